"""Per-agent registry (rebuilt from the store) and the scheduled jobs' work."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.daemon.registry import Registry
from capwatch.daemon.service import Service, build_service
from capwatch.model.domain import GroundAtom
from capwatch.models_store import ModelRef, build_version, open_store
from tests.daemon.helpers import config, example, good_sample

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_registry_rebuilds_agents_from_the_store(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        base = store.put(build_version(ModelRef("rover-v1", None, 1), example("rover.pddl"), T0))
        registry = Registry(store)
        assert registry.load("rover-a", "no-such-family", 0) is None
        a = registry.load("rover-a", "rover-v1", 3)
        assert a is not None and a.version.ref == base.ref and a.partition == 3
        assert registry.load("rover-a", "rover-v1", 3) is a  # held, not reloaded
        store.put(build_version(ModelRef("rover-v1", "rover-a", 1),
                                example("rover-sample-drift.pddl"), T0, parent=base))
        # Another replica taking the partition over sees the agent's own lineage.
        fresh = Registry(store).load("rover-a", "rover-v1", 3)
        assert fresh is not None and fresh.version.ref == ModelRef("rover-v1", "rover-a", 1)
        assert fresh.domain == example("rover-sample-drift.pddl")
        b = registry.load("rover-b", "rover-v1", 5)
        assert b is not None
        assert [x.agent_id for x in registry.in_partitions({5})] == ["rover-b"]
        registry.drop(["rover-b"])
        assert registry.get("rover-b") is None and len(registry) == 1
    finally:
        store.close()


class DriftedRover:
    def __init__(self) -> None:
        self.sim = SimulatedAgent(example("rover-sample-drift.pddl"), seed=2)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


def _consume_jsonl(tmp_path: Path, path: Path, **sections: Any) -> Service:
    """A service over a JSONL file that has handled every record in it, without its loop."""
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)}, **sections)
    service = build_service(cfg, publisher=MemoryPublisher(), agents=DriftedRover(),
                            source=JsonlSource(str(path)))
    d = service.pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    for r in d.source.poll(1.0):
        d.handle(r)
    return service


def test_a_canary_finds_reduced_functionality_the_stream_never_shows(tmp_path: Path) -> None:
    # The stream shows the rover navigating only; sample_rock is never attempted, so its
    # new precondition is invisible to the monitor. A canary asks the agent to sample.
    path = tmp_path / "in.jsonl"
    nav = ["navigate", "rover1", "waypoint1", "waypoint2"]
    state = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
             ["battery_half", "rover1"]]
    after = [["at", "rover1", "waypoint2"], ["equipped_rock_analysis", "rover1"],
             ["battery_half", "rover1"]]
    import json

    path.write_text(json.dumps({"type": "transition", "agent_id": "rover-a",
                                "family": "rover-v1", "state": state, "action": nav,
                                "next_state": after}) + "\n" + good_sample("rover-b") + "\n")
    service = _consume_jsonl(tmp_path, path, scheduler={"canary_idle_s": 0.0001})
    d = service.pipeline
    assert d.store.queue_items() == []
    inits: dict[str, frozenset[GroundAtom]] = {
        n: p.init for n, p in service.problems.items()}
    objects = {n: p.objects_by_type(d.families[n]) for n, p in service.problems.items()}
    time.sleep(0.01)
    d.canary(inits, objects)
    # Each agent's probes answer on the pool's threads in their own time: wait for both
    # findings (waiting for the first one, the other could still be out).
    def queued() -> set[str]:
        return {i.agent_id for i in d.store.queue_items()}

    deadline = time.monotonic() + 60
    while queued() < {"rover-a", "rover-b"} and time.monotonic() < deadline:
        time.sleep(0.05)
        d.drain()
        d.canary_slice()  # as the main loop's turns do: the round runs in slices
    items = d.store.queue_items()
    assert {i.agent_id for i in items} == {"rover-a", "rover-b"}
    evidence = items[0].payload["inconsistent"]
    assert any(o["action"][0] == "sample_rock" for o in evidence)
    assert all(o["offset"] == -1 for o in evidence)  # canary findings hold no commit
    assert d.checkpoints.commit_offsets() == {0: 2}
    d.source.close()
    d.store.close()


@pytest.mark.parametrize("sliced", [False, True])
def test_the_periodic_audit_queues_effect_distribution_drift(tmp_path: Path,
                                                             sliced: bool) -> None:
    import json
    import random

    rng = random.Random(5)
    before = [["at_robot", "robot1", "hall"], ["at", "parcel1", "hall"], ["free", "robot1"]]
    picked = [["at_robot", "robot1", "hall"], ["carrying", "robot1", "parcel1"]]
    lines = []
    for i in range(300):  # pick succeeds half the time; the model says 0.9
        after = picked if rng.random() < 0.5 else before
        lines.append(json.dumps({"type": "transition", "agent_id": "courier-a",
                                 "family": "courier-v1", "step": i, "state": before,
                                 "action": ["pick", "robot1", "parcel1", "hall"],
                                 "next_state": after}))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    # A false-alarm rate this small keeps the online detector quiet: only the audit fires.
    service = _consume_jsonl(tmp_path, path, detection={"drift_false_alarm_rate": 1e-100,
                                                         "drift_min_samples": 100})
    d = service.pipeline

    def audit() -> None:
        if not sliced:
            d.audit()
            return
        # The scheduled one with drift_audit_slice > 0: slices (of one table here, as the
        # setting 0 gives audit_slice), then the rejections together at the next turn.
        assert d.drift.start_audit()
        while d.auditing:
            d.audit_slice()

    assert d.store.queue_items() == []
    audit()
    (item,) = d.store.queue_items()
    drift = item.payload["drift"]["pick"]
    assert drift["detector"] == "audit" and drift["q_value"] < 0.05
    assert drift["estimated_probabilities"][0] < 0.7
    assert item.payload["drift_probes"]["pick"]["action"] == ["pick", "robot1", "parcel1",
                                                              "hall"]
    audits = {"family": "courier-v1", "action": "pick", "test": "audit"}
    metrics = d.metrics.registry
    assert metrics.get_sample_value("capwatch_drift_tests_total", audits) == 1
    # The next audit reuses the unchanged table's result (DriftMonitor.audit): still a
    # test of that audit; the agent awaits its assessment, so nothing more is queued.
    audit()
    assert metrics.get_sample_value("capwatch_drift_tests_total", audits) == 2
    assert len(d.store.queue_items()) == 1
    d.source.close()
    d.store.close()


@pytest.mark.parametrize("sliced", [False, True])
def test_an_audits_rejections_are_queued_in_one_store_transaction(tmp_path: Path,
                                                                  sliced: bool) -> None:
    """Each rejection queued on its own cost a commit's wait for the disk on the main loop
    (0.59 s for 48 in the alert row, docs/performance.md, End of session 17); the audit in
    slices raised a few a turn, a commit each turn."""
    import json
    import random

    rng = random.Random(5)
    before = [["at_robot", "robot1", "hall"], ["at", "parcel1", "hall"], ["free", "robot1"]]
    picked = [["at_robot", "robot1", "hall"], ["carrying", "robot1", "parcel1"]]
    agents = ["courier-a", "courier-b", "courier-c"]
    lines = [json.dumps({"type": "transition", "agent_id": agent, "family": "courier-v1",
                         "step": i, "state": before,
                         "action": ["pick", "robot1", "parcel1", "hall"],
                         "next_state": picked if rng.random() < 0.5 else before})
             for i in range(300) for agent in agents]  # pick at 0.5; the model says 0.9
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    service = _consume_jsonl(tmp_path, path, detection={"drift_false_alarm_rate": 1e-100,
                                                         "drift_min_samples": 100},
                             scheduler={"drift_audit_slice": 16 if sliced else 0})
    d = service.pipeline
    calls: list[int] = []
    enqueue_many = d.store.enqueue_many

    def counted(items: Any) -> Any:
        calls.append(len(items))
        return enqueue_many(items)

    d.store.enqueue_many = counted  # type: ignore[method-assign]
    d.store.enqueue = lambda *a: pytest.fail("a rejection queued on its own")  # type: ignore[method-assign]
    d.start_audit()
    while d.auditing:
        d.audit_slice()
    assert calls == [3]
    assert sorted(item.agent_id for item in d.store.queue_items()) == agents
    d.source.close()
    d.store.close()


def test_a_batch_of_new_agents_shares_the_baseline_and_finds_own_lineages(
        tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        base = store.put(build_version(ModelRef("rover-v1", None, 1), example("rover.pddl"), T0))
        store.put(build_version(ModelRef("rover-v1", "rover-a", 1),
                                example("rover-sample-drift.pddl"), T0, parent=base))
        registry = Registry(store)
        registry.prefetch(["rover-a", "rover-b", "rover-c"])
        a = registry.load("rover-a", "rover-v1", 0)
        b = registry.load("rover-b", "rover-v1", 0)
        c = registry.load("rover-c", "rover-v1", 0)
        registry.end_prefetch()
        assert a is not None and a.version.ref == ModelRef("rover-v1", "rover-a", 1)
        assert b is not None and c is not None and b.version.ref == base.ref
        assert b.domain is c.domain  # one parsed model for the family's agents
        # A newer baseline (an operator's promotion) reaches agents admitted later.
        v2 = store.put(build_version(ModelRef("rover-v1", None, 2),
                                     example("rover-sample-drift.pddl"), T0, parent=base))
        assert registry.refresh_baselines()["rover-v1"][0].ref == v2.ref
        d = registry.load("rover-d", "rover-v1", 0)
        assert d is not None and d.version.ref == v2.ref
    finally:
        store.close()
