"""Wiring the alert outbox into the daemon: sinks from the configuration, metrics, and
the outbox keys that make every alert's cause write it exactly once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from capwatch.alerts.outbox import AlertOutbox
from capwatch.alerts.sinks import (
    AlertDeliveryError,
    AlertmanagerSink,
    AlertSink,
    LogSink,
    alert_event,
)
from capwatch.alerts.types import Alert
from capwatch.contracts.ports import Publisher
from capwatch.daemon.config import AlertsConfig
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.models_store.base import ModelStore, ModelVersion, OutboxAlert


class PublisherAlertSink:
    """The output's alert stream (Kafka alerts topic, alerts.jsonl, the log) as a sink.

    Named ``output`` whatever the output kind, so deliveries routed before a change of
    output kind still go to the new one after a restart.
    """

    name = "output"

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher

    def send(self, alerts: Sequence[Alert]) -> None:
        try:
            for a in alerts:
                self.publisher.alert(alert_event(a))
            self.publisher.flush()
        except Exception as e:
            raise AlertDeliveryError(f"output: {type(e).__name__}: {e}") from e


def build_sinks(config: AlertsConfig, publisher: Publisher) -> list[AlertSink]:
    sinks: list[AlertSink] = []
    if config.sinks.output:
        sinks.append(PublisherAlertSink(publisher))
    if config.sinks.log:
        sinks.append(LogSink())
    am = config.sinks.alertmanager
    if am is not None:
        sinks.append(AlertmanagerSink(am.url, timeout_s=am.timeout_s,
                                      resolve_after=timedelta(seconds=am.resolve_after_s),
                                      generator_url=am.generator_url))
    return sinks


def build_outbox(config: AlertsConfig, store: ModelStore, sinks: Sequence[AlertSink],
                 metrics: DaemonMetrics) -> AlertOutbox:
    def routed(alert: Alert) -> None:
        metrics.alerts.labels(alert.family, alert.type.value).inc()

    def suppressed(row: OutboxAlert) -> None:
        metrics.alerts_suppressed.labels(row.alert_type).inc()

    def failed(sink: str, error: AlertDeliveryError) -> None:
        metrics.alert_delivery_failures.labels(sink).inc()

    return AlertOutbox(store, sinks, config.policy(),
                       retry_after=timedelta(seconds=config.retry_after_s),
                       max_retry_after=timedelta(seconds=config.max_retry_after_s),
                       on_routed=routed, on_suppressed=suppressed, on_failure=failed)


# Outbox keys: one cause, one key, so a retried or replayed write adds nothing.

def version_alert_key(version: ModelVersion, alert: Alert) -> str:
    return f"version:{version.ref}|{alert.dedup_key}"


def queued_alert_key(assessment_key: str) -> str:
    return f"queued:{assessment_key}"


def failed_alert_key(assessment_key: str) -> str:
    return f"failed:{assessment_key}"
