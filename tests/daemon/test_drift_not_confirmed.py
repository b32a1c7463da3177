"""A drift alarm whose re-estimate by queries holds every probability of the model ends
the work "no change" (tests/daemon/test_reestimate_agrees.py). Drift-only work has no
awaiting alert, so before, a drift the STREAM's detector raised (a low false-alarm rate,
not the audit's 5% FDR) ended with nothing published and nothing said to the operator, and
was raised, queried and dropped again after the tables restarted. Now it ends with a
``drift_not_confirmed`` alert (info) and a count; the audit's alarms are counted only.
No servers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.alerts import Alert
from capwatch.alerts.types import AlertType, Severity
from capwatch.contracts.store import PendingAssessment
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.daemon.work import DriftProbe, WorkItem
from capwatch.model.domain import Domain
from capwatch.model.pddl_domain import parse_domain
from tests.daemon.helpers import EXAMPLES, OneAgent, config, run_queued

T0 = datetime(2026, 1, 1, tzinfo=UTC)
COURIER = (EXAMPLES / "courier.pddl").read_text()
STATE = frozenset({("at_robot", "robot1", "hall"), ("at", "parcel1", "hall"),
                   ("free", "robot1")})
PROBE = DriftProbe(("pick", "robot1", "parcel1", "hall"), STATE)


def _courier(p_pick: float) -> Domain:
    return parse_domain(COURIER.replace("0.9 (and", f"{p_pick} (and"), "courier")


def _pipeline(tmp_path: Path, truth: Domain) -> Pipeline:
    path = tmp_path / "in.jsonl"
    path.write_text("")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    d = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path)),
                      agents=OneAgent(SimulatedAgent(truth, seed=4))).pipeline
    d.seed_families()
    return d


def _queue_drift(d: Pipeline, detector: str, **stream: Any) -> str:
    """Drift-only work as an agent's watch queues it: pick's alarm said 0.5."""
    base = d.store.latest("courier-v1")
    assert base is not None
    alarm = _courier(0.5)
    drift: dict[str, Any] = {
        "detector": detector, "action": "pick(?r ?p ?x)", "n": 40, "window": [0, 40],
        "model_probabilities": [0.9, 0.1], "estimated_probabilities": [0.5, 0.5],
        "estimate_ci": [[0.35, 0.65], [0.35, 0.65]], "summary": "pick drifted", **stream}
    item = WorkItem(key=f"courier-v1/courier-a@{base.ref}#7", agent_id="courier-a",
                    family="courier-v1", partition=0, base=base.ref,
                    drift={"pick": drift},
                    provisional=base.domain().replace_action(alarm.action("pick")),
                    probes={"pick": PROBE})
    assert d.store.enqueue(PendingAssessment(item.key, item.agent_id, item.family,
                                             item.to_json(), T0))
    return item.key


def _count(d: Pipeline, detector: str) -> float:
    value = d.metrics.registry.get_sample_value(
        "capwatch_drift_not_confirmed_total", {"family": "courier-v1", "detector": detector})
    return value or 0.0


def _alerts(d: Pipeline, kind: AlertType) -> list[Alert]:
    return [a for a in (Alert.from_record(r.alert) for r in d.store.outbox())
            if a.type is kind]


def test_a_stream_drift_the_answers_do_not_show_is_told_to_the_operator(
        tmp_path: Path) -> None:
    d = _pipeline(tmp_path, _courier(0.9))  # the agent still draws 0.9/0.1
    try:
        key = _queue_drift(d, "sequential")
        assert run_queued(d) == 1
        assert d.store.latest("courier-v1", "courier-a") is None  # no version
        (alert,) = _alerts(d, AlertType.DRIFT_NOT_CONFIRMED)
        assert alert.severity is Severity.INFO
        assert alert.agent_id == "courier-a" and alert.action == "pick"
        assert alert.evidence["assessment_key"] == key
        assert alert.detail["stream"]["estimated_probabilities"] == [0.5, 0.5]
        answers = alert.detail["answers"]
        assert answers["agrees_with_current"] is True
        for p, lo, hi in zip(sorted([0.9, 0.1]), sorted(answers["low"]),
                             sorted(answers["high"]), strict=True):
            assert lo <= p <= hi
        assert _count(d, "sequential") == 1.0
        assert _alerts(d, AlertType.EFFECT_DISTRIBUTION_DRIFT) == []
    finally:
        d.store.close()


def test_a_stream_alarm_the_re_estimate_does_not_explain_publishes_nothing(
        tmp_path: Path) -> None:
    """The answers show 0.5 (they reject the model's 0.9), but the stream's alarm counted
    pick's rarer outcome 40 times in 40: no mixture of 0.9 and 0.5 explains that at the
    detector's threshold. Not the drift that raised the alarm: no version, the operator is
    told (oper18b's proposal: a version must explain the counts that raised the alarm).
    Before: 0.5 published."""
    d = _pipeline(tmp_path, _courier(0.5))
    try:
        _queue_drift(d, "sequential", counts=[0, 40], log_threshold=11.5)
        assert run_queued(d) == 1
        assert d.store.latest("courier-v1", "courier-a") is None
        (alert,) = _alerts(d, AlertType.DRIFT_NOT_CONFIRMED)
        answers = alert.detail["answers"]
        assert answers["alarm_unexplained"] is True
        assert answers["alarm_test"]["log_likelihood_ratio"] > 11.5
        assert _count(d, "sequential") == 1.0
        assert _alerts(d, AlertType.EFFECT_DISTRIBUTION_DRIFT) == []
    finally:
        d.store.close()


def test_an_audit_alarm_the_answers_do_not_show_is_counted_not_alerted(
        tmp_path: Path) -> None:
    d = _pipeline(tmp_path, _courier(0.9))
    try:
        _queue_drift(d, "audit")
        assert run_queued(d) == 1
        assert d.store.latest("courier-v1", "courier-a") is None
        assert _alerts(d, AlertType.DRIFT_NOT_CONFIRMED) == []
        assert _count(d, "audit") == 1.0
    finally:
        d.store.close()


@pytest.mark.parametrize("detector", ["sequential", "audit"])
def test_a_drift_the_answers_show_publishes_a_version_and_says_nothing_of_doubt(
        tmp_path: Path, detector: str) -> None:
    d = _pipeline(tmp_path, _courier(0.5))
    try:
        _queue_drift(d, detector)
        assert run_queued(d) == 1
        assert d.store.latest("courier-v1", "courier-a") is not None
        assert _alerts(d, AlertType.DRIFT_NOT_CONFIRMED) == []
        assert _alerts(d, AlertType.EFFECT_DISTRIBUTION_DRIFT) != []
        assert _count(d, detector) == 0.0
    finally:
        d.store.close()
