"""A rebalance on a real broker: the replica giving partitions up commits what it handled
from its revoke callback (as the daemon does). With kafka-python 3 the callback ran on the
IO thread, where that commit raised; the replica then failed every rebalance and never
consumed again once a second replica joined (red-team rerun of issue 12, session 3)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tests.integration.test_kafka_backends import SOURCES, source_class

pytestmark = pytest.mark.integration


class Member:
    """One group member polling on a thread of its own, as a daemon's main loop does."""

    def __init__(self, bootstrap: str, topic: str, group: str, backend: str) -> None:
        self.source = source_class(backend)(bootstrap, topic, group, session_timeout_ms=6000)
        self.owned: set[int] = set()
        self.revoked: list[set[int]] = []
        self.errors: list[BaseException] = []
        self.seen: dict[int, int] = {}
        self._stop = threading.Event()
        self.source.start(self._assign, self._revoke, {})
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assign(self, parts: set[int]) -> None:
        self.owned |= parts

    def _revoke(self, parts: set[int]) -> None:
        # What the daemon's checkpoint does before giving partitions up.
        self.source.commit({p: self.seen[p] + 1 for p in parts if p in self.seen})
        self.revoked.append(set(parts))
        self.owned -= parts

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for r in self.source.poll(0.2):
                    self.seen[r.partition] = max(self.seen.get(r.partition, -1), r.offset)
            except BaseException as e:
                self.errors.append(e)
                time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.source.close()


def _wait(condition: object, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("backend", SOURCES)
def test_a_replica_joining_lets_the_other_commit_and_hand_partitions_over(
        kafka_bootstrap: str, backend: str) -> None:
    topic = f"rebalance-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-group"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for p in (0, 1):
        for i in range(10):
            producer.send(topic, value=b"x%d" % i, partition=p)
    producer.flush(30)
    producer.close()

    first = Member(kafka_bootstrap, topic, group, backend)
    second: Member | None = None
    try:
        assert _wait(lambda: first.seen == {0: 9, 1: 9}), (first.seen, first.errors)
        second = Member(kafka_bootstrap, topic, group, backend)
        assert _wait(lambda: second is not None and len(second.owned) == 1
                     and len(first.owned) == 1), (first.owned, second and second.owned,
                                                  first.errors)
        assert first.revoked, "the first member gave nothing up"
        assert first.errors == [], first.errors
        assert second.errors == [], second.errors
    finally:
        if second is not None:
            second.stop()
        first.stop()
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group,
                             enable_auto_commit=False)
    try:
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        consumer.close()
    # The revoke's commit went through: the second member did not read everything again.
    assert committed == {0: 10, 1: 10}
