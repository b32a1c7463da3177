"""A Kafka partition whose fetches keep failing, as the daemon meets it (session 22).

The source backs such a partition off alone (kafka-python: kafka_backoff; librdkafka: its
``fetch.error.backoff.ms``). The main loop then polls on at once instead of waiting 0.5 s
per failure it is handed, but never spins on failures no partition's wait paces; and
/readyz and ``capwatch_kafka_partitions_failing`` name a partition that keeps failing,
whichever client reports it (the sources' side: tests/integration/test_kafka_records_broker.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

from kafka.errors import CorruptRecordError, KafkaTimeoutError

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.ports import PartitionFailing, Rebalance, Record
from capwatch.daemon.pipeline import FAILING_FETCHES
from capwatch.daemon.service import build_service
from tests.daemon.helpers import EndlessSourceTail, config


class FakeClock:
    """The outage wait's clock and stop event: a wait moves the clock, nothing sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waited = 0.0
        self.stopped = False

    def __call__(self) -> float:
        return self.now

    def is_set(self) -> bool:
        return self.stopped

    def set(self) -> None:
        self.stopped = True

    def wait(self, timeout: float | None = None) -> bool:
        step = timeout or 0.0
        self.now += step
        self.waited += step
        return self.stopped


class Scripted(EndlessSourceTail):
    """A source whose polls follow a script: records, or a failure that is one
    partition's own (backed off by the source, as kafka-python's are) or not."""

    name = "transitions"

    def __init__(self, script: list[list[Record] | BaseException],
                 own: set[int], clock: FakeClock) -> None:
        self.script = script
        self.own = own
        """ids of the failures the source backs off alone"""
        self.clock = clock
        self.polls: list[float] = []
        """The fake clock at each poll."""
        self.reported: dict[int, PartitionFailing] = {}

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        on_assign({0, 1, 2})

    def poll(self, timeout_s: float) -> list[Record]:
        self.polls.append(self.clock.now)
        if not self.script:
            self.clock.set()
            return []
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def backed_off(self, error: BaseException) -> bool:
        return id(error) in self.own

    def failing(self) -> Mapping[int, PartitionFailing]:
        return self.reported


def _run(tmp_path: Path, script: list[list[Record] | BaseException],
         own: list[BaseException]) -> tuple[Scripted, FakeClock]:
    clock = FakeClock()
    source = Scripted(script, {id(e) for e in own}, clock)
    service = build_service(config(tmp_path), source=source, publisher=MemoryPublisher())
    pipeline = service.pipeline
    pipeline._monotonic = clock
    pipeline._stop = clock  # type: ignore[assignment]
    try:
        pipeline.run()
    finally:
        service.store.close()
    return source, clock


def test_a_partitions_own_failure_costs_the_main_loop_no_wait(tmp_path: Path) -> None:
    # Three partitions assigned; one's fetch fails between polls that work, then two
    # fail in a row (one fetch may bring several partitions' faults). Before, each
    # failure was an outage waited 0.5 s: 2.0 s of the main loop for these four.
    own = [CorruptRecordError(f"partition {p} corrupt") for p in (0, 0, 1, 2)]
    script: list[list[Record] | BaseException] = [
        [], own[0], [], own[1], own[2], own[3], []]
    source, clock = _run(tmp_path, script, own)
    assert clock.waited == 0.0
    assert len(source.polls) == 8  # every step polled, none skipped nor repeated


def test_failures_no_partitions_wait_paces_are_waited_as_an_outage(tmp_path: Path) -> None:
    # More failures in a row than partitions assigned, each said to be a partition's
    # own: something does not pace them (a partition failing again at once), so the
    # loop waits as for an outage, doubling, instead of polling in a loop.
    own = [CorruptRecordError("partition 0 corrupt") for _ in range(6)]
    script: list[list[Record] | BaseException] = [*own, []]
    source, clock = _run(tmp_path, script, own)
    gaps = [b - a for a, b in zip(source.polls, source.polls[1:], strict=False)]
    assert gaps[:6] == [0.0, 0.0, 0.0, 0.5, 1.0, 2.0], gaps
    # A failure that is no partition's own waits from the first, as before.
    other = KafkaTimeoutError("broker down")
    source, clock = _run(tmp_path, [other, []], [])
    assert clock.waited == 0.5


def test_a_partition_that_keeps_failing_is_named_on_readyz_and_counted(
        tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    clock = FakeClock()
    source = Scripted([], set(), clock)
    service = build_service(config(tmp_path), source=source, publisher=MemoryPublisher())
    pipeline = service.pipeline
    try:
        since = time.time() - 12
        source.reported = {
            1: PartitionFailing(1, since, "CorruptRecordError: once"),  # may read next
            2: PartitionFailing(FAILING_FETCHES + 3, since, "CorruptRecordError: bad batch"),
        }
        (said,) = [p for p in pipeline.problems() if "keeps failing" in p]
        assert said.startswith("Kafka partition 2 of transitions keeps failing: 5 fetches "
                               "in a row over 12 s") and said.endswith("bad batch"), said
        text = generate_latest(pipeline.metrics.registry).decode()
        assert "capwatch_kafka_partitions_failing 1.0" in text
        assert 'capwatch_kafka_partition_fetch_failures{partition="1"} 1.0' in text
        assert 'capwatch_kafka_partition_fetch_failures{partition="2"} 5.0' in text
        source.reported = {}  # it read again
        assert not any("keeps failing" in p for p in pipeline.problems())
        text = generate_latest(pipeline.metrics.registry).decode()
        assert "capwatch_kafka_partitions_failing 0.0" in text
        assert "capwatch_kafka_partition_fetch_failures{" not in text
    finally:
        service.store.close()
