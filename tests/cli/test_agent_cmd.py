"""``capwatch agent``: the reference agent server as a real subprocess, and the query command."""

from __future__ import annotations

import ctypes
import errno
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from capwatch.adapters.io.agent_client import HttpAgentClient
from capwatch.model.pddl_reader import parse_plan, read_problem
from tests.paths import DOMAINS, REPO_ROOT

GRIPPER = DOMAINS / "gripper"
CLI = [sys.executable, "-c", "import sys; from capwatch.cli import main; sys.exit(main())"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO_ROOT)


@pytest.fixture
def served() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [*CLI, "agent", "serve", "--domain", str(GRIPPER / "domain.pddl"),
         "--problem", str(GRIPPER / "problem.pddl"), "--port", "0", "--seed", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "serving domain gripper-typed on http://127.0.0.1:" in line, (
            line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        yield proc, line.rsplit(" ", 1)[1].strip()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_serve_answers_queries_and_stops_cleanly_on_sigterm(
        served: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = served
    init = read_problem(GRIPPER / "problem.pddl").init
    plan = parse_plan((GRIPPER / "optimal-plan.txt").read_text())
    [result] = HttpAgentClient(url, timeout=5).query(init, plan[:3])
    assert result.executed == 3
    assert ("at_robby", "roomb") in result.state
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "stopped after 1 queries" in out


def test_serve_stops_cleanly_on_sigint_too(
        served: tuple[subprocess.Popen[str], str]) -> None:
    proc, _ = served
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "stopped after 0 queries" in out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_stops_cleanly_whichever_of_its_threads_the_signal_lands_on(
        served: tuple[subprocess.Popen[str], str], sig: int) -> None:
    """A process-wide signal goes to any thread that does not block it, including native
    ones a library started at import (numpy's OpenBLAS pool), which no mask set later
    covers. Each of the server's other threads takes one here (tgkill), the main thread
    never: the server still stops cleanly."""
    proc, _ = served
    tasks = Path(f"/proc/{proc.pid}/task")
    others = sorted(int(t.name) for t in tasks.iterdir() if int(t.name) != proc.pid)
    assert others, "the server runs no thread besides its main one"
    libc = ctypes.CDLL(None, use_errno=True)
    for tid in others:
        if libc.tgkill(proc.pid, tid, sig) != 0:
            assert ctypes.get_errno() == errno.ESRCH  # that thread ended: already stopping
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the server did not stop") from None
    assert proc.returncode == 0
    assert "stopped after 0 queries" in out


def test_query_command_against_the_served_agent(
        served: tuple[subprocess.Popen[str], str], tmp_path: Path) -> None:
    _, url = served
    done = run("agent", "query", "--url", url, "--problem", str(GRIPPER / "problem.pddl"),
               "--plan", str(GRIPPER / "optimal-plan.txt"), "--samples", "2")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    problem = read_problem(GRIPPER / "problem.pddl")
    assert [r["executed"] for r in answer["results"]] == [11, 11]
    assert {tuple(a) for a in answer["results"][0]["state"]} >= problem.goal_pos

    state = tmp_path / "state.json"
    state.write_text(json.dumps([["at_robby", "rooma"]]))
    plan = tmp_path / "plan.txt"
    plan.write_text("(move rooma roomb)\n(fly roomb)\n")
    done = run("agent", "query", "--url", url, "--state", str(state), "--plan", str(plan))
    assert done.returncode == 3
    assert "unknown action 'fly'" in done.stderr


def test_serve_refuses_a_broken_domain_with_its_position(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pddl"
    bad.write_text("(define (domain d)\n  (:predicates (p ?x))\n  (:action a :parameters (?x)\n")
    done = run("agent", "serve", "--domain", str(bad), "--port", "0")
    assert done.returncode != 0
    assert f"{bad}:" in done.stderr


def test_serve_refuses_a_problem_outside_the_domain(tmp_path: Path) -> None:
    problem = tmp_path / "p.pddl"
    problem.write_text("(define (problem p) (:domain gripper-typed) (:objects a)"
                       " (:init (teleporter a)) (:goal (and)))")
    done = run("agent", "serve", "--domain", str(GRIPPER / "domain.pddl"),
               "--problem", str(problem), "--port", "0")
    assert done.returncode != 0
    assert "(teleporter a) does not match any predicate" in done.stderr


def test_query_against_nothing_reports_unavailable(tmp_path: Path) -> None:
    done = run("agent", "query", "--url", "http://127.0.0.1:9", "--problem",
               str(GRIPPER / "problem.pddl"), "--plan", str(GRIPPER / "optimal-plan.txt"),
               "--retries", "0", "--timeout", "2")
    assert done.returncode == 3
    assert "unavailable after 1 attempts" in done.stderr


def test_serve_logs_carry_their_fields(served: tuple[subprocess.Popen[str], str]) -> None:
    # A drift's log line names the model switched to; a bare format dropped it.
    proc, url = served
    HttpAgentClient(url, timeout=5).drift((GRIPPER / "domain.pddl").read_text())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    line = next(x for x in err.splitlines() if "agent model switched" in x)
    assert "to_domain=gripper-typed" in line and "model_version=2" in line
