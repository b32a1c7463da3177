"""A partition whose fetch keeps failing is backed off alone, the others read on.

A batch corrupt in the log (one kafka-python's reader refuses and the broker took) fails
its partition's poll at every fetch. The waits after a failed poll (the consumer
process's child, the daemon's main loop) were one back-off for the whole consumer, reset
by any poll that worked: with other partitions delivering between two failures, it never
grew, and the failing partition was fetched again about twice a second for good, each
failure sent to the daemon. Here the failing partition is paused (kafka-python's
``pause``) for a wait of its own, doubling at each failure up to :data:`BACKOFF_S`'s
second figure, while the others are polled at their own pace; the wait ends when the
partition hands out records again (it got past what failed) or the group takes it away.

Which partition failed: the one whose reader raised (:class:`~capwatch.adapters.io.
kafka_records.ReadNotes` ``faults``, the same exception object kafka-python raises, at
once or at the next poll) or the partitions the exception names (kafka-python's fetch
errors carry ``{TopicPartition: offset}``). A failure naming none is the caller's to back
off, whole, as before.

What failed is kept per partition (:attr:`PartitionBackoff.failing`, the source's
``failing()``) until the partition hands out records again or leaves the assignment:
the daemon says on /readyz and in a metric which partitions keep failing, as it does
for confluent-kafka's (whose librdkafka backs a failing partition off itself).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka.structs import TopicPartition

from capwatch.contracts.errors import error_text
from capwatch.contracts.ports import PartitionFailing

__all__ = ["BACKOFF_S", "PartitionBackoff"]

BACKOFF_S = (0.5, 30.0)
"""A failing partition's first wait and the longest (as the daemon's outage waits)."""


def _named(error: BaseException, topic: str) -> set[int]:
    """The partitions of ``topic`` that ``error``'s arguments name."""
    found: set[int] = set()
    for arg in error.args:
        items: Iterable[Any] = arg if isinstance(arg, (Mapping, set, frozenset, list, tuple)) \
            else (arg,)
        for item in items:
            if isinstance(item, TopicPartition) and item.topic == topic:
                found.add(item.partition)
    return found


class PartitionBackoff:
    """Per partition of one consumer: how long it waits after its last failure."""

    def __init__(self, consumer: Any, topic: str, faults: Mapping[int, BaseException],
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.consumer = consumer
        self.topic = topic
        self.faults = faults
        self.clock = clock
        self.wall = wall
        self.failing: Mapping[int, PartitionFailing] = {}
        """Per partition backed off here, its failures since it last handed out records.
        Replaced whole at each change: /readyz and the metrics read it on their threads."""
        self.waits: dict[int, tuple[float, float]] = {}
        """Failing partitions → (their wait, when it ends); paused until then."""
        self.last: BaseException | None = None
        """The last failure backed off here (a partition's own)."""

    def failed(self, error: BaseException) -> bool:
        """Pause the partitions ``error`` is the failure of; False if it is none's (or
        they could not be paused: the caller's whole-consumer wait then paces it)."""
        parts = {p for p, fault in self.faults.items() if fault is error} \
            | _named(error, self.topic)
        if not parts:
            return False
        try:  # called while ``error`` is raised: never to be replaced by another
            held = {tp.partition for tp in self.consumer.assignment()
                    if tp.topic == self.topic}
            parts &= held
            if not parts:
                return False
            self.consumer.pause(*(TopicPartition(self.topic, p) for p in parts))
        except Exception:
            return False
        now = self.clock()
        for p in parts:
            wait = min(BACKOFF_S[1], max(BACKOFF_S[0], self.waits.get(p, (0.0, 0.0))[0] * 2))
            self.waits[p] = (wait, now + wait)
        failing = dict(self.failing)
        text, at = error_text(error), self.wall()
        for p in parts:
            last = failing.get(p)
            failing[p] = PartitionFailing(1, at, text) if last is None else \
                PartitionFailing(last.failures + 1, last.since, text)
        self.failing = failing
        self.last = error
        return True

    def resume_due(self) -> None:
        """Fetch again the partitions whose wait has ended (their wait is kept, doubled at
        their next failure)."""
        if not self.waits:
            return
        now = self.clock()
        held = {tp.partition for tp in self.consumer.assignment() if tp.topic == self.topic}
        due = [p for p, (_, until) in self.waits.items() if until <= now and p in held]
        paused = {tp.partition for tp in self.consumer.paused() if tp.topic == self.topic}
        resume = [TopicPartition(self.topic, p) for p in due if p in paused]
        if resume:
            self.consumer.resume(*resume)

    def delivered(self, partitions: Iterable[int]) -> None:
        """These partitions handed out records: past what failed, their wait starts over."""
        self._clear(partitions)

    def forget(self, partitions: Iterable[int]) -> None:
        """Revoked or assigned afresh: a partition's pause went with its assignment."""
        self._clear(partitions)

    def _clear(self, partitions: Iterable[int]) -> None:
        parts = set(partitions)
        for p in parts:
            self.waits.pop(p, None)
        if parts & self.failing.keys():
            self.failing = {p: f for p, f in self.failing.items() if p not in parts}
