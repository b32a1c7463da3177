"""The kafka-python source joins its group only once it knows the topic's partitions,
and no group round it starts is lost (capwatch/adapters/io/kafka_join.py).

The group leader assigns the partitions its own metadata lists. A member that joined
before its metadata listed a just-created topic was seen (at load 13-16) to get no
partition, and kafka-python looked again only at its next metadata refresh, 5 minutes
later. A round that outlasted a poll was dropped or never applied (kafka_join's
docstring). Unit tests with fake consumers; the real broker's tests are in
tests/integration/test_kafka_backends.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from capwatch.adapters.io import kafka as kafka_io
from capwatch.adapters.io import kafka_join
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
    monkeypatch.setattr(time, "sleep", lambda s: None)
    consumer = FakeConsumer([set(), set(), set()])
    KafkaSource("127.0.0.1:1", "t", "g")._await_topic(consumer)
    assert consumer.asked == 4


def test_a_topic_that_never_shows_up_does_not_hold_the_start_forever(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr(time, "monotonic", lambda: float(next(clock)))
    monkeypatch.setattr(time, "sleep", lambda s: None)

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


class FakeRound:
    is_done = False


class FakeCoordinator:
    """kafka-python 3's group coordinator as kafka_join sees it: a round (``_join_task``)
    that a ``poll`` awaiting it applies after ``rounds_to_finish`` calls."""

    def __init__(self, rounds_to_finish: int) -> None:
        self._join_task: FakeRound | None = FakeRound()
        self._metadata_snapshot: dict[str, set[int]] = {}
        self.rounds_to_finish = rounds_to_finish
        self.rejoin_needed = False
        self.drives: list[int] = []

    def request_rejoin(self) -> None:
        self.rejoin_needed = True

    def poll(self, timeout_ms: int) -> bool:
        # As kafka-python: an awaited round is applied only while the rejoin is wanted.
        assert self.rejoin_needed, "the round would not be awaited"
        self.drives.append(timeout_ms)
        self.rounds_to_finish -= 1
        if self.rounds_to_finish <= 0:
            self._join_task = None
            self.rejoin_needed = False
            return True
        return False


class CoordinatedConsumer:
    def __init__(self, group: FakeCoordinator) -> None:
        self._coordinator = group


def test_an_unfinished_round_is_awaited_until_applied() -> None:
    group = FakeCoordinator(3)
    assert kafka_join.join_unfinished(CoordinatedConsumer(group))
    assert kafka_join.finish_join(CoordinatedConsumer(group), 10.0)
    assert len(group.drives) == 3 and not kafka_join.join_unfinished(CoordinatedConsumer(group))


def test_a_round_outlasting_the_bound_is_left_wanted_for_the_next_poll() -> None:
    """Not forgotten: the next poll must take it up (the member that never rejoined had
    its rejoin flag cleared by its own assignment while the round was in flight)."""
    clock = iter([0.0, 0.0, 4.0, 8.0, 12.0, 16.0])
    group = FakeCoordinator(100)
    done = kafka_join.finish_join(CoordinatedConsumer(group), 10.0,
                                  clock=lambda: next(clock))
    assert not done and group.rejoin_needed and group._join_task is not None
    assert 1 <= len(group.drives) <= 3 and all(0 < ms <= 10_000 for ms in group.drives)


def test_nothing_is_driven_without_an_unfinished_round() -> None:
    group = FakeCoordinator(1)
    group._join_task = None
    assert kafka_join.finish_join(CoordinatedConsumer(group), 10.0)
    assert group.drives == [] and not group.rejoin_needed


def test_the_first_round_waits_for_the_group_metadata_to_list_the_topic() -> None:
    group = FakeCoordinator(1)
    filled: Iterator[dict[str, set[int]]] = iter([{}, {}, {"t": set()}, {"t": {0, 1}}])

    def sleep(s: float) -> None:
        group._metadata_snapshot = next(filled)

    assert kafka_join.await_group_metadata(CoordinatedConsumer(group), "t", 30.0,
                                           sleep=sleep)
    assert group._metadata_snapshot == {"t": {0, 1}}


def test_group_metadata_that_never_comes_does_not_hold_the_start_forever() -> None:
    clock = iter(range(0, 10_000, 5))
    group = FakeCoordinator(1)
    assert not kafka_join.await_group_metadata(
        CoordinatedConsumer(group), "t", 30.0, clock=lambda: float(next(clock)),
        sleep=lambda s: None)


def test_the_installed_kafka_python_still_has_what_kafka_join_reaches_for() -> None:
    """kafka_join degrades to the client's own behaviour if these go: an upgrade that
    renames them must fail here rather than bring the lost rounds back silently."""
    import inspect

    from kafka import KafkaConsumer
    from kafka.coordinator.base import BaseCoordinator
    from kafka.coordinator.consumer import ConsumerCoordinator

    assert callable(ConsumerCoordinator.request_rejoin)
    assert callable(ConsumerCoordinator.poll)
    assert "self._join_task = " in inspect.getsource(BaseCoordinator.__init__)
    assert "self._metadata_snapshot = " in inspect.getsource(ConsumerCoordinator.__init__)
    assert "self._coordinator = " in inspect.getsource(KafkaConsumer.__init__)
