from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps

from capwatch.monitor.stats import (
    benjamini_hochberg,
    chi_square_gof,
    clopper_pearson_interval,
    compositions,
    exact_multinomial_test,
    homogeneity_p_value,
    multinomial_mle,
    simultaneous_level,
    total_variation,
    tvd_interval,
    wilson_interval,
)

# ------------------------------------------------------------------ chi-square, known values


def test_pearson_two_outcomes_known_p_value() -> None:
    res = chi_square_gof([30, 70], [0.2, 0.8])
    assert res.method == "pearson"
    assert res.dof == 1
    assert res.statistic == pytest.approx(6.25)
    # X² = 2.5², so p = 2(1 − Φ(2.5)).
    assert res.p_value == pytest.approx(0.0124193, rel=1e-4)
    assert res.expected == (20.0, 80.0)


def test_pearson_three_outcomes_two_dof() -> None:
    res = chi_square_gof([50, 30, 20], [1 / 3, 1 / 3, 1 / 3])
    assert res.dof == 2
    assert res.statistic == pytest.approx(14.0)
    # chi-square with 2 dof has survival function exp(−x/2).
    assert res.p_value == pytest.approx(math.exp(-7.0), rel=1e-6)


def test_dof_counts_only_outcomes_of_the_model() -> None:
    res = chi_square_gof([10, 20, 30, 40, 0], [0.1, 0.2, 0.3, 0.35, 0.05], min_samples=1)
    assert res.dof == 4


def test_minimum_sample_rule() -> None:
    res = chi_square_gof([5, 94], [0.5, 0.5], min_samples=100)
    assert res.method == "insufficient"
    assert not res.tested
    assert res.p_value == 1.0
    assert chi_square_gof([5, 95], [0.5, 0.5], min_samples=100).tested


def test_rejects_zero_model_probability() -> None:
    with pytest.raises(ValueError):
        chi_square_gof([5, 5], [1.0, 0.0])


# ------------------------------------------------------------------ exact test


def test_exact_binomial_known_value() -> None:
    # X ~ Bin(10, 0.2), observed 3: X² ≥ X²(3) for every x except 2, so p = 1 − P(X = 2).
    stat, p = exact_multinomial_test([3, 7], [0.2, 0.8])
    assert stat == pytest.approx(0.625)
    assert p == pytest.approx(1 - sps.binom.pmf(2, 10, 0.2), rel=1e-9)
    assert p == pytest.approx(0.698010, rel=1e-5)


def test_small_expected_counts_use_the_exact_test() -> None:
    res = chi_square_gof([3, 7], [0.2, 0.8], min_samples=10)
    assert res.method == "exact"
    assert res.p_value == pytest.approx(0.698010, rel=1e-5)


def test_exact_test_matches_brute_force_enumeration() -> None:
    p = np.array([0.1, 0.3, 0.6])
    observed = np.array([4, 1, 3])
    n = int(observed.sum())
    e = n * p
    x2_obs = ((observed - e) ** 2 / e).sum()
    brute = 0.0
    for a, b in itertools.product(range(n + 1), repeat=2):
        if a + b > n:
            continue
        x = np.array([a, b, n - a - b])
        if ((x - e) ** 2 / e).sum() >= x2_obs - 1e-9:
            brute += sps.multinomial.pmf(x, n, p)
    _, exact = exact_multinomial_test(observed, p)
    assert exact == pytest.approx(brute, rel=1e-9)


def test_compositions_enumerate_every_vector_once() -> None:
    x = compositions(6, 4)
    assert len(x) == math.comb(9, 3)
    assert (x.sum(axis=1) == 6).all()
    assert len({tuple(r) for r in x}) == len(x)
    assert (x >= 0).all()


def test_exact_test_has_at_most_nominal_size() -> None:
    rng = np.random.default_rng(7)
    p = np.array([0.1, 0.3, 0.6])
    draws = rng.multinomial(20, p, size=2000)
    ps = np.array([exact_multinomial_test(d, p)[1] for d in draws])
    assert (ps <= 0.05).mean() <= 0.05 + 0.012  # 2.5 binomial SDs of slack
    assert (ps <= 0.05).mean() > 0.02  # and not absurdly conservative


def test_pooling_when_enumeration_is_too_large() -> None:
    res = chi_square_gof([194, 4, 2], [0.98, 0.01, 0.01], exact_limit=10)
    assert res.method == "pooled-exact"
    assert res.cells == ((0,), (1, 2))
    assert res.dof == 1
    _, expected_p = exact_multinomial_test([194, 6], [0.98, 0.02])
    assert res.p_value == pytest.approx(expected_p)


def test_pooling_keeps_large_cells_and_uses_pearson() -> None:
    counts = [300, 300, 392, 3, 5]
    probs = [0.3, 0.3, 0.392, 0.004, 0.004]
    res = chi_square_gof(counts, probs, exact_limit=10)
    assert res.method == "pooled-pearson"
    assert res.cells == ((0,), (1,), (2,), (3, 4))
    assert res.dof == 3
    ref = sps.chisquare([300, 300, 392, 8], [300, 300, 392, 8])
    assert res.p_value == pytest.approx(float(ref.pvalue))


# ------------------------------------------------------------------ intervals


def test_wilson_known_values() -> None:
    lo, hi = wilson_interval(np.array([0, 5]), 10)
    assert lo[0] == 0.0
    assert hi[0] == pytest.approx(0.27753, abs=1e-5)
    assert (lo[1], hi[1]) == pytest.approx((0.23659, 0.76341), abs=1e-5)


def test_clopper_pearson_known_values() -> None:
    lo, hi = clopper_pearson_interval(np.array([0, 5, 10]), 10)
    assert hi[0] == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-9)
    assert (lo[1], hi[1]) == pytest.approx((0.18709, 0.81291), abs=1e-5)
    assert hi[2] == 1.0
    assert lo[2] == pytest.approx(0.025 ** (1 / 10), rel=1e-9)


@pytest.mark.parametrize("p", [0.03, 0.1, 0.27, 0.5])
def test_clopper_pearson_exact_coverage_is_at_least_nominal(p: float) -> None:
    n = 60
    x = np.arange(n + 1)
    lo, hi = clopper_pearson_interval(x, n)
    coverage = sps.binom.pmf(x, n, p)[(lo <= p) & (p <= hi)].sum()
    assert coverage >= 0.95


def test_simultaneous_level() -> None:
    assert simultaneous_level(0.95, 2) == 0.95
    assert simultaneous_level(0.95, 5) == pytest.approx(0.99)


def test_mle_and_intervals() -> None:
    est = multinomial_mle([30, 70], method="clopper-pearson")
    assert est.probabilities == (0.3, 0.7)
    assert est.n == 100
    assert all(lo < p < hi for lo, p, hi in zip(est.low, est.probabilities, est.high,
                                                 strict=True))
    assert est.covers([0.3, 0.7])
    assert not est.covers([0.5, 0.5])


# ------------------------------------------------------------------ total variation


def test_tvd_point_and_two_outcome_interval() -> None:
    est = tvd_interval([30, 70], [0.2, 0.8])
    assert est.value == pytest.approx(0.1)
    lo, hi = clopper_pearson_interval(np.array([30]), 100)
    # With two outcomes the confidence box is one interval for p̂₀.
    assert est.low == pytest.approx(max(0.0, float(lo[0]) - 0.2), abs=1e-7)
    assert est.high == pytest.approx(float(hi[0]) - 0.2, abs=1e-7)
    assert est.low <= est.value <= est.high


def test_tvd_interval_is_zero_based_when_model_fits() -> None:
    est = tvd_interval([200, 300, 500], [0.2, 0.3, 0.5])
    assert est.value == 0.0
    assert est.low == 0.0
    assert 0.0 < est.high < 0.1


def test_tvd_interval_covers_the_true_distance() -> None:
    rng = np.random.default_rng(11)
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.4, 0.3, 0.3])
    truth = total_variation(p, q)
    draws = rng.multinomial(150, q, size=300)
    covered = [(e.low - 1e-9 <= truth <= e.high + 1e-9)
               for e in (tvd_interval(d, p) for d in draws)]
    assert np.mean(covered) >= 0.95


def _min_tvd_by_linear_program(lo: np.ndarray, hi: np.ndarray, p: np.ndarray) -> float:
    """min ½ Σ |q − p| over lo ≤ q ≤ hi, Σ q = 1, as a linear program in [q, t]."""
    k = p.size
    eye = np.eye(k)
    res = optimize.linprog(
        np.concatenate([np.zeros(k), np.full(k, 0.5)]),
        A_ub=np.block([[eye, -eye], [-eye, -eye]]), b_ub=np.concatenate([p, -p]),
        A_eq=np.concatenate([np.ones(k), np.zeros(k)])[None, :], b_eq=[1.0],
        bounds=[(float(a), float(b)) for a, b in zip(lo, hi, strict=True)] + [(0.0, None)] * k,
        method="highs")
    assert res.success
    return max(0.0, float(res.fun))


def test_tvd_interval_low_end_is_the_linear_programs_minimum() -> None:
    """The interval's low end (closed form) is the minimum of the TVD over the confidence
    box on the simplex, as a linear program finds it, over random models and counts."""
    rng = np.random.default_rng(3)
    nonzero = 0
    for _ in range(300):
        k = int(rng.integers(2, 7))
        p = rng.dirichlet(np.ones(k))
        q = rng.dirichlet(np.ones(k)) if rng.random() < 0.7 else p
        counts = rng.multinomial(int(rng.integers(5, 2_000)), q)
        est = tvd_interval(counts, p)
        lo, hi = clopper_pearson_interval(counts, int(counts.sum()),
                                          simultaneous_level(0.95, k))
        assert est.low == pytest.approx(_min_tvd_by_linear_program(lo, hi, p / p.sum()),
                                        abs=1e-7)
        nonzero += est.low > 0.01
    assert nonzero > 50  # boxes away from the model, not only the trivial zero


# ------------------------------------------------------------------ Benjamini–Hochberg


def test_bh_known_example() -> None:
    rejected, adjusted = benjamini_hochberg([0.01, 0.04, 0.03, 0.005, 0.2], 0.05)
    assert rejected.tolist() == [True, True, True, True, False]
    assert adjusted == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.2])


def test_bh_empty() -> None:
    rejected, adjusted = benjamini_hochberg([], 0.05)
    assert rejected.size == 0 and adjusted.size == 0


def test_by_is_more_conservative_than_bh() -> None:
    ps = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205]
    _, bh = benjamini_hochberg(ps)
    _, by = benjamini_hochberg(ps, dependent=True)
    assert (by >= bh).all()


def test_bh_controls_fdr_on_synthetic_tables() -> None:
    """900 tables fit the model, 100 drifted; BH at q=0.1 keeps FDP ≤ q on average."""
    rng = np.random.default_rng(2024)
    p0 = np.array([0.8, 0.2])
    p1 = np.array([0.72, 0.28])
    n, m_null, m_alt, q = 400, 450, 50, 0.1
    fdps, powers, raw_false = [], [], []
    for _ in range(20):
        null = rng.multinomial(n, p0, size=m_null)
        alt = rng.multinomial(n, p1, size=m_alt)
        ps = np.array([chi_square_gof(c, p0).p_value for c in np.vstack([null, alt])])
        rejected, _ = benjamini_hochberg(ps, q)
        false = int(rejected[:m_null].sum())
        fdps.append(false / max(1, int(rejected.sum())))
        powers.append(rejected[m_null:].mean())
        raw_false.append(int((ps[:m_null] <= q).sum()))
    assert np.mean(fdps) <= q * (m_null / (m_null + m_alt)) + 0.03
    assert np.mean(powers) > 0.5
    # Without the correction about q·450 ≈ 45 null tables per round would be flagged.
    assert np.mean(raw_false) > 30


def test_pearson_p_values_agree_with_scipy_chisquare() -> None:
    rng = np.random.default_rng(3)
    p = np.array([0.5, 0.25, 0.15, 0.1])
    for counts in rng.multinomial(300, [0.45, 0.3, 0.15, 0.1], size=20):
        ours = chi_square_gof(counts, p)
        ref = sps.chisquare(counts, 300 * p)
        assert ours.statistic == pytest.approx(float(ref.statistic))
        assert ours.p_value == pytest.approx(float(ref.pvalue), rel=1e-9)


@pytest.mark.parametrize(("a", "b"), [
    ((300, 200), (310, 190)),
    ((300, 200), (60, 440)),
    ((12, 30, 5), (40, 80, 30)),
    ((50, 0, 7, 3), (41, 0, 2, 9)),  # an outcome neither saw
    ((5, 1), (1, 5)),
])
def test_homogeneity_matches_pearsons_test_of_the_contingency_table(
        a: tuple[int, ...], b: tuple[int, ...]) -> None:
    seen = [i for i in range(len(a)) if a[i] + b[i] > 0]
    table = np.array([[a[i] for i in seen], [b[i] for i in seen]])
    expected = sps.chi2_contingency(table, correction=False).pvalue
    assert homogeneity_p_value(a, b) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_homogeneity_of_samples_it_cannot_compare() -> None:
    assert homogeneity_p_value((0, 0), (3, 4)) == 1.0  # one empty
    assert homogeneity_p_value((5, 0), (7, 0)) == 1.0  # one outcome seen
    assert homogeneity_p_value((5, 1), (5, 1, 0)) == 0.0  # other outcomes: not one action
