from __future__ import annotations

import math

import numpy as np
import pytest

from capwatch.monitor.attribution import Attribution
from capwatch.monitor.sequential import (
    DEFAULT_LOGIT_SHIFTS,
    SequentialDetector,
    block_llr,
    cusum_arl,
    cusum_threshold_for_arl,
    llr_table,
    mixture_log_statistic,
    sr_step,
    sr_step_linear,
    threshold_for_rate,
    tilted_alternatives,
)


def _run_lengths(p0: np.ndarray, p1: np.ndarray, nu: int, rate: float, streams: int,
                 tmax: int, seed: int) -> np.ndarray:
    """First alarm index (0-based) per stream, −1 if none; vectorised, linear-space kernel."""
    rng = np.random.default_rng(seed)
    q, logw = tilted_alternatives(p0)
    lr = np.exp(llr_table(p0, q))
    w = np.exp(logw)
    log_a = threshold_for_rate(rate)
    r = np.zeros((streams, len(q)))
    alarm = np.full(streams, -1)
    cum0, cum1 = np.cumsum(p0), np.cumsum(p1)
    for t in range(tmax):
        u = rng.random(streams)
        x = np.searchsorted(cum0 if t < nu else cum1, u, side="right")
        r = sr_step_linear(r, lr[:, x].T)
        hit = (np.log(r @ w) >= log_a) & (alarm < 0)
        alarm[hit] = t
        if (alarm >= 0).all():
            break
    return alarm


def test_alternatives_are_distributions_with_uniform_weights() -> None:
    q, logw = tilted_alternatives([0.8, 0.2])
    # With two outcomes tilting outcome 0 up equals tilting outcome 1 down: 12 shifts × 2 signs.
    assert q.shape == (2 * len(DEFAULT_LOGIT_SHIFTS), 2)
    assert np.allclose(q.sum(axis=1), 1.0)
    assert np.exp(logw).sum() == pytest.approx(1.0)
    assert (q[:, 1] > 0.2).any() and (q[:, 1] < 0.2).any()
    q3, _ = tilted_alternatives([0.5, 0.3, 0.2])
    assert q3.shape == (3 * 2 * len(DEFAULT_LOGIT_SHIFTS), 3)


def test_alternatives_need_two_outcomes() -> None:
    with pytest.raises(ValueError):
        tilted_alternatives([1.0])


def test_log_and_linear_kernels_agree() -> None:
    p0 = np.array([0.7, 0.2, 0.1])
    q, logw = tilted_alternatives(p0)
    llr = llr_table(p0, q)
    rng = np.random.default_rng(5)
    log_r = np.full(len(q), -np.inf)
    r = np.zeros(len(q))
    for x in rng.choice(3, size=300, p=[0.5, 0.3, 0.2]):
        log_r = sr_step(log_r, llr[:, x])
        r = sr_step_linear(r, np.exp(llr[:, x]))
    assert mixture_log_statistic(log_r, logw) == pytest.approx(math.log(r @ np.exp(logw)))


def test_detector_class_matches_batch_kernel() -> None:
    p0 = np.array([0.8, 0.2])
    det = SequentialDetector(p0.tolist(), false_alarm_rate=1e-3)
    rng = np.random.default_rng(9)
    xs = (rng.random(5000) < 0.35).astype(int)
    q, logw = tilted_alternatives(p0)
    lr = np.exp(llr_table(p0, q))
    r = np.zeros(len(q))
    kernel_alarm = class_alarm = -1
    for t, x in enumerate(xs):
        r = sr_step_linear(r, lr[:, x])
        if kernel_alarm < 0 and math.log(r @ np.exp(logw)) >= det.log_threshold:
            kernel_alarm = t
        if class_alarm < 0 and det.update(int(x)):
            class_alarm = t
        if kernel_alarm >= 0 and class_alarm >= 0:
            break
    assert class_alarm == kernel_alarm >= 0


def test_time_to_false_alarm_is_at_least_a() -> None:
    """The Shiryaev–Roberts guarantee: E[time to false alarm] ≥ A = 1 / rate."""
    p0 = np.array([0.9, 0.1])
    alarms = _run_lengths(p0, p0, nu=10**9, rate=1 / 200, streams=3000, tmax=4000, seed=1)
    assert (alarms >= 0).mean() > 0.99  # nearly all alarmed, so the mean is not censored
    run_lengths = np.where(alarms >= 0, alarms + 1, 4000)
    # Standard error of the mean is about ARL/√3000 ≈ 2%; the bound must hold within it.
    assert run_lengths.mean() >= 200 * 0.95
    # ... and it is not wildly conservative either (that would cost detection delay).
    assert run_lengths.mean() <= 200 * 2.0


def test_detects_a_shift_and_locates_the_change() -> None:
    p0, p1 = np.array([0.8, 0.2]), np.array([0.6, 0.4])
    rng = np.random.default_rng(3)
    errors, delays = [], []
    for _ in range(40):
        det = SequentialDetector(p0.tolist(), false_alarm_rate=1e-5)
        nu = 300
        for t in range(5000):
            x = int(rng.random() < (p0[1] if t < nu else p1[1]))
            if det.update(x):
                delays.append(t - nu + 1)
                errors.append(det.change_point - nu)
                break
    assert len(delays) == 40
    assert all(d > 0 for d in delays)  # no false alarm before the change
    assert np.median(delays) < 250
    assert np.median(np.abs(errors)) < 40


def test_uninformative_observations_are_skipped() -> None:
    det = SequentialDetector([0.5, 0.5], false_alarm_rate=1e-2)
    both = Attribution(((0, 1),), 0)
    for _ in range(1000):
        assert not det.update(both)
    assert det.n == 0


def test_partially_ambiguous_observations_use_group_likelihood() -> None:
    p0 = np.array([0.6, 0.3, 0.1])
    q, _ = tilted_alternatives(p0)
    llr = block_llr(p0, q, (1, 2))
    assert np.allclose(llr, np.log(q[:, 1:].sum(axis=1) / 0.4))
    det = SequentialDetector(p0.tolist())
    det.update(Attribution(((0,), (1, 2)), 1))
    assert det.n == 1


def test_restart_clears_state() -> None:
    det = SequentialDetector([0.8, 0.2], false_alarm_rate=1e-3)
    for _ in range(50):
        det.update(1)
    assert det.log_statistic > 0
    det.restart()
    assert det.n == 0
    assert det.log_statistic == -math.inf


def test_threshold_for_rate() -> None:
    assert threshold_for_rate(1e-5) == pytest.approx(math.log(1e5))
    with pytest.raises(ValueError):
        threshold_for_rate(0.0)


def test_cusum_arl_matches_simulation() -> None:
    p0, p1 = np.array([0.5, 0.5]), np.array([0.3, 0.7])
    llr = np.log(p1 / p0)
    h = 3.0
    rng = np.random.default_rng(0)
    streams = 4000
    w = np.zeros(streams)
    done = np.full(streams, -1)
    for t in range(5000):
        x = (rng.random(streams) < p0[1]).astype(int)
        w = np.maximum(0.0, w + llr[x])
        hit = (w >= h) & (done < 0)
        done[hit] = t + 1
        if (done > 0).all():
            break
    simulated = done.mean()
    assert cusum_arl(llr, p0, h) == pytest.approx(simulated, rel=0.06)


def test_cusum_threshold_for_arl_inverts_arl() -> None:
    llr = np.log(np.array([0.7, 0.3]) / np.array([0.8, 0.2]))
    h = cusum_threshold_for_arl(llr, [0.8, 0.2], 5000.0)
    assert cusum_arl(llr, [0.8, 0.2], h) == pytest.approx(5000.0, rel=0.01)
    # Lorden's bound ARL ≥ e^h is loose: the calibrated threshold is well below log(ARL).
    assert h < math.log(5000.0)
