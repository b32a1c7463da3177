"""Whether the answers to an action's queries draw its outcomes from one distribution.

An agent with the outcomes a model states draws each step's outcome independently with
the same shares, whichever answer the step is in. An agent that answers some queries as
one model and others as another (a per-answer switcher: the old model in 30% of the
answers) gives answers whose outcome shares differ: an outcome the new model dropped
shows in the old model's answers only. Replaying the steps cannot refuse a model holding
that outcome (it allows every answer), and asking more only gives the switcher more
answers in which to show it, so before an outcome is kept or retired on the answers they
must look like one distribution's draws.

The test is a conditional (permutation) test of homogeneity, one per outcome: given how
many steps of the action each answer ran (``sizes``) and how many of them showed the
outcome (``counts``), under one distribution every way of placing those steps among the
answers is as likely (the steps are exchangeable), so the counts are a draw of the
multivariate hypergeometric law. The statistic is the dispersion of the counts around
their expectation, sum (k_a - n_a K / N)^2 / n_a (Pearson's, up to a constant factor);
its law under homogeneity is sampled, not taken from the chi-square approximation, which
is far off for the rare outcomes this is about (four of four steps of a 0.01 outcome in
one answer of ten has a chance of 0.001; the approximation says 4e-5). The draws are
seeded: the same answers always get the same verdict. Answers that ran the action once
carry no information about homogeneity (their dispersion is the same whatever the
placement): the test can then never reject, which is right, since no answer shows a
share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

BATCH = 512
"""Placements sampled at a time (:func:`dispersion_p`)."""
SEED = 20261127
"""Seeds the sampled law: a verdict depends on the answers only."""


def draws_for(error: float, tests: int) -> int:
    """Sampled placements enough that a p-value as small as the per-test level
    ``error / tests`` can be reached four times over (resolution, not a tuned
    constant: fewer and the test could never reject at that level)."""
    return math.ceil(4 * tests / error)


def _xlogx(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)


def _statistic(k: npt.NDArray[Any], n: npt.NDArray[np.int64],
               expect: npt.NDArray[np.float64], likelihood: bool
               ) -> npt.NDArray[np.float64]:
    """Per row of ``k`` (the last axis: answers), Pearson's dispersion
    sum (k_a - e_a)^2 / n_a, or the likelihood ratio's sum k_a ln(k_a / e_a) +
    (n_a - k_a) ln((n_a - k_a) / (n_a - e_a)) (each up to a constant factor)."""
    if not likelihood:
        return np.asarray((((k - expect) ** 2) / n).sum(axis=-1), dtype=np.float64)
    kf = k.astype(np.float64)
    rest = n - kf
    const = float((_xlogx(expect) + _xlogx(n - expect)).sum())
    return np.asarray((_xlogx(kf) + _xlogx(rest)).sum(axis=-1) - const, dtype=np.float64)


def dispersion_p(counts: Sequence[int], sizes: Sequence[int], *, draws: int,
                 rng: np.random.Generator, level: float = 1.0,
                 likelihood: bool = False) -> float:
    """The sampled p-value of the counts' dispersion across answers under homogeneity
    (1.0 when it cannot be told: one answer, or the outcome in none or all steps). Once
    it is sure to be above ``level`` the sampling stops and the estimate so far is
    returned (above ``level`` too). ``likelihood``: the likelihood-ratio statistic
    (:func:`heterogeneous`) instead of Pearson's."""
    n = np.asarray(sizes, dtype=np.int64)
    k = np.asarray(counts, dtype=np.int64)
    keep = n > 0
    n, k = n[keep], k[keep]
    total, shown = int(n.sum()), int(k.sum())
    if len(n) < 2 or shown == 0 or shown == total:
        return 1.0
    expect = (n * (shown / total)).astype(np.float64)
    observed = float(_statistic(k, n, expect, likelihood))
    # Sampled in batches, stopping once the p-value can no longer reach ``level``
    # (Besag and Clifford's sequential Monte Carlo p-value): an answer set that looks
    # homogeneous costs one batch, not ``draws``.
    exceed, done = 0, 0
    while done < draws:
        size = min(BATCH, draws - done)
        placed = rng.multivariate_hypergeometric(n, shown, size=size)
        sampled = _statistic(placed, n, expect, likelihood)
        # Ties count against rejecting; a relative slack absorbs rounding only.
        exceed += int(np.count_nonzero(sampled >= observed * (1.0 - 1e-9)))
        done += size
        if (1 + exceed) / (1 + draws) > level:
            return (1 + exceed) / (1 + done)
    return (1 + exceed) / (1 + draws)


def heterogeneous(table: Sequence[Sequence[int]], error: float, *,
                  likelihood: bool = False) -> list[tuple[int, float]]:
    """The outcomes whose counts differ across the answers more than one distribution
    allows but for a chance ``error`` overall (Bonferroni over the outcomes tested):
    ``table[a][j]`` is how many steps of answer ``a`` showed outcome ``j``. Returns each
    such outcome's index and sampled p-value, Bonferroni-adjusted (times the outcomes
    tested).

    ``likelihood``: the statistic is the likelihood ratio of one share per answer against
    one for all (the G statistic) instead of Pearson's dispersion. Against answers of
    which some never show a rare outcome (a switcher's answers as a model without it)
    it has the power Pearson's lacks: an answer of 64 steps with none of a 0.055 outcome
    adds 3.7 to Pearson's (a count short of its expectation weighs by that expectation)
    and 7.2 to twice the likelihood ratio (docs/assessment.md, "The answers asked
    again")."""
    if len(table) < 2 or not table[0]:
        return []
    sizes = [sum(row) for row in table]
    width = len(table[0])
    tested = [j for j in range(width) if 0 < sum(row[j] for row in table) < sum(sizes)]
    if len(tested) == 2 and width == 2:
        # Two outcomes: each one's counts are the other's complement, the same test.
        tested = [min(tested, key=lambda j: sum(row[j] for row in table))]
    if not tested:
        return []
    level = error / len(tested)
    draws = draws_for(error, len(tested))
    rng = np.random.default_rng(SEED)
    out = []
    for j in tested:
        p = dispersion_p([row[j] for row in table], sizes, draws=draws, rng=rng,
                         level=level, likelihood=likelihood)
        if p <= level:
            out.append((j, p * len(tested)))
    return out


__all__ = ["dispersion_p", "draws_for", "heterogeneous"]
