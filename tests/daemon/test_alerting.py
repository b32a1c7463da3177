"""The daemon's alerts go through the store's outbox: grouped across a family,
suppressed across restarts, re-delivered after a sink failure. No servers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.alerts import Alert, AlertDeliveryError
from capwatch.assess.agent import AgentQuery, AgentUnavailable, QueryResult
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.service import Service, build_service
from capwatch.model.domain import GroundAction, GroundAtom
from capwatch.model.pal import delta
from capwatch.model.serialize import domain_from_json
from capwatch.models_store import open_store
from capwatch.models_store.actions import action_store
from tests.daemon.helpers import EXAMPLES, config, example, refused_sample, run, simulated

SAMPLE_CHANGE = ("sample_rock(?r ?s ?w) now requires (battery_full ?r); no longer requires "
                 "(battery_half ?r)")


def _sample(registry: object, name: str, labels: dict[str, str]) -> float:
    from prometheus_client import CollectorRegistry

    assert isinstance(registry, CollectorRegistry)
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_family_wide_drift_is_one_grouped_alert_and_a_version_per_agent(
        tmp_path: Path) -> None:
    drift = {"family": "rover-v1", "at_step": 30,
             "domain": str(EXAMPLES / "rover-sample-drift.pddl")}
    cfg = simulated(tmp_path, agents=4, rounds=300, drifts=[drift],
                    alerts={"group_wait_seconds": 600})
    service, out = run(cfg)
    rovers = [f"rover-v1-{i:03d}" for i in range(4)]
    assert sorted(m.agent_id for m in out.models) == rovers
    for m in out.models:
        assert delta(domain_from_json(m.model.json_), example("rover-sample-drift.pddl")) == 0
    reduced = [a for a in out.alerts if a.alert_type == "capability_reduced"]
    assert len(reduced) == 1, [a.summary for a in out.alerts]
    (g,) = reduced
    assert g.summary.startswith(f"4 agents of rover-v1: {SAMPLE_CHANGE}")
    # On the wire a grouped alert lists its agents as evidence.agents: agent → evidence.
    assert g.agent_id == "*" and sorted(g.evidence["agents"]) == rovers
    assert all(e["queries"] > 0 for e in g.evidence["agents"].values())
    assert g.severity == "critical" and g.model_version is None
    waiting = [a for a in out.alerts if a.alert_type == "unexplained_inconsistency"]
    assert sorted(a for w in waiting for a in (w.evidence.get("agents") or [w.agent_id])) \
        == rovers  # one per queued assessment, grouped or not
    assert {a.alert_type for a in out.alerts} == {"capability_reduced",
                                                  "unexplained_inconsistency"}
    registry = service.pipeline.metrics.registry
    assert _sample(registry, "capwatch_alerts_total",
                   {"family": "rover-v1", "type": "capability_reduced"}) == 1
    assert _sample(registry, "capwatch_model_versions_total", {"family": "rover-v1"}) == 4


class Unreachable:
    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        raise AgentUnavailable("connection refused")


def _jsonl(tmp_path: Path, name: str, lines: list[str], **overrides: object) -> DaemonConfig:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                  assessment={"max_attempts": 1, "retry_after_s": 0,
                              "agent_retry": {"attempts": 1}}, **overrides)


def _run(cfg: DaemonConfig, **kwargs: object) -> tuple[Service, MemoryPublisher]:
    memory = MemoryPublisher()
    service = build_service(cfg, publisher=memory, agents=Unreachable(),
                            source=JsonlSource(str(cfg.source.path)), **kwargs)  # type: ignore[arg-type]
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    return service, memory


def test_repeats_are_suppressed_across_a_restart(tmp_path: Path) -> None:
    """An agent that keeps contradicting its model while it cannot be assessed raises
    its alerts once per suppression window, not once per queued assessment, even across
    a restart of the daemon."""
    _, out = _run(_jsonl(tmp_path, "a.jsonl", [refused_sample(step=i) for i in range(3)]))
    assert sorted(a.alert_type for a in out.alerts) == ["assessment_failed",
                                                        "unexplained_inconsistency"]
    failed = next(a for a in out.alerts if a.alert_type == "assessment_failed")
    assert "agent unreachable" in failed.summary

    # The agent's stream goes on (the file grew); the restarted daemon resumes after the
    # first three lines and queues a second assessment for the new refusals (with the
    # back-off of failed evidence off: tests/daemon/test_no_loops.py covers that).
    second, again = _run(_jsonl(tmp_path, "a.jsonl",
                                [refused_sample(step=i) for i in range(6)],
                                detection={"unexplained_backoff_s": 0}))
    assert again.alerts == []
    registry = second.pipeline.metrics.registry
    for kind in ("assessment_failed", "unexplained_inconsistency"):
        assert _sample(registry, "capwatch_alerts_suppressed_total", {"type": kind}) == 1
    store = open_store(str(tmp_path / "models.db"))
    try:
        # Both assessments were queued and failed; only the alerts were held back.
        assert len(store.queue_items("failed")) == 2
        rows = store.outbox()
        assert sorted(r.status for r in rows if not r.key.startswith("ended:")) == \
            ["routed"] * 2 + ["suppressed"] * 2
        # Each failure ended its awaiting-assessment alert; endings are never suppressed.
        assert sorted(r.status for r in rows if r.key.startswith("ended:")) == ["routed"] * 2
    finally:
        store.close()


class Sink:
    def __init__(self, failing: bool) -> None:
        self.name = "kafka"
        self.failing = failing
        self.sent: list[Alert] = []

    def send(self, alerts: Sequence[Alert]) -> None:
        if self.failing:
            raise AlertDeliveryError("kafka: broker unreachable")
        self.sent.extend(alerts)


def test_alerts_a_sink_refused_are_delivered_after_a_restart(tmp_path: Path) -> None:
    down = Sink(failing=True)
    # A short retry so the restarted daemon finds the deliveries due at once.
    fast = {"retry_after_s": 0.001}
    first, _ = _run(_jsonl(tmp_path, "a.jsonl", [refused_sample(step=i) for i in range(3)],
                           alerts=fast), alert_sinks=[down])
    assert down.sent == []
    assert _sample(first.pipeline.metrics.registry, "capwatch_alert_delivery_failures_total",
                   {"sink": "kafka"}) >= 1
    up = Sink(failing=False)
    # Nothing new arrives: the restarted daemon only delivers what the outbox holds.
    _run(_jsonl(tmp_path, "empty.jsonl", [], alerts=fast), alert_sinks=[up])
    assert sorted((a.type.value, a.ends_at is not None) for a in up.sent) == [
        ("assessment_failed", False), ("unexplained_inconsistency", False),
        ("unexplained_inconsistency", True)]  # the awaiting alert, and its ending after it
    firing, ending = (a for a in up.sent if a.type.value == "unexplained_inconsistency")
    assert up.sent.index(firing) < up.sent.index(ending)
    assert ending.dedup_key == firing.dedup_key
    store = open_store(str(tmp_path / "models.db"))
    try:
        assert store.deliveries("pending") == []
    finally:
        store.close()


def test_alert_configuration_errors_are_reported(tmp_path: Path) -> None:
    import pytest

    from capwatch.daemon.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="unknown alert type 'capability_lost'"):
        load_config(text="alerts:\n  severity: {capability_lost: critical}\n")
    with pytest.raises(ConfigError, match="enables no sink"):
        load_config(text="alerts:\n  sinks: {output: false}\n")
    with pytest.raises(ConfigError, match="must be http"):
        load_config(text="alerts:\n  sinks: {alertmanager: {url: am:9093}}\n")
    cfg = load_config(text="alerts:\n  severity: {capability_expanded: warning}\n"
                           "  sinks: {log: true, alertmanager: {url: 'http://am:9093'}}\n")
    from capwatch.alerts import AlertType, Severity
    from capwatch.daemon.alerting import build_sinks

    assert cfg.alerts.policy().severities[AlertType.CAPABILITY_EXPANDED] is Severity.WARNING
    assert [s.name for s in build_sinks(cfg.alerts, MemoryPublisher())] == [
        "output", "log", "alertmanager"]


def test_a_published_version_ends_the_awaiting_alert_with_the_same_labels(
        tmp_path: Path) -> None:
    """The "awaiting assessment" alert used to stay open in Alertmanager for
    resolve_after_s (6 h) after the version that answered it: now an ending with the same
    labels and endsAt at the version's time follows it; the Kafka topic (the output sink)
    carries no ending, and the store's alert history lists none."""
    from capwatch.alerts import AlertmanagerSink
    from capwatch.daemon.alerting import PublisherAlertSink

    drift = {"family": "rover-v1", "at_step": 30,
             "domain": str(EXAMPLES / "rover-sample-drift.pddl")}
    am = Sink(failing=False)
    am.name = "alertmanager"
    memory = MemoryPublisher()
    service = build_service(simulated(tmp_path, agents=1, rounds=200, drifts=[drift]),
                            publisher=memory, alert_sinks=[am, PublisherAlertSink(memory)])
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    (version,) = memory.models
    firing, ending = (a for a in am.sent if a.type.value == "unexplained_inconsistency")
    assert firing.ends_at is None and ending.ends_at == version.time
    assert am.sent.index(firing) < am.sent.index(ending)
    firing_am, ending_am = AlertmanagerSink("http://am:9093").payload([firing, ending])
    assert firing_am["labels"] == ending_am["labels"]
    assert ending_am["endsAt"] == version.time.isoformat().replace("+00:00", "Z")
    assert [a.alert_type for a in memory.alerts].count("unexplained_inconsistency") == 1
    store = open_store(str(tmp_path / "models.db"))
    try:
        history = action_store(store).alert_history(limit=100)
        assert not any(r.key.startswith("ended:") for r in history)
        assert len(history) == len(memory.alerts)
    finally:
        store.close()


def test_a_grouped_awaiting_alert_is_ended_when_every_agent_was_assessed(
        tmp_path: Path) -> None:
    """The awaiting alerts of a family-wide drift go out as one "4 agents of ..." alert,
    whose labels no agent's ending names: it used to stay open in Alertmanager for
    resolve_after_s. Now it gets an ending of its own once all four versions are out."""
    from capwatch.alerts import AlertmanagerSink

    drift = {"family": "rover-v1", "at_step": 30,
             "domain": str(EXAMPLES / "rover-sample-drift.pddl")}
    am = Sink(failing=False)
    am.name = "alertmanager"
    memory = MemoryPublisher()
    cfg = simulated(tmp_path, agents=4, rounds=300, drifts=[drift],
                    alerts={"group_wait_by_type": {"unexplained_inconsistency": 600}})
    service = build_service(cfg, publisher=memory, alert_sinks=[am])
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    assert len(memory.models) == 4
    awaiting = [a for a in am.sent if a.type.value == "unexplained_inconsistency"]
    (group,) = [a for a in awaiting if a.ends_at is None]
    assert group.agents is not None and len(group.agents) == 4
    (group_end,) = [a for a in awaiting if a.ends_at is not None and a.agent_id is None]
    assert am.sent.index(group) < am.sent.index(group_end)
    assert group_end.ends_at == max(m.time for m in memory.models)
    firing, ending = AlertmanagerSink("http://am:9093").payload([group, group_end])
    assert firing["labels"] == ending["labels"]


def test_a_finite_run_sends_the_delivery_a_killed_run_held_before_it_exits(
        tmp_path: Path) -> None:
    """A run killed after claiming a delivery and before sending it leaves the delivery
    held for alerts.delivery_lease_s. The next finite run waits the hold out and sends it,
    instead of ending with the alert still in the store."""
    from datetime import UTC, datetime

    from capwatch.alerts.outbox import AlertOutbox, outbox_record
    from capwatch.alerts.policy import AlertPolicy
    from capwatch.alerts.types import inconsistency_alert
    from capwatch.daemon.alerting import PublisherAlertSink
    from tests.daemon.helpers import good_sample

    cfg = _jsonl(tmp_path, "in.jsonl", [good_sample()], alerts={"delivery_lease_s": 1.0})
    now = datetime.now(UTC)
    alert = inconsistency_alert(family="rover-v1", agent_id="rover-a", action="navigate",
                                time=now, contradicted=[])
    store = open_store(str(cfg.store.url))
    try:
        store.add_alerts([outbox_record(alert, "held")])
        killed_run = AlertOutbox(store, [PublisherAlertSink(MemoryPublisher())],
                                 AlertPolicy(group_wait=timedelta(0)))
        killed_run.route(now)
        assert len(store.claim_deliveries(now, 1.0)) == 1  # and then it was killed
    finally:
        store.close()
    _, memory = _run(cfg)
    assert [a.dedup_key for a in memory.alerts] == [alert.dedup_key]
