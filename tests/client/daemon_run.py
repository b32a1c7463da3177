"""``capwatch run --exit-when-idle`` over a JSONL file, as an operator would start it, and
what it left behind: model versions, alerts, and the offsets in its JSON log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.paths import REPO_ROOT


@dataclass
class DaemonRun:
    models: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    dead_letters: list[dict[str, Any]]
    log: list[dict[str, Any]]

    def first_offset(self, event: str) -> int | None:
        """Stream offset of the first log record of ``event`` (e.g. "assessment queued")."""
        offsets = [r["offset"] for r in self.log if r.get("event") == event and "offset" in r]
        return min(offsets) if offsets else None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def daemon_config(tmp: Path, family: str, domain: Path, problem: Path, transitions: Path,
                  agent_urls: dict[str, str], token: str, **sections: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "replica_id": "e2e",
        "source": {"kind": "jsonl", "path": str(transitions)},
        "output": {"kind": "jsonl", "directory": str(tmp / "out")},
        "store": {"url": f"sqlite:///{tmp / 'models.db'}"},
        "families": {family: {"domain": str(domain), "problem": str(problem)}},
        "agents": {"urls": agent_urls, "bearer_token": token, "timeout_s": 30.0},
        "http": {"enabled": False},
        # Assess from 3 inconsistent transitions, not from whatever a loaded machine has read
        # after a short debounce: from one refusal daaisy cannot tell the precondition.
        "detection": {"debounce_transitions": 3, "debounce_s": 10.0},
        "scheduler": {"checkpoint_s": 0.5, "results_poll_s": 0.5},
        "alerts": {"group_wait_seconds": 0, "route_s": 0.2},
        "log": {"level": "info", "format": "json"},
    }
    for key, value in sections.items():
        config[key] = {**config.get(key, {}), **value}
    return config


def run_daemon(tmp: Path, config: dict[str, Any], timeout_s: float = 120.0) -> DaemonRun:
    path = tmp / "capwatch.yaml"
    path.write_text(yaml.safe_dump(config))
    log_path = tmp / "daemon.log"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with open(log_path, "wb") as log:
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "capwatch"), "run", "--config", str(path),
             "--exit-when-idle"], stdout=log, stderr=subprocess.STDOUT, env=env,
            cwd=REPO_ROOT, timeout=timeout_s, check=False)
    text = log_path.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    out = tmp / "out"
    return DaemonRun(_jsonl(out / "models.jsonl"), _jsonl(out / "alerts.jsonl"),
                     _jsonl(out / "deadletter.jsonl"), records)
