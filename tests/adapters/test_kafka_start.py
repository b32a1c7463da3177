"""With ``auto_offset_reset: latest``, a partition's start is committed before any of its
records is handed out, and a start that could not be committed holds its partition's
records back until it is. The commit failing needs a fake consumer; the real broker runs
the path that works (tests/integration/test_kafka_backends.py, tests/chaos/
test_kafka_latest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka.errors import CommitFailedError, KafkaTimeoutError
from kafka.structs import TopicPartition

from capwatch.adapters.io.kafka import KafkaSource
from capwatch.adapters.io.kafka_confluent import ConfluentKafkaSource

TOPIC = "transitions"


class _Message(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int


class _KafkaPythonConsumer:
    """kafka-python's consumer as far as the source's start handling uses it."""

    def __init__(self, ends: dict[int, int]) -> None:
        self.ends = dict(ends)
        self.group: dict[int, int] = {}
        self.positions: dict[int, int] = {}
        self.failures: list[Exception] = []
        """Raised by the next commits, one each."""
        self.read_failures: list[Exception] = []
        """Raised by the next reads of the committed offset, one each."""
        self.rebalance: Callable[[], None] | None = None
        """Run by the next poll before it fetches (a rebalance listener's turn)."""

    def assignment(self) -> set[TopicPartition]:
        return {TopicPartition(TOPIC, p) for p in self.ends}

    def committed(self, tp: TopicPartition, timeout_ms: int | None = None) -> int | None:
        if self.read_failures:
            raise self.read_failures.pop(0)
        return self.group.get(tp.partition)

    def end_offsets(self, tps: list[TopicPartition], timeout_ms: int | None = None
                    ) -> dict[TopicPartition, int]:
        return {tp: self.ends[tp.partition] for tp in tps}

    def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.group.update({tp.partition: o.offset for tp, o in offsets.items()})

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp.partition] = offset

    def seek_to_beginning(self, tp: TopicPartition) -> None:
        self.positions[tp.partition] = 0

    def poll(self, timeout_ms: int) -> dict[TopicPartition, list[_Message]]:
        """What is there from each partition's position (one record: the end moved on)."""
        rebalance, self.rebalance = self.rebalance, None
        if rebalance is not None:
            rebalance()
        batch = {}
        for p, at in self.positions.items():
            if at < self.ends[p]:
                batch[TopicPartition(TOPIC, p)] = [_Message(at, None, b"v", -1)]
                self.positions[p] = at + 1
        return batch


def _kafka_python(consumer: _KafkaPythonConsumer, reset: str = "latest") -> KafkaSource:
    source = KafkaSource("127.0.0.1:9", TOPIC, "g", auto_offset_reset=reset)
    source._consumer = consumer
    return source


def test_kafka_python_commits_the_end_of_each_partition_nothing_was_committed_of() -> None:
    consumer = _KafkaPythonConsumer({0: 5, 1: 7})
    consumer.group[1] = 3  # a partition with a commit keeps it
    source = _kafka_python(consumer)
    source._unstarted = {0, 1}
    source._settle()
    assert consumer.group == {0: 5, 1: 3}
    assert consumer.positions == {0: 5, 1: 3}  # each read from the group's commit
    assert not source._unstarted


def test_kafka_python_holds_records_back_until_the_start_is_committed() -> None:
    consumer = _KafkaPythonConsumer({0: 5})
    consumer.failures = [KafkaTimeoutError("in the rebalance callback"),
                         KafkaTimeoutError("at the first poll")]
    source = _kafka_python(consumer)
    source._unstarted = {0}
    source._settle()  # in the callback: said, not raised
    assert source._unstarted == {0} and consumer.group == {}
    consumer.positions[0] = 5  # kafka-python resolved the start itself meanwhile
    consumer.ends[0] = 8
    with pytest.raises(KafkaTimeoutError):  # an outage the main loop reports and retries
        source.poll(0.1)
    assert consumer.group == {}
    records = source.poll(0.1)
    # The end when the commit went through is the start; the records fetched before it
    # were never handed out.
    assert consumer.group == {0: 8}
    assert records == [] and consumer.positions == {0: 8}
    consumer.ends[0] = 9
    assert [r.offset for r in source.poll(0.1)] == [8]


def test_kafka_python_records_held_back_are_read_again_from_the_commit_found_later() -> None:
    # The rebalance listener could not read the partition's commit (a coordinator that
    # did not answer in time), so its records are held back; kafka-python positioned the
    # partition at that commit itself and the same poll fetched from it. When the next
    # poll reads the commit, the records held back must be read again from it: before,
    # the source left kafka-python's position past them, so they were never handed out
    # while the next checkpoint committed past them (found by fault12).
    consumer = _KafkaPythonConsumer({0: 6})
    consumer.group[0] = 3  # another member's earlier commit: where the group is
    source = _kafka_python(consumer)

    def assigned() -> None:
        source._unstarted = {0}
        consumer.read_failures = [KafkaTimeoutError("in the rebalance callback")]
        source._settle()
        consumer.positions[0] = 3  # kafka-python read the commit itself afterwards

    consumer.rebalance = assigned
    assert source.poll(0.1) == []  # offset 3 fetched and held back
    assert source._unstarted == {0}
    assert [r.offset for r in source.poll(0.1)] == [3]
    assert not source._unstarted and consumer.group == {0: 3}


def test_kafka_python_a_member_dropped_from_its_group_rejoins_instead_of_retrying() -> None:
    consumer = _KafkaPythonConsumer({0: 5})
    consumer.failures = [CommitFailedError("dropped")]
    consumer.positions[0] = 4
    source = _kafka_python(consumer)
    source._unstarted = {0}
    assert source.poll(0.1) == []  # no raise: the poll rejoins; the record is held back
    assert source._unstarted == {0} and consumer.group == {}


def test_kafka_python_with_earliest_commits_nothing_at_the_start() -> None:
    consumer = _KafkaPythonConsumer({0: 5})
    source = _kafka_python(consumer, reset="earliest")
    source._rewind = {0}
    source._settle()
    assert consumer.group == {} and consumer.positions == {0: 0}


class _ConfluentMessage:
    def __init__(self, partition: int, offset: int) -> None:
        self._partition, self._offset = partition, offset

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (0, -1)

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"v"


class _Committed(NamedTuple):
    """confluent-kafka's TopicPartition as committed() answers it (its error read-only)."""
    topic: str
    partition: int
    offset: int
    error: KafkaError | None


class _ConfluentConsumer:
    def __init__(self, ends: dict[int, int]) -> None:
        self.ends = dict(ends)
        self.group: dict[int, int] = {}
        self.positions: dict[int, int] = {}
        self.assigned: list[tuple[int, int]] | None = None
        self.failures: list[Exception] = []
        self.unreadable: set[int] = set()
        """Partitions whose commit the next read answers with an error (librdkafka's
        way: the partition's error set, its offset invalid)."""

    def committed(self, tps: list[ConfluentPartition], timeout: float
                  ) -> list[_Committed]:
        unreadable, self.unreadable = self.unreadable, set()
        return [_Committed(tp.topic, tp.partition, -1001,
                           KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT))
                if tp.partition in unreadable else
                _Committed(tp.topic, tp.partition, self.group.get(tp.partition, -1001), None)
                for tp in tps]

    def get_watermark_offsets(self, tp: ConfluentPartition, timeout: float, cached: bool
                              ) -> tuple[int, int]:
        return 0, self.ends[tp.partition]

    def commit(self, offsets: list[ConfluentPartition], asynchronous: bool
               ) -> list[ConfluentPartition]:
        if self.failures:
            raise self.failures.pop(0)
        self.group.update({tp.partition: tp.offset for tp in offsets})
        return offsets

    def assign(self, tps: list[ConfluentPartition]) -> None:
        self.assigned = [(tp.partition, tp.offset) for tp in tps]
        self.positions.update({tp.partition: tp.offset for tp in tps if tp.offset >= 0})

    def seek(self, tp: ConfluentPartition) -> None:
        self.positions[tp.partition] = tp.offset

    def consume(self, n: int, timeout: float) -> list[_ConfluentMessage]:
        out: list[_ConfluentMessage] = []
        for p, at in self.positions.items():
            if at < self.ends[p] and len(out) < n:
                out.append(_ConfluentMessage(p, at))
                self.positions[p] = at + 1
        return out


def _confluent(consumer: _ConfluentConsumer) -> ConfluentKafkaSource:
    source = ConfluentKafkaSource("127.0.0.1:9", TOPIC, "g", auto_offset_reset="latest")
    source._consumer = consumer  # type: ignore[assignment]
    return source


def _assignment(parts: list[int]) -> list[ConfluentPartition]:
    return [ConfluentPartition(TOPIC, p) for p in parts]


def test_confluent_commits_each_start_and_assigns_from_it() -> None:
    consumer = _ConfluentConsumer({0: 5, 1: 7})
    consumer.group[1] = 3
    source = _confluent(consumer)
    source._start(consumer, _assignment([0, 1]))  # type: ignore[arg-type]
    assert consumer.group == {0: 5, 1: 3}
    assert consumer.assigned == [(0, 5), (1, -1001)]  # 1: librdkafka reads its commit
    assert not source._unstarted


def test_confluent_holds_records_back_until_the_start_is_committed() -> None:
    consumer = _ConfluentConsumer({0: 5})
    consumer.failures = [KafkaException(KafkaError(KafkaError._TIMED_OUT)),
                         KafkaException(KafkaError(KafkaError._TRANSPORT))]
    source = _confluent(consumer)
    source._start(consumer, _assignment([0]))  # type: ignore[arg-type]
    assert source._unstarted == {0} and consumer.assigned is None
    consumer.positions[0] = 5  # librdkafka's own assignment, from the end
    consumer.ends[0] = 8
    with pytest.raises(KafkaException):
        source.poll(0.1)
    assert consumer.group == {}
    assert source.poll(0.1) == []
    assert consumer.group == {0: 8} and not source._unstarted
    consumer.ends[0] = 9
    assert [r.offset for r in source.poll(0.1)] == [8]


def test_confluent_a_commit_that_could_not_be_read_is_not_taken_for_none() -> None:
    # librdkafka answers a partition whose commit it could not read with the error set
    # and the offset invalid. Taken for "nothing committed", its end was committed over
    # the group's commit (3 here), skipping records 3 and 4 for good (found by fault12).
    consumer = _ConfluentConsumer({0: 5})
    consumer.group[0] = 3
    consumer.unreadable = {0}
    source = _confluent(consumer)
    source._start(consumer, _assignment([0]))  # type: ignore[arg-type]
    assert consumer.group == {0: 3} and source._unstarted == {0}
    consumer.positions[0] = 3  # librdkafka's own assignment, from the commit
    # The poll's retry read the commit and reads on from it.
    assert [r.offset for r in source.poll(0.1)] == [3]
    assert consumer.group == {0: 3} and not source._unstarted


def test_confluent_a_member_dropped_from_its_group_goes_on_polling() -> None:
    consumer = _ConfluentConsumer({0: 5})
    consumer.failures = [KafkaException(KafkaError(KafkaError._TIMED_OUT)),
                         KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))]
    consumer.positions[0] = 4
    source = _confluent(consumer)
    source._start(consumer, _assignment([0]))  # type: ignore[arg-type]
    assert source.poll(0.1) == []  # consumed (its callbacks served), the record held back
    assert source._unstarted == {0} and consumer.positions == {0: 5}
