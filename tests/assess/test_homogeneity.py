"""The homogeneity test across answers (capwatch/assess/homogeneity.py) on made-up
counts: per answer, how many of its steps showed each outcome."""

from __future__ import annotations

import math
import random

import numpy as np

from capwatch.assess.homogeneity import dispersion_p, draws_for, heterogeneous


def _honest(rng: random.Random, answers: int, steps: int, shares: list[float]
            ) -> list[list[int]]:
    """Every answer's steps drawn independently from one distribution."""
    table = []
    for _ in range(answers):
        row = [0] * len(shares)
        for _ in range(steps):
            row[rng.choices(range(len(shares)), shares)[0]] += 1
        table.append(row)
    return table


def test_answers_of_one_distribution_are_not_flagged() -> None:
    rng = random.Random(7)
    for shares in ([0.9, 0.1], [0.99, 0.01], [0.6, 0.3, 0.1]):
        for steps in (1, 5, 64):
            assert heterogeneous(_honest(rng, 12, steps, shares), 1e-3) == []


def test_an_outcome_shown_only_in_some_answers_is_flagged() -> None:
    """The per-answer switcher of a removed slip (gripper prob2 101): the old model's
    answers show the 0.08 slip, the new model's never do."""
    table = [[59, 5], [60, 4], [58, 6]] + [[64, 0]] * 7
    flagged = heterogeneous(table, 1e-3)
    assert flagged and all(p <= 1e-3 for _, p in flagged)


def test_the_sampled_p_value_is_the_exact_one() -> None:
    """Four steps of one outcome, all in one answer of ten (64 steps each): the exact
    chance under one distribution is 10 C(64, 4) / C(640, 4) ~ 0.0009. The chi-square
    approximation says ~4e-5 (it would flag an honest agent's rare outcome); the sampled
    law does not. Three of three there (~0.009) are not flagged at 0.001."""
    exact = 10 * math.comb(64, 4) / math.comb(640, 4)
    p = dispersion_p([4] + [0] * 9, [64] * 10, draws=200_000, rng=np.random.default_rng(3))
    assert abs(p - exact) < 0.25 * exact
    assert heterogeneous([[61, 3]] + [[64, 0]] * 9, 1e-3) == []


def test_answers_that_ran_the_action_once_tell_nothing() -> None:
    """With one step an answer every placement has the same dispersion: never flagged,
    however the outcomes fall (an action one answer runs once cannot show a switcher)."""
    table = [[1, 0]] * 30 + [[0, 1]] * 30
    assert dispersion_p([r[1] for r in table], [1] * 60, draws=1000,
                        rng=np.random.default_rng(0)) == 1.0
    assert heterogeneous(table, 1e-3) == []


def test_nothing_to_test() -> None:
    assert heterogeneous([], 1e-3) == []
    assert heterogeneous([[5, 0]], 1e-3) == []
    assert heterogeneous([[5, 0], [7, 0]], 1e-3) == []


def test_enough_draws_to_reach_the_level() -> None:
    """The smallest p-value the sampling can give is 1 / (draws + 1): below the level."""
    for error, tests in ((1e-3, 1), (1e-3, 3), (1e-2, 2)):
        assert 1 / (draws_for(error, tests) + 1) < error / tests


def test_the_rejection_rate_under_one_distribution_is_at_most_the_level() -> None:
    """Calibration at a level where it can be counted: 400 honest tables, 5% level."""
    rng = random.Random(11)
    flagged = sum(bool(heterogeneous(_honest(rng, 8, 10, [0.8, 0.2]), 0.05))
                  for _ in range(400))
    assert flagged <= 0.05 * 400 * 1.5


def test_answers_without_a_rare_outcome_are_flagged_by_the_likelihood_ratio() -> None:
    """A per-answer switcher's answers asked again (probe_switcher17 seed 3): ten answers
    of 64 steps as the model without the slip, two as the one with it, two of two steps.
    In Pearson's dispersion an answer short of its expected count weighs by that
    expectation (0.8 here) and a slip placed in a two-step answer by chance weighs
    much: not flagged at 0.001 (p ~ 0.008). The likelihood ratio is."""
    table = [[64, 0]] * 10 + [[59, 5], [59, 5], [2, 0], [2, 0]]
    assert heterogeneous(table, 1e-3) == []
    flagged = heterogeneous(table, 1e-3, likelihood=True)
    assert [j for j, _ in flagged] == [1] and flagged[0][1] <= 1e-3


def test_the_likelihood_ratio_passes_one_distribution_at_its_level() -> None:
    rng = random.Random(7)
    for shares in ([0.9, 0.1], [0.99, 0.01], [0.6, 0.3, 0.1]):
        for steps in (1, 5, 64):
            assert heterogeneous(_honest(rng, 12, steps, shares), 1e-3,
                                 likelihood=True) == []
    flagged = sum(bool(heterogeneous(_honest(rng, 8, 10, [0.8, 0.2]), 0.05,
                                     likelihood=True)) for _ in range(400))
    assert flagged <= 0.05 * 400 * 1.5
