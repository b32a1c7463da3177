"""Issue 12, rows 4 and 5: agents are addressed only as configured, and their answers are
validated. An agent id must never move a query to another host, port or path; an agent
that lies (empty states, atoms the model does not have, oversized or self-contradicting
answers) must put the assessment in ``failed`` with the reason, never yield a version."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.harness import FleetInput, jsonl_config, read_sqlite_store, run_to_end


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: list[str] = []
        self.rng = random.Random(0)
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append(f"GET {self.path}")
        self._send({"status": "ok"})

    def do_POST(self) -> None:
        self.server.requests.append(f"POST {self.path}")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self._send(self._answer(body))

    def _answer(self, q: dict[str, Any]) -> dict[str, Any]:
        n, state, samples = len(q["plan"]), q["state"], q.get("samples", 1)
        mode = self.server.mode
        if mode == "empty":
            result = {"executed": n, "state": []}
        elif mode == "unknown_atoms":
            result = {"executed": n, "state": [*state, ["teleported", "nowhere"]]}
        elif mode == "wrong_arity":
            result = {"executed": n, "state": [[a[0]] for a in state]}
        elif mode == "oversized":
            result = {"executed": n, "state": [*state, *(["at", f"o{i}", "w"] for i in
                                                       range(400_000))]}
        else:  # contradictory: the same question answered at random
            result = {"executed": self.server.rng.randint(0, n), "state":
                      self.server.rng.sample(state, self.server.rng.randint(0, len(state)))}
        return {"results": [result] * samples}

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def recorder(request: pytest.FixtureRequest) -> Iterator[_Recorder]:
    server = _Recorder(getattr(request, "param", "empty"))
    t = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _one_agent(inp: FleetInput, agent: str, rename: str | None = None) -> list[bytes]:
    lines = []
    for line in inp.lines:
        event = json.loads(line)
        if event["agent_id"] == agent:
            if rename is not None:
                event["agent_id"] = rename
            lines.append(json.dumps(event).encode())
    return lines


def _failing_fast(config: dict[str, Any]) -> dict[str, Any]:
    config["assessment"] = {**config["assessment"], "max_attempts": 1,
                            "agent_retry": {"attempts": 1}}
    return config


def test_an_agent_id_cannot_send_queries_elsewhere(
        drift_fleet: FleetInput, recorder: _Recorder, tmp_path: Path) -> None:
    host, port = recorder.server_address[:2]
    hostile = f"{host}:{port}/ssrf-0#"
    lines = _one_agent(drift_fleet, drift_fleet.drifted[0], rename=hostile)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    config = _failing_fast(jsonl_config(tmp_path, drift_fleet, path, str(tmp_path / "s.db")))
    config["agents"] = {"url_template": "http://{agent_id}.agents.svc:8080", "timeout_s": 2}
    code, _ = run_to_end(config, tmp_path, "ssrf")
    versions, _ = read_sqlite_store(tmp_path / "s.db")
    assert recorder.requests == [], f"capwatch asked {host}:{port}: {recorder.requests[:3]}"
    assert versions == {}
    dead = (tmp_path / "out" / "deadletter.jsonl").read_text().splitlines()
    assert len(dead) == len(lines), "records of an invalid agent id must be dead letters"
    assert code == 0


@pytest.mark.parametrize("recorder", ["empty", "unknown_atoms", "wrong_arity", "oversized",
                                      "contradictory"], indirect=True)
def test_a_lying_agent_yields_a_failed_assessment_not_a_version(
        drift_fleet: FleetInput, recorder: _Recorder, tmp_path: Path) -> None:
    agent = drift_fleet.drifted[0]
    lines = _one_agent(drift_fleet, agent)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    host, port = recorder.server_address[:2]
    config = _failing_fast(jsonl_config(tmp_path, drift_fleet, path, str(tmp_path / "s.db")))
    config["agents"] = {"urls": {agent: f"http://{host}:{port}"}, "timeout_s": 10}
    code, _ = run_to_end(config, tmp_path, "liar")
    versions, _ = read_sqlite_store(tmp_path / "s.db")
    alerts = [json.loads(a) for a in
              (tmp_path / "out" / "alerts.jsonl").read_text().splitlines()]
    assert recorder.requests, "the agent was never asked"
    assert versions == {}, f"a version from a lying agent ({recorder.mode})"
    failed = [a for a in alerts if a["alert_type"] == "assessment_failed"]
    assert failed, [a["alert_type"] for a in alerts]
    assert code == 0
