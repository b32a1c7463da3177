"""The metrics capwatch exports: names pass promtool, labels stay bounded, and a real
Prometheus server scrapes them from the daemon's HTTP endpoint."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from capwatch.contracts.ports import PartitionFailing
from capwatch.daemon.http import ApiServer, RecentAlerts
from capwatch.daemon.metrics import OTHER, DaemonMetrics, FailingPartitions, StoreWrites
from capwatch.models_store.sqlite import SqliteModelStore
from tests.support.prometheus_server import prometheus_binary, start_prometheus

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None,
                                    reason="promtool missing: apt-get install -y prometheus")


def exercised() -> DaemonMetrics:
    """Every metric with at least one sample, as a busy daemon would have them."""
    m = DaemonMetrics()
    m.records.labels("capwatch.transitions").inc(10)
    m.transitions.labels("rover-v3", "sample_rock", "applied").inc(7)
    m.transitions.labels("rover-v3", "sample_rock", "inconsistent").inc()
    m.inconsistencies.labels("rover-v3", "sample_rock").inc()
    m.dead_letters.labels("schema").inc()
    m.family_moves.labels("parking", "wh").inc()
    m.drift_tests.labels("courier", "pick", "sequential").inc(3)
    m.drift_tests.labels("courier", "pick", "audit").inc()
    m.drift_alarms.labels("courier", "pick").inc()
    m.assessments_queued.labels("rover-v3").inc()
    m.assessments.labels("rover-v3", "changed").inc()
    m.assessment_seconds.labels("rover-v3").observe(1.7)
    m.queries.labels("rover-v3").inc(4)
    m.model_versions.labels("rover-v3").inc()
    m.alerts.labels("rover-v3", "capability_reduced").inc()
    m.alerts_suppressed.labels("capability_reduced").inc()
    m.alert_delivery_failures.labels("alertmanager").inc()
    # Read from the store in a daemon (fleet_drift.py, tests/daemon/test_drift_gauges.py).
    m.model_delta.labels("rover-v3").set(5)
    m.agents_drifted.labels("rover-v3").set(1)
    m.agents.set(3)
    m.pending.set(1)
    m.lag.labels("0").set(12)
    m.lag_seconds.labels("0").set(4.5)
    m.last_record.labels("capwatch.transitions").set(1_790_000_000.0)
    m.canaries.labels("rover-v3", "applied").inc()
    # The service registers this collector over its store (service.py).
    m.registry.register(StoreWrites(lambda: {"model_versions": "DiskFull: disk is full"},
                                    {"model_versions": 1}))
    # And this one over a Kafka source that reports failing partitions (service.py).
    failing = {2: PartitionFailing(3, 1_790_000_000.0, "CorruptRecordError: bad batch")}
    m.registry.register(FailingPartitions(lambda: failing, 2))
    return m


@needs_promtool
def test_promtool_check_metrics_accepts_the_exposition() -> None:
    text = exercised().exposition()
    assert PROMTOOL is not None
    run = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                         timeout=60)
    assert run.returncode == 0, (run.stdout + run.stderr).decode()
    assert run.stdout.strip() == b"" and run.stderr.strip() == b""


def test_every_issue_metric_is_exported_without_agent_labels() -> None:
    families = {f.name: f for f in text_string_to_metric_families(
        exercised().exposition().decode())}
    for name in ["capwatch_transitions", "capwatch_inconsistencies", "capwatch_drift_tests",
                 "capwatch_drift_alarms", "capwatch_model_delta_from_baseline",
                 "capwatch_agent_queries", "capwatch_assessment_duration_seconds",
                 "capwatch_alerts", "capwatch_consumer_lag", "capwatch_dead_letters",
                 "capwatch_consumer_lag_seconds", "capwatch_last_record_timestamp_seconds",
                 "capwatch_agents_drifted"]:
        assert name in families, name
    # The process collector a registry of our own lacks by default.
    for name in ["process_cpu_seconds", "process_resident_memory_bytes",
                 "process_start_time_seconds", "process_open_fds", "python_info"]:
        assert name in families, name
    for f in families.values():
        for sample in f.samples:
            assert "agent_id" not in sample.labels and "agent" not in sample.labels


def test_label_values_beyond_the_limit_fold_into_other() -> None:
    m = DaemonMetrics(label_limits={"action": 3})
    for i in range(10):
        m.transitions.labels("f", f"a{i}", "applied").inc()
    samples = [s for f in text_string_to_metric_families(m.exposition().decode())
               if f.name == "capwatch_transitions" for s in f.samples
               if s.name == "capwatch_transitions_total"]
    by_action = {s.labels["action"]: s.value for s in samples}
    assert by_action == {"a0": 1, "a1": 1, "a2": 1, OTHER: 7}
    with pytest.raises(ValueError, match="expected labels"):
        m.transitions.labels("f", "a0")


@pytest.mark.integration
@pytest.mark.skipif(prometheus_binary() is None,
                    reason="prometheus missing: apt-get install -y prometheus")
def test_real_prometheus_scrapes_the_daemon_endpoint(tmp_path: Path) -> None:
    metrics = exercised()
    store = SqliteModelStore(tmp_path / "m.db")
    api = ApiServer(store, metrics.registry, ready=lambda: True, families_of=lambda a: None,
                    alerts=RecentAlerts()).start()
    prom = start_prometheus([api.url.removeprefix("http://")])
    try:
        result = prom.wait_for('capwatch_transitions_total{verdict="inconsistent"}')
        (series,) = result
        assert series["metric"]["family"] == "rover-v3"
        assert series["metric"]["action"] == "sample_rock"
        assert float(series["value"][1]) == 1.0
        up = prom.query('up{job="capwatch"}')
        assert [float(s["value"][1]) for s in up] == [1.0]
    finally:
        prom.stop()
        api.close()
        store.close()


@pytest.mark.integration
@pytest.mark.skipif(prometheus_binary() is None,
                    reason="prometheus missing: apt-get install -y prometheus")
def test_a_familys_first_version_and_alert_count_in_increase(tmp_path: Path) -> None:
    """The daemon's event counters start at 0 for every configured family, so a real
    Prometheus' increase() counts the first event. Before, the series was born at 1 with
    the event, and increase() never counts a series' first sample: oper18 saw the
    dashboard's 24 h alerts panel (then titled "Capability alerts") and versions panel at
    0 after a version and two alerts of family wh."""
    from capwatch.daemon.service import build_service
    from tests.daemon.helpers import config, good_sample

    path = tmp_path / "in.jsonl"
    path.write_text(good_sample() + "\n")
    service = build_service(config(tmp_path, source={"kind": "jsonl", "path": str(path)}))
    metrics = service.pipeline.metrics
    exposed = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(metrics.exposition().decode())
               for s in f.samples}
    assert exposed[("capwatch_model_versions_total", (("family", "rover-v1"),))] == 0
    assert exposed[("capwatch_alerts_total", (("family", "rover-v1"),
                                              ("type", "capability_reduced")))] == 0
    assert exposed[("capwatch_drift_alarms_total", (("action", "sample_rock"),
                                                    ("family", "rover-v1")))] == 0
    assert exposed[("capwatch_dead_letters_total", (("reason", "vocabulary"),))] == 0
    store = SqliteModelStore(tmp_path / "m.db")
    api = ApiServer(store, metrics.registry, ready=lambda: True, families_of=lambda a: None,
                    alerts=RecentAlerts()).start()
    prom = start_prometheus([api.url.removeprefix("http://")])
    try:
        prom.wait_for('capwatch_model_versions_total{family="rover-v1"} == 0')
        # What a worker and the alert router do with the family's first version.
        metrics.model_versions.labels("rover-v1").inc()
        metrics.alerts.labels("rover-v1", "capability_reduced").inc()
        prom.wait_for('capwatch_model_versions_total{family="rover-v1"} == 1')
        prom.wait_for('capwatch_alerts_total{type="capability_reduced"} == 1')
        versions = prom.query('sum(increase(capwatch_model_versions_total[1h]))')
        alerts = prom.query('sum(increase(capwatch_alerts_total[1h]))')
        assert float(versions[0]["value"][1]) >= 1.0
        assert float(alerts[0]["value"][1]) >= 1.0
    finally:
        prom.stop()
        api.close()
        store.close()
        service.pipeline.source.close()
        service.pipeline.store.close()
        if service.api is not None:
            service.api.close()
