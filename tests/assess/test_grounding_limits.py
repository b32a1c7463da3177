"""Grounding every operator is bounded, and respects equality constraints."""

from __future__ import annotations

import pytest

from capwatch.assess.planner import BreadthFirstPlanner, PlannerGaveUp, PlanningTask
from capwatch.assess.search import GroundingLimitExceeded, ground_operators
from capwatch.model import Grounder, parse_domain
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import IPC

WIDE = parse_domain(
    "(define (domain wide) (:predicates (p ?a ?b) (q ?a))\n(:action a :parameters ("
    + " ".join(f"?x{i}" for i in range(40)) + ") :precondition (and "
    + " ".join(f"(p ?x{i} ?x{i + 1})" for i in range(39))
    + ") :effect (and (q ?x0) (not (p ?x0 ?x1)))))")
OBJECTS = {"object": ("o1", "o2", "o3")}


def test_a_forty_parameter_action_is_refused_instead_of_hanging() -> None:
    with pytest.raises(GroundingLimitExceeded, match=r"grounding a \(40 parameters"):
        ground_operators(Grounder(WIDE), OBJECTS, [("p", "o1", "o2")], max_groundings=50_000)


def test_the_planner_reports_the_limit_as_giving_up() -> None:
    """The engine already turns PlannerGaveUp into a note on the assessment."""
    task = PlanningTask(WIDE, OBJECTS, frozenset({("p", "o1", "o2")}),
                        frozenset({("q", "o1")}))
    with pytest.raises(PlannerGaveUp, match="enumerates more argument tuples"):
        BreadthFirstPlanner(max_groundings=10_000).shortest_plan(task, 3)


def test_the_limit_does_not_bind_real_problems() -> None:
    domain = read_domain(IPC / "freecell" / "domain.pddl")
    problem = read_problem(IPC / "freecell" / "problem.pddl")
    ops = ground_operators(Grounder(domain), problem.objects_by_type(domain), problem.init)
    assert ops


def test_groundings_that_break_an_equality_constraint_are_not_operators() -> None:
    domain = read_domain(IPC / "hiking" / "domain.pddl")
    problem = read_problem(IPC / "hiking" / "problem.pddl")
    ops = ground_operators(Grounder(domain), problem.objects_by_type(domain), problem.init)
    drive = [op for op in ops if op.action.name == "drive_passenger"]
    assert drive and all(op.args[0] != op.args[4] for op in drive)
    assert all(op.admitted for op in ops)
