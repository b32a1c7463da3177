"""The daemon's assessor: the assessment engine (DAAISy) plus the drift statistics' estimates.

Structural evidence (inconsistent transitions, canary findings) goes to
capwatch.assess.engine in DAAISy mode with the agent's recent executed transitions, which
pin many modes without a query. Effect-distribution drift is re-estimated
by repeated one-step queries from a state the action was seen executing in
(capwatch.assess.probabilities, sampling until every outcome's probability is known to
±``half_width`` and precisely enough, relative to it, that the fleet drift audit would
not reject the estimate on the truth); without such a state, or if sampling does not
converge, the monitor's estimate over the window since the change point is installed
instead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from capwatch.assess.agent import AgentQuery, AgentRefusesQueries
from capwatch.assess.engine import AssessmentResult, Method, assess, refused_every_query
from capwatch.assess.observations import Transition as EngineObservation
from capwatch.assess.outcomes import OUTCOME_ERROR
from capwatch.assess.probabilities import (
    ProbabilityEstimate,
    UnidentifiableOutcomes,
    estimate_outcome_probabilities,
)
from capwatch.assess.replay import Unexplained, confirm, replay
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.work import DriftProbe
from capwatch.model.domain import Action, Domain
from capwatch.model.pal import PalTuple
from capwatch.monitor.drift import DriftConfig
from capwatch.monitor.stats import chi2_isf, chi_square_gof, max_pearson_over_box


@dataclass(frozen=True, slots=True)
class AssessmentRequest:
    agent_id: str
    family: str
    model: Domain
    """The model the agent was believed to follow when the evidence arrived."""
    agent: AgentQuery
    inconsistent: Sequence[AgentTransition] = ()
    """Observed transitions the model cannot explain."""
    executed: Sequence[AgentTransition] = ()
    """Recent transitions the model explained (they pin modes without a query)."""
    drifted_actions: Mapping[str, Action] = field(default_factory=dict)
    """Action name → provisional re-estimated action (probability drift)."""
    drift_probes: Mapping[str, DriftProbe] = field(default_factory=dict)
    """Action name → where to re-estimate it."""
    drift_evidence: Mapping[str, Any] = field(default_factory=dict)
    """Action name → the evidence that raised its alarm (DriftEvidence.to_dict()): a
    re-estimate must explain the stream's counts (:func:`_explains_alarm`)."""
    query_budget: int = 500
    confirm_queries: int = 0
    """Queries asked a second time before the model may be published (replay.confirm)."""
    samples: int = 30
    min_outcome_probability: float = 0.01
    """See AssessmentConfig.min_outcome_probability."""
    probability_tolerance: float = 0.1
    """See AssessmentConfig.probability_tolerance."""
    max_query_atoms: int = 10_000
    """See AssessmentConfig.max_query_atoms."""
    independent_draws: bool = False
    """See AssessmentConfig.independent_draws."""
    method: str | None = None
    """An operator's request ("assess now"): this method, with or without evidence."""
    optimal_traces: Sequence[Sequence[tuple[str, ...]]] = ()


@dataclass(frozen=True, slots=True)
class AssessmentOutcome:
    model: Domain
    queries: int
    details: Mapping[str, Any] = field(default_factory=dict)
    unexplained: Sequence[Unexplained] = ()
    """Evidence (observations, query answers) the new model cannot explain: such a model
    must not be published."""
    budget_exhausted: bool = False


def coverage(result: AssessmentResult) -> dict[str, Any]:
    """What the evidence checked: pal-tuples confirmed, carried over unverified, unresolved
    (these are published at the known model's mode), with the actions of the last two."""
    def actions(pals: frozenset[PalTuple]) -> list[str]:
        return sorted({p.action for p in pals})

    carried, unresolved = result.carried_over, result.unresolved
    return {"confirmed": len(result.confirmed), "carried_over": len(carried),
            "unresolved": len(unresolved), "carried_over_actions": actions(carried),
            "unresolved_actions": actions(unresolved),
            "unresolved_pal_tuples": sorted(str(p) for p in unresolved)}


EVIDENCE_STATE_ATOMS = 64
"""A state of an unexplained answer up to this many atoms is shown whole, a larger one by
its size and the atoms that changed."""
EVIDENCE_PLAN_STEPS = 64


def unexplained_json(u: Unexplained) -> dict[str, Any]:
    """An unexplained observation or answer as the failure's evidence, bounded.

    The evidence goes whole into the ``assessment_failed`` alert (the alerts topic,
    Alertmanager). A query runs its probes one after another on fresh objects, so its
    start state can hold thousands of atoms: twenty such answers made a 6 MB alert that a
    broker's default ``message.max.bytes`` refuses, on every attempt. What tells an
    operator what the agent did is the plan's start, the steps executed and what changed;
    ``capwatch assess offline`` reproduces the whole query."""
    out = u.to_json()
    if max(len(u.state), len(u.final_state)) > EVIDENCE_STATE_ATOMS:
        del out["state"], out["final_state"]
        out["state_atoms"], out["final_state_atoms"] = len(u.state), len(u.final_state)
        made_true = sorted(list(a) for a in u.final_state - u.state)
        made_false = sorted(list(a) for a in u.state - u.final_state)
        out["made_true"] = made_true[:EVIDENCE_STATE_ATOMS]
        out["made_false"] = made_false[:EVIDENCE_STATE_ATOMS]
        if max(len(made_true), len(made_false)) > EVIDENCE_STATE_ATOMS:  # a list was cut
            out["changed_atoms"] = len(made_true) + len(made_false)
    if len(u.plan) > EVIDENCE_PLAN_STEPS:
        # The steps around the last executed one say where the answer parted from the model.
        end = min(len(u.plan), max(u.executed or 0, 0) + 1)
        start = max(0, end - EVIDENCE_PLAN_STEPS)
        out["plan"] = [list(a) for a in u.plan[start:start + EVIDENCE_PLAN_STEPS]]
        out["plan_steps"], out["plan_from"] = len(u.plan), start
    return out


def _agrees(est: ProbabilityEstimate, action: Action) -> bool:
    """The answers leave ``action``'s probabilities as safe to keep as the estimate is to
    publish: with the audit's target, the audit would not reject them on any distribution
    in the estimate's region (``keeps_current``); without it, every outcome's probability
    lies within the estimate's simultaneous interval (outcomes in ``action``'s order, as
    the estimate counted them)."""
    if est.keeps_current is not None:
        return est.keeps_current
    known = [o.probability for o in action.outcomes]
    e = est.estimate
    return len(known) == len(e.low) and all(
        lo <= p <= hi for p, lo, hi in zip(known, e.low, e.high, strict=True))


PUBLISH_LEVEL = OUTCOME_ERROR
"""A re-estimate replaces the probabilities the agent is known to draw only when its
answers reject them at this level. The decision is a test of "the answers reject the
current probabilities": at the interval's 5% it published a noise version on ~5% of the
false alarms the answers did not confirm (oper18b: 0.8 -> 0.779 and 0.8 -> 0.783 on honest
agents); at the engine's outcome error (0.001) on ~0.1%. A drift the answers cannot tell
at this level is kept, not published: the ``drift_not_confirmed`` alert and the drift
back-off (doubling up to 6 h) bound the alarm coming back."""

EXPLAINED_DETECTORS = frozenset({"sequential", "confirmation"})
"""The alarms whose counts a re-estimate must explain: the stream's sequential detector
(its counts start at the estimated change point) and a confirmation (fresh executions
after the alarm). Not the fleet audit: its window of ~2,000 executions can straddle the
drift, and counts that are part old, part new need not fit the new probabilities."""


def _gof_p_value(counts: Sequence[int], probabilities: Sequence[float]) -> float:
    """The drift tests' goodness of fit of ``counts`` to ``probabilities`` (same order),
    any sample size; a count where a probability is 0 rejects outright."""
    if len(counts) != len(probabilities):
        return 0.0
    if any(c > 0 and p <= 0.0 for c, p in zip(counts, probabilities, strict=True)):
        return 0.0
    kept = [(c, p) for c, p in zip(counts, probabilities, strict=True) if p > 0.0]
    total = sum(p for _, p in kept)
    if len(kept) < 2 or sum(c for c, _ in kept) == 0:
        return 1.0
    return chi_square_gof([c for c, _ in kept], [p / total for _, p in kept],
                          min_samples=1).p_value


def _answers_reject(est: ProbabilityEstimate, action: Action) -> bool:
    """The estimate's answers (its last stage, fresh: that stage's size was fixed before
    its samples) reject ``action``'s probabilities at :data:`PUBLISH_LEVEL`."""
    return _gof_p_value(est.estimate.counts,
                        [o.probability for o in action.outcomes]) < PUBLISH_LEVEL


MIXTURE_STEPS = 50
"""The alarm's window may start before the drift (its change point is an estimate:
tireworld's 0.8 -> 0.5 at execution 500 was placed at 115 once): its counts are then
tested against the mixtures w·current + (1 − w)·updated, w in steps of 1/50."""


def _log_likelihood_ratio(counts: Sequence[int], probabilities: Sequence[float]) -> float:
    """log of the counts' likelihood at their own frequencies over that at
    ``probabilities`` (n·KL, half the G statistic): the most any alternative, the
    sequential detector's shifts included, can gain over them on these counts."""
    n = sum(counts)
    out = 0.0
    for c, p in zip(counts, probabilities, strict=True):
        if c:
            if p <= 0.0:
                return math.inf
            out += c * math.log(c / (n * p))
    return out


def _explains_alarm(evidence: Any, current: Action,
                    updated: Action) -> tuple[bool, dict[str, float] | None]:
    """Whether ``updated``'s probabilities explain the counts that raised the alarm, as a
    structural version must explain its transitions: the alarm's own test would not
    have fired on them against the best mixture of the current and the updated
    probabilities (the window may straddle the drift). For the sequential detector, the
    counts' log-likelihood ratio (what any shift can gain, at least its statistic on
    these counts) below its log threshold; its window was chosen for looking different,
    so a test at a fixed level refused real drifts (tireworld 0.8 -> 0.7: 21 of 44 where
    0.7 was drawn, p = 7e-4, 9 of 200 alarms). For a confirmation (fresh executions),
    their goodness of fit at :data:`PUBLISH_LEVEL`. With the figures (None: not asked,
    the audit's alarm or counts in another outcome order). oper18b's honest agents: 0 of
    10 flat tyres against 0.8 raised the alarm, and the 0.779 published, or any mixture
    of it with 0.8, explained them no better."""
    if not isinstance(evidence, Mapping) or evidence.get("detector") not in EXPLAINED_DETECTORS:
        return True, None
    counts, stated = evidence.get("counts"), evidence.get("model_probabilities")
    known = [o.probability for o in current.outcomes]
    if not isinstance(counts, list) or not isinstance(stated, list) \
            or len(counts) != len(known) or len(stated) != len(known) \
            or any(abs(float(a) - b) > 1e-9 for a, b in zip(stated, known, strict=True)):
        return True, None  # counted against another version of the action
    # An action's outcomes are kept sorted by probability (Outcome.sort_key), so new
    # probabilities may list them in another order than the counts: match by effects.
    by_effects = {(o.add, o.delete): o.probability for o in updated.outcomes}
    new = [by_effects.get((o.add, o.delete), -1.0) for o in current.outcomes]
    if len(updated.outcomes) != len(known) or min(new, default=0.0) < 0.0:
        return True, None  # not the same outcomes: a structural change, checked elsewhere
    observed = [int(c) for c in counts]
    mixtures = [[w * a + (1.0 - w) * b for a, b in zip(known, new, strict=True)]
                for w in (step / MIXTURE_STEPS for step in range(MIXTURE_STEPS + 1))]
    threshold = evidence.get("log_threshold")
    if evidence.get("detector") == "sequential" and isinstance(threshold, (int, float)):
        statistic = min(_log_likelihood_ratio(observed, m) for m in mixtures)
        return statistic < threshold, {"log_likelihood_ratio": statistic,
                                       "log_threshold": float(threshold)}
    p = max(_gof_p_value(observed, m) for m in mixtures)
    return p >= PUBLISH_LEVEL, {"p_value": p, "level": PUBLISH_LEVEL}


class Assessor(Protocol):
    """Re-learns the parts of a model the evidence says changed (DAAISy, AIA, estimation)."""

    def assess(self, request: AssessmentRequest) -> AssessmentOutcome: ...


_DRIFT_DEFAULTS = DriftConfig()


class EngineAssessor:
    def __init__(self, objects: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
                 method: str = "verify", half_width: float = 0.05, *,
                 audit_window: int | None = _DRIFT_DEFAULTS.window,
                 audit_level: float = _DRIFT_DEFAULTS.fdr) -> None:
        self.half_width = half_width
        self.audit_window = audit_window
        """The fleet drift audit's window and level (DriftConfig.window, .fdr): a
        re-estimate is sized so that the audit would not reject it on the truth's expected
        counts (capwatch.assess.probabilities.AuditPrecision); None: ±half_width only."""
        self.audit_level = audit_level
        self.method = Method(method)
        self.objects = dict(objects or {})
        """Family → type → object names, for the engine's optimal-plan comparison."""

    def _out_of_reach(self, est: ProbabilityEstimate, current: Action) -> bool:
        """The fleet audit would reject ``current``'s probabilities on the window's
        expected counts of some distribution in the estimate's region (keeping them could
        bring the alarm back: rare17's 0.00578 against a truth of 0.01)."""
        if self.audit_window is None or est.estimate.n == 0:
            return False
        known = [o.probability for o in current.outcomes]
        if len(known) != len(est.estimate.low) or min(known) <= 0.0:
            return False
        far = max_pearson_over_box(est.estimate.low, est.estimate.high, known,
                                   self.audit_window)
        return far > chi2_isf(self.audit_level, len(known) - 1)

    def assess(self, request: AssessmentRequest) -> AssessmentOutcome:
        model: Domain = request.model
        details: dict[str, Any] = {}
        queries = 0
        unexplained: list[Unexplained] = []
        exhausted = False
        # The engine's own observation type, built here at its boundary only.
        observations = [
            EngineObservation(t.state, t.action, t.next_state, source=f"executed[{i}]")
            for i, t in enumerate(request.executed)
        ] + [
            EngineObservation(t.state, t.action, t.next_state, source=f"inconsistent[{i}]",
                              executed=t.executed, optimal=t.optimal)
            for i, t in enumerate(request.inconsistent)
        ]
        if request.inconsistent or request.method is not None:
            method = Method(request.method) if request.method is not None else self.method
            result = assess(model, observations, request.agent, method=method,
                            budget=request.query_budget,
                            objects=self.objects.get(request.family),
                            min_outcome_probability=request.min_outcome_probability,
                            probability_tolerance=request.probability_tolerance,
                            max_query_atoms=request.max_query_atoms,
                            independent_draws=request.independent_draws)
            queries += result.query_count
            model = result.domain()
            details["method"] = result.method.value
            details["changes"] = len(result.changes)
            details["unresolved"] = sorted(str(p) for p in result.unresolved)
            details["budget_exhausted"] = result.budget_exhausted
            details["notes"] = list(result.notes)
            details["coverage"] = coverage(result)
            if result.retired:
                # Left out as gone, but only bounded: the version says how rare each is
                # shown to be (docs/assessment.md, "Outcomes made rarer").
                details["retired_outcomes"] = [
                    {"action": r.action, "outcome": r.outcome + 1,
                     "known_probability": r.known_probability, "steps": r.steps,
                     "share_at_most": round(r.share_at_most, 4)} for r in result.retired]
            if result.undecided_outcomes:
                details["undecided_outcomes"] = list(result.undecided_outcomes)
            exhausted = result.budget_exhausted
            # A version never contradicts the evidence it was learned from (issue 11).
            unexplained = replay(model, observations, result.queries)
            refusing = refused_every_query(result, observations) if unexplained else None
            if refusing is not None:
                # Not a model contradicting its evidence: no answer ran anything to learn
                # from (docs/assessment.md, "An agent that refuses every query").
                raise AgentRefusesQueries(refusing)
            # Nor states an outcome the steps could neither confirm nor retire: replay and
            # asking again cannot refuse a model that allows more than the agent does.
            # The reason says which: a known outcome not confirmed, or answers that do not
            # show independent outcomes (a noisy or alternating agent).
            unexplained += [
                Unexplained(f"outcomes of {name}", frozenset(), (), None, frozenset(),
                            result.undecided_reasons.get(name, "outcomes undecided"))
                for name in result.undecided_outcomes]
            if not unexplained:
                # An agent declared to draw independently is not tested for it
                # (assessment.independent_draws; docs/assessment.md).
                unexplained, asked = confirm(
                    model, request.agent, result.queries, request.confirm_queries,
                    mixed_error=None if request.independent_draws else OUTCOME_ERROR)
                queries += asked
                details["asked_again"] = asked
            if unexplained:
                details["unexplained"] = [unexplained_json(u) for u in unexplained[:20]]
        if request.drifted_actions:
            structural = {a.name: a for a in model.actions}
            for name, updated in request.drifted_actions.items():
                current = structural.get(name)
                if current is None:
                    continue
                same_effects = {(o.add, o.delete) for o in current.outcomes} == {
                    (o.add, o.delete) for o in updated.outcomes}
                if not (same_effects and current.pre_pos == updated.pre_pos
                        and current.pre_neg == updated.pre_neg):
                    continue
                probe = request.drift_probes.get(name)
                if probe is not None:
                    try:
                        est = estimate_outcome_probabilities(
                            request.agent, current, probe.action, probe.state,
                            half_width=self.half_width, max_samples=request.query_budget * 20,
                            audit_window=self.audit_window, audit_level=self.audit_level,
                            current=[o.probability for o in current.outcomes])
                    except UnidentifiableOutcomes:
                        est = None
                    if est is not None:
                        queries += 1
                        details.setdefault("estimates", {})[name] = {
                            "samples": est.samples, "converged": est.converged,
                            "probabilities": list(est.estimate.probabilities),
                            "low": list(est.estimate.low), "high": list(est.estimate.high)}
                        if est.audit is not None:
                            # Short of it within the budget, the estimate is still
                            # published (it is within ±half_width, nearer the truth than
                            # the alarm's or the current model's), and says so: the audit
                            # may flag it again (docs/assessment.md, "Rare outcomes").
                            details["estimates"][name]["audit"] = {
                                "window": est.audit.window, "level": est.audit.level,
                                "statistic_at_most": est.audit.statistic,
                                "critical": est.audit.critical,
                                "reached": est.audit.reached}
                        if est.converged and not est.structural_anomalies:
                            entry = details["estimates"][name]
                            keep = _agrees(est, current) or not _answers_reject(est, current)
                            left = request.query_budget * 20 - est.samples
                            if keep and 2 * left >= est.samples and self._out_of_reach(
                                    est, current):
                                # Kept, the audit could reject the current probabilities
                                # on a distribution the answers leave plausible: a second
                                # look (what the budget leaves, at least half the first)
                                # decides; the pooled answers must reject them at
                                # PUBLISH_LEVEL (two looks: at most twice it for an agent
                                # that draws them). Never published by default.
                                try:
                                    more = estimate_outcome_probabilities(
                                        request.agent, current, probe.action, probe.state,
                                        half_width=self.half_width, max_samples=left,
                                        audit_window=self.audit_window,
                                        audit_level=self.audit_level)
                                except UnidentifiableOutcomes:
                                    more = None
                                if more is not None:
                                    queries += 1
                                    # Every stage of both looks, not their last
                                    # stages only (session 18's 14 of 60 kept small
                                    # drifts; session 19).
                                    pooled = [a + b for a, b in zip(
                                        est.all_counts or est.estimate.counts,
                                        more.all_counts or more.estimate.counts,
                                        strict=True)]
                                    entry["second_look"] = {
                                        "samples": more.samples, "converged": more.converged,
                                        "probabilities": list(more.estimate.probabilities),
                                        "pooled_counts": pooled}
                                    if more.converged and not more.structural_anomalies \
                                            and _gof_p_value(pooled, [
                                                o.probability for o in current.outcomes]
                                            ) < PUBLISH_LEVEL:
                                        est, keep = more, False
                            if keep:
                                # The answers fit the probabilities the agent is known to
                                # draw: the alarm was a false one (the audit's, which no
                                # stream confirmation precedes) or a shift below what the
                                # estimate can tell at PUBLISH_LEVEL. Publishing the
                                # sampled frequencies would make a version and an alert of
                                # sampling noise.
                                entry["agrees_with_current"] = True
                                updated = current
                            else:
                                updated = est.updated_action(current)
                                explains, test = _explains_alarm(
                                    request.drift_evidence.get(name), current, updated)
                                if test is not None:
                                    entry["alarm_test"] = test
                                if not explains:
                                    # The answers differ from the model, but not as the
                                    # stream did: the alarm is not what they show, so it
                                    # is not confirmed (drift_not_confirmed).
                                    entry["alarm_unexplained"] = True
                                    updated = current
                model = model.replace_action(updated)
            details["reestimated"] = sorted(request.drifted_actions)
        return AssessmentOutcome(model, queries, details, tuple(unexplained), exhausted)
