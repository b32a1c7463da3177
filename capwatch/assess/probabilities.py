"""Outcome probabilities by repeated queries (QACE-style MLE with a stopping rule).

QACE (papers/qace.md §4.3) estimates effect probabilities by maximum likelihood over
the transitions its queries produce, with no stopping criterion. Here the query is the
one-step plan ⟨s, [a]⟩ asked ``samples`` times from a state where ``a`` is applicable
and every outcome yields a different successor (QACE's identifiability condition),
and sampling stops once every outcome's probability is known to within the requested
half-width, simultaneously for all outcomes at the requested confidence.

Clopper–Pearson intervals are the default because their coverage is at least nominal
for every p and n; Wilson's oscillates around nominal and dips below it near p = 0 or
1. Both are computed at the Bonferroni level across outcomes when there are more than
two (with two, the intervals for p and 1 − p are one event).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from capwatch.assess.agent import AgentQuery, State
from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom
from capwatch.monitor.drift import with_probabilities
from capwatch.monitor.stats import (
    IntervalMethod,
    MultinomialEstimate,
    chi2_isf,
    max_pearson_over_box,
    multinomial_mle,
    normal_isf,
    simultaneous_level,
)


class UnidentifiableOutcomes(ValueError):
    """In the probe state some outcomes produce the same successor; pick another state."""

    def __init__(self, action: str, groups: list[tuple[int, ...]]) -> None:
        super().__init__(
            f"{action}: outcomes {groups} yield the same successor in this state, "
            "so their probabilities cannot be told apart here")
        self.groups = groups


@dataclass(frozen=True, slots=True)
class AuditPrecision:
    """How well the fleet drift audit could tell the published probabilities from the truth.

    The audit tests a model's probabilities by Pearson's X² over up to ``window`` of the
    stream's executions at ``level`` (docs/drift-detection.md §5). ``statistic`` is the
    largest X² that ``window`` executions' expected counts would give against the estimate
    to be published, over every distribution in the estimate's simultaneous confidence
    region: while it is at most ``critical``, the audit would not reject the published
    model on the expected counts of any distribution the answers leave plausible, the true
    one included (at the estimate's confidence)."""

    window: int
    level: float
    statistic: float
    critical: float

    @property
    def reached(self) -> bool:
        return self.statistic <= self.critical


@dataclass(frozen=True, slots=True)
class ProbabilityEstimate:
    action: str
    ground_action: GroundAction
    estimate: MultinomialEstimate
    """MLE with simultaneous intervals, over the samples that executed an outcome."""
    samples: int
    """Every sample asked of the agent, including the ones below."""
    not_executed: int
    """Samples in which the agent did not execute the action (a precondition changed?)."""
    unexplained: int
    """Samples whose successor matches no modelled outcome (structural drift)."""
    half_width: float
    """The requested half-width."""
    converged: bool
    """Every interval's half-width reached ``half_width`` before the sample budget ran out
    (the audit's precision is ``audit``'s to say)."""
    audit: AuditPrecision | None = None
    """The drift audit's precision target and whether the estimate reached it (None when
    none was asked)."""
    all_counts: tuple[int, ...] = ()
    """Each outcome's count over every stage asked (the estimate is its last stage's):
    a second look pools them (session 19)."""
    keeps_current: bool | None = None
    """With ``current`` probabilities and an audit target: whether they pass the audit's
    test against every distribution in the estimate's region (the window's expected
    counts, X² at most the critical value), so that keeping them is as safe as publishing
    the estimate; None when no such question was asked."""

    @property
    def audit_precise(self) -> bool:
        """The estimate reached the audit's precision target, or none was asked."""
        return self.audit is None or self.audit.reached

    @property
    def structural_anomalies(self) -> int:
        return self.not_executed + self.unexplained

    def updated_action(self, action: Action) -> Action:
        """``action`` with the estimated probabilities (outcome order as in ``action``)."""
        if self.estimate.n == 0:
            return action
        return with_probabilities(action, self.estimate.probabilities, self.estimate.n)


def _successors(action: Action, ground_action: GroundAction, state: State
                ) -> list[frozenset[GroundAtom]]:
    binding = dict(zip(action.parameter_names, ground_action[1:], strict=True))
    pos = {a.ground(binding) for a in action.pre_pos}
    neg = {a.ground(binding) for a in action.pre_neg}
    if not pos <= state or neg & state:
        raise ValueError(f"{action.name} is not applicable in the probe state under the model")
    result = []
    for o in action.outcomes:
        dele = {a.ground(binding) for a in o.delete}
        add = {a.ground(binding) for a in o.add}
        result.append(frozenset((state - dele) | add))
    return result


def _samples_needed(estimate: MultinomialEstimate, half_width: float, level: float) -> int:
    # Plan the next batch from the most pessimistic p still plausible (the interval end
    # nearest 1/2), so that one more round trip usually suffices.
    z = normal_isf((1.0 - level) / 2.0)
    worst = 0.0
    for lo, hi in zip(estimate.low, estimate.high, strict=True):
        p = min(max(0.5, lo), hi)
        worst = max(worst, p * (1.0 - p))
    # Clopper–Pearson is a little wider than the normal approximation: 10% more samples.
    return math.ceil(1.1 * z * z * worst / (half_width * half_width))


def _published(action: Action, estimate: MultinomialEstimate) -> list[float]:
    # What updated_action would publish, in the estimate's outcome order: an outcome never
    # seen keeps with_probabilities' floor (0.5 / n, capped by its old value), which the
    # audit then divides by. Computed here because with_probabilities re-sorts outcomes.
    probs = np.asarray(estimate.probabilities, dtype=np.float64)
    old = np.array([o.probability for o in action.outcomes], dtype=np.float64)
    floored = np.where(probs <= 0, np.minimum(old, 0.5 / estimate.n), probs)
    return [float(v) for v in floored / floored.sum()]


def audit_precision(action: Action, estimate: MultinomialEstimate, window: int,
                    level: float) -> AuditPrecision:
    """The audit's view of ``estimate`` once published (see AuditPrecision)."""
    k = len(estimate.counts)
    statistic = (math.inf if estimate.n == 0 else
                 max_pearson_over_box(estimate.low, estimate.high,
                                      _published(action, estimate), window))
    return AuditPrecision(window, level, statistic, chi2_isf(level, k - 1))


def _audit_samples(k: int, window: int, level: float, confidence: float) -> int:
    # An interval of half-width z·sqrt(p(1-p)/n) per outcome puts the region's farthest
    # point at X² ≈ window · z² · Σ(1 - p_i) / n ≤ window · z² · (k-1) / n against the
    # estimate, whatever the p_i: the same relative precision for a rare outcome as for a
    # common one. Sized for that to meet the audit's critical value, with the 10% that
    # Clopper-Pearson's width adds (as _samples_needed).
    z = normal_isf((1.0 - simultaneous_level(confidence, k)) / 2.0)
    return math.ceil(1.1 * window * z * z * (k - 1) / chi2_isf(level, k - 1))


def estimate_outcome_probabilities(
    agent: AgentQuery, action: Action, ground_action: GroundAction, state: State, *,
    half_width: float = 0.05, confidence: float = 0.95,
    method: IntervalMethod = "clopper-pearson", pilot: int = 30, max_samples: int = 20_000,
    max_anomaly_fraction: float = 0.5, audit_window: int | None = None,
    audit_level: float = 0.05, current: Sequence[float] | None = None,
) -> ProbabilityEstimate:
    """Sample ⟨state, [ground_action]⟩ until each outcome probability is within ±half_width.

    With ``audit_window``, also until the fleet drift audit (Pearson's X² over up to
    ``audit_window`` executions at ``audit_level``) would not reject the estimate on the
    expected counts of any distribution in its confidence region (AuditPrecision): a
    precision relative to each probability, which ±half_width alone is not near 0 (an
    outcome at 0.01 was published at 0.00578, then 0.00288, and the audit rejected it).
    ``audit`` says whether it was reached within ``max_samples``.

    With ``current`` (the probabilities the model states now, in ``action``'s outcome
    order) and ``audit_window``, ``keeps_current`` says whether they may be kept: only when
    the audit would not reject them on the expected counts of any distribution in the
    region (its X² of them at most the critical value), the bound a published estimate
    carries. An estimate whose region holds them but not that far (the region is sized so
    its points pass against its centre, not against each other: a kept model could be ~4
    critical values from the truth) is followed by a stage sized from that shortfall,
    fresh, if the budget allows; otherwise they are not kept.

    A pilot of ``pilot`` samples sizes the next stage (from the largest variance its
    interval still allows); the estimate reported is the last stage's. ``samples``
    counts every sample asked, pilot included.

    Stops early (``converged=False``) when ``max_samples`` is spent or when more than
    ``max_anomaly_fraction`` of the samples are structural anomalies: the action is not
    executed or its successor is not a modelled outcome, which is a question for the
    assessment engine rather than for probability estimation.
    """
    if not 0.0 < half_width < 0.5:
        raise ValueError("half_width must be in (0, 0.5)")
    if ground_action[0] != action.name or len(ground_action) != action.arity + 1:
        raise ValueError(f"{ground_action} is not an instance of {action.header()}")
    successors = _successors(action, ground_action, state)
    k = len(successors)
    index = {s: i for i, s in reversed(list(enumerate(successors)))}
    if len(index) < k:
        groups: dict[frozenset[GroundAtom], list[int]] = {}
        for i, s in enumerate(successors):
            groups.setdefault(s, []).append(i)
        raise UnidentifiableOutcomes(action.header(),
                                     [tuple(g) for g in groups.values() if len(g) > 1])
    level = simultaneous_level(confidence, k)
    counts = np.zeros(k, dtype=np.int64)
    total = np.zeros(k, dtype=np.int64)
    asked = not_executed = unexplained = 0

    def current_estimate() -> MultinomialEstimate:
        return multinomial_mle(counts, confidence, method, simultaneous=True)

    if k == 1:
        return ProbabilityEstimate(action.header(), ground_action,
                                   MultinomialEstimate((1.0,), (1.0,), (1.0,), 0, (0,), level,
                                                       method),
                                   0, 0, 0, half_width, True)
    if audit_window is not None and (audit_window < 1 or not 0.0 < audit_level < 1.0):
        raise ValueError("audit_window must be positive and audit_level in (0, 1)")
    if current is not None and len(current) != k:
        raise ValueError(f"{len(current)} current probabilities for {k} outcomes")
    request = min(pilot, max_samples)
    est = current_estimate()
    audit: AuditPrecision | None = None
    sized_for_audit = False
    fallback: ProbabilityEstimate | None = None
    while request > 0:
        # Each stage's size is fixed by the previous stage and its estimate uses its own
        # samples only: conditional on that size the samples are fresh, so the reported
        # interval keeps its nominal coverage. Pooling the stages would let the data that
        # chose the sample size leak into the estimate (the pilot costs ~30 samples).
        counts.fill(0)
        for result in agent.query(state, [ground_action], request):
            asked += 1
            if result.executed < 1:
                not_executed += 1
                continue
            hit = index.get(frozenset(result.state))
            if hit is None:
                unexplained += 1
            else:
                counts[hit] += 1
        total += counts
        est = current_estimate()
        if audit_window is not None:
            audit = audit_precision(action, est, audit_window, audit_level)
        keep_needed = 0
        if est.n and max(est.half_widths) <= half_width and (audit is None or audit.reached):
            keeps: bool | None = None
            if current is not None and audit is not None:
                keeps = False
                if est.covers(current) and min(current) > 0.0:
                    # The current probabilities pass against every distribution the
                    # answers leave plausible, the truth included (at the region's
                    # confidence): as safe to keep as the estimate is to publish.
                    far = max_pearson_over_box(est.low, est.high, current, audit.window)
                    keeps = far <= audit.critical
                    if not keeps:
                        # The region holds them but reaches further: the agent may draw
                        # them, or draw what the audit rejects them on. A fresh stage
                        # sized from the shortfall (X² over the region shrinks as 1/n).
                        keep_needed = math.ceil(1.1 * est.n * far / audit.critical)
            done = ProbabilityEstimate(action.header(), ground_action, est, asked,
                                       not_executed, unexplained, half_width, True, audit,
                                       tuple(int(c) for c in total), keeps)
            usable = max(est.n / request, 1.0 - max_anomaly_fraction)
            if not keep_needed or math.ceil(keep_needed / usable) > max_samples - asked:
                return done
            # Should the next stage fall short, this one is the estimate (not kept).
            fallback = done
        if asked >= max_samples or (not_executed + unexplained) > max_anomaly_fraction * asked:
            break
        needed = _samples_needed(est, half_width, level) if est.n else pilot
        needed = max(needed, keep_needed)
        if audit is not None and est.n:
            needed = max(needed, _audit_samples(k, audit.window, audit_level, confidence))
            if sized_for_audit and math.isfinite(audit.statistic):
                # A stage sized for the audit that fell short (a rare outcome's skewed
                # interval) is followed by one sized from its own shortfall: the region's
                # X² shrinks as 1/n (with Clopper-Pearson's 10% as in the plan). Not from
                # the pilot's, which a rare outcome's unseen floor dominates.
                needed = max(needed,
                             math.ceil(1.1 * est.n * audit.statistic / audit.critical))
            sized_for_audit = True
        # Scale by the usable fraction so anomalies do not leave the next stage short.
        usable = max(est.n / request, 1.0 - max_anomaly_fraction)
        request = min(max(math.ceil(needed / usable), pilot), max_samples - asked)
        if audit is not None and request < math.ceil(needed / usable):
            # A stage cut short by the budget would report a wider estimate than this one
            # (each stage's estimate is its own): report this one, short of the target.
            break
    if fallback is not None:
        return dataclasses.replace(fallback, samples=asked, not_executed=not_executed,
                                   unexplained=unexplained,
                                   all_counts=tuple(int(c) for c in total))
    return ProbabilityEstimate(action.header(), ground_action, est, asked, not_executed,
                               unexplained, half_width,
                               bool(est.n) and max(est.half_widths) <= half_width, audit,
                               tuple(int(c) for c in total))


def estimate_domain_probabilities(
    agent: AgentQuery, domain: Domain, probes: Mapping[str, tuple[GroundAction, State]], *,
    half_width: float = 0.05, confidence: float = 0.95,
    method: IntervalMethod = "clopper-pearson", max_samples: int = 20_000,
) -> dict[str, ProbabilityEstimate]:
    """Estimate every probabilistic action that has a probe ⟨ground action, state⟩."""
    result = {}
    for action in domain.actions:
        if action.is_deterministic or action.name not in probes:
            continue
        ground_action, state = probes[action.name]
        result[action.name] = estimate_outcome_probabilities(
            agent, action, ground_action, state, half_width=half_width, confidence=confidence,
            method=method, max_samples=max_samples)
    return result


def updated_domain(domain: Domain, estimates: Mapping[str, ProbabilityEstimate]) -> Domain:
    """The domain with every converged estimate applied (a new model version)."""
    for name, est in estimates.items():
        if est.converged:
            domain = domain.replace_action(est.updated_action(domain.action(name)))
    return domain
