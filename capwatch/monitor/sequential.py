"""Sequential change detection on outcome frequencies with a guaranteed false-alarm rate.

The online detector is a mixture Shiryaev–Roberts procedure. For every alternative
distribution q_j in a finite family and every candidate change point, it accumulates
the likelihood ratio of "the outcomes since then came from q_j" against "they came
from the model's p". Per alternative the Shiryaev–Roberts statistic obeys

    R_n = (1 + R_{n-1}) · q_j(x_n) / p(x_n),    R_0 = 0,

and R_n − n is a martingale when the model is right. So is Σ_j w_j R_n^j − n for
weights w_j summing to 1, and optional stopping at the first n with Σ_j w_j R_n^j ≥ A
gives E[time to false alarm] ≥ A, for any data length and without asymptotics. With a
restart after each alarm that is at most one false alarm per A observations in the
long run: ``false_alarm_rate = 1 / A``.

The family is an exponential tilt of one outcome at a time: q ∝ p · exp(d · 1[x = i])
for a geometric grid of log-odds shifts d of both signs. That family contains "outcome
i became more (less) likely, the others kept their ratios", which is what a slipping
gripper or a worn tyre looks like; any other change still has a positive expected
log-likelihood ratio against the nearest member, it is only detected more slowly.

Observations in which some outcomes are indistinguishable enter with the likelihood
of their whole group, q(S) / p(S), which keeps the martingale property because the
grouping is fixed by the pre-state before the outcome is drawn.

Everything is vectorised over a leading stream axis so the benchmark runs the very
same arithmetic on thousands of simulated streams at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy import sparse
from scipy.sparse import linalg as sparse_linalg
from scipy.special import logsumexp

from capwatch.monitor.attribution import Attribution

FloatArray = npt.NDArray[np.float64]

DEFAULT_LOGIT_SHIFTS: tuple[float, ...] = tuple(round(0.08 * 1.4**m, 4) for m in range(12))
"""|d| from 0.08 to 3.2 log-odds; neighbours 1.4× apart lose only a few percent of the
per-step evidence to grid mismatch, and 24 alternatives per outcome cost log(24) ≈ 3.2
nats of extra threshold."""

PROBABILITY_CLIP = 1e-6


def tilted_alternatives(p0: Sequence[float] | npt.ArrayLike,
                        shifts: Sequence[float] = DEFAULT_LOGIT_SHIFTS
                        ) -> tuple[FloatArray, FloatArray]:
    """Alternative distributions (G, k) and their log weights (G,), uniform and deduplicated.

    With two outcomes, tilting outcome 0 up is tilting outcome 1 down, so duplicates are
    removed before weighting: weight is spread over distinct alternatives only.
    """
    p = np.asarray(p0, dtype=np.float64)
    k = p.size
    if k < 2:
        raise ValueError("a drift test needs at least two outcomes")
    logp = np.log(p)
    rows = []
    for i in range(k):
        for d in shifts:
            for sign in (1.0, -1.0):
                logq = logp.copy()
                logq[i] += sign * d
                q = np.exp(logq - logsumexp(logq))
                rows.append(np.clip(q, PROBABILITY_CLIP, 1.0))
    q_all = np.array(rows)
    q_all /= q_all.sum(axis=1, keepdims=True)
    _, first = np.unique(np.round(q_all, 10), axis=0, return_index=True)
    q_unique = q_all[np.sort(first)]
    logw = np.full(len(q_unique), -math.log(len(q_unique)))
    return q_unique, logw


def llr_table(p0: npt.ArrayLike, alternatives: FloatArray) -> FloatArray:
    """log(q_j(i) / p(i)) as a (G, k) table: the per-observation evidence for each alternative."""
    return np.asarray(np.log(alternatives) - np.log(np.asarray(p0, dtype=np.float64)),
                      dtype=np.float64)


def block_llr(p0: FloatArray, alternatives: FloatArray, block: Sequence[int]) -> FloatArray:
    idx = list(block)
    return np.asarray(np.log(alternatives[:, idx].sum(axis=1)) - math.log(float(p0[idx].sum())),
                      dtype=np.float64)


def sr_step(log_r: FloatArray, llr: FloatArray) -> FloatArray:
    """One Shiryaev–Roberts update in log space: log R ← log(1 + R) + llr."""
    return np.asarray(np.logaddexp(0.0, log_r) + llr, dtype=np.float64)


def mixture_log_statistic(log_r: FloatArray, logw: FloatArray) -> FloatArray:
    """log Σ_j w_j R^j over the last axis."""
    return np.asarray(logsumexp(log_r + logw, axis=-1), dtype=np.float64)


def threshold_for_rate(false_alarm_rate: float) -> float:
    """log A for a long-run rate of at most ``false_alarm_rate`` false alarms per observation."""
    if not 0.0 < false_alarm_rate < 1.0:
        raise ValueError("false_alarm_rate must be in (0, 1)")
    return -math.log(false_alarm_rate)


class SequentialDetector:
    """Mixture Shiryaev–Roberts change detector for one (agent, lifted action) stream.

    ``update`` returns True on an alarm and then restarts itself, so a persisting
    change raises one alarm per fresh batch of evidence rather than one per step;
    the owner normally calls ``reset`` with the re-estimated probabilities instead.
    """

    __slots__ = ("_cusum", "_llr", "_log_r", "_logw", "_start", "alternatives", "log_threshold",
                 "n", "p0")

    def __init__(self, probabilities: Sequence[float], *, false_alarm_rate: float = 1e-5,
                 shifts: Sequence[float] = DEFAULT_LOGIT_SHIFTS) -> None:
        self.log_threshold = threshold_for_rate(false_alarm_rate)
        self.p0 = np.asarray(probabilities, dtype=np.float64)
        self.alternatives, self._logw = tilted_alternatives(self.p0, shifts)
        self._llr = llr_table(self.p0, self.alternatives)
        g = len(self.alternatives)
        self._log_r = np.full(g, -np.inf)
        self._cusum = np.zeros(g)
        self._start = np.zeros(g, dtype=np.int64)
        self.n = 0
        """Observations since the last (re)start."""

    def restart(self) -> None:
        self._log_r.fill(-np.inf)
        self._cusum.fill(0.0)
        self._start.fill(0)
        self.n = 0

    def _evidence(self, obs: int | Attribution) -> FloatArray:
        if isinstance(obs, int):
            return self._llr[:, obs]
        if obs.distinguishable:
            return self._llr[:, obs.explaining[0]]
        return block_llr(self.p0, self.alternatives, obs.explaining)

    def update(self, obs: int | Attribution) -> bool:
        """Feed one observation (an outcome index or an attribution); True means alarm."""
        llr = self._evidence(obs)
        self._log_r = sr_step(self._log_r, llr)
        # Per-alternative CUSUMs ride along only to say where the change most likely began.
        w = self._cusum + llr
        fresh = w <= 0.0
        self._cusum = np.where(fresh, 0.0, w)
        self._start = np.where(fresh, self.n + 1, self._start)
        self.n += 1
        return self.log_statistic >= self.log_threshold

    @property
    def log_statistic(self) -> float:
        return float(mixture_log_statistic(self._log_r, self._logw))

    @property
    def change_point(self) -> int:
        """Estimated index (since restart) of the first post-change observation."""
        return int(self._start[int(np.argmax(self._cusum))])

    @property
    def best_alternative(self) -> tuple[float, ...]:
        j = int(np.argmax(self._log_r + self._logw))
        return tuple(float(v) for v in self.alternatives[j])


# --------------------------------------------------------------------------- CUSUM


def cusum_arl(llr: Sequence[float], probs: Sequence[float], threshold: float,
              cells: int = 2000) -> float:
    """Average run length of a CUSUM W ← max(0, W + llr(x)) to reach ``threshold``.

    Brook & Evans' Markov-chain method: W is discretised on ``cells`` grid points,
    each step moves to the nearest grid point (or is absorbed at the threshold), and
    the expected absorption time from W = 0 solves (I − P) L = 1. Use the in-control
    ``probs`` for ARL₀ (time to false alarm), the post-change ones for the delay.
    """
    values = np.asarray(llr, dtype=np.float64)
    pr = np.asarray(probs, dtype=np.float64)
    if threshold <= 0:
        return 1.0
    step = threshold / cells
    grid = np.arange(cells) * step
    rows, cols, data = [], [], []
    for v, p in zip(values, pr, strict=True):
        if p <= 0:
            continue
        nxt = grid + v
        inside = nxt < threshold
        target = np.clip(np.rint(np.maximum(nxt, 0.0) / step), 0, cells - 1).astype(np.int64)
        rows.append(np.nonzero(inside)[0])
        cols.append(target[inside])
        data.append(np.full(int(inside.sum()), p))
    transition = sparse.csr_matrix(
        (np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(cells, cells)
    )
    system = sparse.identity(cells, format="csr") - transition
    arl = sparse_linalg.spsolve(system.tocsc(), np.ones(cells))
    return float(arl[0])


def cusum_threshold_for_arl(llr: Sequence[float], probs: Sequence[float], arl: float,
                            cells: int = 2000) -> float:
    """The CUSUM threshold whose in-control average run length is ``arl`` (bisection)."""
    lo, hi = 0.0, max(1.0, math.log(arl) + 2.0)
    while cusum_arl(llr, probs, hi, cells) < arl:
        lo, hi = hi, hi * 1.5
    for _ in range(40):
        mid = (lo + hi) / 2.0
        if cusum_arl(llr, probs, mid, cells) < arl:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-4:
            break
    return hi
