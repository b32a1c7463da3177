"""Where alerts go: Alertmanager's v2 API, a structured log (and, through the daemon, its
output: capwatch.daemon.alerting.PublisherAlertSink).

Every sink raises :class:`AlertDeliveryError` when it could not deliver; the outbox
delivers to every sink regardless and records which failed, so a down Alertmanager never
stops alerts from reaching Kafka or the log.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

import structlog

from capwatch.alerts.types import Alert, Severity
from capwatch.contracts.wire import AlertEvent

GROUP_AGENT_ID = "*"
"""``agent_id`` on the wire of an alert that groups several agents (listed in evidence)."""


class AlertDeliveryError(RuntimeError):
    """A sink could not deliver; the message names the sink and the cause."""


class AlertSink(Protocol):
    """Optionally ``max_send_s``: the longest one send should take; the outbox begins a
    send only while the delivery's hold has that long left (AlertOutbox.deliver)."""

    name: str

    def send(self, alerts: Sequence[Alert]) -> None:
        """Deliver all of ``alerts`` or raise :class:`AlertDeliveryError`."""
        ...


def alert_event(alert: Alert) -> AlertEvent:
    """The published wire form (``capwatch.alerts`` topic, docs/wire-formats)."""
    evidence = dict(alert.evidence)
    if alert.agents:
        evidence.setdefault("agents", list(alert.agents))
    return AlertEvent(
        alert_type=alert.type.value, severity=alert.severity.label,  # type: ignore[arg-type]
        agent_id=alert.agent_id if alert.agent_id is not None else GROUP_AGENT_ID,
        family=alert.family, action=alert.action, summary=alert.summary,
        detail=json.loads(json.dumps(dict(alert.detail), default=str)), evidence=evidence,
        dedup_key=alert.dedup_key, model_version=alert.model_version, time=alert.time,
    )


class LogSink:
    """One structlog event per alert, at a level that follows severity."""

    name = "log"

    def __init__(self, logger: Any | None = None) -> None:
        self._log = logger if logger is not None else structlog.get_logger("capwatch.alerts")

    def send(self, alerts: Sequence[Alert]) -> None:
        for a in alerts:
            if a.ends_at is not None:
                self._log.info("alert ended", **a.to_json())
                continue
            level = {Severity.INFO: "info", Severity.WARNING: "warning",
                     Severity.CRITICAL: "error"}[a.severity]
            getattr(self._log, level)("alert", **a.to_json())


class AlertmanagerSink:
    """POST /api/v2/alerts. Alerts are events, not conditions, so each carries ``endsAt``
    ``resolve_after`` its start and Alertmanager resolves it by itself; an ending (the
    same labels, ``ends_at`` set) resolves it earlier."""

    name = "alertmanager"

    def __init__(self, base_url: str, *, timeout_s: float = 5.0,
                 resolve_after: timedelta = timedelta(hours=6),
                 generator_url: str | None = None,
                 opener: Callable[..., Any] = urllib.request.urlopen) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"Alertmanager URL must be http(s): {base_url!r}")
        self.url = base_url.rstrip("/") + "/api/v2/alerts"
        self._timeout_s = timeout_s
        self.max_send_s = 2 * timeout_s
        """The connection and the answer each get ``timeout_s``."""
        self._resolve_after = resolve_after
        self._generator_url = generator_url
        self._open = opener

    def payload(self, alerts: Sequence[Alert]) -> list[dict[str, Any]]:
        body = []
        for a in alerts:
            labels = {"alertname": a.type.alertname, "severity": a.severity.label,
                      "family": a.family, "alert_type": a.type.value,
                      "dedup_key": a.dedup_key}
            if a.agent_id is not None:
                labels["agent_id"] = a.agent_id
            if a.action:
                labels["action"] = a.action
            item: dict[str, Any] = {
                "labels": labels,
                "annotations": {
                    "summary": a.summary,
                    "detail": json.dumps(dict(a.detail), sort_keys=True, default=str),
                    "evidence": json.dumps(dict(a.evidence), sort_keys=True, default=str),
                },
                "startsAt": _rfc3339(a.time.isoformat()),
                "endsAt": _rfc3339((a.ends_at if a.ends_at is not None
                                    else a.time + self._resolve_after).isoformat()),
            }
            if self._generator_url:
                item["generatorURL"] = self._generator_url
            body.append(item)
        return body

    def send(self, alerts: Sequence[Alert]) -> None:
        if not alerts:
            return
        data = json.dumps(self.payload(alerts)).encode()
        req = urllib.request.Request(self.url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with self._open(req, timeout=self._timeout_s) as resp:
                status = int(resp.status)
        except urllib.error.HTTPError as e:
            detail = e.read(500).decode(errors="replace")
            raise AlertDeliveryError(f"alertmanager {self.url}: HTTP {e.code} {detail}") from e
        except (urllib.error.URLError, OSError) as e:
            raise AlertDeliveryError(f"alertmanager {self.url}: {e}") from e
        if status // 100 != 2:
            raise AlertDeliveryError(f"alertmanager {self.url}: HTTP {status}")


def _rfc3339(iso: str) -> str:
    return iso.replace("+00:00", "Z")
