"""Red-team rerun of issue 12 (session 3): an agent whose answers are each valid but do
not hold together. It answers every query as one of two reference agents, the drifted
one or one still on the old model (chosen from the query's bytes), and as the other one
when the same query comes again. Before the second asking (``assessment.confirm_queries``)
the engine learnt a model explaining every answer it got once, and capwatch published it:
a wrong version (Δ 1-2 to the agent's true model). Now the assessment fails, with the
reason, and no version is published (the final check, session 15, may catch it first)."""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.chaos.harness import (
    EXAMPLES,
    AgentProcess,
    FleetInput,
    jsonl_config,
    read_sqlite_store,
    run_to_end,
)


class TwoFaced(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, faces: tuple[str, str], salt: bytes) -> None:
        self.faces = faces
        self.salt = salt
        self.asked: dict[bytes, int] = {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Forward)


class _Forward(BaseHTTPRequestHandler):
    server: TwoFaced

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._forward(self.server.faces[0], None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            n = self.server.asked.get(body, 0)
            self.server.asked[body] = n + 1
        pick = (hashlib.sha256(self.server.salt + body).digest()[0] + n) % 2
        self._forward(self.server.faces[pick], body)

    def _forward(self, base: str, body: bytes | None) -> None:
        req = urllib.request.Request(base + self.path, data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, data = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def old_model_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    agent = AgentProcess(EXAMPLES / "rover.pddl", EXAMPLES / "rover-problem.pddl", 5,
                         tmp_path_factory.mktemp("old") / "agent.log")
    try:
        yield agent.url
    finally:
        agent.stop()


@pytest.mark.parametrize("salt", [b"3", b"random"])
def test_a_two_faced_agent_yields_a_failed_assessment_not_a_wrong_version(
        drift_fleet: FleetInput, old_model_agent: str, tmp_path: Path, salt: bytes) -> None:
    agent = drift_fleet.drifted[0]
    lines = [line for line in drift_fleet.lines if json.loads(line)["agent_id"] == agent]
    proxy = TwoFaced((drift_fleet.urls[agent], old_model_agent), salt)
    thread = threading.Thread(target=proxy.serve_forever, args=(0.1,), daemon=True)
    thread.start()
    try:
        path = tmp_path / "in.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        config = jsonl_config(tmp_path, drift_fleet, path, str(tmp_path / "s.db"))
        config["agents"] = {"urls": {agent: f"http://127.0.0.1:{proxy.server_address[1]}"},
                            "timeout_s": 10}
        config["assessment"] = {**config["assessment"], "max_attempts": 1}
        code, daemon = run_to_end(config, tmp_path, "two-faced")
    finally:
        proxy.shutdown()
        proxy.server_close()
    versions, committed = read_sqlite_store(tmp_path / "s.db")
    truth = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    wrong = {k: delta(domain_from_json(m), truth) for k, m in versions.items()
             if delta(domain_from_json(m), truth) != 0}
    assert wrong == {}, f"a wrong version from a two-faced agent: Δ {wrong}"
    alerts = [json.loads(a) for a in (tmp_path / "out" / "alerts.jsonl").read_text()
              .splitlines()]
    failed = [a for a in alerts if a["alert_type"] == "assessment_failed"]
    assert failed, [a["alert_type"] for a in alerts]
    # Caught by asking a query again ("answered differently") or, since session 15, by
    # the final check first: an action refused where the evidence says it surely runs.
    reason = json.dumps(failed[0])
    assert "answered differently" in reason or "answers otherwise than a model would" in reason
    assert proxy.asked, "the agent was never asked"
    assert code == 0 and committed == len(lines) and daemon.tracebacks() == 0
