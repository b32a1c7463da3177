"""A re-estimate by queries is precise enough, relative to each outcome's probability, that
the fleet drift audit would not reject it on the truth.

oper17 over a real broker (session 17): tireworld's flat tyre made rarer, 0.1 -> 0.01, was
published at 0.00578 (within the ±0.05 the re-estimate was sized for), the audit then rightly
rejected it, and the re-estimate published 0.00288; since a re-estimate whose intervals hold
the current probabilities changes nothing, that became a loop of audit alarm, "no change",
back-off. The target is now the audit's own: Pearson's X² of ``window`` executions' expected
counts against the published probabilities, at most the critical value at the audit's
level, over the estimate's confidence region."""

from __future__ import annotations

import itertools

import numpy as np

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.probabilities import estimate_outcome_probabilities
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor
from capwatch.model.domain import Action
from capwatch.monitor.stats import chi2_isf, chi_square_gof, max_pearson_over_box
from tests.daemon.test_reestimate_agrees import PROBE, _tire

WINDOW, LEVEL = 2000, 0.05
"""DriftConfig's defaults: the audit's window and Benjamini-Hochberg level."""


def _expected_x2(truth: Action, published: Action) -> float:
    """The audit's X² on WINDOW executions' expected counts under ``truth``."""
    t = sorted(o.probability for o in truth.outcomes)
    m = sorted(o.probability for o in published.outcomes)
    return WINDOW * sum((a - b) ** 2 / b for a, b in zip(t, m, strict=True))


def _rare(action: Action) -> float:
    return min(o.probability for o in action.outcomes)


def test_a_rare_outcome_is_estimated_within_what_the_audit_tells_apart() -> None:
    truth = _tire(0.01).action("move-car")
    critical = chi2_isf(LEVEL, 1)
    new_x2: list[float] = []
    old_x2: list[float] = []
    new_rel: list[float] = []
    for seed in range(20):
        for window, out in ((WINDOW, new_x2), (None, old_x2)):
            est = estimate_outcome_probabilities(
                SimulatedAgent(_tire(0.01), seed=seed), truth, PROBE.action, PROBE.state,
                max_samples=10_000, audit_window=window, audit_level=LEVEL)
            assert est.converged and est.audit_precise
            published = est.updated_action(truth)
            out.append(_expected_x2(truth, published))
            if window is not None:
                assert est.audit is not None and est.audit.reached
                new_rel.append(abs(_rare(published) - 0.01) / 0.01)
    # The region holds the truth in 95% of seeds at least; here in every one.
    assert max(new_x2) <= critical, new_x2
    # The relative precision the target implies at 0.01: sqrt(critical / (WINDOW * 0.01)).
    assert sum(r <= np.sqrt(critical / (WINDOW * 0.01)) for r in new_rel) >= 18, new_rel
    # ±0.05 absolute alone (before): most seeds the audit would reject on the truth.
    assert sum(x > critical for x in old_x2) >= 5, old_x2


def test_the_audit_run_on_the_truth_rejects_the_published_model_less_often() -> None:
    """Simulated audits (WINDOW draws of the truth, the audit's chi_square_gof) against the
    versions each sizing publishes."""
    truth = _tire(0.01).action("move-car")
    t = np.array(sorted(o.probability for o in truth.outcomes))
    rng = np.random.default_rng(7)
    rates: dict[int | None, float] = {}
    for window in (WINDOW, None):
        rejected = 0
        for seed in range(10):
            est = estimate_outcome_probabilities(
                SimulatedAgent(_tire(0.01), seed=seed), truth, PROBE.action, PROBE.state,
                max_samples=10_000, audit_window=window)
            m = sorted(o.probability for o in est.updated_action(truth).outcomes)
            for _ in range(40):
                rejected += chi_square_gof(rng.multinomial(WINDOW, t), m).p_value <= LEVEL
        rates[window] = rejected / 400
    # At X² of the expected counts <= critical the audit's power is at most ~1/2; the
    # published models here sit well inside.
    assert rates[WINDOW] < 0.25, rates
    assert rates[None] > rates[WINDOW], rates


def test_the_loop_ends_a_current_model_off_by_half_is_re_estimated() -> None:
    """The current version states 0.00578 (oper17's), the agent draws 0.01: the audit's
    alarm now leads to a version the audit would accept, not "no change"."""
    known, truth = _tire(0.00578), _tire(0.01)
    critical = chi2_isf(LEVEL, 1)
    for seed in (1, 2, 3):
        out = EngineAssessor().assess(AssessmentRequest(
            "tire-1", "tire", known, SimulatedAgent(truth, seed=seed),
            drifted_actions={"move-car": known.action("move-car")},
            drift_probes={"move-car": PROBE}))
        assert out.model != known
        assert _expected_x2(truth.action("move-car"), out.model.action("move-car")) <= critical
        audit = out.details["estimates"]["move-car"]["audit"]
        assert audit["reached"] and audit["window"] == WINDOW


def test_the_largest_x2_over_the_region_matches_a_grid_search() -> None:
    lo, hi = np.array([0.05, 0.2, 0.5]), np.array([0.15, 0.35, 0.7])
    m = np.array([0.1, 0.3, 0.6])
    grid = np.linspace(0.0, 1.0, 401)
    best = 0.0
    for a, b in itertools.product(grid, grid):
        q = np.array([a, b, 1.0 - a - b])
        if ((q >= lo - 1e-12) & (q <= hi + 1e-12)).all():
            best = max(best, float(100 * ((q - m) ** 2 / m).sum()))
    got = max_pearson_over_box(lo, hi, m, 100)
    assert got >= best - 1e-9
    assert got <= best * 1.01 + 1e-9
