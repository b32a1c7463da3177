"""Exact replay (issue 12): a record first read while an earlier version was in force is
not judged again as evidence against the version learned from it."""

from __future__ import annotations

from datetime import UTC, datetime

from capwatch.contracts.versions import ModelRef, build_version
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.agent_watch import AgentWatch, WatchSettings
from capwatch.model.consistency import Verdict
from capwatch.monitor.drift import DriftMonitor
from tests.daemon.helpers import example

NOW = datetime(2026, 11, 26, tzinfo=UTC)
BEFORE = frozenset({("at", "rover1", "waypoint1"), ("equipped_rock_analysis", "rover1"),
                    ("battery_half", "rover1")})
SAMPLE = ("sample_rock", "rover1", "store1", "waypoint1")
# The old behaviour: sampling on a half battery, which the drifted model forbids.
AFTER = frozenset({("at", "rover1", "waypoint1"), ("equipped_rock_analysis", "rover1"),
                   ("rock_sample_taken", "rover1"), ("store_full", "rover1", "store1"),
                   ("battery_reserve", "rover1")})


def _watch(evidence_offsets: list[int]) -> AgentWatch:
    baseline = build_version(ModelRef("rover-v1", None, 1), example("rover.pddl"), NOW)
    learned = build_version(
        ModelRef("rover-v1", "rover-a", 1), example("rover-sample-drift.pddl"), NOW,
        parent=baseline,
        evidence={"transitions": [{"partition": 0, "offset": o} for o in evidence_offsets]})
    return AgentWatch("rover-a", "rover-v1", 0, learned, DriftMonitor(),
                      WatchSettings(debounce_transitions=1))


def _old_behaviour(offset: int, partition: int = 0) -> AgentTransition:
    # A step of its own per record: one step sent twice is a producer's retry, observed once.
    return AgentTransition("rover-a", "rover-v1", "ep", offset, None, BEFORE, SAMPLE, AFTER,
                           False, True, partition, offset)


def test_a_replayed_record_before_the_versions_evidence_starts_nothing() -> None:
    watch = _watch([40, 45])
    for offset in (3, 40, 45):
        finding = watch.observe(_old_behaviour(offset))
        assert finding.verdict is Verdict.INCONSISTENT
        assert not finding.ripe
    assert not watch.evidence and watch.first_buffered_offset() is None


def test_a_record_after_the_versions_evidence_is_evidence_again() -> None:
    watch = _watch([40, 45])
    finding = watch.observe(_old_behaviour(46))
    assert finding.verdict is Verdict.INCONSISTENT and finding.ripe
    assert watch.first_buffered_offset() == 46


def test_other_partitions_and_evidence_free_versions_are_judged_as_usual() -> None:
    assert _watch([40]).observe(_old_behaviour(3, partition=1)).ripe
    assert _watch([]).observe(_old_behaviour(3)).ripe
