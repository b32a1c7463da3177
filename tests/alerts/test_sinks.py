"""Sinks against real receivers: an HTTP server on loopback, a Kafka broker, structlog."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from structlog.testing import capture_logs

from capwatch.alerts import (
    Alert,
    AlertDeliveryError,
    AlertmanagerSink,
    AlertType,
    LogSink,
    Severity,
)

T = datetime(2026, 11, 25, 21, 0, tzinfo=UTC)


def alert(agent: str | None = "rover-17", **kw: Any) -> Alert:
    base: dict[str, Any] = dict(
        type=AlertType.CAPABILITY_REDUCED, severity=Severity.CRITICAL, family="rover-v3",
        agent_id=agent, action="sample_rock",
        summary="sample_rock(?r ?s ?w) now requires (battery_full ?r)", time=T,
        fingerprint="fp1", detail={"changes": [1]}, evidence={"queries": 3},
        model_version=2)
    base.update(kw)
    return Alert(**base)


class Receiver:
    """A real HTTP server on 127.0.0.1 that records what is POSTed to it."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[tuple[str, str, bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append((self.path, self.headers["Content-Type"], body))
                self.send_response(outer.status)
                self.end_headers()
                self.wfile.write(b"{}" if outer.status == 200 else b"bad alerts")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_alertmanager_sink_posts_v2_alerts(receiver: Receiver) -> None:
    sink = AlertmanagerSink(receiver.url + "/", resolve_after=timedelta(hours=2),
                            generator_url="http://capwatch:8080/")
    grouped = alert(agent=None, agents=("r1", "r2"), summary="2 agents of rover-v3: x")
    sink.send([alert(), grouped])
    ((path, ctype, body),) = receiver.requests
    assert path == "/api/v2/alerts" and ctype == "application/json"
    sent = json.loads(body)
    assert len(sent) == 2
    first = sent[0]
    assert first["labels"] == {
        "alertname": "CapwatchCapabilityReduced", "severity": "critical",
        "family": "rover-v3", "alert_type": "capability_reduced", "agent_id": "rover-17",
        "action": "sample_rock", "dedup_key": "capability_reduced|rover-v3|rover-17|"
                                              "sample_rock|fp1"}
    assert first["annotations"]["summary"] == alert().summary
    assert json.loads(first["annotations"]["evidence"]) == {"queries": 3}
    assert first["startsAt"] == "2026-11-25T21:00:00Z"
    assert first["endsAt"] == "2026-11-25T23:00:00Z"
    assert first["generatorURL"] == "http://capwatch:8080/"
    # Alertmanager's schema: every label and annotation value is a string.
    for item in sent:
        assert all(isinstance(v, str) for v in item["labels"].values())
        assert all(isinstance(v, str) for v in item["annotations"].values())
    assert "agent_id" not in sent[1]["labels"]


def test_alertmanager_errors_are_delivery_errors() -> None:
    failing = Receiver(status=400)
    try:
        with pytest.raises(AlertDeliveryError, match="HTTP 400 bad alerts"):
            AlertmanagerSink(failing.url).send([alert()])
    finally:
        failing.close()
    closed = Receiver()
    closed.close()
    with pytest.raises(AlertDeliveryError, match="alertmanager"):
        AlertmanagerSink(closed.url, timeout_s=2).send([alert()])
    with pytest.raises(ValueError, match="http"):
        AlertmanagerSink("ftp://x")


def test_log_sink_logs_every_alert_at_its_severity() -> None:
    with capture_logs() as logs:
        LogSink().send([alert(), alert(severity=Severity.INFO, agent="r2")])
    assert [(e["log_level"], e["agent_id"]) for e in logs] == [("error", "rover-17"),
                                                               ("info", "r2")]
    assert logs[0]["summary"] == alert().summary
    assert logs[0]["dedup_key"] == alert().dedup_key


