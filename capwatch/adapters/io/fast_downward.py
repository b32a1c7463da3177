"""Fast Downward as a :class:`capwatch.assess.planner.Planner`, in a subprocess.

The planner ships with PyPI ``up-fast-downward`` (a driver script plus a compiled
``downward`` binary); we run the driver directly rather than through unified-planning,
which would pull in a large dependency for one subprocess call. Every run gets its own
temporary directory and a hard wall-clock timeout; on expiry the whole process group is
killed, so a runaway search never outlives the assessment that started it.

Optimal search is ``astar(lmcut())`` (unit costs), as in the DAAISy experiments.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from capwatch.assess.planner import PlannerGaveUp, PlanningTask
from capwatch.model.domain import Domain, GroundAction, Parameter, Problem
from capwatch.model.pddl_reader import parse_plan
from capwatch.model.pddl_writer import write_domain, write_problem

DEFAULT_SEARCH = "astar(lmcut())"


def driver_path() -> Path:
    """The ``fast-downward.py`` driver inside the installed up-fast-downward package."""
    spec = importlib.util.find_spec("up_fast_downward")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("Fast Downward is not installed (pip install up-fast-downward)")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "downward" / "fast-downward.py"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("up-fast-downward is installed but its driver script is missing")


def _objects(domain: Domain, objects: Mapping[str, Sequence[str]]) -> tuple[Parameter, ...]:
    """Each object once, under its most specific type (the longest ancestor chain)."""
    best: dict[str, str] = {}
    constants = {c.name for c in domain.constants}
    for t, names in objects.items():
        for name in names:
            if name in constants:
                continue
            old = best.get(name)
            if old is None or len(domain.types.ancestors(t)) > len(domain.types.ancestors(old)):
                best[name] = t
    return tuple(Parameter(n, t) for n, t in sorted(best.items()))


class FastDownwardPlanner:
    """Optimal planning with Fast Downward; raises PlannerGaveUp on timeout or error."""

    def __init__(self, timeout: float = 30.0, search: str = DEFAULT_SEARCH,
                 driver: Path | None = None) -> None:
        self.timeout = timeout
        self.search = search
        self.driver = driver if driver is not None else driver_path()

    def shortest_plan(self, task: PlanningTask, max_length: int) -> list[GroundAction] | None:
        atoms = task.init | task.goal
        problem = Problem("capwatch-task", task.domain.name, _objects(task.domain, task.objects),
                          task.init, goal_pos=task.goal, goal_neg=frozenset(atoms - task.goal))
        with tempfile.TemporaryDirectory(prefix="capwatch-fd-") as tmp:
            d = Path(tmp)
            (d / "domain.pddl").write_text(write_domain(task.domain), encoding="utf-8")
            (d / "problem.pddl").write_text(write_problem(problem), encoding="utf-8")
            plan_file = d / "plan.txt"
            cmd = [sys.executable, str(self.driver), "--plan-file", str(plan_file),
                   str(d / "domain.pddl"), str(d / "problem.pddl"), "--search", self.search]
            code = self._run(cmd, d)
            if code in (10, 11, 12):  # FD exit codes: proven unsolvable
                return None
            if code != 0 or not plan_file.exists():
                raise PlannerGaveUp(f"Fast Downward exited with code {code}")
            plan = [tuple(step) for step in parse_plan(plan_file.read_text(), str(plan_file))]
        return plan if len(plan) <= max_length else None

    def _run(self, cmd: list[str], cwd: Path) -> int:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            # The driver forks translate and search; kill the whole group, not just it.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise PlannerGaveUp(f"Fast Downward timed out after {self.timeout} s") from None
