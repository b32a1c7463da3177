"""The kafka-python source joins its group only once it knows the topic's partitions.

The group leader assigns the partitions its own metadata lists. A member that joined
before its metadata listed a just-created topic was seen (at load 13-16) to get no
partition, and kafka-python looked again only at its next metadata refresh, 5 minutes
later. Unit tests with a fake consumer; the real broker's tests are in tests/integration.
"""

from __future__ import annotations

from typing import Any

import pytest

from capwatch.adapters.io import kafka as kafka_io
from capwatch.adapters.io.kafka import KafkaSource


class FakeConsumer:
    def __init__(self, answers: list[set[int]]) -> None:
        self.answers = answers
        self.asked = 0

    def partitions_for_topic(self, topic: str) -> set[int]:
        self.asked += 1
        return self.answers.pop(0) if self.answers else {0, 1, 2}


def test_the_source_waits_until_its_metadata_lists_the_partitions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_io.time, "sleep", lambda s: None)
    consumer = FakeConsumer([set(), set(), set()])
    KafkaSource("127.0.0.1:1", "t", "g")._await_topic(consumer)
    assert consumer.asked == 4


def test_a_topic_that_never_shows_up_does_not_hold_the_start_forever(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr(kafka_io.time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(kafka_io.time, "sleep", lambda s: None)

    class Never(FakeConsumer):
        def partitions_for_topic(self, topic: str) -> set[int]:
            self.asked += 1
            return set()

    consumer = Never([])
    KafkaSource("127.0.0.1:1", "t", "g")._await_topic(consumer)
    assert 1 < consumer.asked <= kafka_io._TOPIC_WAIT_S / 5 + 2


def test_metadata_is_refreshed_well_within_the_default_five_minutes() -> None:
    config: dict[str, Any] = KafkaSource("127.0.0.1:1", "t", "g")._config
    assert config["metadata_max_age_ms"] <= 60_000
