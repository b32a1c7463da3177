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
    assert (f"{path}:2:3: source.kind: Input should be 'kafka', 'jsonl', 'simulated' or"
            " 'ingest'") in capsys.readouterr().err


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
    # A probability re-estimate is one query asked many times: both figures are shown.
    line = next(x for x in out.splitlines() if x.startswith("  courier-v1-007:"))
    assert "1 query (" in line and " samples of the agent's outcomes)" in line
    # Each agent's alerts in the order raised: "awaiting assessment" before its answer.
    alerts = out.split("\nAlerts (")[1].split("\n\n")[0].splitlines()[1:]
    for agent in ("courier-v1-002", "rover-v3-004"):
        kinds = [a.split(":")[0].split()[-1] for a in alerts if f": {agent}: " in a]
        assert kinds == ["unexplained_inconsistency", "capability_reduced"], alerts


@pytest.mark.parametrize("rounds", ["0", "-5", "x"])
def test_demo_refuses_a_round_count_that_is_not_positive(
        rounds: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["demo", "--rounds", rounds])
    assert e.value.code == 2
    assert "--rounds" in capsys.readouterr().err


def test_demo_fails_when_a_drift_that_took_effect_is_not_recovered(
        capsys: pytest.CaptureFixture[str]) -> None:
    # 50 rounds: two drifts are scheduled after the run ends, the third takes effect
    # two transitions before it, too late to be detected.
    assert main(["demo", "--rounds", "50"]) == 1
    out = capsys.readouterr().out
    assert "Drift scheduled for 3 agents; took effect in 1:" in out
    assert "rover-v3-004: drift scheduled at step 60 not reached" in out
    assert "courier-v1-007: drifted at step 48 of 50; no new model version (MISSED" in out
    assert "recovered exactly (pal-tuples): 0/1" in out


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
