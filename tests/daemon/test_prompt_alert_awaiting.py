"""A hard inconsistency is alerted at once even while the agent's watch awaits an
assessment (issue 13, latency row: the benchmark's one missed injection went to an agent
awaiting a drift assessment). The alert goes out once, the pending assessment keeps its
own evidence, and the new evidence is queued once that work ends, against the model then
in use; an inconsistency of the awaited action is counted only. Through the pipeline: a
real assessment by a simulated drifted rover, the store's queue and outbox, the routed
alerts on the output. No servers."""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.alerts.outbox import ending_key
from capwatch.assess.agent import AgentQuery
from capwatch.contracts.ports import Record
from capwatch.daemon.alerting import queued_alert_key
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.daemon.work import WorkItem
from tests.daemon.helpers import (
    HALF,
    SAMPLE,
    SAMPLED,
    config,
    example,
    refused_sample,
    run_queued,
    transition,
)

FULL = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
        ["battery_full", "rover1"]]
AFTER_FULL = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
              ["battery_half", "rover1"], ["rock_sample_taken", "rover1"],
              ["store_full", "rover1", "store1"]]


def refused_navigate(step: int) -> str:
    """Refused although the rover stands where it starts: neither the baseline nor the
    drifted model explains it (a second, unrelated fault)."""
    return transition("rover-a", "rover-v1", HALF, ["navigate", "rover1", "waypoint1",
                                                    "waypoint2"], HALF, step, executed=False)


def sampled_on_full_battery(step: int) -> str:
    """What the drifted rover does: the baseline rules it out (sample_rock needs a half
    battery there), the drifted model explains it."""
    return transition("rover-a", "rover-v1", FULL, SAMPLE, AFTER_FULL, step, executed=True)


class DriftedRover:
    """Every agent answers queries as the drifted rover (rover-sample-drift.pddl)."""

    def __init__(self) -> None:
        self.sim = SimulatedAgent(example("rover-sample-drift.pddl"), seed=1)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


def _pipeline(tmp_path: Path, lines: list[str]) -> tuple[Pipeline, MemoryPublisher,
                                                        list[Record]]:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 50, "debounce_s": 3600.0})
    memory = MemoryPublisher()
    d = build_service(cfg, publisher=memory, agents=DriftedRover(),
                      source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    return d, memory, d.source.poll(1.0)


def _alerted_offsets(memory: MemoryPublisher) -> list[list[int]]:
    return [[t["offset"] for t in a.evidence["transitions"]] for a in memory.alerts
            if a.alert_type == "unexplained_inconsistency"]


def _awaiting_first_assessment(d: Pipeline, records: list[Record]) -> str:
    """The refused sample (offset 0) is queued at once: the watch awaits its work."""
    d.handle_batch(records[:1])
    d.sweep(force=True)
    watch = d.registry.get("rover-a")
    assert watch is not None and watch.awaiting is not None
    return watch.awaiting


def test_a_new_fault_is_alerted_at_once_while_an_assessment_runs_and_queued_after_it(
        tmp_path: Path) -> None:
    d, memory, records = _pipeline(tmp_path, [
        refused_sample(step=0), refused_sample(step=1), refused_navigate(step=2),
        refused_navigate(step=3)])
    try:
        first = _awaiting_first_assessment(d, records)
        (pending,) = d.store.queue_items()
        # The same kind as the awaited work (offset 1) is what that work assesses: counted
        # only. The refused navigate (offset 2) is a new fault: alerted in this batch.
        d.handle_batch(records[1:3])
        watch = d.registry.get("rover-a")
        assert watch is not None and watch.awaiting == first
        assert [e.offset for e in watch.evidence] == [2]
        second = watch.work_key()
        assert second != first and second.endswith("#2")
        assert {r.key for r in d.store.outbox()} == {queued_alert_key(first),
                                                    queued_alert_key(second)}
        assert d.checkpoints.commit_offsets() == {0: 2}  # the new evidence holds the commit
        d.route_alerts()
        assert sorted(_alerted_offsets(memory)) == [[0], [2]]
        (alert,) = (a for a in memory.alerts if a.action == "navigate")
        assert alert.evidence["assessment_key"] == second
        assert alert.evidence["model_version"] == watch.version.ref.version
        # The pending assessment is untouched: its own evidence only, still queued alone.
        assert d.store.queue_items() == [pending]
        d.handle_batch(records[3:])  # joins the open buffer: no alert of its own
        assert len(d.store.outbox()) == 2

        # The assessment publishes the drifted sample_rock; the refused navigate is still
        # unexplained by that version, so it stays, queued against it under its own key.
        assert run_queued(d) == 1
        version = d.store.latest("rover-v1", "rover-a")
        assert version is not None and watch.version == version and watch.awaiting is None
        assert [e.offset for e in watch.evidence] == [2, 3]
        assert watch.work_key() == second
        d.sweep(force=True)
        (item,) = d.store.queue_items("pending")
        work = WorkItem.from_pending(item)
        assert work.key == second and work.base == version.ref
        assert [t.offset for t in work.inconsistent] == [2, 3]
        # One alert per fault: the queued work's write added nothing, no ending was written.
        keys = [r.key for r in d.store.outbox() if r.alert_type == "unexplained_inconsistency"]
        assert sorted(keys) == sorted([queued_alert_key(first), ending_key(
            queued_alert_key(first)), queued_alert_key(second)])
        d.route_alerts(force=True)
        assert sorted(_alerted_offsets(memory)) == [[0], [2]]
    finally:
        d.source.close()
        d.store.close()


def test_a_fault_seen_while_awaited_work_ends_unchanged_is_queued_against_the_same_model(
        tmp_path: Path) -> None:
    d, memory, records = _pipeline(tmp_path, [
        refused_sample(step=0), refused_navigate(step=1),
        transition("rover-a", "rover-v1", HALF, SAMPLE, SAMPLED, 2, executed=True)])
    try:
        first = _awaiting_first_assessment(d, records)
        d.handle_batch(records[1:])
        watch = d.registry.get("rover-a")
        assert watch is not None
        base = watch.version
        second = watch.work_key()
        # Another replica's worker ends the awaited work without a version.
        (claimed,) = d.store.claim("other/w0", d.clock(), 60.0, 1)
        assert claimed.key == first
        d.store.complete(first, "other/w0")
        d.poll_results()
        assert watch.awaiting is None and watch.version == base
        d.sweep(force=True)
        (item,) = d.store.queue_items("pending")
        work = WorkItem.from_pending(item)
        assert work.key == second and work.base == base.ref
        assert [t.offset for t in work.inconsistent] == [1]
        assert [r.key for r in d.store.outbox()] == [queued_alert_key(first),
                                                      queued_alert_key(second)]
        d.route_alerts(force=True)
        assert sorted(_alerted_offsets(memory)) == [[0], [1]]
    finally:
        d.source.close()
        d.store.close()


def test_another_kind_of_the_awaited_action_is_counted_only(tmp_path: Path) -> None:
    # One drift of an action shows as several kinds of evidence (its transitions
    # contradict different pa-tuples); which of them arrive before the work ends is
    # timing, which must not decide whether a second alert is written. The demo's
    # drifted rover sometimes got two "awaiting assessment" alerts before this.
    d, memory, records = _pipeline(tmp_path, [
        refused_sample(step=0), sampled_on_full_battery(step=1), refused_navigate(step=2)])
    try:
        first = _awaiting_first_assessment(d, records)
        d.handle_batch(records[1:2])
        watch = d.registry.get("rover-a")
        assert watch is not None and watch.awaiting == first
        assert watch.evidence == [] and watch.inconsistent == 2
        assert {r.key for r in d.store.outbox()} == {queued_alert_key(first)}
        d.route_alerts()
        assert _alerted_offsets(memory) == [[0]]
        # Another action is still alerted at once.
        d.handle_batch(records[2:])
        assert [e.offset for e in watch.evidence] == [2]
        assert len(d.store.outbox()) == 2
    finally:
        d.source.close()
        d.store.close()
