"""A re-estimate publishes a version only when its answers reject the current
probabilities at the engine's outcome error (0.001) and it explains the counts of the
stream's alarm (oper18b, docs/reliability.md "Session 18: the image, confluent-kafka and a
fleet that evicts").

oper18b's honest tireworld agents replayed one episode (0 flat tyres in 10 runs, p = 1e-7
against 0.8): the sequential detector alarmed, and where the re-estimate's 95% interval
just missed 0.8 a version was published (0.8 -> 0.779, 0.8 -> 0.783): noise, on ~5% of the
alarms the answers did not confirm."""

from __future__ import annotations

from typing import Any

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.daemon.alerting import unconfirmed_drifts
from capwatch.daemon.assessor import (
    AssessmentOutcome,
    AssessmentRequest,
    EngineAssessor,
    _explains_alarm,
)
from capwatch.model.domain import Domain
from capwatch.monitor.action_drift import ActionMonitor
from capwatch.monitor.drift_evidence import with_probabilities
from tests.daemon.test_reestimate_agrees import PROBE, _tire


def _flat(domain: Domain) -> int:
    """Index of move-car's flat-tyre outcome."""
    return next(i for i, o in enumerate(domain.action("move-car").outcomes)
                if any(a.predicate == "not-flattire" for a in o.delete))


def _stream_alarm(known: Domain, outcomes: list[int]) -> dict[str, Any]:
    """The sequential detector's evidence (as the daemon queues it) over ``outcomes``
    replayed until it alarms."""
    monitor = ActionMonitor(known.action("move-car"))
    for i in range(10_000):
        alarm = monitor.observe(outcomes[i % len(outcomes)])
        if alarm is not None:
            assert alarm.provisional
            return alarm.evidence.to_dict()
    raise AssertionError("no alarm")


def _assess(known: Domain, truth: Domain, seed: int,
            evidence: dict[str, Any] | None) -> AssessmentOutcome:
    out = EngineAssessor().assess(AssessmentRequest(
        "tire-1", "tire", known, SimulatedAgent(truth, seed=seed),
        drifted_actions={"move-car": known.action("move-car")},
        drift_probes={"move-car": PROBE},
        drift_evidence={"move-car": evidence} if evidence is not None else {}))
    assert out.unexplained == ()
    return out


def test_a_false_alarm_whose_answers_do_not_reject_the_model_strictly_changes_nothing(
) -> None:
    """An honest agent at 0.8, oper18b's alarm (a replayed episode with no flat tyre).
    Every seed keeps the model, among them seeds whose 95% simultaneous interval misses
    0.8, which published a version before (at least one here: the test would pass
    vacuously otherwise)."""
    known = _tire(0.8)
    flat = _flat(known)
    evidence = _stream_alarm(known, [1 - flat] * 10)
    assert evidence["p_value"] < 1e-6
    missed = 0
    for seed in range(40):
        out = _assess(known, known, seed, evidence)
        est = out.details["estimates"]["move-car"]
        missed += not all(lo <= p <= hi for p, lo, hi in zip(
            [o.probability for o in known.action("move-car").outcomes], est["low"],
            est["high"], strict=True))
        assert out.model == known, (seed, est["probabilities"])
        assert est["agrees_with_current"] is True
    assert missed >= 1


def test_a_re_estimate_that_does_not_explain_the_stream_s_alarm_is_not_published() -> None:
    """The answers show 0.75 (the model says 0.8; 2,230 answers reject it), but the
    stream's alarm saw no flat tyre in 10 runs: neither 0.75 nor any mixture of it with
    0.8 explains that at the detector's own threshold, so the answers are not what raised
    the alarm. No version; the drift is not confirmed (drift_not_confirmed). Before: 0.75
    published."""
    known, truth = _tire(0.8), _tire(0.75)
    evidence = _stream_alarm(known, [1 - _flat(known)])
    for seed in range(3):
        out = _assess(known, truth, seed, evidence)
        est = out.details["estimates"]["move-car"]
        assert out.model == known
        assert est["alarm_unexplained"] is True and "agrees_with_current" not in est
        assert est["alarm_test"]["log_likelihood_ratio"] > est["alarm_test"]["log_threshold"]
        assert unconfirmed_drifts({"move-car": evidence}, out.details) == [
            ("move-car", "sequential")]


def test_a_real_drift_whose_alarm_window_straddles_the_change_is_published() -> None:
    """The detector's change point is an estimate: a window of 300 executions at 0.8 then
    100 at 0.5 is explained by the mixture of the two, and the re-estimate (0.5) is
    published. The fleet audit's window (counts part old, part new) is not held to the
    rule at all, nor is evidence without counts."""
    known, truth = _tire(0.8), _tire(0.5)
    flat = _flat(known)
    counts = [0, 0]
    counts[flat], counts[1 - flat] = 240 + 50, 60 + 50
    evidence = _stream_alarm(known, [1 - flat] * 10)
    evidence["counts"] = counts
    audit = dict(evidence, detector="audit", counts=[0, 0])
    audit["counts"][1 - flat] = 400
    for seed, ev in ((0, evidence), (1, audit), (2, {})):
        out = _assess(known, truth, seed, ev)
        assert out.model != known, seed
        est = out.details["estimates"]["move-car"]
        assert "alarm_unexplained" not in est and "agrees_with_current" not in est
        flat_p = out.model.action("move-car").outcomes[flat].probability
        assert abs(flat_p - 0.5) <= 0.05


def test_a_kept_model_the_audit_could_reject_is_looked_at_again() -> None:
    """rare17's loop case: the model says 0.00578, the agent draws 0.01. Where the first
    answers do not reject 0.00578 at 0.001 but the audit could reject it on a
    distribution they leave plausible, a second look decides on the pooled answers (it
    published in some seeds here); a model kept is one both looks left standing."""
    known, truth = _tire(0.00578), _tire(0.01)
    decided = 0
    for seed in range(12):
        out = _assess(known, truth, seed, None)
        est = out.details["estimates"]["move-car"]
        if "second_look" in est:
            decided += out.model != known
        if out.model == known:
            assert est["agrees_with_current"] is True
    assert decided >= 1


def test_the_alarms_counts_are_matched_to_the_new_probabilities_by_outcome_not_position(
) -> None:
    """An action's outcomes are kept sorted by probability, so a drift that makes the
    flat tyre the less likely outcome lists the re-estimate's outcomes in the other order.
    Before, the alarm's counts (in the current action's order) were paired with them by
    position: a real 0.8 -> 0.3 drift, counted 13 to 27, was "not explained" and no version
    was published (tests/client/test_gym_e2e.py's frozenlake 1/3 -> 0.8 the same way)."""
    current = _tire(0.8).action("move-car")
    flat = next(i for i, o in enumerate(current.outcomes)
                if any(a.predicate == "not-flattire" for a in o.delete))
    updated = with_probabilities(
        current, [0.3 if i == flat else 0.7 for i in range(len(current.outcomes))], 1000)
    assert [o.probability for o in updated.outcomes] != [
        0.3 if i == flat else 0.7 for i in range(len(current.outcomes))]  # reordered
    counts = [13 if i == flat else 27 for i in range(len(current.outcomes))]
    evidence = {"detector": "sequential", "counts": counts, "log_threshold": 11.5,
                "model_probabilities": [o.probability for o in current.outcomes]}
    explains, test = _explains_alarm(evidence, current, updated)
    assert test is not None and explains, test
    assert test["log_likelihood_ratio"] < 1.0
