"""Reading input files for every command: one clear line per kind of failure, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.cli import main
from capwatch.cli._common import load_domain, load_plan, load_problem
from capwatch.model.grounding import Grounder
from capwatch.model.simulate import execute_plan
from tests.paths import DOMAINS


def test_the_loaded_plan_solves_the_loaded_problem_in_the_loaded_domain() -> None:
    gripper = DOMAINS / "gripper"
    domain = load_domain(gripper / "domain.pddl")
    problem = load_problem(gripper / "problem.pddl")
    plan = load_plan(gripper / "optimal-plan.txt")
    assert problem.domain_name == domain.name
    executed, final = execute_plan(Grounder(domain), problem.init, plan)
    assert executed == len(plan) > 0 and problem.goal_pos <= final


@pytest.mark.parametrize("load", [load_domain, load_problem, load_plan])
def test_a_missing_file_names_the_file_and_the_reason(load: object, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pddl"
    with pytest.raises(SystemExit) as info:
        load(missing)  # type: ignore[operator]
    assert str(info.value) == f"capwatch: cannot read {missing}: No such file or directory"


@pytest.mark.parametrize("load", [load_domain, load_problem, load_plan])
def test_a_binary_file_is_refused_as_not_text(load: object, tmp_path: Path) -> None:
    binary = tmp_path / "model.pddl"
    binary.write_bytes(b"(define \xff\xfe\x00")
    with pytest.raises(SystemExit) as info:
        load(binary)  # type: ignore[operator]
    # The reader points at the first byte that is not UTF-8: line 1, column 9.
    assert str(info.value).startswith(f"capwatch: {binary}:1:9: not UTF-8 text: byte 0xff")


def test_a_parse_error_keeps_the_reader_s_position(tmp_path: Path) -> None:
    plan = tmp_path / "plan.txt"
    plan.write_text("(pick ball1 rooma left)\n(pick ball2\n")
    with pytest.raises(SystemExit) as info:
        load_plan(plan)
    message = str(info.value)
    assert message.startswith(f"capwatch: {plan}:2:")


@pytest.mark.parametrize("argv", [
    ["model", "stats", "{bad}"],
    ["model", "diff", "{bad}", str(DOMAINS / "gripper" / "domain.pddl")],
    ["assess", "offline", "--truth", str(DOMAINS / "gripper" / "domain.pddl"),
     "--initial", "{bad}", "--problem", str(DOMAINS / "gripper" / "problem.pddl"),
     "--plan", str(DOMAINS / "gripper" / "optimal-plan.txt")],
])
def test_every_command_reports_an_unreadable_domain_the_same_way(
        argv: list[str], tmp_path: Path) -> None:
    bad = tmp_path / "broken.pddl"
    bad.write_bytes(b"\x80not text")
    with pytest.raises(SystemExit) as info:
        main([a.replace("{bad}", str(bad)) for a in argv])
    assert str(info.value).startswith(f"capwatch: {bad}:1:1: not UTF-8 text: byte 0x80")
