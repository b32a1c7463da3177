"""The HTTP endpoints: health, readiness, metrics and the read API over a real store."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from capwatch.contracts.wire import AlertEvent
from capwatch.daemon.http import ApiServer, RecentAlerts
from capwatch.models_store import ModelRef, build_version, open_store
from tests.daemon.helpers import example

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def _json(url: str) -> Any:
    status, _, body = _get(url)
    assert status == 200, body
    return json.loads(body)


@pytest.fixture
def api(tmp_path: Path) -> Any:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    base = build_version(ModelRef("rover-v1", None, 1), example("rover.pddl"), T0)
    store.put(base)
    store.put(build_version(ModelRef("rover-v1", "rover-a", 1),
                            example("rover-sample-drift.pddl"), T0, parent=base))
    registry = CollectorRegistry()
    Counter("capwatch_test_total", "A test counter.", registry=registry).inc(3)
    alerts = RecentAlerts()
    alerts.add(AlertEvent(alert_type="capability_reduced", severity="critical",
                          agent_id="rover-a", family="rover-v1", summary="s", dedup_key="k",
                          time=T0))
    ready = {"value": True}
    server = ApiServer(store, registry, ready=lambda: ready["value"],
                       families_of=lambda a: "rover-v1" if a == "rover-a" else None,
                       alerts=alerts).start()
    yield server, ready
    server.close()
    store.close()


def test_health_readiness_and_metrics(api: Any) -> None:
    server, ready = api
    assert _get(server.url + "/healthz")[0] == 200
    assert _json(server.url + "/readyz") == {"ready": True, "problems": []}
    ready["value"] = False
    status, _, body = _get(server.url + "/readyz")
    assert status == 503 and "not consuming" in body
    status, ctype, body = _get(server.url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert "capwatch_test_total 3.0" in body


def test_read_api_models_versions_diff_and_alerts(api: Any) -> None:
    server, _ = api
    agents = _json(server.url + "/api/v1/agents")
    assert {(a["agent_id"], a["latest_version"]) for a in agents} == {("_baseline", 1),
                                                                      ("rover-a", 1)}
    model = _json(server.url + "/api/v1/agents/rover-a/model")
    assert model["ref"] == {"family": "rover-v1", "agent_id": "rover-a", "version": 1}
    status, ctype, pddl = _get(server.url + "/api/v1/agents/rover-a/model?format=pddl")
    assert status == 200 and ctype.startswith("text/plain")
    assert "(battery_full ?r)" in pddl.split(":action sample_rock")[1].split(":effect")[0]
    versions = _json(server.url + "/api/v1/agents/rover-a/versions")
    assert [v["version"] for v in versions] == [1]
    assert any("now requires (battery_full ?r)" in s for s in versions[0]["summary"])
    base = _json(server.url + "/api/v1/agents/_baseline/model?family=rover-v1")
    assert base["ref"]["agent_id"] is None
    # Another agent of the family runs the baseline until it drifts.
    other = _json(server.url + "/api/v1/agents/rover-b/model?family=rover-v1")
    assert other["ref"]["agent_id"] is None
    diff = _json(server.url + "/api/v1/agents/_baseline/diff?family=rover-v1&from=1&to=1")
    assert diff["delta"] == 0
    alerts = _json(server.url + "/api/v1/alerts")
    assert [a["dedup_key"] for a in alerts] == ["k"]


@pytest.mark.parametrize(("path", "status", "words"), [
    ("/nope", 404, "no such path"),
    ("/api/v1/agents/rover-b/model", 400, "add ?family="),
    ("/api/v1/agents/rover-a/versions/9", 404, "no version 9"),
    ("/api/v1/agents/rover-a/versions/x", 400, "must be a number"),
    ("/api/v1/agents/rover-a/diff?from=1", 400, "diff needs"),
    ("/api/v1/agents/ghost/model?family=nope", 404, "no model"),
])
def test_bad_requests_get_clear_errors(api: Any, path: str, status: int, words: str) -> None:
    server, _ = api
    got, _, body = _get(server.url + path)
    assert got == status and words in json.loads(body)["error"]
