"""Alerts: what changed, in the model's words, routed to Kafka, Alertmanager and the log."""

from capwatch.alerts.outbox import AlertOutbox, DeliveryReport, outbox_record, plan_routing
from capwatch.alerts.router import AlertPolicy, AlertRouter, merge_group
from capwatch.alerts.sinks import (
    AlertDeliveryError,
    AlertmanagerSink,
    AlertSink,
    FanOut,
    KafkaAlertSink,
    LogSink,
    alert_event,
)
from capwatch.alerts.types import (
    DEFAULT_SEVERITY,
    Alert,
    AlertType,
    Severity,
    alerts_for_model_change,
    alerts_for_version,
    assessment_failed_alert,
    drift_alert,
    inconsistency_alert,
)

__all__ = [
    "DEFAULT_SEVERITY", "Alert", "AlertDeliveryError", "AlertOutbox", "AlertPolicy",
    "AlertRouter", "AlertSink", "AlertType", "AlertmanagerSink", "DeliveryReport", "FanOut",
    "KafkaAlertSink", "LogSink", "Severity", "alert_event", "alerts_for_model_change",
    "alerts_for_version", "assessment_failed_alert", "drift_alert", "inconsistency_alert",
    "merge_group", "outbox_record", "plan_routing",
]
