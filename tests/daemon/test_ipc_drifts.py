"""The daemon end to end on IPC domains it was not built on, with drifts written by hand.

One daemon watches three families at once (hiking: typed, equality constraints; tpp: a deep
type hierarchy and 7-parameter actions; openstacks: constants, action costs), each a
simulated fleet of the domain's problem in which one agent switches to a drifted copy of
the domain (tests/data/domains/own/ipc-drifts). The stream alone shows these drifts (an
effect removed, a precondition removed); the daemon must find them, query the agent and
publish exactly one version per drifted agent whose model is the drifted domain, with an
alert naming the change, and nothing for the agents that did not drift.
``make bench-daemon-drifts`` runs every hand-made drift, canaries included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.daemon.helpers import config, run
from tests.paths import DATA, IPC

DRIFTS = DATA / "own" / "ipc-drifts"

CASES = {
    # family: (drift file, the change the alert must name)
    "hiking": ("drive-leaves-car", "drive(?x1 ?x2 ?x3 ?x4) no longer makes (at_car ?x4 ?x2) "
                                   "false; no longer makes (at_car ?x4 ?x3) true"),
    "tpp": ("load-from-anywhere", "load(?g ?t ?m ?l1 ?l2 ?l3 ?l4) no longer requires "
                                  "(at ?t ?m)"),
    "openstacks": ("start-keeps-waiting", "start-order(?o ?avail ?new-avail) no longer makes "
                                          "(waiting ?o) false"),
}


def _config(tmp_path: Path) -> Any:
    return config(
        tmp_path,
        families={name: {"domain": str(IPC / name / "domain.pddl"),
                         "problem": str(IPC / name / "problem.pddl")} for name in CASES},
        source={"kind": "simulated", "simulated": {
            "families": {name: {"agents": 3} for name in CASES},
            "rounds": 300, "seed": 1,
            "drifts": [{"agent_id": f"{name}-001", "at_step": 40,
                        "domain": str(DRIFTS / name / f"{drift}.pddl")}
                       for name, (drift, _) in CASES.items()]}})


def test_each_hand_made_drift_gets_one_exact_version_and_an_alert_naming_it(
        tmp_path: Path) -> None:
    service, out = run(_config(tmp_path))
    fleet = service.pipeline.agents.fleet  # type: ignore[attr-defined]
    drifted = {f"{name}-001" for name in CASES}
    assert set(fleet.drifted_agents()) == drifted
    assert sorted(m.agent_id for m in out.models) == sorted(drifted)
    for m in out.models:
        drift, change = CASES[m.family]
        truth = read_domain(DRIFTS / m.family / f"{drift}.pddl")
        assert fleet.true_model(m.agent_id) == truth
        assert m.version == 1 and m.parent_agent_id is None and m.parent_version == 1
        assert delta(domain_from_json(m.model.json_), truth) == 0, m.summary
        assert m.summary == [change]
        assert m.coverage is not None and m.coverage.unresolved == 0
    capability = [a for a in out.alerts if a.alert_type.startswith("capability_")]
    assert sorted(a.agent_id for a in capability) == sorted(drifted)
    for a in capability:
        assert a.summary == CASES[a.family][1]
    assert not [a for a in out.alerts if a.agent_id not in drifted]
    assert out.dead_letters == []


def test_a_second_drift_of_the_same_agent_gets_a_second_version_on_the_first(
        tmp_path: Path) -> None:
    """hiking-001 first leaves its car behind, later also leaves tents down when putting
    them up: version 1 (parent: the baseline) has the first change, version 2 (parent:
    version 1) adds the second, and each alert names only its own change.

    Two runs over one store, the second resuming the stream where the first stopped: an
    assessment asks the agent as it is when it asks, so within one run the second drift
    could already be in place when the first is assessed (one version with both)."""
    first = DRIFTS / "hiking" / "drive-leaves-car.pddl"
    second = DRIFTS / "hiking" / "drive-leaves-car-then-tent-stays-down.pddl"

    def daemon(rounds: int) -> Any:
        return config(
            tmp_path,
            families={"hiking": {"domain": str(IPC / "hiking" / "domain.pddl"),
                                 "problem": str(IPC / "hiking" / "problem.pddl")}},
            source={"kind": "simulated", "simulated": {
                "families": {"hiking": {"agents": 3}}, "rounds": rounds, "seed": 1,
                "drifts": [{"agent_id": "hiking-001", "at_step": 40, "domain": str(first)},
                           {"agent_id": "hiking-001", "at_step": 250,
                            "domain": str(second)}]}})

    _, out1 = run(daemon(200))
    service, out2 = run(daemon(600))
    fleet = service.pipeline.agents.fleet  # type: ignore[attr-defined]
    assert fleet.true_model("hiking-001") == read_domain(second)
    assert fleet.simulated_agent("hiking-001").model_version == 3  # switched once to each
    (v1,), (v2,) = out1.models, out2.models
    assert (v1.agent_id, v1.version, v1.parent_agent_id, v1.parent_version) == (
        "hiking-001", 1, None, 1)
    assert (v2.agent_id, v2.version, v2.parent_agent_id, v2.parent_version) == (
        "hiking-001", 2, "hiking-001", 1)
    assert delta(domain_from_json(v1.model.json_), read_domain(first)) == 0
    assert delta(domain_from_json(v2.model.json_), read_domain(second)) == 0
    assert v1.summary == [CASES["hiking"][1]]
    assert v2.summary == ["put_up(?x1 ?x2 ?x3) no longer makes (down ?x3) false"]
    capability = [a.summary for out in (out1, out2) for a in out.alerts
                  if a.alert_type.startswith("capability_")]
    assert capability == [v1.summary[0], v2.summary[0]]
