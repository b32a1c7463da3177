from __future__ import annotations

import json

import numpy as np
import pytest

from capwatch.model.domain import Action
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.attribution import Attribution
from capwatch.monitor.drift import (
    ActionMonitor,
    DriftConfig,
    DriftMonitor,
    describe_outcome,
    with_probabilities,
)
from capwatch.monitor.stats import total_variation
from tests.paths import STOCHASTIC


@pytest.fixture(scope="module")
def move_car() -> Action:
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()
    return domain.action("move-car")


@pytest.fixture(scope="module")
def change_tire() -> Action:
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()
    return domain.action("changetire")


def _draws(rng: np.random.Generator, p: list[float], n: int) -> list[int]:
    return [int(x) for x in rng.choice(len(p), size=n, p=p)]


def test_shift_raises_an_alarm_with_evidence_and_a_new_action(move_car: Action) -> None:
    p0 = [o.probability for o in move_car.outcomes]  # [0.8 flat tyre, 0.2 no flat]
    p1 = [0.5, 0.5]
    mon = ActionMonitor(move_car)
    rng = np.random.default_rng(4)
    alarm, alarm_at = None, -1
    for t, x in enumerate(_draws(rng, p0, 3000) + _draws(rng, p1, 3000)):
        alarm = mon.observe(x)
        if alarm is not None:
            alarm_at = t
            break
    assert alarm is not None
    assert alarm_at >= 3000, "false alarm before the change"
    ev = alarm.evidence
    assert ev.detector == "sequential"
    assert ev.change_point is not None and abs(ev.change_point - 3000) < 60
    assert ev.gof.p_value < 0.01
    assert ev.gof.dof == 1
    assert ev.tvd.low <= total_variation(p0, p1) <= ev.tvd.high
    assert ev.log_statistic is not None and ev.log_threshold is not None
    assert ev.log_statistic >= ev.log_threshold
    assert ev.estimate.n == sum(ev.gof.counts)
    # The provisional action carries the window's MLE, with the same outcomes as before.
    new = alarm.updated_action
    assert {(o.add, o.delete) for o in new.outcomes} == {(o.add, o.delete)
                                                         for o in move_car.outcomes}
    flat = next(o for o in new.outcomes if o.delete == move_car.outcomes[0].delete)
    assert 0.3 < flat.probability < 0.7
    payload = json.loads(json.dumps(ev.to_dict()))
    assert payload["dof"] == 1 and payload["detector"] == "sequential"
    assert "move-car" in ev.summary() and "→" in ev.summary()


def test_no_alarm_without_drift(move_car: Action) -> None:
    mon = ActionMonitor(move_car)
    rng = np.random.default_rng(8)
    p0 = [o.probability for o in move_car.outcomes]
    alarms = [a for a in map(mon.observe, _draws(rng, p0, 20_000)) if a is not None]
    assert alarms == []
    gof = mon.test()
    assert gof.tested and gof.n == 2000  # the sliding window, not the whole history


def test_deterministic_actions_have_no_detector(change_tire: Action) -> None:
    mon = ActionMonitor(change_tire)
    assert not mon.stochastic
    assert all(mon.observe(0) is None for _ in range(500))
    assert mon.window.counts().tolist() == [500]


def test_ambiguous_observations_are_reported_not_counted(move_car: Action) -> None:
    mon = ActionMonitor(move_car, DriftConfig(window=200, min_samples=50))
    for _ in range(100):
        mon.observe(0)
    for _ in range(10):
        mon.observe(Attribution(((0, 1),), 0))
    ev = mon.evidence()
    assert ev.ambiguous == 10
    assert ev.gof.n == 100


def test_with_probabilities_keeps_unobserved_outcomes(move_car: Action) -> None:
    new = with_probabilities(move_car, [1.0, 0.0], n=200)
    assert len(new.outcomes) == 2
    probs = sorted(o.probability for o in new.outcomes)
    assert probs[0] == pytest.approx(0.5 / 200 / (1 + 0.5 / 200))
    assert sum(probs) == pytest.approx(1.0)
    swapped = with_probabilities(move_car, [0.3, 0.7])
    # Canonical order sorts by probability: the no-flat outcome now comes first.
    assert swapped.outcomes[0].delete == move_car.outcomes[1].delete
    with pytest.raises(ValueError):
        with_probabilities(move_car, [1.0])


def test_describe_outcome(move_car: Action) -> None:
    text = describe_outcome(move_car.outcomes[0])
    assert "(vehicle-at ?to)" in text and "(not (not-flattire))" in text


def test_monitor_restarts_on_a_new_model_version(move_car: Action) -> None:
    fleet = DriftMonitor()
    for _ in range(30):
        fleet.observe("rover-1", move_car, 0)
    assert fleet.monitor("rover-1", move_car).window.seen == 30
    newer = with_probabilities(move_car, [0.6, 0.4])
    fleet.observe("rover-1", newer, 1)
    mon = fleet.monitor("rover-1", newer)
    assert mon.window.seen == 1
    assert mon.probabilities == tuple(o.probability for o in newer.outcomes)
    fleet.forget("rover-1")
    assert len(fleet) == 0


def test_fleet_audit_controls_false_discoveries(move_car: Action) -> None:
    cfg = DriftConfig(window=1000, fdr=0.05)
    fleet = DriftMonitor(cfg)
    rng = np.random.default_rng(12)
    p0 = [o.probability for o in move_car.outcomes]
    drifted = {f"agent-{i}" for i in range(5)}
    for i in range(60):
        agent = f"agent-{i}"
        p = [0.7, 0.3] if agent in drifted else p0
        for x in _draws(rng, p, 1000):
            fleet.monitor(agent, move_car).window.add(x)  # the audit path only
    findings = fleet.audit()
    assert len(findings) == 60
    flagged = {f.agent_id for f in findings if f.rejected}
    assert drifted <= flagged
    assert len(flagged - drifted) <= 2
    for f in findings:
        assert f.q_value >= f.gof.p_value
        assert (f.evidence is not None) == f.rejected
    ev = next(f.evidence for f in findings if f.rejected and f.evidence is not None)
    assert ev.detector == "audit" and ev.q_value is not None and ev.agent_id in drifted


def test_audit_skips_tables_below_the_minimum_sample(move_car: Action) -> None:
    fleet = DriftMonitor(DriftConfig(window=500, min_samples=100))
    for _ in range(99):
        fleet.observe("a", move_car, 1)
    assert fleet.audit() == []


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        DriftConfig(window=10, min_samples=100)


def test_alarm_is_confirmed_on_fresh_executions(move_car: Action) -> None:
    p0 = [o.probability for o in move_car.outcomes]
    p1 = [0.65, 0.35]
    mon = ActionMonitor(move_car)
    rng = np.random.default_rng(21)
    events = []
    for x in _draws(rng, p0, 2000) + _draws(rng, p1, 4000):
        ev = mon.observe(x)
        if ev is not None:
            events.append(ev)
            if not ev.provisional:
                break
    assert len(events) == 2, "one alarm, then its confirmation, nothing in between"
    alarm, confirmation = events
    assert alarm.provisional and alarm.fresh_samples_planned is not None
    # ±0.05 around p ≈ 0.35 needs roughly 1.96² · 0.23 / 0.05² ≈ 350 fresh executions.
    assert 250 <= alarm.fresh_samples_planned <= 600
    assert not mon.confirming
    evidence = confirmation.evidence
    assert evidence.detector == "confirmation"
    assert evidence.gof.n == alarm.fresh_samples_planned
    assert evidence.window[1] - evidence.window[0] == alarm.fresh_samples_planned
    assert evidence.estimate.method == "clopper-pearson"
    assert evidence.estimate.covers(p1)
    assert max(evidence.estimate.half_widths) <= 0.055
    assert evidence.gof.p_value < 1e-3


def test_confirmation_can_be_disabled(move_car: Action) -> None:
    mon = ActionMonitor(move_car, DriftConfig(confirm_half_width=None))
    rng = np.random.default_rng(5)
    events = [e for e in map(mon.observe, _draws(rng, [0.5, 0.5], 3000)) if e is not None]
    assert events and all(e.provisional and e.fresh_samples_planned is None for e in events)


def test_unconfirmed_alarm_says_so(move_car: Action) -> None:
    mon = ActionMonitor(move_car, DriftConfig(confirm_half_width=0.1))
    # A burst of the rare outcome raises an alarm; the fresh executions then fit the model.
    for _ in range(40):
        alarm = mon.observe(1)
        if alarm is not None:
            break
    assert alarm is not None and alarm.provisional
    rng = np.random.default_rng(0)
    confirmation = None
    for x in _draws(rng, [0.8, 0.2], 2000):
        confirmation = mon.observe(x)
        if confirmation is not None:
            break
    assert confirmation is not None and not confirmation.provisional
    assert not confirmation.evidence.confirms_drift
    assert "not confirmed" in confirmation.evidence.summary()
    assert confirmation.evidence.to_dict()["confirmed"] is False
