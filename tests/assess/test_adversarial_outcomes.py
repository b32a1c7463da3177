"""Evidence about a probabilistic action that must not decide its outcomes on its own:
observed steps that may predate the drift, and answers of an agent that is not drawing its
outcomes independently (a noisy one, one that alternates between two behaviours).

Each would be published as a model that allows more than the agent does, which replaying
the evidence or asking again cannot refuse; what is wanted is the truth or nothing."""

from __future__ import annotations

import random
from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import confirm, replay
from capwatch.model.domain import Domain, GroundAction, GroundAtom, Outcome
from capwatch.model.pddl_reader import parse_domain
from tests.assess.test_outcomes import AT, CARRYING, FREE, _effects, _jammed, _with

# test_outcomes' courier with pick at 0.7 (its slip at 0.3 retires within 20 steps) and
# without move.
TRAY = """
(define (domain tray)
  (:requirements :strips :typing :probabilistic-effects)
  (:types robot parcel room)
  (:predicates (at_robot ?r - robot ?x - room) (at ?p - parcel ?x - room)
               (carrying ?r - robot ?p - parcel) (free ?r - robot))
  (:action pick
    :parameters (?r - robot ?p - parcel ?x - room)
    :precondition (and (at_robot ?r ?x) (at ?p ?x) (free ?r))
    :effect (probabilistic 0.7 (and (carrying ?r ?p) (not (at ?p ?x)) (not (free ?r)))))
  (:action drop
    :parameters (?r - robot ?p - parcel ?x - room)
    :precondition (and (at_robot ?r ?x) (carrying ?r ?p))
    :effect (and (at ?p ?x) (free ?r) (not (carrying ?r ?p)))))
"""

FULL = Outcome(frozenset({CARRYING}), frozenset({AT, FREE}), 0.7)


def _known() -> Domain:
    return parse_domain(TRAY)


def _pick_steps(picked: int, slipped: int, slip: Outcome | None = None
                ) -> list[Transition]:
    """Observed picks of the known behaviour (each on its own objects): ``picked`` of the
    full outcome, then ``slipped`` of ``slip`` (by default the one that does nothing)."""
    out = []
    for i in range(picked + slipped):
        r, p, x = f"r{i}", f"p{i}", f"room{i}"
        binding = {"?r": r, "?p": p, "?x": x}
        before = frozenset({("at_robot", r, x), ("at", p, x), ("free", r)})
        o = FULL if i < picked else slip or Outcome()
        after = (before - {a.ground(binding) for a in o.delete}) | {
            a.ground(binding) for a in o.add}
        out.append(Transition(before, ("pick", r, p, x), after, executed=True,
                              source=f"old pick {i}"))
    return out


def _jammed_drop() -> Transition:
    before = frozenset({("at_robot", "rj", "hall"), ("carrying", "rj", "pj")})
    return Transition(before, ("drop", "rj", "pj", "hall"),
                      frozenset({("at_robot", "rj", "hall"), ("at", "pj", "hall")}),
                      executed=True, source="jammed drop")


def test_an_outcome_seen_only_before_the_drift_is_not_kept_by_those_steps() -> None:
    """The slip is gone (pick now always picks). Observed steps that show it may predate
    the drift: they must not keep it in the model. Before: published with the slip, as
    the observations showed it and no query had to."""
    known = _known()
    truth = _with(_jammed(known), "pick", outcomes=(Outcome(FULL.add, FULL.delete, 1.0),))
    evidence = [*_pick_steps(picked=4, slipped=4), _jammed_drop()]
    agent = SimulatedAgent(truth, seed=3)
    result = assess(known, evidence, agent, method="verify", budget=300)
    model = result.domain()
    assert result.undecided_outcomes == ()
    assert _effects(model.action("pick")) == _effects(truth.action("pick"))
    assert any("retired" in n for n in result.notes)
    # The old slips contradict the agent as it is now: the daemon's replay refuses to
    # publish a model over them (fails closed) and names them.
    assert {u.source for u in replay(model, evidence, result.queries)} == {
        f"old pick {i}" for i in range(4, 8)}


def test_an_outcome_the_queries_show_is_kept_however_old_the_observations() -> None:
    """The same stale observations, no drift of pick: the slip shows in the answers too,
    so the model keeps it (the rule costs queries, not the outcome)."""
    known = _known()
    truth = _jammed(known)
    evidence = [*_pick_steps(picked=4, slipped=4), _jammed_drop()]
    result = assess(known, evidence, SimulatedAgent(truth, seed=4), method="verify",
                    budget=300)
    assert result.undecided_outcomes == ()
    assert _effects(result.domain().action("pick")) == _effects(truth.action("pick"))


class _OneWrongAnswer:
    """The truth, except that the first answer in which a pick ran reports that pick's
    parcel still on the floor (the agent got one answer wrong)."""

    def __init__(self, truth: SimulatedAgent) -> None:
        self.truth = truth
        self.done = False

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        out = self.truth.query(state, plan, samples)
        if self.done:
            return out
        for i, step in enumerate(plan[:out[0].executed]):
            _, r, p, x = step if step[0] == "pick" else ("", "", "", "")
            if step[0] == "pick" and ("carrying", r, p) in out[0].state and not any(
                    p in later[1:] for later in plan[i + 1:out[0].executed]):
                self.done = True
                return [QueryResult(out[0].executed, out[0].state | {("at", p, x)})]
        return out


def test_an_outcome_one_wrong_answer_showed_fails_closed() -> None:
    """One answer shows a pick that carries the parcel and leaves it on the floor: no
    outcome of pick does that, so it is added. It never shows again: published, it would
    be an outcome the agent does not have. Before: published with it."""
    known = _known()
    truth = _jammed(known)
    agent = _OneWrongAnswer(SimulatedAgent(truth, seed=5))
    result = assess(known, [_jammed_drop()], agent, method="verify", budget=300)
    assert agent.done
    model = result.domain()
    if result.undecided_outcomes == ():
        # Published: then it must be the truth.
        assert _effects(model.action("pick")) == _effects(truth.action("pick"))
    else:
        assert result.undecided_outcomes == ("pick",)
        assert any("did not show again" in n for n in result.notes)
        assert "did not show again" in result.undecided_reasons["pick"]


class _Alternating:
    """Answers some queries as one agent, the others as another (seeded)."""

    def __init__(self, first: SimulatedAgent, second: SimulatedAgent, share: float,
                 seed: int) -> None:
        self.first, self.second, self.share = first, second, share
        self.rng = random.Random(seed)

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        agent = self.first if self.rng.random() < self.share else self.second
        return agent.query(state, plan, samples)


def test_answers_alternating_between_the_old_and_the_new_pick_fail_closed() -> None:
    """Pick's likely outcome no longer deletes free; the agent answers 30% of the queries
    as before the drift. Each answer is one behaviour, so the old full outcome and the
    new one never show in one answer, which independent draws would: nothing is
    published. Before: a model with both forms."""
    known = _known()
    truth = _with(_jammed(known), "pick",
                  outcomes=(Outcome(FULL.add, frozenset({AT}), 0.7), Outcome(probability=0.3)))
    for seed in range(3):
        agent = _Alternating(SimulatedAgent(known, seed=seed), SimulatedAgent(truth, seed=seed),
                             0.3, seed)
        evidence = [_jammed_drop()]
        result = assess(known, evidence, agent, method="verify", budget=300)
        model = result.domain()
        published = not result.undecided_outcomes and not replay(model, evidence,
                                                                 result.queries) \
            and not confirm(model, agent, result.queries, 64)[0]
        assert not published or _effects(model.action("pick")) == \
            _effects(truth.action("pick")), (seed, model.action("pick").outcomes)
