"""``ensure_topics`` returns once the topics it created have their partitions' leaders in the
broker's metadata. No broker: a stand-in admin client answers as a KRaft broker does for a
moment after CreateTopics (the topic, and no partitions yet)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import capwatch.adapters.io.kafka as kafka_io
from capwatch.adapters.io.kafka import await_leaders, ensure_topics, partition_shortfall


class Admin:
    """Describes each created topic without partitions ``empty`` times, then with a leader
    for each partition but the last (``leaderless`` times), then whole."""

    def __init__(self, empty: int = 2, leaderless: int = 1) -> None:
        self.partitions: dict[str, int] = {}
        self.described: dict[str, int] = {}
        self.empty, self.leaderless = empty, leaderless
        self.closed = False

    def list_topics(self) -> list[str]:
        return []

    def create_topics(self, topics: list[Any]) -> None:
        for t in topics:
            self.partitions[t.name] = t.num_partitions

    def describe_topics(self, names: list[str]) -> list[dict[str, Any]]:
        out = []
        for name in names:
            n = self.described[name] = self.described.get(name, 0) + 1
            parts = [] if n <= self.empty else [
                {"partition_index": i, "error_code": 0,
                 "leader_id": -1 if n <= self.empty + self.leaderless and i == p - 1 else 1}
                for p in [self.partitions[name]] for i in range(p)]
            out.append({"name": name, "error_code": 0, "partitions": parts})
        return out

    def close(self) -> None:
        self.closed = True


def test_the_created_topics_are_awaited_until_every_partition_has_a_leader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    admin = Admin()
    monkeypatch.setattr(kafka_io, "KafkaAdminClient", lambda **_: admin)
    monkeypatch.setattr(time, "sleep", lambda s: None)
    created = ensure_topics("b:9092", transitions="tr", models="m", alerts="a",
                            dead_letter="d", partitions=3)
    assert sorted(created) == ["a", "d", "m", "tr"]
    # Asked until the fourth answer: two without partitions, one with a leaderless one.
    assert admin.described == {"a": 4, "d": 4, "m": 4, "tr": 4}
    assert admin.closed


def test_a_leader_that_never_comes_is_reported_not_waited_for_forever(
        capsys: pytest.CaptureFixture[str]) -> None:
    admin = Admin(empty=10**9)
    admin.partitions["tr"] = 2
    assert await_leaders(admin, {"tr": 2}, timeout_s=0, sleep=lambda s: None) is False
    assert admin.described == {"tr": 1}
    assert "new topics have no leader yet" in capsys.readouterr().out


def test_a_transitions_topic_made_before_with_other_partitions_is_warned_about(
        kafka_bootstrap: str) -> None:
    # Against the real broker: what its metadata answer looks like is the point.
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from structlog.testing import capture_logs

    name = f"auto-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(name, 1, 1)])  # as a broker's auto-create would
        await_leaders(admin, {name: 1})
    finally:
        admin.close()
    topics = {"models": f"{name}-m", "alerts": f"{name}-a", "dead_letter": f"{name}-d"}
    with capture_logs() as logs:
        ensure_topics(kafka_bootstrap, transitions=name, partitions=3,
                      models=topics["models"], alerts=topics["alerts"],
                      dead_letter=topics["dead_letter"])
    (warning,) = [e for e in logs if e["log_level"] == "warning"]
    assert (warning["topic"], warning["partitions"], warning["configured"]) == (name, 1, 3)
    # What it means for scale-out, and the fix, in the line itself.
    assert f"{name} has 1 partition, not the 3 of kafka.partitions" in warning["event"]
    assert "So one replica of the group read records" in warning["event"]
    assert "adding replicas adds no throughput" in warning["event"]
    assert f"--topic {name} --partitions 3" in warning["event"]
    with capture_logs() as logs:  # as configured: nothing to say
        ensure_topics(kafka_bootstrap, transitions=f"{name}-m", partitions=3,
                      models=f"{name}-m2", alerts=topics["alerts"],
                      dead_letter=topics["dead_letter"])
    assert [e for e in logs if e["log_level"] == "warning"] == []


def test_the_shortfall_message_counts_the_replicas_that_read() -> None:
    text = partition_shortfall("t", 2, 6)
    assert "t has 2 partitions, not the 6" in text and "at most 2 replicas" in text
