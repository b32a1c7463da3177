"""Issue 12, row 5: agent answers are validated (row 4, agent ids, is fixed: see
tests/chaos/test_fixed_rows.py). An agent that lies (empty states, atoms the model does
not have, oversized or self-contradicting answers) must put the assessment in ``failed``
with the reason, never yield a version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.fake_agent import Recorder
from tests.chaos.harness import FleetInput, jsonl_config, read_sqlite_store, run_to_end


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


@pytest.mark.parametrize("recorder", ["empty", "unknown_atoms", "wrong_arity", "oversized",
                                      "contradictory"], indirect=True)
def test_a_lying_agent_yields_a_failed_assessment_not_a_version(
        drift_fleet: FleetInput, recorder: Recorder, tmp_path: Path) -> None:
    agent = drift_fleet.drifted[0]
    lines = _one_agent(drift_fleet, agent)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    config = _failing_fast(jsonl_config(tmp_path, drift_fleet, path, str(tmp_path / "s.db")))
    config["agents"] = {"urls": {agent: f"http://{recorder.host_port}"}, "timeout_s": 10}
    code, _ = run_to_end(config, tmp_path, "liar")
    versions, _ = read_sqlite_store(tmp_path / "s.db")
    alerts = [json.loads(a) for a in
              (tmp_path / "out" / "alerts.jsonl").read_text().splitlines()]
    assert recorder.requests, "the agent was never asked"
    assert versions == {}, f"a version from a lying agent ({recorder.mode})"
    failed = [a for a in alerts if a["alert_type"] == "assessment_failed"]
    assert failed, [a["alert_type"] for a in alerts]
    assert code == 0
