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


def _get(url: str, method: str = "GET", token: str | None = None
         ) -> tuple[int, str, str]:
    req = urllib.request.Request(url, method=method,
                                 data=b"{}" if method not in ("GET", "HEAD") else None)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def _error(body: str) -> dict[str, Any]:
    """The agent query protocol's error form, the one capwatch's API answers with too."""
    data = json.loads(body)
    assert set(data) == {"error"} and set(data["error"]) == {"code", "message", "details"}
    error: dict[str, Any] = data["error"]
    return error


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
                            example("rover-sample-drift.pddl"), T0, parent=base,
                            evidence={"assessment": {"coverage": {
                                "confirmed": 30, "carried_over": 0, "unresolved": 2,
                                "carried_over_actions": [], "unresolved_actions": ["top_up"],
                                "unresolved_pal_tuples": ["a", "b"]}}}))
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
    # Unknown stays unknown (issue 11): what the assessment could not check.
    assert model["coverage"]["unresolved_actions"] == ["top_up"]
    assert model["coverage"]["unchecked"].startswith("2 capabilities could not be checked")
    versions = _json(server.url + "/api/v1/agents/rover-a/versions")
    assert [v["version"] for v in versions] == [1]
    assert versions[0]["unchecked"] == model["coverage"]["unchecked"]
    assert any("now requires (battery_full ?r)" in s for s in versions[0]["summary"])
    base = _json(server.url + "/api/v1/agents/_baseline/model?family=rover-v1")
    assert base["ref"]["agent_id"] is None and base["coverage"] is None
    # Another agent of the family runs the baseline until it drifts.
    other = _json(server.url + "/api/v1/agents/rover-b/model?family=rover-v1")
    assert other["ref"]["agent_id"] is None
    diff = _json(server.url + "/api/v1/agents/_baseline/diff?family=rover-v1&from=1&to=1")
    assert diff["delta"] == 0
    # Against the family baseline (the default): what the agent's drift changed.
    diff = _json(server.url + "/api/v1/agents/rover-a/diff")
    assert diff["a"] == {"family": "rover-v1", "agent_id": None, "version": 1}
    assert diff["b"]["agent_id"] == "rover-a" and diff["delta"] > 0
    assert diff == _json(server.url + "/api/v1/agents/rover-a/diff?from=baseline&to=1")
    alerts = _json(server.url + "/api/v1/alerts")
    assert [a["dedup_key"] for a in alerts] == ["k"]


@pytest.mark.parametrize(("path", "status", "code", "words"), [
    ("/nope", 404, "not_found", "no such path"),
    ("/api/v1/agents/rover-b/model", 404, "not_found", "unknown agent 'rover-b'"),
    ("/api/v1/agents/rover-a/versions/9", 404, "not_found", "no version 9"),
    ("/api/v1/agents/rover-a/versions/x", 400, "invalid_request", "must be a number"),
    ("/api/v1/agents/rover-a/diff?from=x", 400, "invalid_request", "must be a number"),
    ("/api/v1/agents/ghost/model?family=nope", 404, "not_found", "no model"),
    ("/api/v1/alerts?limit=abc", 400, "invalid_request", "limit must be a whole number"),
    ("/api/v1/alerts?limit=0", 400, "invalid_request", "from 1 to 200"),
])
def test_bad_requests_get_clear_errors(api: Any, path: str, status: int, code: str,
                                       words: str) -> None:
    server, _ = api
    got, ctype, body = _get(server.url + path)
    error = _error(body)
    assert got == status and ctype == "application/json"
    assert error["code"] == code and words in error["message"]


def test_writes_need_the_token_and_reads_may(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    registry = CollectorRegistry()
    open_api = ApiServer(store, registry, ready=lambda: True, families_of=lambda a: None,
                         alerts=RecentAlerts()).start()
    locked = ApiServer(store, registry, ready=lambda: True, families_of=lambda a: None,
                       alerts=RecentAlerts(), token="s3cret", read_auth=True).start()
    try:
        # Without a token configured, nothing can be written.
        status, _, body = _get(open_api.url + "/api/v1/agents", "POST")
        assert status == 403 and _error(body)["code"] == "forbidden"
        assert _get(open_api.url + "/api/v1/agents")[0] == 200
        # With one: reads and writes need it; probes and metrics never do.
        for method in ("GET", "POST", "DELETE"):
            status, _, body = _get(locked.url + "/api/v1/agents", method)
            assert status == 401 and _error(body)["code"] == "unauthorized"
            status, _, _ = _get(locked.url + "/api/v1/agents", method, token="wrong")
            assert status == 401
        assert _get(locked.url + "/api/v1/agents", token="s3cret")[0] == 200
        status, _, body = _get(locked.url + "/api/v1/agents", "POST", token="s3cret")
        assert status == 405 and _error(body)["code"] == "method_not_allowed"
        for path in ("/healthz", "/readyz", "/metrics"):
            assert _get(locked.url + path)[0] == 200, path
    finally:
        open_api.close()
        locked.close()
        store.close()


def test_health_is_served_while_the_daemon_is_still_starting(tmp_path: Path) -> None:
    waiting = {"on": "waiting for Kafka at kafka:9092"}
    server = ApiServer(None, CollectorRegistry(), ready=lambda: False,
                       families_of=lambda a: None, alerts=RecentAlerts(),
                       starting=lambda: waiting["on"]).start()
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        assert _get(server.url + "/healthz")[0] == 200
        status, _, body = _get(server.url + "/readyz")
        assert status == 503
        assert json.loads(body)["problems"] == ["starting: waiting for Kafka at kafka:9092"]
        status, _, body = _get(server.url + "/api/v1/agents")
        assert status == 503 and _error(body)["code"] == "starting"
        server.attach(store, ready=lambda: True, families_of=lambda a: None)
        assert _json(server.url + "/readyz") == {"ready": True, "problems": []}
        assert _json(server.url + "/api/v1/agents") == []
    finally:
        server.close()
        store.close()


def test_a_standing_by_note_goes_only_beside_a_200(tmp_path: Path) -> None:
    """The problems and the notes are each asked afresh; a group that settled between the
    two gave a 503 saying "no partitions held" and "standing by" at once (a flaky
    integration test, tests/integration/test_daemon_health.py)."""
    problems = {"now": ["no partitions held for 4 s: the group g is PreparingRebalance"]}
    note = ["standing by: the group g has 2 members for 1 partitions"]
    server = ApiServer(None, CollectorRegistry(), ready=lambda: False,
                       families_of=lambda a: None, alerts=RecentAlerts()).start()
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        server.attach(store, ready=lambda: not problems["now"], families_of=lambda a: None,
                      problems=lambda: problems["now"], notes=lambda: note)
        status, _, body = _get(server.url + "/readyz")
        assert status == 503
        assert json.loads(body) == {"ready": False, "problems": problems["now"]}
        problems["now"] = []
        assert _json(server.url + "/readyz") == {"ready": True, "problems": [],
                                                 "notes": note}
    finally:
        server.close()
        store.close()


def test_alerts_include_what_other_replicas_let_out(tmp_path: Path) -> None:
    from capwatch.alerts.outbox import AlertOutbox, outbox_record
    from capwatch.alerts.sinks import LogSink
    from capwatch.alerts.types import inconsistency_alert

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    # Another replica wrote and routed this alert: it is only in the shared store.
    other = inconsistency_alert(family="rover-v1", agent_id="rover-z", action="sample_rock",
                                time=datetime(2026, 11, 1, 13, tzinfo=UTC), contradicted=[],
                                header="sample_rock(?r ?s ?w)", evidence={})
    store.add_alerts([outbox_record(other, "other-replica")])
    AlertOutbox(store, [LogSink()]).run_once(datetime(2026, 11, 1, 14, tzinfo=UTC), force=True)
    mine = RecentAlerts()
    mine.add(AlertEvent(alert_type="capability_reduced", severity="critical",
                        agent_id="rover-a", family="rover-v1", summary="s", dedup_key="k",
                        time=T0))
    server = ApiServer(store, CollectorRegistry(), ready=lambda: True,
                       families_of=lambda a: None, alerts=mine).start()
    try:
        alerts = _json(server.url + "/api/v1/alerts")
        assert [(a["agent_id"], a["alert_type"]) for a in alerts] == [
            ("rover-z", "unexplained_inconsistency"), ("rover-a", "capability_reduced")]
        assert len(_json(server.url + "/api/v1/alerts?limit=1")) == 1
    finally:
        server.close()
        store.close()


def test_a_port_in_use_is_named_with_the_settings_that_chose_it() -> None:
    # `capwatch run` printed only "[Errno 98] Address already in use": which address, and
    # which setting, was left to guess (the HTTP server also serves ingest and /metrics).
    first = ApiServer(None, CollectorRegistry(), ready=lambda: True,
                      families_of=lambda a: None, alerts=RecentAlerts()).start()
    try:
        with pytest.raises(OSError) as e:
            ApiServer(None, CollectorRegistry(), ready=lambda: True,
                      families_of=lambda a: None, alerts=RecentAlerts(), port=first.port)
        assert f"127.0.0.1:{first.port}" in str(e.value)
        assert "http.host, http.port" in str(e.value)
        assert "Address already in use" in str(e.value)
    finally:
        first.close()


def test_api_assess_refuses_an_agent_the_store_has_not_seen_in_the_family(
        tmp_path: Path) -> None:
    """oper20: POST /api/v1/actions {"kind": "assess", "agent_id": "nosuch"} was queued (and
    failed five attempts on a 404), and the recorded action made "nosuch" a known agent;
    an agent of another family was queued to be asked that family's queries."""
    from capwatch.console.web import Console
    from capwatch.models_store.actions import action_store

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    rover = build_version(ModelRef("rover-v1", None, 1), example("rover.pddl"), T0)
    store.put(rover)
    store.put(build_version(ModelRef("rover-v1", "rover-a", 1),
                            example("rover-sample-drift.pddl"), T0, parent=rover))
    store.put(build_version(ModelRef("courier-v1", None, 1), example("rover.pddl"), T0))
    server = ApiServer(store, CollectorRegistry(), ready=lambda: True,
                       families_of=lambda a: None, alerts=RecentAlerts(),
                       token="s3cret").start()
    server.console = Console(store, token="s3cret")

    def assess(family: str, agent: str) -> tuple[int, str, Any]:
        req = urllib.request.Request(
            server.url + "/api/v1/actions", method="POST",
            data=json.dumps({"kind": "assess", "family": family, "agent_id": agent,
                             "actor": "ci-bot", "reason": "why not"}).encode(),
            headers={"Authorization": "Bearer s3cret", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.headers["Content-Type"], json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, e.headers["Content-Type"], json.loads(e.read())

    try:
        status, ctype, body = assess("rover-v1", "nosuch")
        assert (status, ctype) == (404, "application/json")
        assert "has not seen agent nosuch in family rover-v1" in body["error"]
        status, _, body = assess("courier-v1", "rover-a")
        assert status == 404
        assert "in family courier-v1 (it knows it in rover-v1)" in body["error"]
        # Nothing was queued or recorded: the typo is not an agent now.
        s = action_store(store)
        assert s.actions() == [] and store.queue_items() == []
        assert ("rover-v1", "nosuch") not in s.known_agents()
        status, _, body = assess("rover-v1", "rover-a")
        assert status == 201 and body["kind"] == "assess" and body["agent_id"] == "rover-a"
    finally:
        server.close()
        store.close()
