"""``capwatch assess offline`` on the benchmark files in tests/data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capwatch.cli import main
from tests.paths import DOMAINS

G = DOMAINS / "gripper"


def _args(*extra: str, plan: Path = G / "optimal-plan.txt") -> list[str]:
    return ["assess", "offline", "--truth", str(G / "domain.pddl"),
            "--initial", str(G / "initial-models" / "domain_10_0.pddl"),
            "--problem", str(G / "problem.pddl"), "--plan", str(plan), *extra]


def test_json_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args("--method", "verify", "--json")) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"queries", "accuracy", "delta", "pal_tuples", "seconds"}
    assert out["accuracy"] == 1.0 and out["delta"] == 0 and out["pal_tuples"] == 20
    assert 0 < out["queries"] <= 17


def test_human_output_names_the_changes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args("--method", "daaisy", "--show-queries")) == 0
    out = capsys.readouterr().out
    assert "queries, accuracy" in out
    assert "pick(?obj ?room ?gripper)" in out
    assert "query 1:" in out


def test_a_plan_the_truth_cannot_execute_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "plan.txt"
    bad.write_text("(drop ball1 roomb left)\n")
    with pytest.raises(SystemExit, match="not executable in the truth model"):
        main(_args(plan=bad))


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="cannot read"):
        main(_args(plan=tmp_path / "nope.txt"))
