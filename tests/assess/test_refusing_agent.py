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
from capwatch.model.domain import GroundAction
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
    """``verify``, the daemon's default method (assessment.method). Named as refusing
    where REFUSED_QUERIES queries, or two final-check steps, ran nothing (ferry, hiking,
    transport); where the loop ends sooner and the final check has one step (parking,
    gripper, elevators: 3 to 11 queries) it ends as before, on that refused step, which
    one answer cannot tell from an honest agent whose evidence contradicts itself
    (test_engine's gripper case: 1 query, nothing run, the check's step refused)."""
    obs, objects = _observations(where)
    agent = Refuses()
    try:
        result = assess(read_domain(where + "/domain.pddl"), _refused(obs), agent,
                        method="verify", budget=500, objects=objects)
    except AgentRefusesQueries as e:
        assert "ran no step of" in str(e)
    else:
        assert any("refused where the evidence says it surely runs" in n
                   for n in result.notes)
    assert agent.asked <= REFUSED_QUERIES


@pytest.mark.parametrize("where", [str(w) for w in WHERE], ids=[w.name for w in WHERE])
def test_an_honest_agent_is_not_taken_for_one(where: str) -> None:
    obs, objects = _observations(where)
    domain = read_domain(where + "/domain.pddl")
    result = assess(domain, obs, SimulatedAgent(domain, seed=2), method="verify",
                    budget=500, objects=objects)
    assert not result.changes
