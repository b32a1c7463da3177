"""The per-partition lag gauges follow the assignment: a partition given up (revoked, or
lost when a commit finds the member dropped) no longer reports the lag this replica last
saw on it. Found by session 17's second operator (three replicas, one SIGKILLed and
restarted): the survivor that held all six partitions meanwhile kept reporting lag 4 on
the four it had handed back, next to their new owners' own series."""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.ports import AssignmentLost
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample


class Lagging(JsonlSource):
    """The JSONL source, reporting a fixed lag on the partitions it holds."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.held: set[int] = {0}

    def lag(self) -> dict[int, int]:
        return {p: 4 for p in self.held}


def _pipeline(tmp_path: Path) -> tuple[Pipeline, Lagging]:
    path = tmp_path / "in.jsonl"
    path.write_text(good_sample("rover-b", 0) + "\n")
    source = Lagging(str(path))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    d = build_service(cfg, publisher=MemoryPublisher(), source=source).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    d.source.poll(1.0)
    return d, source


def _lag(d: Pipeline, name: str = "capwatch_consumer_lag") -> float | None:
    value: float | None = d.metrics.registry.get_sample_value(name, {"partition": "0"})
    return value


def test_a_revoked_partition_reports_no_lag(tmp_path: Path) -> None:
    d, source = _pipeline(tmp_path)
    d.lag.refresh()
    assert _lag(d) == 4
    assert _lag(d, "capwatch_consumer_lag_seconds") is not None
    source.held = set()
    d.revoke({0})
    assert _lag(d) is None
    assert _lag(d, "capwatch_consumer_lag_seconds") is None


def test_a_lost_partition_reports_no_lag(tmp_path: Path) -> None:
    d, source = _pipeline(tmp_path)
    d.lag.refresh()
    assert _lag(d) == 4
    source.held = set()
    d._lost(AssignmentLost({0}, "the member was dropped from the group"))
    assert _lag(d) is None


class Draining(Lagging):
    """The lag the test sets, on partition 0."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.behind = 30

    def lag(self) -> dict[int, int]:
        return {0: self.behind}


def test_the_lag_reaches_0_when_the_stream_stops_within_the_throttle(tmp_path: Path) -> None:
    """oper18b (confluent-kafka, two replicas in podman): once the fleet stopped, one
    replica kept exporting lag 18, 33 and 9 on its three partitions for good, their
    commits at the partitions' ends. The gauges are refreshed after a checkpoint that
    moved the offsets, at most every 15 s: the stream's last records were committed
    within 15 s of the previous refresh, and no later checkpoint moved. A refresh the
    throttle put off is now done at the next checkpoint, moved or not."""
    path = tmp_path / "in.jsonl"
    path.write_text(good_sample("rover-b", 0) + "\n")
    source = Draining(str(path))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    d = build_service(cfg, publisher=MemoryPublisher(), source=source).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    d.source.poll(1.0)
    now = [1_000.0]
    d.lag.clock = lambda: now[0]
    d.checkpoint()  # the record's offset committed: nothing moves after this
    d.lag.refresh()  # a checkpoint that moved, 30 behind
    assert _lag(d) == 30
    source.behind = 0
    now[0] += 5
    d.lag.refresh()  # the stream's last records committed, 5 s later: put off
    assert _lag(d) == 30
    for _ in range(3):  # the stream has stopped: scheduled checkpoints move nothing
        now[0] += 10
        d.checkpoint()
    assert _lag(d) == 0
    assert _lag(d, "capwatch_consumer_lag_seconds") == 0
    # Idle checkpoints with nothing put off ask the source nothing.
    source.behind = 7
    now[0] += 60
    d.checkpoint()
    assert _lag(d) == 0
