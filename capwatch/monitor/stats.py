"""Goodness-of-fit statistics for outcome frequencies: pure functions over counts.

Everything here takes count vectors and model probabilities and returns plain values,
so the same code serves the online monitor, the periodic fleet audit, the query-based
estimator and the benchmark. See docs/drift-detection.md for the choices made here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import special

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

IntervalMethod = Literal["wilson", "clopper-pearson"]
GofMethod = Literal["pearson", "exact", "pooled-pearson", "pooled-exact", "insufficient"]

MIN_EXPECTED = 5.0
"""Cochran's rule: the chi-square approximation is trusted when every expected count is ≥ 5."""

EXACT_LIMIT = 200_000
"""Largest number of count vectors the exact multinomial test enumerates."""


def _as_counts(counts: Sequence[int] | npt.ArrayLike) -> IntArray:
    c = np.asarray(counts, dtype=np.int64)
    if c.ndim != 1 or c.size == 0:
        raise ValueError("counts must be a non-empty 1-d vector")
    if (c < 0).any():
        raise ValueError("counts must be non-negative")
    return c


def _as_probs(probs: Sequence[float] | npt.ArrayLike, k: int) -> FloatArray:
    p = np.asarray(probs, dtype=np.float64)
    if p.shape != (k,):
        raise ValueError(f"expected {k} probabilities, got shape {p.shape}")
    if (p <= 0).any() or not math.isclose(float(p.sum()), 1.0, abs_tol=1e-6):
        raise ValueError("model probabilities must be positive and sum to 1")
    return np.asarray(p / p.sum(), dtype=np.float64)


# --------------------------------------------------------------------------- intervals


# The quantiles below call scipy.special's functions, the very ones scipy.stats' methods
# evaluate (norm.isf is -ndtri; beta.ppf agrees with betaincinv wherever a level can
# take it, tests/monitor/test_stats_special.py): importing scipy.stats cost every
# replica ~50 MB of RSS and ~0.45 s of CPU for a handful of calls (docs/performance.md,
# "SciPy's stats left out of the daemon").


def normal_isf(q: float) -> float:
    """Upper ``q`` quantile of the standard normal, as ``scipy.stats.norm.isf(q)``."""
    return -float(special.ndtri(q))


def wilson_interval(successes: npt.ArrayLike, n: int, confidence: float = 0.95
                    ) -> tuple[FloatArray, FloatArray]:
    """Wilson score interval for binomial proportions (vectorised over ``successes``)."""
    x = np.asarray(successes, dtype=np.float64)
    if n <= 0:
        return np.zeros_like(x), np.ones_like(x)
    z = normal_isf((1.0 - confidence) / 2.0)
    z2 = z * z
    centre = (x + z2 / 2.0) / (n + z2)
    half = z / (n + z2) * np.sqrt(x * (n - x) / n + z2 / 4.0)
    return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)


def clopper_pearson_interval(successes: npt.ArrayLike, n: int, confidence: float = 0.95
                             ) -> tuple[FloatArray, FloatArray]:
    """Exact (Clopper–Pearson) interval: coverage is at least ``confidence`` for every p."""
    x = np.asarray(successes, dtype=np.float64)
    if n <= 0:
        return np.zeros_like(x), np.ones_like(x)
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore"):
        lo = np.where(x > 0, special.betaincinv(x, n - x + 1.0, alpha / 2.0), 0.0)
        hi = np.where(x < n, special.betaincinv(x + 1.0, n - x, 1.0 - alpha / 2.0), 1.0)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


def proportion_interval(successes: npt.ArrayLike, n: int, confidence: float = 0.95,
                        method: IntervalMethod = "wilson") -> tuple[FloatArray, FloatArray]:
    if method == "wilson":
        return wilson_interval(successes, n, confidence)
    if method == "clopper-pearson":
        return clopper_pearson_interval(successes, n, confidence)
    raise ValueError(f"unknown interval method {method!r}")


def simultaneous_level(confidence: float, k: int) -> float:
    """Per-outcome level so that all ``k`` outcome intervals hold together (Bonferroni).

    With two outcomes the two intervals are the same event (p and 1 − p), so no
    correction is needed; with more, Bonferroni over the k outcomes.
    """
    if k <= 2:
        return confidence
    return 1.0 - (1.0 - confidence) / k


# --------------------------------------------------------------------------- chi-square


@dataclass(frozen=True, slots=True)
class GofResult:
    """A goodness-of-fit test of observed outcome counts against model probabilities."""

    statistic: float
    """Pearson's X² over the cells actually tested (after pooling)."""
    dof: int
    p_value: float
    method: GofMethod
    n: int
    counts: tuple[int, ...]
    expected: tuple[float, ...]
    """Expected counts per outcome (before pooling), n × p_i."""
    cells: tuple[tuple[int, ...], ...]
    """Outcome indices that form each tested cell; a cell of several indices was pooled."""

    @property
    def tested(self) -> bool:
        return self.method != "insufficient"


def chi2_sf(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square distribution.

    The same special function ``scipy.stats.chi2.sf`` and ``scipy.stats.chisquare``
    evaluate, called directly: a fleet audit runs thousands of tests and the frozen
    distribution machinery costs ~50× the arithmetic.
    """
    return float(special.chdtrc(dof, statistic))


def chi2_isf(level: float, dof: int) -> float:
    """The chi-square statistic of ``dof`` degrees of freedom whose upper tail is ``level``
    (``scipy.stats.chi2.isf``): the critical value of a test at ``level``."""
    return float(special.chdtri(dof, level))


def max_pearson_over_box(low: Sequence[float] | npt.ArrayLike,
                         high: Sequence[float] | npt.ArrayLike,
                         model: Sequence[float] | npt.ArrayLike, n: int) -> float:
    """The largest Pearson statistic of ``n`` observations' expected counts, n·q, against
    ``model`` over every distribution q in the box [low, high] on the simplex.

    That is the non-centrality of a chi-square test of ``model`` on ``n`` draws from q:
    the statistic its expected counts would give. X²(q) = n Σ (q_i − m_i)² / m_i is convex
    in q, so its maximum over the polytope box ∩ simplex lies at a vertex, where every
    coordinate but at most one sits at a bound of its interval and that one is fixed by
    Σ q = 1: k · 2^(k−1) candidates, enumerated up to 12 outcomes. Beyond, the box's
    maximum without the simplex (each coordinate at its farther bound) bounds it above.
    """
    lo = np.asarray(low, dtype=np.float64)
    hi = np.asarray(high, dtype=np.float64)
    m = np.asarray(model, dtype=np.float64)
    k = m.size
    if lo.shape != (k,) or hi.shape != (k,):
        raise ValueError("one interval per outcome is required")
    if (m <= 0).any():
        raise ValueError("model probabilities must be positive")
    far = np.maximum((lo - m) ** 2, (hi - m) ** 2)
    loose = float(n * (far / m).sum())
    if k > 12 or k < 2:
        return loose
    best = -1.0
    masks = ((np.arange(2 ** (k - 1))[:, None] >> np.arange(k - 1)) & 1).astype(bool)
    for free in range(k):
        others = [i for i in range(k) if i != free]
        q = np.where(masks, hi[others], lo[others])
        rest = 1.0 - q.sum(axis=1)
        ok = (rest >= lo[free] - 1e-12) & (rest <= hi[free] + 1e-12)
        if not ok.any():
            continue
        dev = ((q[ok] - m[others]) ** 2 / m[others]).sum(axis=1) \
            + (rest[ok] - m[free]) ** 2 / m[free]
        best = max(best, float(dev.max()))
    # No vertex only when rounding leaves the box off the simplex: the loose bound holds.
    return n * best if best >= 0.0 else loose


def pearson_statistic(counts: npt.ArrayLike, expected: npt.ArrayLike) -> float:
    c = np.asarray(counts, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return float(((c - e) ** 2 / e).sum())


def compositions(n: int, k: int) -> IntArray:
    """Every vector of ``k`` non-negative integers summing to ``n`` (stars and bars)."""
    if k == 1:
        return np.array([[n]], dtype=np.int64)
    if k == 2:
        first = np.arange(n + 1, dtype=np.int64)
        return np.stack([first, n - first], axis=1)
    bars = np.array(list(itertools.combinations(range(n + k - 1), k - 1)), dtype=np.int64)
    edges = np.concatenate(
        [np.full((len(bars), 1), -1), bars, np.full((len(bars), 1), n + k - 1)], axis=1
    )
    return np.diff(edges, axis=1) - 1


def exact_multinomial_test(counts: Sequence[int] | npt.ArrayLike,
                           probs: Sequence[float] | npt.ArrayLike) -> tuple[float, float]:
    """Exact p-value of Pearson's X²: P_H0(X² ≥ observed), summed over all count vectors.

    Ordering by X² (rather than by probability) makes this the exact version of the
    same test that the chi-square approximation approximates, so switching between the
    two at the small-count boundary does not change what is being tested.
    """
    c = _as_counts(counts)
    k = c.size
    p = _as_probs(probs, k)
    n = int(c.sum())
    if math.comb(n + k - 1, k - 1) > 4 * EXACT_LIMIT:
        raise ValueError(f"exact test over n={n}, k={k} is too large to enumerate")
    x = compositions(n, k)
    e = n * p
    stats = ((x - e) ** 2 / e).sum(axis=1)
    observed = pearson_statistic(c, e)
    logpmf = (special.gammaln(n + 1) - special.gammaln(x + 1).sum(axis=1)
              + (x * np.log(p)).sum(axis=1))
    # Ties in X² are common on a lattice: compare with a relative tolerance so that
    # float noise does not drop the observed vector's own probability mass.
    at_least = stats >= observed - 1e-9 * max(1.0, observed)
    p_value = float(np.exp(logpmf[at_least]).sum())
    return observed, min(1.0, p_value)


def _pool(expected: FloatArray, min_expected: float) -> list[list[int]]:
    """Merge the cells with the smallest expected counts until all reach ``min_expected``.

    Small cells are merged with each other first, so a rare outcome keeps its own cell
    for as long as the data allow it; pooling stops at two cells.
    """
    cells = [[i] for i in np.argsort(expected, kind="stable")]
    sums = [float(expected[c[0]]) for c in cells]
    while len(cells) > 2 and sums[0] < min_expected:
        merged = cells[0] + cells[1]
        total = sums[0] + sums[1]
        cells = cells[2:]
        sums = sums[2:]
        pos = int(np.searchsorted(np.array(sums), total))
        cells.insert(pos, merged)
        sums.insert(pos, total)
    return [sorted(c) for c in sorted(cells, key=min)]


def chi_square_gof(counts: Sequence[int] | npt.ArrayLike, probs: Sequence[float] | npt.ArrayLike,
                   *, min_samples: int = 100, min_expected: float = MIN_EXPECTED,
                   exact_limit: int = EXACT_LIMIT) -> GofResult:
    """Pearson goodness of fit with k − 1 degrees of freedom and guarded small counts.

    ``probs`` are the model's outcome probabilities (all > 0, so k is the number of
    outcomes with p > 0). The rule, in order:

    - fewer than ``min_samples`` observations: no test (``method="insufficient"``);
    - every expected count ≥ ``min_expected``: scipy's chi-square, k − 1 dof;
    - otherwise, if the count vectors can be enumerated (≤ ``exact_limit``): the exact
      multinomial test of the same statistic;
    - otherwise pool the smallest cells until each expects ≥ ``min_expected`` (or two
      cells remain), then chi-square on the pooled cells, or the exact test on them if
      two cells still have a small expected count.
    """
    c = _as_counts(counts)
    k = c.size
    p = _as_probs(probs, k)
    n = int(c.sum())
    expected = n * p
    all_cells = tuple((i,) for i in range(k))

    def result(stat: float, dof: int, pv: float, method: GofMethod,
               cells: tuple[tuple[int, ...], ...] = all_cells) -> GofResult:
        return GofResult(stat, dof, pv, method, n, tuple(int(v) for v in c),
                         tuple(float(v) for v in expected), cells)

    if k < 2 or n < max(1, min_samples):
        return result(0.0, max(k - 1, 0), 1.0, "insufficient")
    if (expected >= min_expected).all():
        stat = pearson_statistic(c, expected)
        return result(stat, k - 1, chi2_sf(stat, k - 1), "pearson")
    if math.comb(n + k - 1, k - 1) <= exact_limit:
        stat, pv = exact_multinomial_test(c, p)
        return result(stat, k - 1, pv, "exact")
    cells = _pool(expected, min_expected)
    pc = np.array([c[idx].sum() for idx in cells], dtype=np.int64)
    pp = np.array([p[idx].sum() for idx in cells])
    pe = n * pp
    cell_t = tuple(tuple(int(i) for i in idx) for idx in cells)
    if (pe >= min_expected).all():
        stat = pearson_statistic(pc, pe)
        return result(stat, len(cells) - 1, chi2_sf(stat, len(cells) - 1), "pooled-pearson",
                      cell_t)
    stat, pv = exact_multinomial_test(pc, pp)
    return result(stat, len(cells) - 1, pv, "pooled-exact", cell_t)


def homogeneity_p_value(a: Sequence[int], b: Sequence[int]) -> float:
    """Pearson's chi-square test that two samples of counts over the same outcomes come
    from one distribution (a 2 x k contingency table): its p-value.

    Outcomes neither sample saw are left out (they tell nothing); 1.0 when either sample
    is empty or fewer than two outcomes were seen, and 0.0 when the samples are over
    different numbers of outcomes (not the same action: they cannot be one distribution).
    The approximation wants every expected count >= 5; with fewer it errs towards
    telling the samples apart (a smaller p-value), which its caller (the back-off of a
    drift not confirmed) takes as a drift of its own, to be assessed: the safe side.
    """
    if len(a) != len(b):
        return 0.0
    na, nb = sum(a), sum(b)
    if na <= 0 or nb <= 0:
        return 1.0
    n = na + nb
    stat = 0.0
    seen = 0
    for x, y in zip(a, b, strict=True):
        col = x + y
        if col <= 0:
            continue
        seen += 1
        ea, eb = na * col / n, nb * col / n
        stat += (x - ea) ** 2 / ea + (y - eb) ** 2 / eb
    if seen < 2:
        return 1.0
    return chi2_sf(stat, seen - 1)


# --------------------------------------------------------------------------- effect size


@dataclass(frozen=True, slots=True)
class TvdEstimate:
    """Total variation distance between the observed and the model distribution."""

    value: float
    """Plug-in ½ Σ |p̂_i − p_i|."""
    low: float
    high: float
    confidence: float


def total_variation(p: npt.ArrayLike, q: npt.ArrayLike) -> float:
    diff = np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)
    return 0.5 * float(np.abs(diff).sum())


def _max_tvd_over_box(lo: FloatArray, hi: FloatArray, p: FloatArray) -> float:
    # TVD(q, p) = max over events S of q(S) − p(S); for a fixed S the largest q(S) in
    # box ∩ simplex is min(Σ_S hi, 1 − Σ_{not S} lo), so enumerate the events.
    k = p.size
    if k > 16:
        # 2^k events would be too many; fall back to the looser but valid Σ max(hi−p, p−lo)/2.
        return float(min(1.0, 0.5 * np.maximum(hi - p, p - lo).sum()))
    masks = ((np.arange(1, 2 ** k - 1)[:, None] >> np.arange(k)) & 1).astype(bool)
    s_hi = (masks * hi).sum(axis=1)
    not_lo = (~masks * lo).sum(axis=1)
    s_p = (masks * p).sum(axis=1)
    return float(max(0.0, np.max(np.minimum(s_hi, 1.0 - not_lo) - s_p)))


def _min_tvd_over_box(lo: FloatArray, hi: FloatArray, p: FloatArray) -> float:
    # For q and p on the simplex, TVD = Σ (q − p)⁺ = Σ (p − q)⁺. In the box, an outcome
    # whose model probability is below lo adds at least lo − p to the first sum (U in all),
    # one above hi at least p − hi to the second (D): TVD ≥ max(U, D). The bound is met:
    # clip p to the box, then take the surplus |U − D| from (or give it to) the outcomes
    # left at their p, which have the room (Σ lo ≤ 1 ≤ Σ hi). A linear program (HiGHS,
    # ~3 ms an alarm) found the same minimum to its tolerance.
    above = float(np.maximum(lo - p, 0.0).sum())
    below = float(np.maximum(p - hi, 0.0).sum())
    return max(above, below)


def tvd_interval(counts: Sequence[int] | npt.ArrayLike, probs: Sequence[float] | npt.ArrayLike,
                 confidence: float = 0.95) -> TvdEstimate:
    """TVD between the true outcome distribution and the model, with a confidence interval.

    The interval is the range of TVD(q, p) over every q in a simultaneous confidence box
    for the true distribution: Clopper–Pearson per outcome at the Bonferroni level
    (``simultaneous_level``), intersected with the simplex. If the true q is in the box,
    which happens with probability ≥ ``confidence``, its TVD lies in the interval, so the
    coverage holds for every n without bootstrap or asymptotics (it is conservative).
    """
    c = _as_counts(counts)
    k = c.size
    p = _as_probs(probs, k)
    n = int(c.sum())
    if n == 0:
        return TvdEstimate(0.0, 0.0, float(1.0 - p.min()), confidence)
    phat = c / n
    lo, hi = clopper_pearson_interval(c, n, simultaneous_level(confidence, k))
    return TvdEstimate(total_variation(phat, p), _min_tvd_over_box(lo, hi, p),
                       _max_tvd_over_box(lo, hi, p), confidence)


# --------------------------------------------------------------------------- multiplicity


def benjamini_hochberg(p_values: Sequence[float] | npt.ArrayLike, q: float = 0.05,
                       *, dependent: bool = False) -> tuple[npt.NDArray[np.bool_], FloatArray]:
    """Benjamini–Hochberg step-up: (rejected mask, adjusted p-values a.k.a. q-values).

    ``dependent=True`` uses Benjamini–Yekutieli, valid under arbitrary dependence
    (for instance overlapping sliding windows of one stream tested at many times).
    """
    adjusted = fdr_adjusted(p_values, dependent=dependent)
    return adjusted <= q, adjusted


def fdr_adjusted(p_values: Sequence[float] | npt.ArrayLike, *, dependent: bool = False
                 ) -> FloatArray:
    """Benjamini–Hochberg (or –Yekutieli) adjusted p-values of a 1-d vector, in its order.

    The same arithmetic, in the same order, as ``scipy.stats.false_discovery_control``
    (so the same floats): sorted p_(i) · m / i (· Σ 1/i for BY), the running minimum
    from the largest down, clipped to [0, 1]. A p-value outside [0, 1] (NaN too) is an
    error, as there.
    """
    ps = np.asarray(p_values, dtype=np.float64)
    if ps.ndim != 1:
        raise ValueError("p-values must be a 1-d vector")
    if not ((ps >= 0.0) & (ps <= 1.0)).all():
        raise ValueError("p-values must be numbers between 0 and 1")
    m = ps.size
    if m <= 1:
        return ps.copy()
    order = np.argsort(ps)
    ranks = np.arange(1, m + 1, dtype=np.float64)
    adjusted = ps[order] * (m / ranks)
    if dependent:
        adjusted *= np.sum(1.0 / ranks)
    np.minimum.accumulate(adjusted[::-1], out=adjusted[::-1])
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return np.asarray(np.clip(out, 0.0, 1.0), dtype=np.float64)


# --------------------------------------------------------------------------- estimation


@dataclass(frozen=True, slots=True)
class MultinomialEstimate:
    """MLE of outcome probabilities with a per-outcome confidence interval."""

    probabilities: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    n: int
    counts: tuple[int, ...]
    confidence: float
    """Per-outcome level of each interval."""
    method: IntervalMethod

    @property
    def half_widths(self) -> tuple[float, ...]:
        return tuple((h - lo) / 2.0 for lo, h in zip(self.low, self.high, strict=True))

    def covers(self, truth: Sequence[float]) -> bool:
        """Whether every true probability lies inside its interval."""
        return all(lo - 1e-12 <= t <= h + 1e-12
                   for lo, t, h in zip(self.low, truth, self.high, strict=True))


def multinomial_mle(counts: Sequence[int] | npt.ArrayLike, confidence: float = 0.95,
                    method: IntervalMethod = "wilson", *, simultaneous: bool = False
                    ) -> MultinomialEstimate:
    """p̂_i = n_i / n with a Wilson or Clopper–Pearson interval per outcome.

    ``simultaneous=True`` widens each interval (Bonferroni) so that all of them hold
    together with probability ≥ ``confidence``.
    """
    c = _as_counts(counts)
    n = int(c.sum())
    level = simultaneous_level(confidence, c.size) if simultaneous else confidence
    lo, hi = proportion_interval(c, n, level, method)
    phat = c / n if n else np.full(c.size, np.nan)
    return MultinomialEstimate(tuple(float(v) for v in phat), tuple(float(v) for v in lo),
                               tuple(float(v) for v in hi), n, tuple(int(v) for v in c),
                               level, method)
