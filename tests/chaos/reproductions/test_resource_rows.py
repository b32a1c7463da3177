"""Issue 12, rows 9 and 10: an agent that moves to another family keeps its evidence;
idle connections cannot exhaust the HTTP servers. (Rows 11 and 12 are fixed: see
tests/chaos/test_fixed_rows.py.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from tests.chaos.harness import (
    EXAMPLES,
    AgentProcess,
    Daemon,
    FleetInput,
    jsonl_config,
    run_to_end,
)
from tests.support._proc import free_port, wait_until

COURIER = {"domain": str(EXAMPLES / "courier.pddl"),
           "problem": str(EXAMPLES / "courier-problem.pddl")}


def _courier_event(agent: str) -> bytes:
    state = [["at_robot", "robot1", "hall"], ["free", "robot1"], ["at", "parcel1", "hall"],
             ["at", "parcel2", "lab"]]
    after = [["at_robot", "robot1", "lab"], ["free", "robot1"], ["at", "parcel1", "hall"],
             ["at", "parcel2", "lab"]]
    return json.dumps({"type": "transition", "agent_id": agent, "family": "courier-v1",
                       "state": state, "action": ["move", "robot1", "hall", "lab"],
                       "next_state": after, "executed": True}).encode()


def test_an_agent_moving_to_another_family_keeps_its_buffered_evidence(
        drift_fleet: FleetInput, tmp_path: Path) -> None:
    agent = drift_fleet.drifted[0]
    events = [json.loads(line) for line in drift_fleet.lines]
    mine = [e for e in events if e["agent_id"] == agent]
    # Sampling with a full battery and no half one: the old model says it cannot run.
    contradicting = [i for i, e in enumerate(mine) if e["action"][0] == "sample_rock"
                     and e["executed"] and ["battery_half", e["action"][1]] not in e["state"]]
    assert len(contradicting) >= 2
    cut = contradicting[1] + 1  # two inconsistencies: under the debounce of three
    # Two records in a row: one record naming another family is a dead letter (session 19).
    lines = [json.dumps(e).encode() for e in mine[:cut]] + [_courier_event(agent)] * 2
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    config = jsonl_config(tmp_path, drift_fleet, path, str(tmp_path / "s.db"))
    config["families"] = {**drift_fleet.families, "courier-v1": COURIER}
    code, _ = run_to_end(config, tmp_path, "move")
    alerts = [json.loads(a) for a in
              (tmp_path / "out" / "alerts.jsonl").read_text().splitlines()]
    about = [a for a in alerts if a["agent_id"] == agent and a["family"] == "rover-v1"]
    assert code == 0
    assert about, "the inconsistencies seen under rover-v1 were dropped without a word"


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def _idle_connections(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        socks.append(s)
    return socks


def _closed_by_server(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_idle_connections_cannot_exhaust_the_daemon_http_server(
        drift_fleet: FleetInput, tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"")
    port = free_port()
    d = Daemon(jsonl_config(tmp_path, drift_fleet, path, str(tmp_path / "s.db"), follow=True,
                            http_port=port), tmp_path, "idle")
    try:
        assert wait_until(lambda: _port_open(port), 60), d.tail()
        before = _threads(d.pid)
        socks = _idle_connections(port, 1000)
        wait_until(lambda: _threads(d.pid) > before + 64, 5)
        during = _threads(d.pid)
        closed = _closed_by_server(socks[0], 65)
        for s in socks:
            s.close()
    finally:
        d.kill()
    assert during <= before + 64, f"{during} threads for 1000 idle connections ({before} before)"
    assert closed, "an idle connection is never timed out"


def test_idle_connections_cannot_exhaust_the_reference_agent(tmp_path: Path) -> None:
    agent = AgentProcess(EXAMPLES / "rover.pddl", EXAMPLES / "rover-problem.pddl", 0,
                         tmp_path / "agent.log")
    try:
        port = int(agent.url.rsplit(":", 1)[1])
        before = _threads(agent.proc.pid)
        socks = _idle_connections(port, 1000)
        wait_until(lambda: _threads(agent.proc.pid) > before + 64, 5)
        during = _threads(agent.proc.pid)
        for s in socks:
            s.close()
    finally:
        agent.stop()
    assert during <= before + 64, f"{during} threads for 1000 idle connections"


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


