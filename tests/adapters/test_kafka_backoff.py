"""kafka_backoff: a partition whose fetch keeps failing waits alone, longer each time,
while the others are read on (against the broker: tests/integration/
test_kafka_records_broker.py)."""

from __future__ import annotations

from kafka.errors import CorruptRecordError, OffsetOutOfRangeError
from kafka.structs import TopicPartition

from capwatch.adapters.io.kafka_backoff import PartitionBackoff


class _Consumer:
    def __init__(self, parts: set[int]) -> None:
        self.held = {TopicPartition("t", p) for p in parts}
        self.stopped: set[TopicPartition] = set()

    def assignment(self) -> set[TopicPartition]:
        return self.held

    def paused(self) -> set[TopicPartition]:
        return set(self.stopped)

    def pause(self, *tps: TopicPartition) -> None:
        self.stopped |= set(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.stopped -= set(tps)


def test_a_failing_partition_waits_alone_doubling_until_it_delivers() -> None:
    now = [100.0]
    consumer = _Consumer({0, 1, 2})
    faults: dict[int, BaseException] = {}
    backoff = PartitionBackoff(consumer, "t", faults, clock=lambda: now[0])
    waits = []
    for _ in range(9):
        error = CorruptRecordError("a batch corrupt in the log")
        faults[1] = error  # the reader's fault: the very object the poll raises
        assert backoff.failed(error) and backoff.last is error
        assert consumer.paused() == {TopicPartition("t", 1)}
        wait, until = backoff.waits[1]
        waits.append(wait)
        now[0] = until - 0.01
        backoff.resume_due()
        assert consumer.paused() == {TopicPartition("t", 1)}  # not yet
        now[0] = until
        backoff.resume_due()
        assert consumer.paused() == set()
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    backoff.delivered([1])  # it got past what failed: its next failure waits 0.5 s
    error = CorruptRecordError("again")
    faults[1] = error
    assert backoff.failed(error) and backoff.waits[1][0] == 0.5


def test_a_failure_is_a_partitions_by_its_reader_or_its_arguments_else_none() -> None:
    consumer = _Consumer({0, 3})
    faults: dict[int, BaseException] = {0: CorruptRecordError("an older one")}
    backoff = PartitionBackoff(consumer, "t", faults, clock=lambda: 0.0)
    assert not backoff.failed(CorruptRecordError("no partition"))  # the caller's wait
    assert not backoff.failed(faults[0].__class__("equal text, another object"))
    assert consumer.paused() == set()
    named = OffsetOutOfRangeError({TopicPartition("t", 3): 17, TopicPartition("u", 0): 1})
    assert backoff.failed(named) and consumer.paused() == {TopicPartition("t", 3)}
    # A partition no longer held is not paused (the group took it away meanwhile).
    assert not backoff.failed(OffsetOutOfRangeError({TopicPartition("t", 5): 1}))
    backoff.forget({3})
    assert backoff.waits == {}


def test_what_failed_is_kept_per_partition_until_it_delivers_or_leaves() -> None:
    # The source's failing(): /readyz and capwatch_kafka_partitions_failing read it on
    # their threads, so it is replaced whole at each change, never changed in place.
    consumer = _Consumer({0, 1, 2})
    faults: dict[int, BaseException] = {}
    backoff = PartitionBackoff(consumer, "t", faults, clock=lambda: 0.0,
                               wall=lambda: 1_700_000_000.0)
    assert backoff.failing == {}
    for i in range(3):
        error = CorruptRecordError(f"bad batch {i}")
        faults[1] = error
        before = backoff.failing
        assert backoff.failed(error)
        assert backoff.failing is not before and backoff.failing[1].failures == i + 1
    error = CorruptRecordError("partition 2 too")
    faults[2] = error
    assert backoff.failed(error)
    failing = backoff.failing
    assert set(failing) == {1, 2}
    assert failing[1].failures == 3 and failing[1].since == 1_700_000_000.0
    assert failing[1].error.endswith("CorruptRecordError: bad batch 2")
    assert failing[2].failures == 1
    backoff.delivered([0])  # another partition's records change nothing
    assert backoff.failing is failing
    backoff.delivered([1])
    assert set(backoff.failing) == {2} and set(failing) == {1, 2}
    backoff.forget([2])  # revoked
    assert backoff.failing == {}
