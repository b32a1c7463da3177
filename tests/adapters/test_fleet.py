"""The simulated fleet: deterministic (replayable) streams and drift injection."""

from __future__ import annotations

import json

import pytest

from capwatch.adapters.sim.fleet import DriftSpec, FamilySpec, SimulatedFleet
from capwatch.adapters.sim.source import SimulatedSource, stable_partition
from capwatch.contracts.wire import decode
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "capwatch" / "examples"


def families() -> dict[str, FamilySpec]:
    return {
        "rover-v1": FamilySpec("rover-v1", read_domain(EXAMPLES / "rover.pddl"),
                               read_problem(EXAMPLES / "rover-problem.pddl")),
        "courier-v1": FamilySpec("courier-v1", read_domain(EXAMPLES / "courier.pddl"),
                                 read_problem(EXAMPLES / "courier-problem.pddl")),
    }


def test_the_same_seed_gives_the_same_stream() -> None:
    a = [e.value for e in SimulatedFleet.build(families(), 3, seed=4).events(40)]
    b = [e.value for e in SimulatedFleet.build(families(), 3, seed=4).events(40)]
    c = [e.value for e in SimulatedFleet.build(families(), 3, seed=5).events(40)]
    assert a == b and a != c
    assert all(isinstance(decode(raw), list) for raw in a)


def test_a_family_drift_switches_every_agent_of_the_family_after_its_step() -> None:
    drifted = read_domain(EXAMPLES / "courier-drop-jam.pddl")
    fleet = SimulatedFleet.build(families(), 3, [DriftSpec(drifted, 30, family="courier-v1")],
                                 seed=1, episode_steps=10)
    list(fleet.events(25))
    assert fleet.drifted_agents() == []
    list(fleet.events(20))
    assert sorted(fleet.drifted_agents()) == [f"courier-v1-{i:03d}" for i in range(3)]
    assert all(fleet.true_model(a) == drifted for a in fleet.drifted_agents())
    assert fleet.true_model("rover-v1-000") == families()["rover-v1"].domain


def test_drift_targets_must_exist() -> None:
    d = read_domain(EXAMPLES / "rover.pddl")
    with pytest.raises(ValueError, match="unknown agent"):
        SimulatedFleet.build(families(), 1, [DriftSpec(d, 1, agent_id="nobody")])
    with pytest.raises(ValueError, match="exactly one"):
        DriftSpec(d, 1)


def test_the_simulated_source_partitions_by_agent_and_resumes() -> None:
    source = SimulatedSource(SimulatedFleet.build(families(), 2, seed=2), rounds=10,
                             partitions=3)
    source.start(lambda p: None, lambda p: None, {})
    records = []
    while not source.exhausted():
        records += source.poll(0.0)
    assert len(records) == 40
    for r in records:
        agent = json.loads(r.value)["agent_id"]
        assert r.key == agent.encode() and r.partition == stable_partition(agent, 3)
    resumed = SimulatedSource(SimulatedFleet.build(families(), 2, seed=2), rounds=10,
                              partitions=3)
    resumed.start(lambda p: None, lambda p: None, {0: 5, 1: 5, 2: 5})
    rest = []
    while not resumed.exhausted():
        rest += resumed.poll(0.0)
    assert rest == [r for r in records if r.offset >= 5]


def test_an_exhausted_simulated_source_waits_out_the_poll_timeout() -> None:
    waits: list[float] = []
    source = SimulatedSource(SimulatedFleet.build(families(), 1, seed=2), rounds=3,
                             batch=1000, wait=waits.append)
    source.start(lambda p: None, lambda p: None, {})
    assert len(source.poll(0.25)) == 6 and waits == []
    assert source.poll(0.25) == [] and waits == [0.25] and source.exhausted()


def test_a_later_drift_supersedes_an_earlier_one_once() -> None:
    """An agent's drifts apply in step order: past the second one's step the agent runs the
    second model, switched to once (it flipped back to the first and on to the second
    before every episode, and its drift step moved with every flip)."""
    jam = read_domain(EXAMPLES / "courier-drop-jam.pddl")
    wear = read_domain(EXAMPLES / "courier-pick-wear.pddl")
    fleet = SimulatedFleet.build(families(), 1, [
        DriftSpec(wear, 40, agent_id="courier-v1-000"),
        DriftSpec(jam, 10, agent_id="courier-v1-000")], seed=1, episode_steps=10)
    list(fleet.events(25))
    assert fleet.true_model("courier-v1-000") == jam
    list(fleet.events(30))
    agent = fleet.simulated_agent("courier-v1-000")
    assert fleet.true_model("courier-v1-000") == wear
    switched = fleet.drift_step("courier-v1-000")
    assert switched is not None and 40 <= switched < 55
    list(fleet.events(50))
    assert agent.model_version == 3 and fleet.drift_step("courier-v1-000") == switched
