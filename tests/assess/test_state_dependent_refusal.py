"""An agent whose refusal depends on more of the state than the model's atoms must not get
a precondition published on one refusal (rev12b, own drift: gripper's ``move`` turned into
a no-op; found by benchmarks/probe_assess_rev12b.py's refusing agent).

The agent refuses ``drop`` in one state (the first query that asks it with the gripper
free) and in that state every time it comes again, as an agent with one gripper broken,
known by its name, would. The engine takes the refusal for a precondition (``drop`` needs
its gripper not free), which no model of this agent has: in any other state with the same
atoms it drops. Asked again verbatim, the agent repeated its refusal and the wrong model
was published; asked on renamed objects, it drops, and the model fails closed.
"""

from __future__ import annotations

from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult, State
from capwatch.assess.engine import assess
from capwatch.assess.replay import confirm, replay
from capwatch.model.domain import GroundAction, Outcome
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.assess.walks import split_walks
from tests.paths import DOMAINS


class RefusesInOneState:
    def __init__(self, truth: SimulatedAgent) -> None:
        self.truth = truth
        self.refused: tuple[frozenset[tuple[str, ...]], tuple[GroundAction, ...]] | None = None
        self.refusals = 0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        first = plan[0] if plan else None
        if first is not None and first[0] == "drop" and ("free", first[3]) in state:
            key = (frozenset(state), tuple(plan))
            if self.refused is None:
                self.refused = key
            if key == self.refused:
                self.refusals += samples
                return [QueryResult(0, frozenset(state)) for _ in range(samples)]
        return self.truth.query(state, plan, samples)


def test_a_precondition_learnt_from_a_state_dependent_refusal_is_not_published() -> None:
    known = read_domain(DOMAINS / "gripper" / "domain.pddl")
    move = known.action("move")
    truth = known.replace_action(move.replace(outcomes=(Outcome(probability=1.0),)))
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    walker = SimulatedAgent(truth, seed=0, problem=problem)
    good, bad = split_walks(walker, known, episodes=10, length=15, p_inapplicable=0.1)
    assert bad, "the drift shows in the walks"
    evidence = good[-40:] + bad[:2]
    agent = RefusesInOneState(SimulatedAgent(truth, seed=0, problem=problem))
    result = assess(known, evidence, agent, method="verify", budget=500)
    learnt = result.domain()
    # The refusal was taken for a precondition of drop: a model explaining every answer
    # given once, but not the agent's (what the daemon published before).
    assert agent.refusals > 0
    assert delta(learnt, truth) > 0
    assert replay(learnt, evidence, result.queries) == []
    again, asked = confirm(learnt, agent, result.queries, 64)
    assert asked == 64
    assert again, "a precondition learnt from one state-dependent refusal passed"
    assert all("answered differently" in u.reason for u in again)


def test_honest_answers_on_renamed_objects_pass() -> None:
    known = read_domain(DOMAINS / "gripper" / "domain.pddl")
    move = known.action("move")
    truth = known.replace_action(move.replace(outcomes=(Outcome(probability=1.0),)))
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    walker = SimulatedAgent(truth, seed=0, problem=problem)
    good, bad = split_walks(walker, known, episodes=10, length=15, p_inapplicable=0.1)
    agent = SimulatedAgent(truth, seed=0, problem=problem)
    result = assess(known, good[-40:] + bad[:2], agent, method="verify", budget=500)
    assert delta(result.domain(), truth) == 0
    again, asked = confirm(result.domain(), agent, result.queries, 64)
    assert again == [] and asked == 64
