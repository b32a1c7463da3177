"""Agents whose outcome depends on the state they are asked in (assess13a, session 13).

A PPDDL agent draws a probabilistic action's outcome independently of the state it runs
in (given that the action applies). An agent that answers some states as the old model
and the others as the new one shows, in each state, the outcomes of one model only; the
engine must not publish the union of both (a model the agent is in no state) as the
action's outcomes.

The action here, ``place``, has its chance effect on a 0-ary atom (``armfree``): a step
after it that needs ``armfree`` at a designed value cannot follow it. Until session 16 no
answer ran it twice, and an added outcome kept beside a known one failed closed (session
14: asking the same query again in separate answers, session 13's test, passes an agent
switching models per answer). ``place`` runs whatever ``armfree`` is, so a two-draw query
runs it again with that atom free (docs/assessment.md, "Two draws in one answer"): an
honest agent mixes its outcomes there, a per-answer switcher never does.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom, LiftedAtom, Outcome
from capwatch.model.pddl_reader import parse_domain
from tests.assess.publishing import ByAnswer, published

SHELF = """
(define (domain shelf)
  (:requirements :strips :typing :probabilistic-effects)
  (:types box)
  (:predicates (held ?b - box) (placed ?b - box) (armfree))
  (:action place
    :parameters (?b - box)
    :precondition (and (held ?b))
    :effect (probabilistic 0.7 (and (placed ?b) (armfree) (not (held ?b)))
                           0.3 (and (not (held ?b)))))
  (:action grab
    :parameters (?b - box)
    :precondition (and (armfree) (placed ?b))
    :effect (and (held ?b) (not (placed ?b)) (not (armfree)))))
"""

HELD = LiftedAtom("held", ("?b",))
PLACED = LiftedAtom("placed", ("?b",))
ARMFREE = LiftedAtom("armfree", ())


def _known() -> Domain:
    return parse_domain(SHELF)


def _known_strict() -> Domain:
    """The shelf whose ``place`` needs the arm not free (its likely outcome frees it): the
    next step of it cannot follow one that freed the arm, and no action takes ``armfree``
    back whatever it is (``grab`` needs it): no two-draw query exists."""
    return parse_domain(SHELF.replace(":precondition (and (held ?b))",
                                      ":precondition (and (held ?b) (not (armfree)))"))


def _place(*outcomes: Outcome, known: Domain | None = None) -> Domain:
    known = known if known is not None else _known()
    return known.replace_action(known.action("place").replace(outcomes=outcomes))


def _keeps_hold() -> Domain:
    """The drift: the likely outcome no longer lets go of the box (held stays)."""
    return _place(Outcome(frozenset({PLACED, ARMFREE}), frozenset(), 0.7),
                  Outcome(frozenset(), frozenset({HELD}), 0.3))


def _added(known: Domain | None = None) -> Domain:
    """The drift: a new outcome (the box placed and still held) beside both known ones."""
    return _place(Outcome(frozenset({PLACED, ARMFREE}), frozenset({HELD}), 0.5),
                  Outcome(frozenset(), frozenset({HELD}), 0.3),
                  Outcome(frozenset({PLACED, ARMFREE}), frozenset(), 0.2), known=known)


def _effects(action: Action) -> set[tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]]]:
    return {(o.add, o.delete) for o in action.outcomes}


def _evidence(truth: Domain) -> list[Transition]:
    """One step of the drifted likely outcome the known model cannot explain."""
    before = frozenset({("held", "b0")})
    after = frozenset({("held", "b0"), ("placed", "b0"), ("armfree",)})
    assert _effects(truth.action("place")) & {
        (frozenset({PLACED, ARMFREE}), frozenset())}
    return [Transition(before, ("place", "b0"), after, executed=True, source="kept hold")]


class _ByState:
    """The old model in the states whose hash falls in a third, the new one elsewhere:
    every answer to one query (verbatim) is the same model's."""

    def __init__(self, old: SimulatedAgent, new: SimulatedAgent) -> None:
        self.old, self.new = old, new

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        key = zlib.crc32(repr((sorted(state), list(plan))).encode())
        return (self.old if key % 3 == 0 else self.new).query(state, plan, samples)


@pytest.mark.parametrize("seed", range(6))
def test_old_model_in_some_states_new_in_others_is_not_published_as_both(seed: int) -> None:
    """Each state shows one model's outcomes, so both forms of the likely outcome are
    seen, never in one state. Before: published with both (0.7 and the old one beside
    it), which no answer refutes."""
    known, truth = _known(), _keeps_hold()
    agent = _ByState(SimulatedAgent(known, seed=seed), SimulatedAgent(truth, seed=seed + 50))
    model = published(known, agent, _evidence(truth))
    assert model is None or _effects(model.action("place")) == _effects(
        truth.action("place")), model and model.action("place").outcomes


@pytest.mark.parametrize("seed", range(6))
def test_an_agent_switching_models_per_answer_is_not_published_as_both(seed: int) -> None:
    """The old model in a random 30% of the answers: no answer runs ``place`` twice, so
    every answer, asked any number of times, has the distribution of an agent with both
    models' outcomes. Before (session 13's verbatim groups): published with both, since
    the repeats of one query mix across separate answers."""
    known, truth = _known(), _keeps_hold()
    agent = ByAnswer(SimulatedAgent(known, seed=seed), SimulatedAgent(truth, seed=seed + 50),
                      seed)
    model = published(known, agent, _evidence(truth))
    assert model is None or _effects(model.action("place")) == _effects(
        truth.action("place")), model and model.action("place").outcomes


@pytest.mark.parametrize("seed", range(3))
def test_an_honest_agent_with_an_added_outcome_is_published_from_two_draws_in_one_answer(
        seed: int) -> None:
    """Session 14's price: an honest agent with an outcome added beside the known ones gave
    the switcher's answers (no answer ran ``place`` twice) and failed closed. The
    two-draw query runs ``place`` again in one answer with ``armfree`` free (it runs
    either way): the agent's outcomes mix there and it is published with its three
    outcomes, by default. Before: undecided, "no answer ran the action twice"."""
    known, truth = _known(), _added()
    evidence = _evidence(truth)
    # The daemon's default budget: place's three outcomes re-estimated to the tolerance
    # relative to each one's size (session 18) took more than 300 queries in seed 0.
    result = assess(known, evidence, SimulatedAgent(truth, seed=seed), method="verify",
                    budget=500)
    assert not result.undecided_outcomes, result.undecided_reasons
    assert any(sum(1 for a in q.plan[:q.executed] if a[0] == "place") > 1
               for q in result.queries)
    model = result.domain()
    assert not replay(model, evidence, result.queries)
    assert _effects(model.action("place")) == _effects(truth.action("place"))


@pytest.mark.parametrize("seed", range(3))
def test_without_a_two_draw_query_an_honest_added_outcome_still_fails_closed(seed: int) -> None:
    """Where no answer can run the action twice (the strict shelf: ``place`` needs the arm
    not free, its likely outcome frees it, and no action takes ``armfree`` back whatever
    it is), session 14's rule stands: the honest agent's added outcome fails closed,
    naming the reason."""
    known = _known_strict()
    truth = _added(known)
    result = assess(known, _evidence(truth), SimulatedAgent(truth, seed=seed),
                    method="verify", budget=300)
    assert result.undecided_outcomes == ("place",)
    assert "no answer ran the action twice" in result.undecided_reasons["place"]


@pytest.mark.parametrize("seed", range(3))
def test_declared_independent_draws_publish_an_honest_agents_added_outcome(seed: int) -> None:
    """``independent_draws=True`` (the operator's word, assessment.independent_draws):
    the same honest agent as above is published with its three outcomes."""
    known, truth = _known(), _added()
    agent = SimulatedAgent(truth, seed=seed)
    evidence = _evidence(truth)
    result = assess(known, evidence, agent, method="verify", budget=300,
                    independent_draws=True)
    assert not result.undecided_outcomes, result.undecided_reasons
    model = result.domain()
    assert not replay(model, evidence, result.queries)
    assert _effects(model.action("place")) == _effects(truth.action("place"))


def test_declared_independent_draws_are_the_operators_risk() -> None:
    """What the setting gives up, stated as a test until session 16: the per-answer
    switcher, refused by default (above), was published with both models' outcomes in
    some seed once the operator declared the draws independent. Since session 17 place's
    unseen known outcome is asked in two-draw queries while it retires (it must be
    bounded below the minimum outcome probability), and an answer that ran place twice
    lets session 12's rule (an outcome kept beside an added one must show in one answer
    with it) refuse the switcher, which the setting does not turn off: no seed publishes
    it. The risk stays where no two-draw query exists (docs/assessment.md)."""
    known, truth = _known(), _keeps_hold()
    for seed in range(6):
        agent = ByAnswer(SimulatedAgent(known, seed=seed),
                          SimulatedAgent(truth, seed=seed + 50), seed)
        result = assess(known, _evidence(truth), agent, method="verify", budget=300,
                        independent_draws=True)
        if result.undecided_outcomes:
            continue
        assert _effects(result.domain().action("place")) == _effects(truth.action("place"))


def test_the_reason_names_the_answers_that_never_ran_it_twice() -> None:
    known, truth = _known(), _keeps_hold()
    agent = _ByState(SimulatedAgent(known, seed=1), SimulatedAgent(truth, seed=51))
    result = assess(known, _evidence(truth), agent, method="verify", budget=300)
    if result.undecided_outcomes:
        assert result.undecided_outcomes == ("place",)
        # Answers that run it twice show one model's outcomes each (session 16: the
        # two-draw query); without them, that none ran it twice.
        assert "never showed in an answer beside an added one" in \
            result.undecided_reasons["place"] or \
            "no answer ran the action twice" in result.undecided_reasons["place"]
    else:
        assert _effects(result.domain().action("place")) == _effects(truth.action("place"))


class _RefusesSomeQueries:
    """The agent, except that it refuses (runs nothing) the queries whose hash, salted,
    falls in a fixed 15%: the same query is refused every time it comes, a renamed one
    by its own hash (an agent whose refusals depend on more than the model's atoms)."""

    def __init__(self, agent: SimulatedAgent, salt: int) -> None:
        self.agent, self.salt = agent, salt
        self.refused = 0

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        key = zlib.crc32(repr((self.salt, sorted(state), list(plan))).encode())
        if key % 100 < 15:
            self.refused += 1
            return [QueryResult(0, state) for _ in range(samples)]
        return self.agent.query(state, plan, samples)


@pytest.mark.parametrize("salt", range(12))
def test_a_refusal_of_a_query_of_probabilistic_steps_is_asked_again_not_learnt(
        salt: int) -> None:
    """A query whose steps are all of a probabilistic action, refused by an agent for
    reasons of its own, taught a precondition (one atom in doubt: its one cause); asking
    again asked such queries once only (their outcomes are chance), and a renamed copy
    refused too by chance 15%: a precondition the agent does not have was published."""
    known, truth = _known(), _keeps_hold()
    agent = _RefusesSomeQueries(SimulatedAgent(truth, seed=salt), salt)
    model = published(known, agent, _evidence(truth))
    if model is not None:
        place, real = model.action("place"), truth.action("place")
        assert (place.pre_pos, place.pre_neg) == (real.pre_pos, real.pre_neg)
        assert _effects(place) == _effects(real)
