"""Alerts: what changed, in the model's words, routed to Kafka, Alertmanager and the log."""

from capwatch.alerts.outbox import AlertOutbox, DeliveryReport, outbox_record, plan_routing
from capwatch.alerts.policy import AlertPolicy, merge_group
from capwatch.alerts.sinks import (
    AlertDeliveryError,
    AlertmanagerSink,
    AlertSink,
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
    inconsistency_alert,
)

__all__ = [
    "DEFAULT_SEVERITY", "Alert", "AlertDeliveryError", "AlertOutbox", "AlertPolicy",
    "AlertSink", "AlertType", "AlertmanagerSink", "DeliveryReport", "LogSink", "Severity",
    "alert_event", "alerts_for_model_change", "alerts_for_version",
    "assessment_failed_alert", "inconsistency_alert", "merge_group", "outbox_record",
    "plan_routing",
]
