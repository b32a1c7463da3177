"""Replicas of ``capwatch run`` over the real broker, for the Kafka chaos tests that start,
kill and restart them one by one: their configuration, waiting until they hold every
partition, what they read (their metrics) and what the group committed.

The probes give a scenario an exact oracle of what was handled. A probe is a keyed record
that is not JSON: every replica that reads it dead-letters it with its partition and
offset, so the dead-letter topic lists each probe handled (once per handling), and the
producer's acknowledgements list each probe written (a send the broker did not
acknowledge, as during its restart, is not the group's to handle).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer

from tests.chaos.harness import Daemon
from tests.chaos.kafka_harness import KafkaTopics, kafka_daemon_config, read_topic

SOURCES = {
    "kafka-python": ("kafka-python", False),
    "kafka-python-process": ("kafka-python", True),
    "confluent-kafka": ("confluent-kafka", False),
}
"""Each way the daemon reads Kafka: (``kafka.client``, ``kafka.consumer_process``)."""

START_EVENT = "partitions start at their end (auto_offset_reset latest); committed"
"""What a source logs once it committed where partitions start (kafka.py, kafka_confluent.py)."""


def replica_config(topics: KafkaTopics, store: Path | str, families: dict[str, Any],
                   replica: str, source: str, port: int, checkpoint_s: float,
                   reset: str = "latest") -> dict[str, Any]:
    """One replica's configuration: ``store`` a SQLite path or a PostgreSQL URL."""
    client, process = SOURCES[source]
    config = kafka_daemon_config(topics, Path("unused.db"), families, {}, http_port=port,
                                 client=client)
    config["store"] = {"url": str(store)}
    config["replica_id"] = replica
    config["kafka"]["auto_offset_reset"] = reset
    config["kafka"]["consumer_process"] = process
    config["scheduler"] = {"checkpoint_s": checkpoint_s}
    return config


def held(d: Daemon) -> set[int]:
    """The partitions the replica's log says it holds now."""
    parts: set[int] = set()
    for e in d.log_events():
        if e.get("event") == "partitions assigned":
            parts |= set(e["partitions"])
        elif e.get("event") in ("partitions revoked",
                                "dropped from the consumer group; its partitions are given "
                                "up without a commit and replayed by their next owner"):
            parts -= set(e["partitions"])
    return parts


def wait_holding(daemons: Sequence[Daemon], partitions: int, timeout_s: float) -> None:
    """Until the replicas' logs say that together they hold every partition, each once
    (a source says so only after it resolved, and with ``latest`` committed, their
    starts, or failed to and holds their records back)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        holdings = [held(d) for d in daemons]
        union = set().union(*holdings)
        if union == set(range(partitions)) and sum(map(len, holdings)) == partitions:
            return
        for d in daemons:
            if d.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {d.proc.returncode}: {d.tail()}")
        time.sleep(0.2)
    raise AssertionError(f"partitions not all held in {timeout_s:.0f} s: "
                         + " | ".join(d.tail(1500) for d in daemons))


def records_read(port: int) -> int:
    """Records the replica read (its capwatch_records_total)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return int(sum(float(m) for m in re.findall(
        r"^capwatch_records_total\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)))


def wait_read(d: Daemon, port: int, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while records_read(port) < count:
        assert time.monotonic() < deadline, f"read fewer than {count} records: {d.tail()}"
        assert d.proc.poll() is None, d.tail()
        time.sleep(0.2)


def group_committed(topics: KafkaTopics) -> dict[int, int]:
    """The group's committed offset of each transitions partition that has one."""
    admin = KafkaAdminClient(bootstrap_servers=topics.bootstrap)
    try:
        answer = admin.list_group_offsets(topics.group)
    finally:
        admin.close()
    offsets = answer.get(topics.group, answer)
    return {tp.partition: int(o.offset) for tp, o in offsets.items()
            if tp.topic == topics.transitions and int(o.offset) >= 0}


def logged_starts(daemons: Iterable[Daemon]) -> dict[int, list[int]]:
    """Partition -> every start the replicas logged committing for it, in log order."""
    starts: dict[int, list[int]] = {}
    for d in daemons:
        for e in d.log_events():
            if e.get("event") == START_EVENT:
                for p, o in e["offsets"].items():
                    starts.setdefault(int(p), []).append(int(o))
    return starts


def dead_lettered(topics: KafkaTopics) -> Counter[tuple[int, int]]:
    """(partition, offset) of each dead letter written, counted."""
    return Counter((int(d["partition"]), int(d["offset"]))
                   for d in map(json.loads, read_topic(topics, topics.dead_letter)))


def published_conflicts(topics: KafkaTopics) -> list[tuple[str, int]]:
    """(agent, version) published more than once with different models: a wrong version."""
    seen: dict[tuple[str, int], str] = {}
    wrong = []
    for m in map(json.loads, read_topic(topics, topics.models)):
        key = (m["agent_id"], int(m["version"]))
        body = json.dumps(m["model"], sort_keys=True)
        if seen.setdefault(key, body) != body:
            wrong.append(key)
    return wrong


class Probes:
    """Writes probes (and the valid records given) to the transitions topic, in a thread
    if asked, and keeps where the broker acknowledged each probe."""

    def __init__(self, topics: KafkaTopics) -> None:
        self.topics = topics
        self.acked: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._n = 0
        self._producer = KafkaProducer(bootstrap_servers=topics.bootstrap, acks="all",
                                       linger_ms=5, retries=2, request_timeout_ms=5000,
                                       max_block_ms=60_000)

    def _ack(self, metadata: Any) -> None:
        with self._lock:
            self.acked.append((int(metadata.partition), int(metadata.offset)))

    def send(self, probes: int, valid: Sequence[tuple[bytes, str]] = ()) -> None:
        """``probes`` probes, each followed by the next of ``valid``, then flushed."""
        for i in range(probes):
            self._n += 1
            future = self._producer.send(self.topics.transitions,
                                         key=f"probe-{self._n % 97}".encode(),
                                         value=f"probe {self._n}: not JSON".encode())
            future.add_callback(self._ack)
            if i < len(valid):
                self._producer.send(self.topics.transitions, key=valid[i][1].encode(),
                                    value=valid[i][0])
        # A send the broker never acknowledged is not in self.acked.
        with contextlib.suppress(Exception):
            self._producer.flush(60)

    def paced(self, probes: int, per_second: float,
              valid: Sequence[tuple[bytes, str]] = ()) -> None:
        """Send in a thread, ``per_second`` probes a second (a stream going on while the
        replicas start), until :meth:`join`."""
        def run() -> None:
            for i in range(probes):
                self.send(1, valid[i:i + 1])
                time.sleep(1 / per_second)

        self._thread = threading.Thread(target=run, name="probes", daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join(180)
            assert not self._thread.is_alive(), "the probes' producer did not finish"
            self._thread = None

    def close(self) -> None:
        self.join()
        self._producer.close(5)

    def verdict(self, starts: dict[int, list[int]], handled: Counter[tuple[int, int]]
                ) -> dict[str, Any]:
        """What went wrong, against the group's first start of each partition: probes
        at or after it never handled (lost), probes before it handled (read from before
        the start), partitions whose start was committed twice (an overwrite), probes
        handled more than twice. A start is committed only where nothing is: one committed
        twice could have been committed over the group's progress."""
        first = {p: min(offsets) for p, offsets in starts.items()}
        acked = set(self.acked)
        lost = sorted((p, o) for p, o in acked if p in first and o >= first[p]
                      and handled[(p, o)] == 0)
        unstarted = sorted({p for p, _ in acked} - set(first))
        early = sorted((p, o) for p, o in handled if p in first and o < first[p])
        twice = {p: offsets for p, offsets in starts.items() if len(offsets) > 1}
        many = sorted(k for k, n in handled.items() if n > 2)
        return {"lost": lost, "unstarted": unstarted, "early": early,
                "starts_overwritten": twice, "handled_more_than_twice": many,
                "probes": len(acked),
                "duplicates": sum(n - 1 for n in handled.values() if n > 1)}
