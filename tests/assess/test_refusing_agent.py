"""Session 19, gap 2: an agent that answers every query ``executed: false``.

Before, the assessment went on designing queries from the refusals (3 to 95 queries on
these domains, each refusal read as a precondition) and failed closed on a misleading
reason: a refused final-check step ("the agent changed during the assessment"), after
reporting dozens of changes in its details. No answer that runs nothing can teach a
model; once the first queries ran no step, a dozen of them steps the evidence says run,
the engine stops and says so (:class:`AgentRefusesQueries`, an ``AgentUnavailable``:
no version, the daemon's assessment_failed names it)."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentRefusesQueries, QueryResult, State
from capwatch.assess.engine import REFUSED_QUERIES, assess
from capwatch.assess.observations import Transition
from capwatch.model.domain import Domain, GroundAction
from capwatch.model.pal import LEGAL_PA_VALUES, AbstractModel, Location, Mode
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import DOMAINS, IPC

WHERE = [IPC / "ferry", IPC / "parking", IPC / "hiking", IPC / "transport",
         DOMAINS / "gripper", IPC / "elevators"]


class Refuses:
    def __init__(self) -> None:
        self.asked = 0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        self.asked += 1
        return [QueryResult(0, frozenset(state))] * samples


def _observations(where: str) -> tuple[list[Transition], dict[str, tuple[str, ...]]]:
    from pathlib import Path
    p = Path(where)
    domain = read_domain(p / "domain.pddl")
    problem = read_problem(min(p.glob("problem*.pddl")))
    walk = SimulatedAgent(domain, seed=1).random_walk(60, problem, p_inapplicable=0.2)
    obs = [Transition(s, a, s2, source=f"walk[{i}]")
           for i, (s, a, s2) in enumerate(walk.transitions())]
    random.Random(1).shuffle(obs)
    return obs, dict(problem.objects_by_type(domain))


def _refused(obs: list[Transition]) -> list[Transition]:
    """The stream's inconsistency that queues the assessment: a step the model says runs,
    refused (the drift, as the daemon sees it, of an agent that now refuses everything)."""
    ran = next(o for o in obs if o.state != o.next_state)
    return [*(o for o in obs if o is not ran),
            Transition(ran.state, ran.action, ran.state, source="inconsistent[0]",
                       executed=False)]


@pytest.mark.parametrize("where", [str(w) for w in WHERE], ids=[w.name for w in WHERE])
def test_an_agent_refusing_every_query_stops_early(where: str) -> None:
    """``verify``, the daemon's default method (assessment.method). After REFUSED_QUERIES
    queries ran nothing, the final check's steps are asked early and two refused name it
    (ferry 16, hiking 20, transport 15, elevators 14, gripper 13 queries); parking's loop
    ends sooner, at 3, and its final check names it (7). Before assess19b the count alone
    named it at 12 (an honest agent too: below), and parking, gripper and elevators ended
    on one refused check step as 'unexplained': the check now asks a refused step's
    followers again instead of dropping them."""
    obs, objects = _observations(where)
    agent = Refuses()
    with pytest.raises(AgentRefusesQueries, match="ran no step of"):
        assess(read_domain(where + "/domain.pddl"), _refused(obs), agent,
               method="verify", budget=500, objects=objects)
    assert agent.asked <= 2 * REFUSED_QUERIES


@pytest.mark.parametrize("where", [str(w) for w in WHERE], ids=[w.name for w in WHERE])
def test_an_honest_agent_is_not_taken_for_one(where: str) -> None:
    obs, objects = _observations(where)
    domain = read_domain(where + "/domain.pddl")
    result = assess(domain, obs, SimulatedAgent(domain, seed=2), method="verify",
                    budget=500, objects=objects)
    assert not result.changes


def _gained(known: Domain, per_action: int, share: float, rng: random.Random) -> Domain:
    """``known`` with up to ``per_action`` precondition literals gained by about ``share``
    of its actions (a legal drift: the agent now needs more before it acts)."""
    model = AbstractModel.from_domain(known)
    modes = dict(model.modes)
    actions = sorted({p.action for p in model.pals})
    for a in [a for a in actions if rng.random() < share] or actions[:1]:
        pres = [p for p in model.pals if p.action == a and p.location is Location.PRE
                and modes[p] is Mode.ABSENT]
        rng.shuffle(pres)
        gained = 0
        for p in pres:
            if gained >= per_action:
                break
            effect = modes[p.pa.pal(Location.EFF)]
            legal = [m for m in (Mode.POS, Mode.NEG) if (m, effect) in LEGAL_PA_VALUES]
            if legal:
                modes[p] = rng.choice(legal)
                gained += 1
    return model.with_modes(modes).to_domain()


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_an_honest_agent_that_gained_preconditions_is_not_taken_for_one(share: float) -> None:
    """An agent whose actions legitimately need more than the known model says refuses
    the first queries designed from that model, perhaps all of a dozen (IPC barman: two
    literals gained, its own walk a dead end from the problem's start, 4-5 refused steps
    observed): a count of refused queries named it ``agent_refuses_queries`` at query 12
    and gave the work up (session 19, assess19b). The queries that follow learn what it
    needs, and the final check's steps then run."""
    where = IPC / "barman"
    known = read_domain(where / "domain.pddl")
    problem = read_problem(where / "problem.pddl")
    truth = _gained(known, 2, share, random.Random(0))
    walk = SimulatedAgent(truth, seed=0).random_walk(40, problem, p_inapplicable=0.9)
    obs = [Transition(s, a, s2, source=f"walk[{i}]")
           for i, (s, a, s2) in enumerate(walk.transitions())]
    assert not any(o.state != o.next_state for o in obs)  # what made it hard
    assess(known, obs, SimulatedAgent(truth, seed=100), method="verify", budget=300,
           objects=dict(problem.objects_by_type(known)))
