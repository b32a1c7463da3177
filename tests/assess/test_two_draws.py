"""Two draws of a probabilistic action in one answer (session 16, docs/assessment.md, "Two
draws in one answer").

``pick`` needs ``handempty`` and takes it by chance (its likely outcome picks the box up, the
other does nothing): after one step of it, the next cannot be packed at a designed value
of ``handempty``, so until session 16 no answer ran it twice, and an outcome added beside
the known ones failed closed (an agent switching between the old and the new model per
answer gives such answers too). ``drop`` of a box held from the start, on its own objects,
sets ``handempty`` whatever it was, so a query ``pick, drop, pick, ...`` runs ``pick`` many
times in one answer: an agent drawing independently mixes its outcomes there, one that
switches models per answer never does.
"""

from __future__ import annotations

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.model.domain import Action, Domain, LiftedAtom, Outcome
from capwatch.model.pddl_reader import parse_domain
from tests.assess.publishing import ByAnswer, decided, published

HAND = """
(define (domain hand)
  (:requirements :strips :typing :probabilistic-effects)
  (:types box)
  (:predicates (ontable ?b - box) (holding ?b - box) (handempty))
  (:action pick
    :parameters (?b - box)
    :precondition (and (ontable ?b) (handempty))
    :effect (probabilistic 0.7 (and (holding ?b) (not (ontable ?b)) (not (handempty)))))
  (:action drop
    :parameters (?b - box)
    :precondition (and (holding ?b))
    :effect (and (ontable ?b) (handempty) (not (holding ?b)))))
"""

ONTABLE = LiftedAtom("ontable", ("?b",))
HOLDING = LiftedAtom("holding", ("?b",))
HANDEMPTY = LiftedAtom("handempty", ())
PICKED = Outcome(frozenset({HOLDING}), frozenset({ONTABLE, HANDEMPTY}), 0.7)


def _pick(*outcomes: Outcome) -> Domain:
    known = parse_domain(HAND)
    return known.replace_action(known.action("pick").replace(outcomes=outcomes))


def _added() -> Domain:
    """The drift: a new outcome (the box falls off the table) beside both known ones."""
    return _pick(Outcome(PICKED.add, PICKED.delete, 0.5), Outcome(frozenset(), frozenset(), 0.3),
                 Outcome(frozenset(), frozenset({ONTABLE}), 0.2))


def _changed() -> Domain:
    """The drift: the slip now drops the box off the table (an outcome changed)."""
    return _pick(PICKED, Outcome(frozenset(), frozenset({ONTABLE}), 0.3))


def _evidence() -> list[Transition]:
    before = frozenset({("ontable", "b0"), ("handempty",)})
    return [Transition(before, ("pick", "b0"), frozenset({("handempty",)}), executed=True,
                       source="fell")]


def _effects(action: Action) -> set[tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]]]:
    return {(o.add, o.delete) for o in action.outcomes}


@pytest.mark.parametrize("seed", range(3))
def test_an_honest_agents_added_outcome_is_published_from_picks_with_drops_between(
        seed: int) -> None:
    """Before: failed closed, "no answer ran the action twice" (3 of 3)."""
    truth = _added()
    # One assessment, looked at and then decided on: assess is deterministic for a seeded
    # agent, and it is nearly all of this test's time.
    agent = SimulatedAgent(truth, seed=seed)
    result = assess(parse_domain(HAND), _evidence(), agent, method="verify", budget=300)
    assert not result.undecided_outcomes, result.undecided_reasons
    twice = [q for q in result.queries
             if sum(1 for a in q.plan[:q.executed] if a[0] == "pick") > 1]
    assert twice
    # The step between two picks is a drop, on objects of its own.
    plan = list(twice[0].plan)
    first = next(i for i, a in enumerate(plan) if a[0] == "pick")
    assert plan[first + 1][0] == "drop" and plan[first + 1][1] != plan[first][1]
    model = decided(result, agent, _evidence())
    assert model is not None
    assert _effects(model.action("pick")) == _effects(truth.action("pick"))


@pytest.mark.parametrize("seed", range(6))
def test_an_agent_switching_models_per_answer_is_not_published_as_both(seed: int) -> None:
    """The old model in 30% of the answers, the changed one in the rest: every answer
    that runs pick twice shows one model's outcomes, so the known outcome the change
    replaced never shows beside the new one, and nothing is published (a model with
    both would be wrong)."""
    agent = ByAnswer(SimulatedAgent(parse_domain(HAND), seed=seed),
                      SimulatedAgent(_changed(), seed=seed + 50), seed)
    model = published(parse_domain(HAND), agent, _evidence())
    assert model is None or _effects(model.action("pick")) == _effects(
        _changed().action("pick")), model and model.action("pick").outcomes
