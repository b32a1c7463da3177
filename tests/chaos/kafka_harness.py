"""The chaos harness over a real Kafka broker: topics, producing a generated stream,
``capwatch run`` over Kafka, and reading back what it wrote and committed.

Only kafka-python's client API is used, as any other producer or consumer would.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.chaos.harness import Outcome, alert_pairs, read_sqlite_store
from tests.support.kafka_offsets import end_offsets


@dataclass
class KafkaTopics:
    bootstrap: str
    transitions: str
    models: str
    alerts: str
    dead_letter: str
    group: str
    partitions: int

    def config(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap, "transitions_topic": self.transitions,
                "models_topic": self.models, "alerts_topic": self.alerts,
                "dead_letter_topic": self.dead_letter, "group_id": self.group,
                "partitions": self.partitions, "session_timeout_ms": 6000}


def make_topics(bootstrap: str, partitions: int = 3,
                transitions_max_bytes: int | None = None) -> KafkaTopics:
    """Fresh topics; the transitions topic may allow larger messages than the broker's
    default (as an operator's topic configuration might)."""
    prefix = f"chaos-{uuid.uuid4().hex[:10]}"
    t = KafkaTopics(bootstrap, f"{prefix}-tr", f"{prefix}-models", f"{prefix}-alerts",
                    f"{prefix}-dlq", f"{prefix}-group", partitions)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        configs = ({"max.message.bytes": str(transitions_max_bytes)}
                   if transitions_max_bytes else {})
        admin.create_topics([NewTopic(t.transitions, partitions, 1, topic_configs=configs)])
    finally:
        admin.close()
    return t


def produce(topics: KafkaTopics, values: Sequence[bytes], keys: Sequence[str | None],
            max_request_size: int = 1_048_576) -> None:
    producer = KafkaProducer(bootstrap_servers=topics.bootstrap, acks="all", linger_ms=20,
                             max_request_size=max_request_size)
    for v, k in zip(values, keys, strict=True):
        producer.send(topics.transitions, key=k.encode() if k is not None else None, value=v)
    producer.flush(60)
    producer.close()


CLIENTS = ["kafka-python", "confluent-kafka"]
"""The Kafka backends (``kafka.client``) a scenario may run over."""


def kafka_daemon_config(topics: KafkaTopics, store: Path, families: dict[str, Any],
                        urls: dict[str, str], http_port: int | None = None,
                        client: str = "kafka-python") -> dict[str, Any]:
    return {
        "replica_id": "chaos",
        "source": {"kind": "kafka"},
        "output": {"kind": "kafka"},
        "kafka": {**topics.config(), "client": client},
        "store": {"url": str(store)},
        "families": families,
        "agents": {"urls": urls, "timeout_s": 5.0},
        "assessment": {"workers": 2, "lease_s": 10.0, "retry_after_s": 0.5},
        "http": {"enabled": http_port is not None, "port": http_port or 0},
        "alerts": {"group_wait_seconds": 0.2, "route_s": 0.1},
        "log": {"level": "info", "format": "json"},
        "shutdown_grace_s": 10.0,
    }


def read_topic(topics: KafkaTopics, topic: str, timeout_s: float = 10.0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=topics.bootstrap, enable_auto_commit=False,
                             fetch_max_bytes=64 * 1024 * 1024,
                             max_partition_fetch_bytes=64 * 1024 * 1024)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in parts]
        if not tps:
            return []
        consumer.assign(tps)
        ends = end_offsets(topics.bootstrap, tps)
        consumer.seek_to_beginning(*tps)
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise AssertionError(f"could not read {topic} to its end")
            for records in consumer.poll(timeout_ms=300).values():
                out.extend(r.value for r in records)
        return out
    finally:
        consumer.close()


def committed_and_end(topics: KafkaTopics) -> tuple[int, int]:
    """(offsets the group committed, records in the transitions topic), summed."""
    tps = [TopicPartition(topics.transitions, p) for p in range(topics.partitions)]
    end = sum(end_offsets(topics.bootstrap, tps).values())
    admin = KafkaAdminClient(bootstrap_servers=topics.bootstrap)
    try:
        answer = admin.list_group_offsets(topics.group)
    except Exception:
        return 0, end
    finally:
        admin.close()
    offsets = answer.get(topics.group, answer)
    return sum(int(o.offset) for o in offsets.values()), end


def kafka_outcome(topics: KafkaTopics, store: Path, exits: Sequence[int] = (),
                  tracebacks: int = 0) -> Outcome:
    versions, _ = read_sqlite_store(store)
    models = [json.loads(v) for v in read_topic(topics, topics.models)]
    alerts = [json.loads(v) for v in read_topic(topics, topics.alerts)]
    dead = [json.loads(v) for v in read_topic(topics, topics.dead_letter)]
    committed, _ = committed_and_end(topics)
    return Outcome(
        versions=versions,
        published={(m["agent_id"], m["version"]): m["model"]["json"] for m in models},
        published_raw=len(models),
        alerts=alert_pairs(alerts),
        dead_letters={d["offset"] * 1000 + d["partition"] for d in dead},
        committed=committed, exits=list(exits), tracebacks=tracebacks)


def pending_work(store: Path) -> int:
    """Queued or running assessments in the store."""
    import sqlite3

    conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT COUNT(*) FROM pending_assessments"
                           " WHERE status IN ('pending', 'claimed')").fetchone()
        return int(row[0])
    except sqlite3.OperationalError:
        return 1  # not created yet
    finally:
        conn.close()


def wait_done(topics: KafkaTopics, store: Path, alive: Callable[[], bool],
              timeout_s: float) -> bool:
    """Until every record is committed and no assessment waits (True), the daemon died or
    the time ran out (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            return False
        committed, end = committed_and_end(topics)
        if end and committed >= end and store.exists() and pending_work(store) == 0:
            return True
        time.sleep(0.5)
    return False
