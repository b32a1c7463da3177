"""The statistics module's quantiles and FDR adjustment against scipy.stats, which the
daemon no longer imports (capwatch/monitor/stats.py): the same floats over a grid of
arguments, edges included (levels 0 and 1, a single success or failure, counts up to
10^12, huge degrees of freedom, ties and NaN among p-values)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from capwatch.monitor.stats import (
    benjamini_hochberg,
    chi2_isf,
    chi2_sf,
    clopper_pearson_interval,
    fdr_adjusted,
    normal_isf,
    simultaneous_level,
    wilson_interval,
)

_QS = [0.0, 1e-300, 1e-100, 1e-30, 1e-17, 1e-12, 1e-6, 5e-4, 0.001, 0.0025, 0.005, 0.0125,
       0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975, 0.995, 0.9995, 1 - 1e-12,
       1 - 1e-16, 1.0]
_LEVELS = sorted({0.0, 0.5, 0.8, 0.9, 0.95, 0.99, 0.999, 1 - 1e-6, 1 - 1e-12, 1.0}
                 | {simultaneous_level(c, k) for c in (0.9, 0.95, 0.99, 1 - 1e-6)
                    for k in (3, 4, 8, 16, 64, 1024)})


def _same(a: object, b: object) -> bool:
    return bool(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True))


def test_normal_isf_is_scipys() -> None:
    for q in _QS:
        assert _same(normal_isf(q), sps.norm.isf(q)), q


def test_chi2_isf_is_scipys_and_inverts_chi2_sf() -> None:
    """The drift audit's critical value, which a re-estimate is sized to."""
    for dof in (1, 2, 3, 7, 15):
        for level in (1e-6, 0.001, 0.01, 0.05, 0.1, 0.5):
            x = chi2_isf(level, dof)
            assert x == pytest.approx(float(sps.chi2.isf(level, dof)), rel=1e-12), (level, dof)
            assert chi2_sf(x, dof) == pytest.approx(level, rel=1e-9), (level, dof)


def _scipy_clopper_pearson(x: np.ndarray, n: int, confidence: float
                           ) -> tuple[np.ndarray, np.ndarray]:
    # capwatch's interval as it was written over scipy.stats (main before this change).
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore"):
        lo = np.where(x > 0, sps.beta.ppf(alpha / 2.0, x, n - x + 1.0), 0.0)
        hi = np.where(x < n, sps.beta.ppf(1.0 - alpha / 2.0, x + 1.0, n - x), 1.0)
    return lo, hi


@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 30, 100, 1_000, 10**4, 10**6, 10**9, 10**12])
def test_clopper_pearson_is_scipys_beta_ppf(n: int) -> None:
    xs = np.array(sorted({x for x in [0, 1, 2, 3, n // 3, n // 2, n - 3, n - 2, n - 1, n,
                                      *range(min(n, 40))] if 0 <= x <= n}), dtype=np.float64)
    for level in _LEVELS:
        with np.errstate(invalid="ignore"):
            got = clopper_pearson_interval(xs, n, level)
        want = _scipy_clopper_pearson(xs, n, level)
        assert _same(got[0], want[0]) and _same(got[1], want[1]), (n, level)


def test_beta_quantile_differs_from_scipys_only_beyond_any_level() -> None:
    # At a tail of 1e-100 and below scipy's beta.ppf gives up its root finding (with a
    # warning) and returns a value whose tail is not q; betaincinv's is. No confidence a
    # monitor uses comes near: levels down to 1e-30 are identical above.
    from scipy import special
    q, a, b = 1e-100, 2.0, 4.0
    x = special.betaincinv(a, b, q)
    assert special.betainc(a, b, x) == pytest.approx(q, rel=1e-6)


def test_wilson_uses_scipys_normal_quantile() -> None:
    xs = np.arange(0, 31, dtype=np.float64)
    for level in _LEVELS:
        z = sps.norm.isf((1.0 - level) / 2.0)
        if not np.isfinite(z):
            continue
        lo, hi = wilson_interval(xs, 30, level)
        centre = (xs + z * z / 2.0) / (30 + z * z)
        half = z / (30 + z * z) * np.sqrt(xs * (30 - xs) / 30 + z * z / 4.0)
        assert _same(lo, np.clip(centre - half, 0.0, 1.0)), level
        assert _same(hi, np.clip(centre + half, 0.0, 1.0)), level


@pytest.mark.parametrize("dof", [1, 2, 3, 7, 30, 1_000, 10**6, 10**9])
def test_chi2_sf_is_scipys(dof: int) -> None:
    for stat in [0.0, 1e-12, 0.5, 1.0, dof / 2, dof - 1, dof, dof + 3 * dof**0.5, 10 * dof,
                 1e12, np.inf]:
        assert _same(chi2_sf(stat, dof), sps.chi2.sf(stat, dof)), (stat, dof)


def _p_values(rng: np.random.Generator, m: int) -> np.ndarray:
    ps: np.ndarray = rng.random(m) ** float(rng.choice([1.0, 3.0, 10.0]))
    if m > 2:
        # Ties (repeated p-values, exact zeros and ones) as a chi-square's sf gives them.
        idx = rng.integers(0, m, size=m // 3)
        ps[idx] = ps[rng.integers(0, m)]
        ps[rng.integers(0, m)] = 0.0
        ps[rng.integers(0, m)] = 1.0
    return ps


@pytest.mark.parametrize("dependent", [False, True])
def test_fdr_adjustment_is_scipys(dependent: bool) -> None:
    rng = np.random.default_rng(13)
    method = "by" if dependent else "bh"
    for m in [0, 1, 2, 3, 5, 17, 100, 1_000, 20_000]:
        for _ in range(5 if m < 1_000 else 2):
            ps = _p_values(rng, m)
            want = sps.false_discovery_control(ps, method=method)
            assert _same(fdr_adjusted(ps, dependent=dependent), want), m
            rejected, adjusted = benjamini_hochberg(ps, 0.05, dependent=dependent)
            assert _same(adjusted, want) and _same(rejected, want <= 0.05)
    rounded = np.round(rng.random(500), 2)
    assert _same(fdr_adjusted(rounded), sps.false_discovery_control(rounded))


@pytest.mark.parametrize("bad", [[0.1, np.nan, 0.3], [0.2, 1.5], [-0.1, 0.5], [np.nan]])
def test_fdr_adjustment_refuses_what_scipy_refuses(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        sps.false_discovery_control(bad)
    with pytest.raises(ValueError):
        fdr_adjusted(bad)
