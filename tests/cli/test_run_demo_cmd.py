"""``capwatch run`` and ``capwatch demo`` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from capwatch.cli import main
from tests.daemon.helpers import EXAMPLES, refused_sample


def test_run_check_accepts_the_demo_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", str(EXAMPLES / "demo.yaml"), "--check"]) == 0
    assert "configuration is valid" in capsys.readouterr().out


def test_run_refuses_a_bad_configuration_naming_the_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("source:\n  kind: carrier-pigeon\n")
    assert main(["run", "--config", str(path)]) == 2
    assert f"{path}:2:3: source.kind: Input should be 'kafka', 'jsonl' or 'simulated'" in \
        capsys.readouterr().err


def test_run_reports_an_unreadable_family_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.pddl"
    broken.write_text("(define (domain x) (:action")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"families": {"f": {"domain": "broken.pddl"}}}))
    assert main(["run", "--config", str(path), "--check"]) == 2
    assert "broken.pddl:1:" in capsys.readouterr().err


def test_run_over_a_jsonl_file_writes_jsonl_outputs(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text(
        "\n".join([refused_sample(step=i) for i in range(3)] + ["not json"]) + "\n")
    config = {
        "replica_id": "cli-test",
        "source": {"kind": "jsonl", "path": "in.jsonl"},
        "output": {"kind": "jsonl", "directory": "out"},
        "store": {"url": f"sqlite:///{tmp_path / 'models.db'}"},
        "families": {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl")}},
        # No agent server is running: the assessment fails and says so in an alert.
        "agents": {"url_template": "http://127.0.0.1:9/{agent_id}", "timeout_s": 0.2},
        "assessment": {"max_attempts": 1, "retry_after_s": 0, "agent_retry": {"attempts": 1}},
        "http": {"enabled": False},
        "log": {"level": "error"},
    }
    path = tmp_path / "capwatch.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["run", "--config", str(path), "--exit-when-idle"]) == 0
    out = tmp_path / "out"
    dead = [json.loads(x) for x in (out / "deadletter.jsonl").read_text().splitlines()]
    alerts = [json.loads(x) for x in (out / "alerts.jsonl").read_text().splitlines()]
    assert [d["offset"] for d in dead] == [3]
    # Queuing the work raised "awaiting assessment"; its failure, "assessment failed".
    assert sorted(a["alert_type"] for a in alerts) == ["assessment_failed",
                                                       "unexplained_inconsistency"]
    failed = next(a for a in alerts if a["alert_type"] == "assessment_failed")
    assert "agent unreachable" in failed["summary"]
    assert (out / "models.jsonl").read_text() == ""


def test_demo_detects_every_injected_drift(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "Drifted agents recovered exactly (pal-tuples): 3/3" in out
    assert "undrifted agents given a new version: 0" in out
    assert "now requires (battery_full ?r)" in out


def test_run_says_which_input_is_missing(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "source": {"kind": "jsonl", "path": "nowhere.jsonl"}, "output": {"kind": "log"},
        "store": {"url": f"sqlite:///{tmp_path / 'm.db'}"}, "http": {"enabled": False},
        "families": {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl")}},
        "log": {"level": "error"}}))
    assert main(["run", "--config", str(path)]) == 1
    assert "nowhere.jsonl" in capsys.readouterr().err
