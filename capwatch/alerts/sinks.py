"""Where alerts go: a Kafka topic, Alertmanager's v2 API, a structured log.

Every sink raises :class:`AlertDeliveryError` when it could not deliver; :class:`FanOut`
delivers to all sinks regardless and reports which failed, so a down Alertmanager never
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

from capwatch.adapters.wire import AlertEvent
from capwatch.alerts.types import Alert, Severity

GROUP_AGENT_ID = "*"
"""``agent_id`` on the wire of an alert that groups several agents (listed in evidence)."""


class AlertDeliveryError(RuntimeError):
    """A sink could not deliver; the message names the sink and the cause."""


class AlertSink(Protocol):
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
        family=alert.family, action=alert.action, summary=alert.summary, evidence=evidence,
        dedup_key=alert.dedup_key, model_version=alert.model_version, time=alert.time,
    )


class LogSink:
    """One structlog event per alert, at a level that follows severity."""

    name = "log"

    def __init__(self, logger: Any | None = None) -> None:
        self._log = logger if logger is not None else structlog.get_logger("capwatch.alerts")

    def send(self, alerts: Sequence[Alert]) -> None:
        for a in alerts:
            level = {Severity.INFO: "info", Severity.WARNING: "warning",
                     Severity.CRITICAL: "error"}[a.severity]
            getattr(self._log, level)("alert", **a.to_json())


class KafkaAlertSink:
    """Alert events on a topic, keyed by agent id (the family for grouped alerts) so one
    agent's alerts stay in order."""

    name = "kafka"

    def __init__(self, producer: Any, topic: str = "capwatch.alerts",
                 timeout_s: float = 10.0) -> None:
        self._producer = producer
        self.topic = topic
        self._timeout_s = timeout_s

    @classmethod
    def connect(cls, bootstrap_servers: str, topic: str = "capwatch.alerts",
                **producer_config: Any) -> KafkaAlertSink:
        from kafka import KafkaProducer

        config: dict[str, Any] = {"acks": "all", "retries": 5, "linger_ms": 5}
        config.update(producer_config)
        return cls(KafkaProducer(bootstrap_servers=bootstrap_servers, **config), topic)

    def send(self, alerts: Sequence[Alert]) -> None:
        try:
            futures = []
            for a in alerts:
                key = a.agent_id if a.agent_id is not None else a.family
                value = alert_event(a).model_dump_json(by_alias=True).encode()
                futures.append(self._producer.send(self.topic, key=key.encode(), value=value))
            self._producer.flush(timeout=self._timeout_s)
            for f in futures:
                f.get(timeout=self._timeout_s)
        except Exception as e:
            raise AlertDeliveryError(f"kafka topic {self.topic}: {e}") from e

    def close(self) -> None:
        self._producer.close()


class AlertmanagerSink:
    """POST /api/v2/alerts. Alerts are events, not conditions, so each carries ``endsAt``
    ``resolve_after`` its start and Alertmanager resolves it by itself."""

    name = "alertmanager"

    def __init__(self, base_url: str, *, timeout_s: float = 5.0,
                 resolve_after: timedelta = timedelta(hours=6),
                 generator_url: str | None = None,
                 opener: Callable[..., Any] = urllib.request.urlopen) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"Alertmanager URL must be http(s): {base_url!r}")
        self.url = base_url.rstrip("/") + "/api/v2/alerts"
        self._timeout_s = timeout_s
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
                "endsAt": _rfc3339((a.time + self._resolve_after).isoformat()),
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


class FanOut:
    """Send to every sink; failures are reported, not raised, so one sink cannot block
    another. ``on_failure(sink_name, error)`` is where the daemon counts and logs."""

    name = "fanout"

    def __init__(self, sinks: Sequence[AlertSink],
                 on_failure: Callable[[str, AlertDeliveryError], None] | None = None) -> None:
        self.sinks = list(sinks)
        self._on_failure = on_failure

    def send(self, alerts: Sequence[Alert]) -> None:
        self.deliver(alerts)

    def deliver(self, alerts: Sequence[Alert]) -> dict[str, AlertDeliveryError]:
        failures: dict[str, AlertDeliveryError] = {}
        if not alerts:
            return failures
        for sink in self.sinks:
            try:
                sink.send(alerts)
            except AlertDeliveryError as e:
                failures[sink.name] = e
                if self._on_failure is not None:
                    self._on_failure(sink.name, e)
        return failures
