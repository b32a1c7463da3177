"""Outcome probabilities a version states: an added outcome must be shown to be at least
the minimum outcome probability (a rare wrong answer that repeats looks like a rare
outcome), and after a structural change the known probabilities are not published: they
are re-estimated from the steps that tell the outcomes apart, within a tolerance, or the
action fails closed (docs/assessment.md, "Outcome probabilities")."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.outcome_shares import estimate, probability_gap
from capwatch.assess.outcomes import OutcomeSpace
from capwatch.assess.replay import replay
from capwatch.model.domain import Domain, LiftedAtom, Outcome
from capwatch.model.pal import PaTuple
from tests.assess.outcome_drifts import probability_error
from tests.assess.test_outcomes import FREE, _effects, _known, _seen, _space, _with

ASKED = itertools.count(10_000)

Step = tuple[tuple[bool, bool], tuple[bool, bool], tuple[bool, bool]]
"""What one step shows of the free, at and carrying pa-tuples (before, after)."""
FULL: Step = (True, False), (True, False), (False, True)
SLIP: Step = (True, True), (True, True), (False, False)
KEEPS_FREE: Step = (True, True), (True, False), (False, True)
"""A variant of the full pick that leaves the gripper free."""


def _feed(space: OutcomeSpace, pas: dict[LiftedAtom, PaTuple], steps: Sequence[Step]) -> None:
    """The steps, all in one answer (an agent drawing its outcomes independently mixes
    them there: only the share is in question here)."""
    answer = next(ASKED)
    for free, at, carrying in steps:
        space.executed(_seen(pas, free, at, carrying), answer)


def test_an_added_outcome_seen_twice_in_hundreds_of_steps_is_in_doubt() -> None:
    """A noisy agent's wrong answer that happened to be the same twice: shown again, in
    answers of its own, it passed as an outcome (of p ~ 0.007). Its share's lower bound is
    far below the minimum outcome probability: in doubt, the action fails closed."""
    space, pas = _space()
    _feed(space, pas, [FULL] * 270 + [SLIP] * 30 + [KEEPS_FREE] * 2)
    assert [r.origin for r in space.live()] == [0, 1, None]
    assert space.doubts() == []  # no minimum: what was published before
    space.min_share = 0.01
    (doubt,) = space.doubts()
    assert "2 of 302" in doubt and "not shown to be at least 0.01" in doubt
    assert space.unconfirmed()


def test_an_added_outcome_with_a_real_share_is_not_in_doubt() -> None:
    space, pas = _space()
    space.min_share = 0.01
    _feed(space, pas, [FULL] * 200 + [SLIP] * 30 + [KEEPS_FREE] * 30)
    assert space.doubts() == []


def test_steps_whose_state_hides_the_difference_are_not_counted() -> None:
    """With the gripper not free before, the full pick and the variant that keeps it
    free look alike: such steps are not counted (for either), whichever ran; only steps
    whose state tells every two outcomes apart count."""
    space, pas = _space()
    _feed(space, pas, [FULL] * 60 + [SLIP] * 20 + [KEEPS_FREE] * 20)
    est = estimate(space)
    assert est.n == 100 and est.counts == (60, 20, 20)
    hidden = ((False, False), (True, False), (False, True))
    _feed(space, pas, [hidden] * 50)
    assert estimate(space).n == 100


def test_after_a_structural_change_the_probabilities_must_be_determined() -> None:
    space, pas = _space()
    _feed(space, pas, [FULL] * 10 + [SLIP] * 2 + [KEEPS_FREE] * 10)
    est = estimate(space)
    gap = probability_gap(space, est, pals_changed=False, tolerance=0.1)
    assert gap is not None and "within 0.1" in gap
    _feed(space, pas, [FULL] * 200 + [SLIP] * 40 + [KEEPS_FREE] * 200)
    est = estimate(space)
    assert probability_gap(space, est, pals_changed=False, tolerance=0.1) is None
    assert all(max(p - lo, hi - p) <= 0.1
               for p, lo, hi in zip(est.probabilities, est.low, est.high, strict=True))


def test_known_probabilities_the_steps_contradict_are_not_kept() -> None:
    """No outcome changed, but the steps' shares are far from the known 0.9 / 0.1."""
    space, pas = _space()
    _feed(space, pas, [FULL] * 20 + [SLIP] * 20)
    assert probability_gap(space, estimate(space), pals_changed=False, tolerance=0.1)
    calm, calm_pas = _space()
    _feed(calm, calm_pas, [FULL] * 36 + [SLIP] * 4)
    assert probability_gap(calm, estimate(calm), pals_changed=False, tolerance=0.1) is None


def _loose_pick(known: Domain, full: float) -> Domain:
    """pick without its (free ?r) precondition, its outcomes' shares moved to ``full``."""
    pick = known.action("pick")
    return _with(known, "pick", pre_pos=pick.pre_pos - {FREE}, outcomes=tuple(
        Outcome(o.add, o.delete, full if o.add else 1.0 - full) for o in pick.outcomes))


@pytest.mark.parametrize("seed", range(4))
def test_a_precondition_change_does_not_publish_the_stale_probabilities(seed: int) -> None:
    """ferry's pre_and_prob (rev12b): a precondition dropped and the shares moved from
    0.6 / 0.4 to 0.97 / 0.03; the known shares were published (off by 0.37). Here 0.4 /
    0.6 (an outcome made much rarer may retire unseen: "Limits"). Now the
    version states shares within the tolerance of the truth, or none is published."""
    known = _with(_known(), "pick", outcomes=tuple(
        Outcome(o.add, o.delete, 0.6 if o.add else 0.4)
        for o in _known().action("pick").outcomes))
    truth = _loose_pick(known, 0.4)
    before = frozenset({("at_robot", "r1", "hall"), ("at", "p1", "hall")})
    after = frozenset({("at_robot", "r1", "hall"), ("carrying", "r1", "p1")})
    evidence = [Transition(before, ("pick", "r1", "p1", "hall"), after, executed=True,
                           source="pick without free")]
    agent = SimulatedAgent(truth, seed=seed)
    result = assess(known, evidence, agent, method="verify", budget=500)
    if "pick" in result.undecided_outcomes:
        return
    model = result.domain()
    assert not replay(model, evidence, result.queries)
    assert _effects(model.action("pick")) == _effects(truth.action("pick"))
    assert probability_error(model.action("pick"), truth.action("pick")) <= 0.1, \
        model.action("pick").outcomes


def test_the_stale_probabilities_case_is_decided_for_some_seed() -> None:
    """Failing closed every time would pass the test above: some seeds must publish."""
    known = _with(_known(), "pick", outcomes=tuple(
        Outcome(o.add, o.delete, 0.6 if o.add else 0.4)
        for o in _known().action("pick").outcomes))
    truth = _loose_pick(known, 0.4)
    before = frozenset({("at_robot", "r1", "hall"), ("at", "p1", "hall")})
    after = frozenset({("at_robot", "r1", "hall"), ("carrying", "r1", "p1")})
    evidence = [Transition(before, ("pick", "r1", "p1", "hall"), after, executed=True)]
    decided = 0
    for seed in range(4):
        result = assess(known, evidence, SimulatedAgent(truth, seed=seed), method="verify",
                        budget=500)
        decided += "pick" not in result.undecided_outcomes
    assert decided


def test_a_rare_outcome_below_the_minimum_fails_closed_not_published() -> None:
    """An agent with a 0.02 outcome the drift added (or one erring as often): with the
    minimum at 0.05 it is not published; failing closed is the answer."""
    known = _known()
    pick = known.action("pick")
    full, slip = pick.outcomes
    rare = Outcome(full.add, full.delete - {FREE}, 0.02)
    truth = _with(known, "pick", outcomes=(Outcome(full.add, full.delete, 0.88), slip, rare))
    before = frozenset({("at_robot", "r1", "hall"), ("at", "p1", "hall"), ("free", "r1")})
    after = frozenset({("at_robot", "r1", "hall"), ("carrying", "r1", "p1"), ("free", "r1")})
    evidence = [Transition(before, ("pick", "r1", "p1", "hall"), after, executed=True)]
    for seed in range(3):
        result = assess(known, evidence, SimulatedAgent(truth, seed=seed), method="verify",
                        budget=300, min_outcome_probability=0.05)
        published = result.domain().action("pick")
        assert "pick" in result.undecided_outcomes or all(
            o.probability >= 0.05 for o in published.outcomes), published.outcomes
        assert "pick" in result.undecided_outcomes, result.undecided_reasons


def test_an_added_outcome_well_above_the_minimum_is_published() -> None:
    """The cost side: a real 0.3 outcome the drift added is still learnt and published,
    with its probability within the tolerance."""
    known = _known()
    pick = known.action("pick")
    full, slip = pick.outcomes
    variant = Outcome(full.add, full.delete - {FREE}, 0.3)
    truth = _with(known, "pick", outcomes=(Outcome(full.add, full.delete, 0.63),
                                           Outcome(slip.add, slip.delete, 0.07), variant))
    before = frozenset({("at_robot", "r1", "hall"), ("at", "p1", "hall"), ("free", "r1")})
    after = frozenset({("at_robot", "r1", "hall"), ("carrying", "r1", "p1"), ("free", "r1")})
    evidence = [Transition(before, ("pick", "r1", "p1", "hall"), after, executed=True)]
    decided = 0
    for seed in range(3):
        result = assess(known, evidence, SimulatedAgent(truth, seed=seed), method="verify",
                        budget=500)
        if "pick" in result.undecided_outcomes:
            continue
        decided += 1
        got = result.domain().action("pick")
        assert _effects(got) == _effects(truth.action("pick"))
        assert probability_error(got, truth.action("pick")) <= 0.1
    assert decided


def test_the_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="min_outcome_probability"):
        assess(_known(), [], SimulatedAgent(_known()), min_outcome_probability=1.0)
    with pytest.raises(ValueError, match="probability_tolerance"):
        assess(_known(), [], SimulatedAgent(_known()), probability_tolerance=0.0)


@pytest.mark.parametrize("seed", range(4))
def test_an_outcome_made_much_rarer_is_retired_with_the_share_the_steps_bound(
        seed: int) -> None:
    """The case "Outcome probabilities" left open: the slip made much rarer (0.4 -> 0.03)
    retires after the steps its known share predicts, as if gone. A version that leaves
    it out says how rare it is shown to be (session 14): a bound the truth is within."""
    known = _with(_known(), "pick", outcomes=tuple(
        Outcome(o.add, o.delete, 0.6 if o.add else 0.4)
        for o in _known().action("pick").outcomes))
    truth = _loose_pick(known, 0.97)
    before = frozenset({("at_robot", "r1", "hall"), ("at", "p1", "hall")})
    after = frozenset({("at_robot", "r1", "hall"), ("carrying", "r1", "p1")})
    evidence = [Transition(before, ("pick", "r1", "p1", "hall"), after, executed=True)]
    result = assess(known, evidence, SimulatedAgent(truth, seed=seed), method="verify",
                    budget=500)
    if "pick" in result.undecided_outcomes:
        return
    kept = _effects(result.domain().action("pick"))
    rare = {(o.add, o.delete) for o in truth.action("pick").outcomes if o.probability < 0.1}
    if rare <= kept:
        return  # it showed: kept, nothing to say
    (gone,) = [r for r in result.retired if r.action == "pick"]
    assert known.action("pick").outcomes[gone.outcome].probability == 0.4
    assert gone.share_at_most >= 0.03, gone
    assert f"up to {gone.share_at_most:.3f}" in " ".join(result.notes)
