"""An assessment that ends unexplained carries bounded evidence.

Its details become the ``assessment_failed`` alert's evidence, sent whole to the alerts
topic and to Alertmanager. They listed every unexplained answer with its whole start and
end state; an assessment's queries run their probes on fresh objects, one after another,
so one query's state can hold thousands of atoms: an operator's run on the IPC depot domain
(an agent whose traces lost an effect of ``lift`` but whose answers follow the old model)
made a 6 MB alert, over a broker's default ``message.max.bytes`` (1 MB). The output sink
then failed it on every attempt, and the alerts flushed with it (kafka-python aborts a
batch with such a record) never went out either."""

from __future__ import annotations

import json
import random

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.replay import Unexplained
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor, unexplained_json
from capwatch.model.pddl_domain import parse_domain
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import IPC

DEPOT = IPC / "depot"
LIFT_KEEPS_SURFACE = ("(and (lifting ?x ?y) (clear ?z) (not (at ?y ?p))",
                      "(and (lifting ?x ?y) (not (at ?y ?p))")


def _evidence() -> tuple[list[AgentTransition], list[AgentTransition]]:
    text = (DEPOT / "domain.pddl").read_text()
    assert LIFT_KEEPS_SURFACE[0] in text
    drifted = parse_domain(text.replace(*LIFT_KEEPS_SURFACE))
    problem = read_problem(DEPOT / "problem.pddl")
    walker = SimulatedAgent(drifted, seed=3, problem=problem)
    good: list[AgentTransition] = []
    bad: list[AgentTransition] = []
    rnd = random.Random(5)
    for episode in range(12):
        ep = walker.random_walk(40, p_inapplicable=rnd.choice((0.0, 0.2)))
        for i, (s, a, s2) in enumerate(ep.transitions()):
            t = AgentTransition("depot-liar", "depot", f"ep{episode}", i, None, s, a, s2,
                                False, ep.executed[i])
            # The known lift clears the surface under the crate (never clear before):
            # every lift the drifted agent runs contradicts it, nothing else does.
            (bad if a[0] == "lift" and ep.executed[i] else good).append(t)
    return good, bad


def test_an_unexplained_assessment_of_large_queries_stays_small() -> None:
    known = read_domain(DEPOT / "domain.pddl")
    good, bad = _evidence()
    assert bad, "the drifted lift shows in the walks"
    liar = SimulatedAgent(known, seed=1)  # answers as the old model: nothing explains both
    outcome = EngineAssessor().assess(AssessmentRequest(
        "depot-liar", "depot", known, liar, inconsistent=bad[:3], executed=good[-40:],
        confirm_queries=64, query_budget=500))
    assert outcome.unexplained, "a liar's assessment is never published"
    entries = outcome.details["unexplained"]
    assert entries and all(e["reason"] and e["source"] for e in entries)
    size = len(json.dumps(outcome.details))
    assert size < 256_000, f"{size:,} bytes of evidence"


def test_a_large_state_is_given_by_its_size_and_what_changed() -> None:
    state = frozenset(("p", f"o{i}") for i in range(5_000))
    final = (state - {("p", "o1")}) | {("q", "o1")}
    plan = tuple(("a", f"o{i}") for i in range(500))
    u = Unexplained("query 3", state, plan, 2, final, "after 2 steps ...")
    out = unexplained_json(u)
    assert out["source"] == "query 3" and out["executed"] == 2
    assert out["reason"] == "after 2 steps ..."
    assert out["state_atoms"] == 5_000 and out["final_state_atoms"] == 5_000
    assert out["made_true"] == [["q", "o1"]] and out["made_false"] == [["p", "o1"]]
    assert "state" not in out and "final_state" not in out
    assert out["plan_steps"] == 500 and len(out["plan"]) < 500
    assert len(json.dumps(out)) < 16_000
    # A small one is kept whole, as before.
    small = Unexplained("executed[0]", frozenset({("p", "a")}), (("a", "a"),), None,
                        frozenset({("q", "a")}), "no outcome")
    assert unexplained_json(small) == small.to_json()


def test_a_cut_list_of_changed_atoms_says_how_many_there_were() -> None:
    """Each list of changed atoms keeps 64; the total was said only when both together
    passed 128, so 100 atoms made true and none made false showed as 64, cut silently."""
    state = frozenset(("p", f"o{i}") for i in range(200))
    final = state | {("q", f"o{i}") for i in range(100)}
    out = unexplained_json(Unexplained("query 1", state, (("a", "o1"),), 1, final, "r"))
    assert len(out["made_true"]) == 64 and out["made_false"] == []
    assert out["changed_atoms"] == 100
    few = final - {("q", f"o{i}") for i in range(40)}  # 60 made true: nothing cut
    assert "changed_atoms" not in unexplained_json(
        Unexplained("query 1", state, (("a", "o1"),), 1, few, "r"))
