"""Planner facade: bounded breadth-first search and Fast Downward in a subprocess."""

from __future__ import annotations

import pytest

from capwatch.adapters.io.fast_downward import FastDownwardPlanner
from capwatch.assess.planner import BreadthFirstPlanner, PlannerGaveUp, PlanningTask
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import parse_plan, read_domain, read_problem
from capwatch.model.simulate import execute_plan
from tests.paths import DOMAINS


def _task(name: str) -> tuple[PlanningTask, int]:
    domain = read_domain(DOMAINS / name / "domain.pddl")
    problem = read_problem(DOMAINS / name / "problem.pddl")
    plan = [tuple(s) for s in parse_plan((DOMAINS / name / "optimal-plan.txt").read_text())]
    _, goal = execute_plan(Grounder(domain), problem.init, plan)
    return PlanningTask(domain, problem.objects_by_type(domain), problem.init, goal), len(plan)


def test_breadth_first_finds_a_plan_as_short_as_the_reference() -> None:
    task, length = _task("miconic")
    plan = BreadthFirstPlanner().shortest_plan(task, length)
    assert plan is not None and len(plan) == length
    n, final = execute_plan(Grounder(task.domain), task.init, plan)
    assert n == length and final == task.goal


def test_breadth_first_respects_the_length_bound() -> None:
    task, length = _task("miconic")
    assert BreadthFirstPlanner().shortest_plan(task, length - 1) is None


def test_breadth_first_gives_up_rather_than_guessing() -> None:
    task, length = _task("blocksworld")
    with pytest.raises(PlannerGaveUp):
        BreadthFirstPlanner(max_states=50).shortest_plan(task, length)


def test_fast_downward_agrees_on_the_optimal_length() -> None:
    task, length = _task("miconic")
    plan = FastDownwardPlanner(timeout=60).shortest_plan(task, length)
    assert plan is not None and len(plan) == length
    assert FastDownwardPlanner(timeout=60).shortest_plan(task, length - 1) is None


def test_fast_downward_is_killed_on_timeout() -> None:
    task, length = _task("blocksworld")
    with pytest.raises(PlannerGaveUp, match="timed out"):
        FastDownwardPlanner(timeout=0.01).shortest_plan(task, length)


def test_static_pruning_finds_the_same_plan_over_the_same_states_as_full_grounding() -> None:
    import itertools

    from capwatch.assess.search import Targets, breadth_first

    task, length = _task("miconic")
    grounder, pruned = BreadthFirstPlanner().operators(task.domain, task.objects, task.init)
    full = [grounder.operator((a.name, *args)) for a in task.domain.actions
            for args in itertools.product(*(task.objects.get(p.type, ())
                                             for p in a.parameters))]
    assert len(pruned) < len(full)
    # Same relative order: ties between equally short plans are broken the same way.
    assert pruned == [op for op in full if op in set(pruned)]
    start, goal = grounder.index.encode(task.init), grounder.index.encode(task.goal)
    a = breadth_first(pruned, start, Targets({goal: length}), max_depth=length)
    b = breadth_first(full, start, Targets({goal: length}), max_depth=length)
    assert a.plan is not None and len(a.plan) == length
    assert (a.plan, a.end, a.generated) == (b.plan, b.end, b.generated)


def test_pruning_follows_each_task_s_own_static_facts() -> None:
    task, length = _task("miconic")
    above = ("above", "f0", "f1")
    assert above in task.init
    # Without the static fact the lift cannot move: no plan. The operators pruned for that
    # state must not be reused for the next task, whose initial state has the fact again.
    planner = BreadthFirstPlanner()
    stuck = PlanningTask(task.domain, task.objects, task.init - {above}, task.goal - {above})
    assert planner.shortest_plan(stuck, length + 5) is None
    plan = planner.shortest_plan(task, length)
    assert plan is not None and len(plan) == length
