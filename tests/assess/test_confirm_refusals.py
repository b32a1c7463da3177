"""Asking again the queries whose answer refused a step (assess13a, session 13).

One refused step of a probe with one atom in doubt fixes a precondition literal at once
(its only cause), so a refusal is the answer a model rests on most. An agent refusing for
reasons of its own (a fixed share of states) was published with a precondition it does not
have when that refusal was never asked again: with more queries than the limit, asking
again spreads over every other query and skipped it; with fewer, the later rounds skip the
queries whose steps are all probabilistic, and the one renamed copy was refused too by
chance (rev12b's ``refuser``: ``probe_assess_rev12b.py --case tireworld flip_one 0
refuser`` published move-car requiring ``(not (road ?to ?from))``)."""

from __future__ import annotations

from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.assess.replay import confirm
from capwatch.assess.result import QueryLog
from capwatch.model.domain import GroundAction, GroundAtom, LiftedAtom
from tests.assess.test_state_dependent_outcomes import _known

PLACED = LiftedAtom("placed", ("?b",))


def _wrong_model() -> object:
    """Place as known, but requiring its box not placed: what one refusal taught."""
    known = _known()
    place = known.action("place")
    return known.replace_action(place.replace(pre_neg=place.pre_neg | {PLACED}))


def _log(refused_at: int, count: int) -> list[QueryLog]:
    """``count`` queries of one place step each (all probabilistic), the one numbered
    ``refused_at`` asked with its box placed and refused; the others ran."""
    out = []
    for n in range(1, count + 1):
        b = f"b{n}"
        if n == refused_at:
            state = frozenset({("held", b), ("placed", b)})
            out.append(QueryLog(n, state, (("place", b),), 0, state, ("refused?",)))
        else:
            state = frozenset({("held", b)})
            after = frozenset({("placed", b), ("armfree",)})
            out.append(QueryLog(n, state, (("place", b),), 1, after, ("runs",)))
    return out


class _Counting:
    def __init__(self, agent: SimulatedAgent) -> None:
        self.agent = agent
        self.plans: list[tuple[GroundAction, ...]] = []

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.plans.append(tuple(plan))
        return self.agent.query(state, plan, samples)


def test_a_refused_query_is_asked_again_when_there_are_more_queries_than_the_limit() -> None:
    """Query 62 of 113 (spread by two, it was skipped): the agent runs it now."""
    agent = _Counting(SimulatedAgent(_known(), seed=1))
    unexplained, asked = confirm(_wrong_model(), agent, _log(62, 113), 64)  # type: ignore[arg-type]
    assert asked <= 64
    assert unexplained
    assert {u.source for u in unexplained} == {"query 62 asked again"}


def test_a_refused_query_of_probabilistic_steps_is_asked_in_every_round() -> None:
    """Fewer queries than the limit: later rounds skip queries of probabilistic steps
    only (their outcomes are chance), but not a refusal, which is a precondition."""
    agent = _Counting(SimulatedAgent(_known(), seed=2))
    log = _log(3, 5)
    unexplained, asked = confirm(_wrong_model(), agent, log, 64)  # type: ignore[arg-type]
    refused_again = [p for p in agent.plans if p[0][1].startswith("b3")]
    assert len(refused_again) > 1
    assert all(u.source == "query 3 asked again" for u in unexplained)
    assert unexplained
    # The queries that ran stay asked once: their outcomes are the model's either way.
    assert asked <= 64


def test_a_refusal_asked_in_later_rounds_costs_no_step_of_an_honest_agent() -> None:
    """Later rounds ask a refused query of probabilistic steps as its refused step alone,
    in the state the answer ended in: an agent that refuses it for real runs nothing
    (asked whole, every round cost the steps before the refusal)."""
    known = _known()
    b = "b1"
    state = frozenset({("held", b), ("held", "c1")})
    plan = (("place", "c1"), ("place", b))
    ran = frozenset({("held", b), ("placed", "c1"), ("armfree",)})
    # As the wrong model explains it: place c1 ran, place b1 (its box placed) refused.
    after = ran | {("placed", b)}
    log = [QueryLog(1, state | {("placed", b)}, plan, 1, after, ("runs", "refused?"))]
    agent = _Counting(SimulatedAgent(known, seed=3))
    confirm(_wrong_model(), agent, log, 16)  # type: ignore[arg-type]
    assert len(agent.plans) == 16
    assert all(len(p) == 1 and p[0][0] == "place" for p in agent.plans[1:])
