from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult, State
from capwatch.assess.probabilities import (
    UnidentifiableOutcomes,
    estimate_domain_probabilities,
    estimate_outcome_probabilities,
    updated_domain,
)
from capwatch.model.domain import Action, Domain, GroundAction, LiftedAtom, Outcome
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.drift import with_probabilities
from tests.paths import STOCHASTIC

PROBE: tuple[GroundAction, State] = (
    ("move-car", "l1", "l2"),
    frozenset({("vehicle-at", "l1"), ("road", "l1", "l2"), ("not-flattire",)}),
)


@pytest.fixture(scope="module")
def tireworld() -> Domain:
    return read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()


class MultinomialAgent:
    """Answers one-step queries by drawing successors with fixed probabilities (fast)."""

    def __init__(self, successors: Sequence[State], probs: Sequence[float], seed: int) -> None:
        self.successors = list(successors)
        self.probs = np.asarray(probs)
        self.rng = np.random.default_rng(seed)
        self.samples = 0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        self.samples += samples
        draws = self.rng.choice(len(self.successors), size=samples, p=self.probs)
        return [QueryResult(1, self.successors[i]) for i in draws]


def _successors(action: Action, probe: tuple[GroundAction, State]) -> list[State]:
    ground, state = probe
    binding = dict(zip(action.parameter_names, ground[1:], strict=True))
    return [frozenset((state - {a.ground(binding) for a in o.delete})
                      | {a.ground(binding) for a in o.add}) for o in action.outcomes]


def test_estimates_a_drifted_agent_within_the_half_width(tireworld: Domain) -> None:
    move = tireworld.action("move-car")
    drifted = tireworld.replace_action(with_probabilities(move, [0.6, 0.4]))
    agent = SimulatedAgent(drifted, seed=3)
    est = estimate_outcome_probabilities(agent, move, *PROBE, half_width=0.05)
    assert est.converged
    assert max(est.estimate.half_widths) <= 0.05
    assert est.samples == agent.stats.samples
    # The pilot sizes the second stage and is then set aside: it is not in the estimate.
    assert est.samples == est.estimate.n + 30
    # p(1 − p) = 0.24 needs roughly 1.96² · 0.24 / 0.05² ≈ 370 samples; CP is a bit wider.
    assert 300 <= est.estimate.n <= 600
    assert est.estimate.covers([0.6, 0.4])
    new = est.updated_action(move)
    flat = next(o for o in new.outcomes if LiftedAtom("not-flattire") in o.delete)
    assert flat.probability == pytest.approx(est.estimate.probabilities[0])


def test_coverage_over_200_trials(tireworld: Domain) -> None:
    move = tireworld.action("move-car")
    successors = _successors(move, PROBE)
    truth = [0.7, 0.3]
    covered, used = [], []
    for trial in range(200):
        agent = MultinomialAgent(successors, truth, seed=trial)
        est = estimate_outcome_probabilities(agent, move, *PROBE, half_width=0.05)
        assert est.converged
        covered.append(est.estimate.covers(truth))
        used.append(est.samples)
    assert np.mean(covered) >= 0.93
    assert np.median(used) < 480


def test_more_outcomes_use_simultaneous_intervals(tireworld: Domain) -> None:
    move = tireworld.action("move-car")
    flat, no_flat = move.outcomes
    spare = Outcome(frozenset({LiftedAtom("spare-in", ("?to",))}), no_flat.delete, 0.1)
    three = move.replace(outcomes=(flat, Outcome(no_flat.add, no_flat.delete, 0.1), spare))
    successors = _successors(three, PROBE)
    agent = MultinomialAgent(successors, [0.5, 0.3, 0.2], seed=1)
    est = estimate_outcome_probabilities(agent, three, *PROBE, half_width=0.04)
    assert est.converged
    assert est.estimate.confidence == pytest.approx(1 - 0.05 / 3)
    assert max(est.estimate.half_widths) <= 0.04


def test_structural_anomalies_stop_the_estimation(tireworld: Domain) -> None:
    move = tireworld.action("move-car")
    ground, state = PROBE
    odd = frozenset({("vehicle-at", "l1"), ("road", "l1", "l2")})  # the car never moved
    agent = MultinomialAgent([*_successors(move, PROBE), odd], [0.2, 0.2, 0.6], seed=2)
    est = estimate_outcome_probabilities(agent, move, ground, state)
    assert not est.converged
    assert est.unexplained > 0
    assert est.structural_anomalies == est.samples - est.estimate.n


def test_sample_budget(tireworld: Domain) -> None:
    move = tireworld.action("move-car")
    agent = MultinomialAgent(_successors(move, PROBE), [0.5, 0.5], seed=5)
    est = estimate_outcome_probabilities(agent, move, *PROBE, half_width=0.01, max_samples=400)
    assert not est.converged
    assert est.samples == 400


def test_probe_state_must_be_applicable_and_identifying(tireworld: Domain) -> None:
    move = tireworld.action("move-car")
    ground, state = PROBE
    agent = MultinomialAgent(_successors(move, PROBE), [0.8, 0.2], seed=0)
    with pytest.raises(ValueError):
        estimate_outcome_probabilities(agent, move, ground, state - {("not-flattire",)})
    twin = move.replace(outcomes=(
        Outcome(frozenset({LiftedAtom("vehicle-at", ("?to",))}),
                frozenset({LiftedAtom("vehicle-at", ("?from",))}), 0.5),
        Outcome(frozenset({LiftedAtom("vehicle-at", ("?to",)), LiftedAtom("not-flattire")}),
                frozenset({LiftedAtom("vehicle-at", ("?from",))}), 0.5),
    ))
    # (not-flattire) is already true in the probe state, so both outcomes look the same.
    with pytest.raises(UnidentifiableOutcomes):
        estimate_outcome_probabilities(agent, twin, ground, state)


def test_domain_helpers(tireworld: Domain) -> None:
    drifted = tireworld.replace_action(
        with_probabilities(tireworld.action("move-car"), [0.5, 0.5]))
    agent = SimulatedAgent(drifted, seed=11)
    estimates = estimate_domain_probabilities(agent, tireworld, {"move-car": PROBE},
                                              half_width=0.06)
    assert set(estimates) == {"move-car"}
    new = updated_domain(tireworld, estimates)
    probs = sorted(o.probability for o in new.action("move-car").outcomes)
    assert probs[0] == pytest.approx(0.5, abs=0.08)
    assert new.action("changetire") == tireworld.action("changetire")
