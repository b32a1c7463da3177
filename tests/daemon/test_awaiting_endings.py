"""An awaiting-assessment alert written at the first inconsistency announces an
assessment; when the evidence is dropped before it is queued (a newer model installed
meanwhile) no assessment comes, so the alert must be ended. No servers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.alerts import Alert
from capwatch.alerts.outbox import ending_key, plan_routing
from capwatch.alerts.policy import AlertPolicy
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.models_store import ModelRef, build_version
from tests.daemon.helpers import config, example, refused_sample

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _manual(tmp_path: Path, lines: list[str]) -> Pipeline:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 50, "debounce_s": 3600.0})
    d = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    return d


def _promote_baseline(d: Pipeline) -> int:
    """An operator (or another replica's configuration) stores a newer family baseline,
    which the agent, running the baseline, moves to at the next poll."""
    base = d.store.latest("rover-v1")
    assert base is not None
    newer = d.store.put(build_version(ModelRef("rover-v1", None, base.version + 1),
                                      example("rover-sample-drift.pddl"), T0, parent=base))
    d.poll_results()
    return newer.version


def test_evidence_dropped_for_a_newer_model_ends_the_alert_that_announced_it(
        tmp_path: Path) -> None:
    d = _manual(tmp_path, [refused_sample(step=0), refused_sample(step=1)])
    try:
        for r in d.source.poll(1.0):
            d.handle(r)
        d.alert_promptly()
        (announced,) = d.store.outbox()
        assert announced.key.startswith("queued:")
        version = _promote_baseline(d)
        watch = d.registry.get("rover-a")
        assert watch is not None and not watch.evidence and d.store.queue_items() == []
        d.alert_promptly()
        rows = {r.key: r for r in d.store.outbox()}
        ending = rows[ending_key(announced.key)]
        assert ending.dedup_key == announced.dedup_key  # Alertmanager: the same labels
        alert = Alert.from_record(ending.alert)
        assert alert.ends_at is not None
        assert alert.evidence["ended"] == f"superseded by version {version}"
        # Routed after the alert it ends, never before.
        plan = plan_routing(list(rows.values()), {}, AlertPolicy(), datetime.now(UTC),
                            ["output"], force=True)
        assert [d.members for d in plan.deliveries] == [(announced.key,)]
    finally:
        d.source.close()
        d.store.close()


def test_no_ending_for_an_alert_that_was_never_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _manual(tmp_path, [refused_sample(step=0)])
    try:
        add_alerts = d.store.add_alerts

        def store_down(rows: object) -> None:
            raise OSError("store unreachable")

        monkeypatch.setattr(d.store, "add_alerts", store_down)
        for r in d.source.poll(1.0):
            d.handle(r)  # the prompt alert's write fails: it is retried at the next turn
        monkeypatch.setattr(d.store, "add_alerts", add_alerts)
        _promote_baseline(d)  # ... but the evidence is dropped before that
        d.alert_promptly()
        assert d.store.outbox() == []
    finally:
        d.source.close()
        d.store.close()


def test_queued_evidence_keeps_its_alert_open_until_the_assessment_ends(
        tmp_path: Path) -> None:
    d = _manual(tmp_path, [refused_sample(step=0)])
    try:
        for r in d.source.poll(1.0):
            d.handle(r)
        d.alert_promptly()
        d.sweep(force=True)  # the evidence becomes queued work
        assert len(d.store.queue_items()) == 1
        _promote_baseline(d)
        d.alert_promptly()
        # The queued work ends its alert itself (docs/daemon.md, "Alerts"); the promotion
        # dropped nothing, so it writes no ending of its own.
        assert not any(r.key.startswith("ended:") for r in d.store.outbox())
    finally:
        d.source.close()
        d.store.close()
