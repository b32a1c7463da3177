"""A drift alarm's re-estimate by queries whose answers agree with the agent's current
probabilities publishes nothing.

The fleet audit (Benjamini–Hochberg at 5% per audit, a sliding window, once a minute) raises
false alarms on agents that did not drift, and it queues the assessment at once, with no
confirmation on the stream. The assessment then re-estimated the action by queries (±0.05) and
installed that estimate, so a false alarm became a new version and an
`effect_distribution_drift` alert that differed from the current one by sampling noise
(oper17's run over a real broker: tireworld at 0.5/0.5, v1 0.499/0.501, then v2 0.501/0.499,
nothing having changed)."""

from __future__ import annotations

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor
from capwatch.daemon.work import DriftProbe
from capwatch.model.domain import Action, Domain
from capwatch.model.pddl_domain import parse_domain
from capwatch.monitor.stats import chi2_isf, max_pearson_over_box

TIRE = """(define (domain tire)
  (:requirements :typing :probabilistic-effects)
  (:types location)
  (:predicates (vehicle-at ?l - location) (road ?a ?b - location) (not-flattire))
  (:action move-car
    :parameters (?from ?to - location)
    :precondition (and (vehicle-at ?from) (road ?from ?to) (not-flattire))
    :effect (and (vehicle-at ?to) (not (vehicle-at ?from))
                 (probabilistic P (not (not-flattire))))))"""
STATE = frozenset({("vehicle-at", "a"), ("road", "a", "b"), ("not-flattire",)})
PROBE = DriftProbe(("move-car", "a", "b"), STATE)


def _tire(p_flat: float) -> Domain:
    return parse_domain(TIRE.replace(" P ", f" {p_flat} "), "tire")


def _probabilities(action: Action) -> list[float]:
    return sorted(o.probability for o in action.outcomes)


def _assess(known: Domain, truth: Domain, alarm: Domain, seed: int) -> Domain:
    """The alarm's provisional estimate is ``alarm``'s move-car (what the audit saw)."""
    out = EngineAssessor().assess(AssessmentRequest(
        "tire-1", "tire", known, SimulatedAgent(truth, seed=seed),
        drifted_actions={"move-car": alarm.action("move-car")},
        drift_probes={"move-car": PROBE}))
    assert out.unexplained == ()
    return out.model


def test_a_false_alarm_whose_answers_fit_the_current_probabilities_changes_nothing() -> None:
    """The agent still draws 0.8/0.2; the audit's window said 0.5. Before: a version at the
    sampled frequencies (0.79.., 0.8.., never exactly 0.8) in every seed. The model comes
    back unchanged (the daemon then settles "no change": no version, no alert) unless the
    answers reject 0.8/0.2 at the engine's outcome error (noise18): a noise version for an
    honest agent is worse than a kept model the audit may flag again. Where the audit
    could reject 0.8/0.2 on a distribution the answers leave plausible, more answers were
    asked (ad537d9's fresh stage, the assessor's second look), and they did not reject
    it either (ad537d9 alone published the estimate where they could not show the bound).
    """
    known = _tire(0.8)
    for seed in range(1, 7):
        out = EngineAssessor().assess(AssessmentRequest(
            "tire-1", "tire", known, SimulatedAgent(known, seed=seed),
            drifted_actions={"move-car": _tire(0.5).action("move-car")},
            drift_probes={"move-car": PROBE}))
        assert out.unexplained == ()
        assert out.model == known, seed
        assert out.details["estimates"]["move-car"]["agrees_with_current"]


def test_a_kept_model_the_audit_would_reject_is_asked_again() -> None:
    """rare17's loop case: the current version states 0.00578, the agent draws 0.01. The
    estimate's region held 0.00578 in 3 of 20 seeds, which kept it (the audit's X² of the
    truth against it ~6, over the critical 3.84: the alarm comes back). A region that
    reaches where the audit rejects 0.00578 now gets more answers (ad537d9's fresh stage,
    then the assessor's second look while the budget allows) and a version where they
    reject it at 0.001; kept only where they do not (noise18: never published by
    default), which each kept seed's details show."""
    known, truth = _tire(0.00578), _tire(0.01)
    critical = chi2_isf(0.05, 1)
    current = [o.probability for o in known.action("move-car").outcomes]
    published = 0
    for seed in range(20):
        out = EngineAssessor().assess(AssessmentRequest(
            "tire-1", "tire", known, SimulatedAgent(truth, seed=seed),
            drifted_actions={"move-car": known.action("move-car")},
            drift_probes={"move-car": PROBE}))
        est = out.details["estimates"]["move-car"]
        if out.model == known:
            assert est["agrees_with_current"]
            # Asked again, or the region reaches no further than the audit allows.
            assert "second_look" in est or max_pearson_over_box(
                est["low"], est["high"], current, 2000) <= critical or \
                est["samples"] * 3 > 2 * 500 * 20, seed
        else:
            published += 1
    assert published >= 10, published


def test_a_real_probability_drift_is_still_re_estimated() -> None:
    known, truth = _tire(0.8), _tire(0.5)
    for seed in (1, 2, 3):
        model = _assess(known, truth, truth, seed)
        assert model != known
        for got, want in zip(_probabilities(model.action("move-car")),
                             _probabilities(truth.action("move-car")), strict=True):
            assert abs(got - want) <= 0.05
