"""A refusal the known model cannot explain: daaisy must resolve what could have blocked it.

Found running the daemon with ``assessment.method: daaisy`` on hand-made IPC drifts
(tests/data/domains/own/ipc-drifts): a canary or a stream shows an agent refusing an action
in a state where the known model says it applies. No single pa-tuple's known value is
ruled out by that (any of the absent preconditions could be the new one), so nothing was
flagged, daaisy asked no query, and the assessment failed as "unexplained".
"""

from __future__ import annotations

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.model.domain import GroundAction, GroundAtom
from capwatch.model.grounding import Grounder
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import DATA, IPC

DRIFTS = DATA / "own" / "ipc-drifts"


def _refusal(name: str, drift: str, ground: GroundAction,
             extra: set[GroundAtom]) -> tuple[Transition, SimulatedAgent]:
    known = read_domain(IPC / name / "domain.pddl")
    truth = read_domain(DRIFTS / name / f"{drift}.pddl")
    agent = SimulatedAgent(truth, seed=1)
    state = frozenset(read_problem(IPC / name / "problem.pddl").init | extra)
    answer = agent.query(state, [ground])[0]
    assert answer.executed == 0
    grounder = Grounder(known)
    assert grounder.operator(ground).applicable(grounder.index.encode(state))
    return Transition(state, ground, answer.state, source="canary", executed=False), agent


@pytest.mark.parametrize("method", ["daaisy", "auto", "verify"])
@pytest.mark.parametrize(("name", "drift", "ground", "extra"), [
    # a negative precondition added: the ferry sails only loaded, and it is empty
    ("ferry", "sail-only-loaded", ("sail", "l5", "l1"), set()),
    # a positive one: boarding needs the lift to reach the floor, which it does not
    ("elevators", "board-reachable", ("board", "p2", "slow1-0", "n2", "n0", "n1"),
     {("lift-at", "slow1-0", "n2")}),
])
def test_an_unexplained_refusal_is_resolved(method: str, name: str, drift: str,
                                            ground: GroundAction,
                                            extra: set[GroundAtom]) -> None:
    known = read_domain(IPC / name / "domain.pddl")
    observation, agent = _refusal(name, drift, ground, extra)
    result = assess(known, [observation], agent, method=method, budget=500)
    assert delta(result.domain(), agent.domain) == 0, [str(c) for c in result.changes]
