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

import functools
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from scipy.special import logsumexp

from capwatch.monitor.attribution import Attribution

FloatArray = npt.NDArray[np.float64]
Row = tuple[FloatArray, FloatArray, float, int]
"""One observation's step: (llr, lr, largest lr) over the alternatives, and the outcome
whose row of the tables' llr and lr they are (-1: a block's, :func:`_block_rows`)."""

DEFAULT_LOGIT_SHIFTS: tuple[float, ...] = tuple(round(0.08 * 1.4**m, 4) for m in range(12))
"""|d| from 0.08 to 3.2 log-odds; neighbours 1.4× apart lose only a few percent of the
per-step evidence to grid mismatch, and 24 alternatives per outcome cost log(24) ≈ 3.2
nats of extra threshold."""

PROBABILITY_CLIP = 1e-6
_BOUND_SLACK: Final = 1.0 + 1e-12
"""Widens each step's bound on the mixture statistic past every rounding in it (the stored
R's two, the bound's own three: each under 1.2e-16 relative)."""
_DOT_SLACK: Final = 1.0 + 1e-9
"""A computed dot product of G non-negative terms is within G · 1.2e-16 of the exact sum,
in any order of summation and with or without fused multiply-adds: 1e-9 covers G up to
millions."""
_NEAR: Final = 1.0 + 3e-9
"""A bound this close below the threshold (over both of those slacks) may hide an alarm."""
_PACK_HEAD = struct.Struct("<q??")
WAITING_CAP = 32
"""Updates a detector holds back at most (:meth:`SequentialDetector.update`) before it
applies them itself: a detector nobody flushes or reads stays bounded. 0: every update
is applied at once (the code before waiting updates: the baseline of an A/B in one
process; statistics and alarms are the same either way)."""


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


def sr_step_linear(r: FloatArray, lr: FloatArray) -> FloatArray:
    """The same update on R itself, for batch simulation of many streams.

    Several times faster than the log-space form. Safe while every stream is restarted
    at its alarm: no single R_j can then exceed A · G · max(q/p), far from overflow.
    """
    return np.asarray((1.0 + r) * lr, dtype=np.float64)


def mixture_log_statistic(log_r: FloatArray, logw: FloatArray) -> FloatArray:
    """log Σ_j w_j R^j over the last axis."""
    return np.asarray(logsumexp(log_r + logw, axis=-1), dtype=np.float64)


def threshold_for_rate(false_alarm_rate: float) -> float:
    """log A for a long-run rate of at most ``false_alarm_rate`` false alarms per observation."""
    if not 0.0 < false_alarm_rate < 1.0:
        raise ValueError("false_alarm_rate must be in (0, 1)")
    return -math.log(false_alarm_rate)


def packed_detector_end(probabilities: Sequence[float], shifts: Sequence[float],
                        data: bytes | memoryview, at: int = 0) -> int:
    """Where the bytes ``SequentialDetector.pack`` made (for these probabilities and
    shifts) from ``at`` end, read from its header without building the detector."""
    rest = _PACK_HEAD.unpack_from(data, at)[2]
    at += _PACK_HEAD.size
    if rest:
        return at
    tables = _detector_tables(tuple(float(v) for v in probabilities), tuple(shifts))
    return at + 24 * len(tables[1])


@functools.lru_cache(maxsize=4096)
def _detector_tables(probabilities: tuple[float, ...], shifts: tuple[float, ...]
                     ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray,
                                tuple[Row, ...],
                                tuple[tuple[float, ...], tuple[float, ...]], float]:
    """p0, alternatives (G, k), weights (G,), llr (k, G), lr (k, G), read-only; each
    outcome's (llr, lr, largest lr, outcome) rows (a row taken once here is not a new view
    at every update); the arguments, one tuple shared by every detector that holds them; and a
    bound on the weights' sum (:meth:`SequentialDetector.update`)."""
    p0 = np.asarray(probabilities, dtype=np.float64)
    alternatives, logw = tilted_alternatives(p0, shifts)
    llr = np.ascontiguousarray(llr_table(p0, alternatives).T)
    lr = np.exp(llr)
    tables = (p0, alternatives, np.exp(logw), llr, lr)
    for t in tables:
        t.flags.writeable = False
    rows = tuple((llr[i], lr[i], float(lr[i].max()), i) for i in range(len(p0)))
    weight = math.fsum(tables[2].tolist()) * _BOUND_SLACK
    return (*tables, rows, (probabilities, shifts), weight)


@functools.lru_cache(maxsize=4096)
def _block_rows(probabilities: tuple[float, ...], shifts: tuple[float, ...],
                block: tuple[int, ...]) -> Row:
    """(llr, lr, largest lr, -1) of an observation that tells only ``block`` from the
    other outcomes: the same values :func:`block_llr` gives, computed once per group
    rather than per update (a log, a sum and an exp over the alternatives cost ~10 µs);
    -1: no row of the tables' llr and lr."""
    p0, alternatives = _detector_tables(probabilities, shifts)[:2]
    llr = block_llr(p0, alternatives, block)
    lr = np.exp(llr)
    llr.flags.writeable = lr.flags.writeable = False
    return llr, lr, float(lr.max()), -1


class SequentialDetector:
    """Mixture Shiryaev–Roberts change detector for one (agent, lifted action) stream.

    After an alarm the statistics stay readable (``log_statistic``, ``change_point``)
    until the next ``update``, which restarts the detector first; so a persisting change
    raises one alarm per fresh batch of evidence rather than one per step. The owner
    normally replaces the detector with one for the re-estimated probabilities instead.

    R is kept in linear space (one multiply-add per alternative per step, the hot path):
    the restart at each alarm bounds every R_j by A · G · max(q/p), far from overflow.
    """

    __slots__ = ("_alarmed", "_bound", "_cusum", "_key", "_llr", "_lr", "_r", "_rows",
                 "_start", "_state", "_threshold", "_w", "_waiting_from", "_weight", "alternatives",
                 "log_threshold", "n", "p0", "waiting")

    def __init__(self, probabilities: Sequence[float], *, false_alarm_rate: float = 1e-5,
                 shifts: Sequence[float] = DEFAULT_LOGIT_SHIFTS) -> None:
        if false_alarm_rate < 1e-100:
            raise ValueError("false_alarm_rate below 1e-100 is not supported")
        self.log_threshold = threshold_for_rate(false_alarm_rate)
        self._threshold = math.exp(self.log_threshold)
        # The tables depend only on the model's probabilities and the settings, so every
        # agent running the same action shares one read-only copy: building them costs
        # ~25 ms (hundreds of logsumexp calls) and a few KB, per agent and action before.
        (self.p0, self.alternatives, self._w, self._llr, self._lr, self._rows,
         self._key, self._weight) = _detector_tables(
            tuple(float(v) for v in probabilities), tuple(shifts))
        self._bound = 0.0
        """At least the exact mixture statistic Σ w_j R_j of the stored R (inf: unknown)."""
        g = len(self.alternatives)
        # R, the CUSUMs and their starts are the rows of one array, so waiting updates
        # of many detectors are gathered and put back with one copy each (apply_waiting);
        # the starts are whole numbers, exact in float64 below 2**53 observations.
        self._state = np.zeros((3, g))
        self._r = self._state[0]
        self._cusum = self._state[1]
        self._start = self._state[2]
        self._alarmed = False
        self.n = 0
        """Observations since the last (re)start (the waiting ones included)."""
        self.waiting: list[Row] = []
        """(llr, lr, largest lr, outcome) rows of the updates counted in ``n`` but not yet
        applied to R, the CUSUMs and their starts, oldest first (:meth:`update`); the first
        of them was observation ``_waiting_from``."""
        self._waiting_from = 0

    def restart(self) -> None:
        self.waiting.clear()
        self._alarmed = False
        self._state.fill(0.0)
        self._bound = 0.0
        self.n = 0

    def export_state(self, *, arrays: bool = False) -> dict[str, Any]:
        """The running statistics as plain values; the alternatives and threshold are
        recomputed from the probabilities and settings, so only their identity is kept.
        ``arrays``: ``r``, ``cusum`` and ``start`` as copies of the arrays rather than
        lists (for the packed snapshot, which packs them as arrays)."""
        self.settle()
        return {
            "p0": self.p0.tolist(),
            "log_threshold": self.log_threshold,
            "alternatives": len(self.alternatives),
            "r": self._r.copy() if arrays else self._r.tolist(),
            "cusum": self._cusum.copy() if arrays else self._cusum.tolist(),
            "start": self._start.astype(np.int64) if arrays
            else self._start.astype(np.int64).tolist(),
            "n": self.n,
            "alarmed": self._alarmed,
        }

    def pack(self) -> bytes:
        """The running statistics as bytes (see :meth:`unpack`); a detector at rest (just
        started or restarted) is its header alone."""
        self.settle()
        rest = self.n == 0 and not self._state.any()
        head = _PACK_HEAD.pack(self.n, self._alarmed, rest)
        if rest:
            return head
        # R, the CUSUMs and their starts in one copy of the array that holds them (the
        # starts as float64: whole numbers, exact below 2**53, read back into that very
        # array): one numpy call where three copies and a cast cost ~10,000 instructions
        # a table. The bytes stay in this process (packed tables, the checkpoint writer's
        # snapshot of them), never stored as such.
        return head + self._state.tobytes()

    def unpack(self, data: bytes | memoryview, at: int = 0) -> int:
        """Continue exactly where :meth:`pack` left off (a detector for the same
        probabilities and settings); returns where its bytes end."""
        n, alarmed, rest = _PACK_HEAD.unpack_from(data, at)
        at += _PACK_HEAD.size
        self.waiting.clear()
        g = len(self.alternatives)
        if rest:
            self.restart()
        else:
            self._state.flat[:] = np.frombuffer(data, np.float64, 3 * g, at)
            at += 24 * g
            self._bound = math.inf
        self.n = n
        self._alarmed = alarmed
        return at

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from ``export_state``'s values; raises ValueError when they belong to a
        detector with other probabilities, threshold or alternatives."""
        g = len(self.alternatives)
        if [float(v) for v in state["p0"]] != [float(v) for v in self.p0] \
                or float(state["log_threshold"]) != self.log_threshold \
                or int(state["alternatives"]) != g:
            raise ValueError("detector state belongs to other probabilities or settings")
        r = np.asarray(state["r"], dtype=np.float64)
        cusum = np.asarray(state["cusum"], dtype=np.float64)
        start = np.asarray(state["start"], dtype=np.int64)
        if r.shape != (g,) or cusum.shape != (g,) or start.shape != (g,):
            raise ValueError("detector state has the wrong number of alternatives")
        if not (np.isfinite(r).all() and np.isfinite(cusum).all()) or (r < 0).any():
            raise ValueError("detector state holds non-finite or negative statistics")
        self.waiting.clear()
        self._r[:] = r
        self._cusum[:] = cusum
        self._start[:] = start
        self._bound = math.inf
        self.n = int(state["n"])
        self._alarmed = bool(state["alarmed"])

    def update(self, obs: int | Attribution) -> bool:
        """Feed one observation (an outcome index or an attribution); True means alarm.

        An observation that cannot tell any outcome from another (all in one group) is
        skipped: it carries no evidence, yet Shiryaev–Roberts would still add 1 to R for
        it and so walk towards a certain false alarm.
        """
        if self._alarmed:
            self.restart()
        if isinstance(obs, int):
            row = self._rows[obs]
        elif obs.counted >= 0:  # every outcome told apart: the usual case
            row = self._rows[obs.counted]
        else:
            explaining = obs.explaining
            if len(explaining) == 1:
                row = self._rows[explaining[0]]
            elif len(explaining) == len(self.p0):
                return False
            else:
                row = _block_rows(*self._key, tuple(explaining))
        # Σ_j w_j (1 + R_j) lr_j ≤ max_j lr_j · (Σ_j w_j + Σ_j w_j R_j): while that bound
        # stays below the threshold (far from an alarm, most steps) the dot product is not
        # taken; the decision is the dot product's whenever it could go either way. The
        # bound does not read R, so an update it clears need not touch the arrays yet: it
        # waits, to be applied with the updates of other detectors of the same tables as
        # rows of one array (:func:`apply_waiting`), or with this detector's next update
        # the bound cannot clear, or before anything reads the statistics.
        bound = row[2] * (self._weight + self._bound) * _BOUND_SLACK
        waiting = self.waiting
        if bound * _NEAR < self._threshold:
            self._bound = bound
            cap = WAITING_CAP
            if cap > 0:
                if not waiting:
                    self._waiting_from = self.n
                waiting.append(row)  # the shared tables' own tuple: nothing is made
                self.n += 1
                if len(waiting) >= cap:
                    self.settle()
                return False
            if waiting:  # the cap was lowered to 0 meanwhile
                self.settle()
            self._step(row[0], row[1], self.n)
            self.n += 1
            return False
        if waiting:
            self.settle()
        self._step(row[0], row[1], self.n)
        self.n += 1
        # ndarray.dot: the same BLAS product as ``@`` (the same bits), without the
        # matmul ufunc's dispatch (~0.25 µs of a ~2.5 µs update).
        s = float(self._r.dot(self._w))
        self._bound = s * _DOT_SLACK
        self._alarmed = s >= self._threshold
        return self._alarmed

    def _step(self, llr: FloatArray, lr: FloatArray, n: int) -> None:
        """Apply observation ``n`` (counted from the restart) to R, the CUSUMs, their starts."""
        r = self._r
        r += 1.0
        r *= lr
        # Per-alternative CUSUMs ride along only to say where the change most likely began.
        c = self._cusum
        c += llr
        fresh = c <= 0.0
        c[fresh] = 0.0
        self._start[fresh] = n + 1

    def settle(self) -> None:
        """Apply the waiting updates, one by one, in order."""
        waiting = self.waiting
        if not waiting:
            return
        n = self._waiting_from
        for llr, lr, _, _ in waiting:
            self._step(llr, lr, n)
            n += 1
        waiting.clear()

    @property
    def log_statistic(self) -> float:
        self.settle()
        s = float(self._r @ self._w)
        return math.log(s) if s > 0 else -math.inf

    @property
    def change_point(self) -> int:
        """Estimated index (since restart) of the first post-change observation."""
        self.settle()
        return int(self._start[int(np.argmax(self._cusum))])

    @property
    def best_alternative(self) -> tuple[float, ...]:
        self.settle()
        j = int(np.argmax(self._r * self._w))
        return tuple(float(v) for v in self.alternatives[j])


def apply_waiting(detectors: Sequence[SequentialDetector]) -> None:
    """Apply every waiting update of ``detectors`` (any number, duplicates and settled
    ones allowed); those of one table's detectors are applied together, as the rows of
    one array per statistic, the t-th waiting update of each in one step.

    Bit for bit what each detector's own :meth:`SequentialDetector.settle` gives: the
    elementwise arithmetic is the same (each element's add, multiply, compare and store
    do not depend on the array's shape), and in each step every row applies its own
    waiting update to its own statistics. What it saves is the calls: a step costs ~8
    numpy calls whatever its rows, against ~6 per update applied alone.
    """
    groups: dict[int, list[SequentialDetector]] = {}
    for d in detectors:
        if d.waiting:
            group = groups.get(id(d._rows))
            if group is None:
                groups[id(d._rows)] = [d]
            elif group[-1] is not d:
                group.append(d)
    for group in groups.values():
        if len(group) == 1:
            group[0].settle()
        else:
            _apply_together(group)


def _apply_together(group: list[SequentialDetector]) -> None:
    # Duplicates left by a detector that settled and waited again in between.
    unique = list({id(d): d for d in group}.values())
    # Longest first, so the detectors still waiting at step t are the first rows.
    unique.sort(key=_waiting_count, reverse=True)
    m = len(unique)
    g = unique[0]._state.shape[1]
    # One C call each way: the statistics side by side, each one contiguous (m, g), so
    # every step's ufuncs run one inner loop over all rows.
    states = np.concatenate([d._state for d in unique], axis=1).reshape(3, m, g)
    rs, cs, ss = states[0], states[1], states[2]
    # One group shares its tables (apply_waiting groups by them).
    lr_table, llr_table = unique[0]._lr, unique[0]._llr
    rows = m
    t = 0
    while True:
        while rows and len(unique[rows - 1].waiting) <= t:
            rows -= 1
        if not rows:
            break
        steps = [d.waiting[t] for d in unique[:rows]]
        outcomes = [step[3] for step in steps]
        if min(outcomes) >= 0:
            # Rows of the tables (every step but an ambiguous observation's): taken by
            # index in one call each, where concatenating the rows cost ~0.4 us a row.
            lr_rows = lr_table.take(outcomes, axis=0)
            llr_rows = llr_table.take(outcomes, axis=0)
        else:
            lr_rows = np.concatenate([step[1] for step in steps]).reshape(rows, g)
            llr_rows = np.concatenate([step[0] for step in steps]).reshape(rows, g)
        r = rs[:rows]
        r += 1.0
        r *= lr_rows
        c = cs[:rows]
        c += llr_rows
        fresh = c <= 0.0
        # max(c, 0) is c[c <= 0] = 0 bit for bit here: c is finite, and never -0.0 after
        # adding a row (x - x is +0.0, so no llr is -0.0, and -0.0 + y is -0.0 only for
        # y = -0.0).
        np.maximum(c, 0.0, out=c)
        starts = np.array([float(d._waiting_from + t + 1) for d in unique[:rows]])
        np.copyto(ss[:rows], starts[:, None], where=fresh)
        t += 1
    # Each detector's statistics made contiguous again in one copy first: a copy into
    # each from a contiguous (3, G) block costs ~two thirds of one from the strided view.
    for d, state in zip(unique, np.ascontiguousarray(states.transpose(1, 0, 2)), strict=True):
        d._state[...] = state
        d.waiting.clear()


def _waiting_count(d: SequentialDetector) -> int:
    return len(d.waiting)


# --------------------------------------------------------------------------- CUSUM


def cusum_arl(llr: npt.ArrayLike, probs: npt.ArrayLike, threshold: float,
              cells: int = 2000) -> float:
    """Average run length of a CUSUM W ← max(0, W + llr(x)) to reach ``threshold``.

    Brook & Evans' Markov-chain method: W is discretised on ``cells`` grid points,
    each step moves to the nearest grid point (or is absorbed at the threshold), and
    the expected absorption time from W = 0 solves (I − P) L = 1. Use the in-control
    ``probs`` for ARL₀ (time to false alarm), the post-change ones for the delay.
    """
    # Imported here: the daemon never calls this (a calibration aid), and SciPy's sparse
    # linear algebra took ~0.2 s of CPU at every start (docs/performance.md, "Start-up").
    from scipy import sparse
    from scipy.sparse import linalg as sparse_linalg

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


def cusum_threshold_for_arl(llr: npt.ArrayLike, probs: npt.ArrayLike, arl: float,
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


def expected_delay_hint(p0: Sequence[float], p1: Sequence[float], false_alarm_rate: float,
                        n_alternatives: int) -> float:
    """Rough detection delay (executions) for a change p0 → p1: threshold / KL(p1 ‖ p0).

    For capacity planning and docs; the benchmark measures the real thing.
    """
    a = np.asarray(p1, dtype=np.float64)
    b = np.asarray(p0, dtype=np.float64)
    mask = a > 0
    kl = float((a[mask] * np.log(a[mask] / b[mask])).sum())
    if kl <= 0:
        return math.inf
    return (-math.log(false_alarm_rate) + math.log(n_alternatives)) / kl
