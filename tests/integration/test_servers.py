"""The integration fixtures give real, working servers."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import psycopg
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

pytestmark = pytest.mark.integration

N_MESSAGES = 300
KEYS = [f"agent-{i}" for i in range(7)]
PARTITIONS = 3


def _consume(
    consumer: KafkaConsumer, count: int, timeout_s: float = 30.0
) -> list[tuple[int, int, str, int]]:
    """Poll until ``count`` records arrive: (partition, offset, key, sequence number)."""
    got: list[tuple[int, int, str, int]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            for r in records:
                got.append((tp.partition, r.offset, r.key.decode(), int(r.value.decode())))
    return got


def test_kafka_keyed_messages_round_trip_in_order_with_group_commit(
    kafka_bootstrap: str, kafka_topic: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics(
            [NewTopic(kafka_topic, num_partitions=PARTITIONS, replication_factor=1)],
            wait_for_metadata=True,
        )
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    sent: dict[str, list[int]] = defaultdict(list)
    try:
        for seq in range(N_MESSAGES):
            key = KEYS[seq % len(KEYS)]
            producer.send(kafka_topic, key=key.encode(), value=str(seq).encode())
            sent[key].append(seq)
        producer.flush(timeout=30)
    finally:
        producer.close()

    group = f"capwatch-test-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(
        kafka_topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        got = _consume(consumer, N_MESSAGES)
        assert len(got) == N_MESSAGES

        received: dict[str, list[int]] = defaultdict(list)
        partition_of: dict[str, set[int]] = defaultdict(set)
        for partition, _offset, key, seq in sorted(got):  # offset order within a partition
            received[key].append(seq)
            partition_of[key].add(partition)
        assert received == sent, "every key's messages arrive once each, in send order"
        assert all(len(p) == 1 for p in partition_of.values()), "a key maps to one partition"
        assert len({p for ps in partition_of.values() for p in ps}) > 1, "keys spread out"

        consumer.commit()
        ends = consumer.end_offsets([TopicPartition(kafka_topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        committed = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    assert {tp: om.offset for tp, om in committed.items()} == ends
    assert sum(ends.values()) == N_MESSAGES

    # A new member of the same group resumes after the committed offsets.
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        producer.send(kafka_topic, key=b"agent-late", value=str(N_MESSAGES).encode())
        producer.flush(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        kafka_topic,
        bootstrap_servers=kafka_bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        rest = _consume(consumer, 1)
        assert [(key, seq) for _p, _o, key, seq in rest] == [("agent-late", N_MESSAGES)]
        assert _consume(consumer, 1, timeout_s=1.0) == []
    finally:
        consumer.close()


def test_postgres_transaction_round_trip(postgres_dsn: str) -> None:
    table = f"t_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_dsn) as conn:
        with conn.transaction():
            conn.execute(
                f"CREATE TABLE {table} (id serial PRIMARY KEY, agent text NOT NULL, "
                "version int NOT NULL, model jsonb NOT NULL)"
            )
            with conn.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {table} (agent, version, model) VALUES (%s, %s, %s::jsonb)",
                    [("rover-17", v, f'{{"actions": {v}}}') for v in (1, 2, 3)],
                )
        # A rolled-back transaction leaves no trace.
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute(
                f"INSERT INTO {table} (agent, version, model) VALUES ('rover-99', 9, '{{}}')"
            )
            raise RuntimeError("roll back")
        with conn.transaction():
            rows = conn.execute(
                f"SELECT agent, version, model->>'actions' FROM {table} ORDER BY version"
            ).fetchall()
        assert rows == [("rover-17", 1, "1"), ("rover-17", 2, "2"), ("rover-17", 3, "3")]

    # Committed data is visible to another connection.
    with psycopg.connect(postgres_dsn) as other:
        count = other.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert count == (3,)
        version = other.execute("SHOW server_version").fetchone()
        assert version is not None and int(version[0].split(".")[0]) >= 13
