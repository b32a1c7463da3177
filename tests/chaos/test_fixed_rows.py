"""Rows of issue 12 that are fixed, as they were reproduced: an agent id cannot move a
query elsewhere (row 4); a huge JSONL line is refused before it is in memory (row 11);
hostile domain files give a clear error, not a traceback or a hang (row 12)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.chaos.fake_agent import Recorder
from tests.chaos.harness import (
    CAPWATCH,
    ENV,
    Daemon,
    FleetInput,
    jsonl_config,
    read_sqlite_store,
    run_to_end,
)
from tests.paths import REPO_ROOT


def _one_agent(inp: FleetInput, agent: str, rename: str) -> list[bytes]:
    lines = []
    for line in inp.lines:
        event = json.loads(line)
        if event["agent_id"] == agent:
            event["agent_id"] = rename
            lines.append(json.dumps(event).encode())
    return lines


def test_an_agent_id_cannot_send_queries_elsewhere(
        drift_fleet: FleetInput, recorder: Recorder, tmp_path: Path) -> None:
    hostile = f"{recorder.host_port}/ssrf-0#"
    lines = _one_agent(drift_fleet, drift_fleet.drifted[0], rename=hostile)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    config = jsonl_config(tmp_path, drift_fleet, path, str(tmp_path / "s.db"))
    config["agents"] = {"url_template": "http://{agent_id}.agents.svc:8080", "timeout_s": 2}
    code, _ = run_to_end(config, tmp_path, "ssrf")
    versions, _ = read_sqlite_store(tmp_path / "s.db")
    assert recorder.requests == [], \
        f"capwatch asked {recorder.host_port}: {recorder.requests[:3]}"
    assert versions == {}
    dead = (tmp_path / "out" / "deadletter.jsonl").read_text().splitlines()
    assert len(dead) == len(lines), "records of an invalid agent id must be dead letters"
    assert code == 0



def _peak_rss_mib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def test_a_huge_jsonl_line_is_refused_before_it_is_in_memory(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], tmp_path: Path) -> None:
    valid, families = valid_events
    path = tmp_path / "in.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"type": "transition", "episode_id": "')
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            f.write(chunk)
        f.write(b'"}\n')
        for line in valid[:50]:
            f.write(line + b"\n")
    inp = FleetInput([], [], {}, [], families)
    d = Daemon(jsonl_config(tmp_path, inp, path, str(tmp_path / "s.db")), tmp_path, "huge",
               exit_when_idle=True)
    peak = 0
    while d.proc.poll() is None:
        peak = max(peak, _peak_rss_mib(d.pid))
        time.sleep(0.05)
    code = d.wait(10)
    dead = (tmp_path / "out" / "deadletter.jsonl").read_bytes().splitlines()
    _, committed = read_sqlite_store(tmp_path / "s.db")
    assert code == 0
    assert committed == 51
    assert len(dead) == 1 and len(dead[0]) < 2_000_000, f"{len(dead[0])} byte dead letter"
    assert peak < 300, f"peak RSS {peak} MiB for a 100 MiB line"


def _check(tmp_path: Path, domain_text: bytes) -> subprocess.CompletedProcess[str]:
    domain = tmp_path / "domain.pddl"
    domain.write_bytes(domain_text)
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"families": {"f": {"domain": str(domain)}},
                                  "source": {"kind": "jsonl", "path": "-"}}))
    return subprocess.run([CAPWATCH, "run", "--config", str(config), "--check"], env=ENV,
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)


def test_hostile_domain_files_get_a_clear_error(tmp_path: Path) -> None:
    nested = b"(define (domain d) (:predicates (p)) (:action a :parameters () " \
        b":precondition " + b"(and " * 1000 + b"(p)" + b")" * 1000 + b" :effect (p)))"
    non_utf8 = b"(define (domain d\xff) (:predicates (p)))"
    params = " ".join(f"?x{i}" for i in range(40))
    wide = (f"(define (domain d) (:predicates (p)) (:action a :parameters ({params})"
            f" :precondition (p) :effect (p)))").encode()
    for name, text in [("nested", nested), ("non_utf8", non_utf8), ("wide", wide)]:
        r = _check(tmp_path, text)
        assert "Traceback" not in r.stderr, f"{name}: {r.stderr[-2000:]}"
        assert r.returncode in (0, 2), f"{name}: exit {r.returncode}: {r.stderr[-500:]}"
        if r.returncode == 2:
            assert "domain.pddl" in r.stderr, f"{name}: {r.stderr}"
