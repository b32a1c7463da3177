"""Alerts: what changed, in the model's words, routed to Kafka, Alertmanager and the log.

The names below are imported at first use (PEP 562): the daemon's configuration imports
``capwatch.alerts.policy``, which ran this file first, and with it the outbox, the sinks
and the wire formats, before the probes' server could start (docs/performance.md,
"Start-up").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capwatch.lazy import lazy_getattr

if TYPE_CHECKING:
    from capwatch.alerts.outbox import (
        AlertOutbox,
        DeliveryReport,
        outbox_record,
        plan_routing,
    )
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

_MODULE_OF = {
    **dict.fromkeys(("AlertOutbox", "DeliveryReport", "outbox_record", "plan_routing"),
                    "outbox"),
    **dict.fromkeys(("AlertPolicy", "merge_group"), "policy"),
    **dict.fromkeys(("AlertDeliveryError", "AlertmanagerSink", "AlertSink", "LogSink",
                     "alert_event"), "sinks"),
    **dict.fromkeys(("DEFAULT_SEVERITY", "Alert", "AlertType", "Severity",
                     "alerts_for_model_change", "alerts_for_version",
                     "assessment_failed_alert", "inconsistency_alert"), "types"),
}

__getattr__ = lazy_getattr(__name__, _MODULE_OF, globals())
