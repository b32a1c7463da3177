"""How often a probabilistic action's outcomes run, from the answers' steps that tell them
apart: the evidence for a minimum outcome probability and for the probabilities a version
publishes (docs/assessment.md, "Outcome probabilities").

A step's outcome is read from what it changed, and two outcomes look alike where the state
hides their difference (an atom added that was already true). Counting every step with the
outcome it went to biases the shares: the steps of an outcome that often looks like another
are lost to it (or counted as ambiguous), and how often that happens depends on the
outcome. So only the steps whose *state* tells the outcomes apart are counted (which steps
those are does not depend on which outcome ran, so the selection keeps the shares as
they are), and only steps of answers to queries: an observed step may predate the drift
(:meth:`OutcomeSpace.witnesses`).

Two uses:

* :func:`rare_doubts`: an added outcome must be shown to be at least ``min_share``
  likely (a Chernoff lower bound of its share, wrong but for the space's error,
  :func:`capwatch.assess.outcomes.share_floor`): a wrong answer that happened to be the
  same twice (a noisy agent) is otherwise published as an outcome of p ~ 0.01;
* :func:`probability_gap` / :func:`estimate`: after a structural change of the action (an
  outcome added or retired, one's effects or the action's pal-tuples changed) the known
  probabilities are not evidence, and when the steps contradict them they are wrong: the
  probabilities are then estimated from the counting steps, with simultaneous
  Clopper-Pearson intervals at PROBABILITY_CONFIDENCE, and published only once no
  distribution in those intervals is further from the published values, in Pearson's
  chi-square distance per step, than a shift of ``tolerance`` between two outcomes at 1/2
  each (:func:`pearson_tolerance`): relative to each probability's size, as the drift
  audit that next judges the version is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capwatch.assess.effect_masks import EffectMask, posts
from capwatch.model.pal import PaTuple
from capwatch.monitor.stats import max_pearson_over_box, multinomial_mle

if TYPE_CHECKING:
    from capwatch.assess.outcomes import OutcomeRecord, OutcomeSpace

MIN_OUTCOME_PROBABILITY = 0.01
"""The default least probability an added outcome must be shown to have (``assess``'s
``min_outcome_probability``, the daemon's ``assessment.min_outcome_probability``)."""
PROBABILITY_TOLERANCE = 0.1
"""The default tolerance of a re-estimate (``assess``'s ``probability_tolerance``): the
largest distance from a published probability to the ends of its interval for two outcomes
at 1/2 each; elsewhere the same Pearson distance (:func:`pearson_tolerance`), so about
2 · tolerance · sqrt(p (1 - p)) for an outcome of probability p (±0.02 at 0.01)."""
PROBABILITY_CONFIDENCE = 0.99
"""The simultaneous confidence of the intervals a re-estimate is published by: a published
probability is within the tolerance of the truth but for a chance of 1%. At 1 - the
outcome error (0.999) an outcome near 1/2 needs ~300 steps that tell it apart, at 0.99
~180 (an action that runs once an answer pays them in queries); a probability off by a
little more than the tolerance is re-estimated by the monitor's drift test, while a wrong
outcome is not (the outcome error stays 0.001)."""


def _apart(a: OutcomeRecord, b: OutcomeRecord, before: dict[PaTuple, bool]) -> bool:
    """Whether a step that ran with these values before shows which of the two ran, by
    their hypotheses (an effect its steps left open would otherwise make every state
    ambiguous; such an action is undecided until it is settled, and a step that two
    outcomes' possible effects still fit is not counted)."""
    return any(not posts(a.hypothesis(pa), v) & posts(b.hypothesis(pa), v)
               for pa, v in before.items())


def _fits(r: OutcomeRecord, sig: dict[PaTuple, EffectMask]) -> bool:
    return all(r.possible(pa) & m for pa, m in sig.items())


def counts(space: OutcomeSpace, outcomes: Sequence[OutcomeRecord],
           of: OutcomeRecord | None = None) -> tuple[list[int], int]:
    """Per outcome of ``outcomes``, the answers' steps that were it, among the steps whose
    state tells every two of them apart (or, with ``of``, that one from each other); and
    how many such steps there were."""
    key = (space.shape, -1 if of is None else id(of), *map(id, outcomes))
    start, out, n = space.counted.get(key, (0, [0] * len(outcomes), 0))
    out = list(out)
    for i in range(start, len(space.befores)):
        before, sig, _ = space.befores[i]
        if space.answered[i] is None:
            continue
        if of is not None:
            if not all(_apart(of, r, before) for r in outcomes if r is not of):
                continue
        elif not all(_apart(a, b, before) for i, a in enumerate(outcomes)
                     for b in outcomes[i + 1:]):
            continue
        fit = [i for i, r in enumerate(outcomes) if _fits(r, sig)]
        if len(fit) == 1:
            out[fit[0]] += 1
            n += 1
    if len(space.counted) > 64:
        space.counted.clear()
    space.counted[key] = (len(space.befores), out, n)
    return list(out), n


def per_answer(space: OutcomeSpace, outcomes: Sequence[OutcomeRecord]) -> list[list[int]]:
    """Per answer to a query, the steps that were each of ``outcomes``, among the steps
    whose state tells every two of them apart (as :func:`counts`: which steps those are
    does not depend on which outcome ran, nor on when the outcomes were learnt, so an
    agent drawing independently gives every answer the same shares). Counted on from
    the last call while no outcome changed (as :func:`counts`)."""
    key = (space.shape, *map(id, outcomes))
    start, rows = space.tabled[1] if space.tabled[0] == key else (0, {})
    for i in range(start, len(space.befores)):
        before, sig, _ = space.befores[i]
        answer = space.answered[i]
        if answer is None or not all(_apart(a, b, before) for j, a in enumerate(outcomes)
                                     for b in outcomes[j + 1:]):
            continue
        fit = [j for j, r in enumerate(outcomes) if _fits(r, sig)]
        if len(fit) == 1:
            rows.setdefault(answer, [0] * len(outcomes))[fit[0]] += 1
    space.tabled = (key, (len(space.befores), rows))
    return [list(row) for row in rows.values()]


def rare_doubts(space: OutcomeSpace, min_share: float) -> list[str]:
    """Why the live added outcomes are not shown to be at least ``min_share`` likely (empty
    when they are): an agent that errs (a noisy answer) now and then has, by its steps,
    an outcome as likely as its error; one seen in k of n steps is taken to be the agent's
    only once its share's lower bound (wrong but for the space's error) reaches the floor.
    A real outcome rarer than the floor then fails closed, and one just above it needs
    about -ln(error) / KL(p || floor) steps that tell it apart (48 at p = 0.1, 167 at 0.05,
    floor 0.01, error 0.001)."""
    if min_share <= 0.0:
        return []
    from capwatch.assess.outcomes import share_floor

    live = space.live()
    added = [r for r in live if r.origin is None]
    out = []
    for i, r in enumerate(added):
        (k, *_), n = counts(space, [r, *(x for x in live if x is not r)], of=r)
        floor = share_floor(k, n, space.error)
        if floor < min_share:
            out.append(f"added outcome {i + 1} ran in {k} of {n} asked steps that tell it "
                       f"apart: its probability is not shown to be at least {min_share:g} "
                       f"(lower bound {floor:.3g}); a rare wrong answer looks the same")
    return out


def rare_needed(space: OutcomeSpace, min_share: float) -> int:
    """More steps that tell the live added outcomes apart after which, were their shares
    what the steps show, each one's lower bound would reach ``min_share`` (0 when none is
    in doubt; 1 << 30 when a share is not above the floor after as many steps as would
    show an outcome at the floor twice: no number of steps is likely to)."""
    live = space.live()
    need = 0
    for r in live:
        if r.origin is not None or min_share <= 0.0:
            continue
        (k, *_), n = counts(space, [r, *(x for x in live if x is not r)], of=r)
        q = k / n if n else 0.0
        if q <= min_share:
            if n * min_share < 2:
                # Too few steps that tell it apart to say its share is low.
                need = max(need, math.ceil(2 / min_share) - n)
                continue
            return 1 << 30
        kl = q * math.log(q / min_share) + (1 - q) * math.log((1 - q) / (1 - min_share)) \
            if q < 1.0 else -math.log(min_share)
        need = max(need, math.ceil(-math.log(space.error) / kl) - n)
    return need


@dataclass(frozen=True, slots=True)
class ShareEstimate:
    """The live outcomes' probabilities from the steps that tell them apart."""

    outcomes: tuple[OutcomeRecord, ...]
    counts: tuple[int, ...]
    n: int
    probabilities: tuple[float, ...]
    """The value a version publishes: (k + 1/2) / (n + m/2), never 0 for a live outcome."""
    low: tuple[float, ...]
    high: tuple[float, ...]
    """Simultaneous Clopper-Pearson intervals at PROBABILITY_CONFIDENCE."""

    @property
    def spread(self) -> float:
        """The largest distance from a published value to either end of its interval."""
        if not self.n:
            return 1.0
        return max(max(p - lo, hi - p) for p, lo, hi in
                   zip(self.probabilities, self.low, self.high, strict=True))

    @property
    def reach(self) -> float:
        """The largest Pearson chi-square distance per step, sum (q_i - p_i)^2 / p_i, from
        the published values p to a distribution q in the intervals (the drift audit's
        statistic on one execution's expected counts, ``max_pearson_over_box``)."""
        if not self.n or len(self.outcomes) < 2:
            return math.inf
        return max_pearson_over_box(self.low, self.high, self.probabilities, 1)

    def needed(self, tolerance: float) -> int:
        """More steps that tell the outcomes apart after which the intervals should be
        narrow enough: an interval of half-width z sqrt(p (1 - p) / n) per outcome puts the
        region's farthest point at about z^2 (m - 1) / n whatever the p (10% added for
        Clopper-Pearson's width); once steps are counted, from the shortfall of the reach
        they gave (it shrinks as 1/n; a rare outcome's skewed interval falls short of the
        plan)."""
        m = len(self.outcomes)
        z = _z((1.0 - PROBABILITY_CONFIDENCE) / (m if m > 2 else 1))
        target = pearson_tolerance(tolerance)
        need = math.ceil(1.1 * z * z * (m - 1) / target)
        if self.n and math.isfinite(self.reach):
            need = max(need, math.ceil(1.1 * self.n * self.reach / target))
        return max(need - self.n, 1)


def pearson_tolerance(tolerance: float) -> float:
    """The Pearson chi-square distance per step of a shift of ``tolerance`` between two
    outcomes at 1/2 each (tolerance^2 / (1/2) twice): the bound a re-estimate's reach must
    keep within. At 1/2 it is the absolute tolerance it replaces; for an outcome of
    probability p it allows about 2 · tolerance · sqrt(p (1 - p)), so the precision is
    relative where p is small, as the drift audit's X² is (an absolute 0.1 published a 0.01
    outcome at 0.126 from 16 of 130 steps)."""
    return 4.0 * tolerance * tolerance


def _z(two_sided: float) -> float:
    from statistics import NormalDist
    return NormalDist().inv_cdf(1.0 - two_sided / 2.0)


def estimate(space: OutcomeSpace) -> ShareEstimate:
    live = tuple(space.live())
    got, n = counts(space, live)
    m = len(live)
    if not n or m < 2:
        one = tuple(1.0 / m for _ in live) if m else ()
        return ShareEstimate(live, tuple(got), n, one, tuple(0.0 for _ in live),
                             tuple(1.0 for _ in live))
    est = multinomial_mle(got, PROBABILITY_CONFIDENCE, "clopper-pearson", simultaneous=True)
    return ShareEstimate(live, tuple(got), n,
                         tuple((k + 0.5) / (n + 0.5 * m) for k in got), est.low, est.high)


def changed(space: OutcomeSpace) -> bool:
    """Whether the outcomes are no longer the known ones as they were: one added or
    retired, or a known one whose steps rule out its known effect on some atom."""
    live = space.live()
    if len(live) != len(space.records) or any(r.origin is None for r in live):
        return True
    return any(r.steps and not r.known.get(pa, 0) & r.effects[pa]
               for r in live for pa in space.pas)


def contradicted(space: OutcomeSpace, est: ShareEstimate) -> bool:
    """Whether the counting steps contradict the known probabilities (of the live known
    outcomes, scaled to sum to one): one outside its interval at 1 - the space's error
    (a stricter level than the estimate's: a false contradiction costs steps)."""
    live = [r for r in est.outcomes if r.origin is not None]
    if not est.n or len(live) != len(est.outcomes):
        return False
    wide = multinomial_mle(est.counts, 1.0 - space.error, "clopper-pearson",
                           simultaneous=True)
    probs = [space.action.outcomes[r.origin].probability for r in live
             if r.origin is not None]
    total = sum(probs) or 1.0
    return any(not lo - 1e-12 <= p / total <= hi + 1e-12
               for p, lo, hi in zip(probs, wide.low, wide.high, strict=True))


def probability_gap(space: OutcomeSpace, est: ShareEstimate, *, pals_changed: bool,
                    tolerance: float) -> str | None:
    """Why the probabilities a version would state are not shown (None when they are):
    after a structural change (:func:`changed`, or ``pals_changed``: the action's
    pal-tuples are not the known ones) or when the steps contradict the known ones, no
    distribution in the re-estimate's intervals may be further from its values than
    :func:`pearson_tolerance` (``tolerance`` at 1/2, relative near 0 and 1)."""
    if len(est.outcomes) < 2 or tolerance >= 1.0:
        return None
    if not (pals_changed or changed(space) or contradicted(space, est)):
        return None
    if est.n and est.reach <= pearson_tolerance(tolerance):
        return None
    return (f"its outcome probabilities changed or may have, and the {est.n} asked steps "
            f"that tell its outcomes apart do not determine them within {tolerance:g} "
            f"at 1/2 (relative to each probability's size: Pearson distance per step "
            f"{est.reach:.3g} over {pearson_tolerance(tolerance):.3g}; interval reach "
            f"{est.spread:.2f})")


def published(space: OutcomeSpace, est: ShareEstimate, *, pals_changed: bool) -> bool:
    """Whether the version states the re-estimate (True) or the known probabilities."""
    return len(est.outcomes) > 1 and (pals_changed or changed(space) or
                                      contradicted(space, est))


__all__ = ["MIN_OUTCOME_PROBABILITY", "PROBABILITY_TOLERANCE", "ShareEstimate", "changed",
           "contradicted", "counts", "estimate", "pearson_tolerance", "probability_gap",
           "published", "rare_doubts", "rare_needed"]
