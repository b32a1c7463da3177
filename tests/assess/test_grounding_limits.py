"""Grounding every operator is bounded, and respects equality constraints."""

from __future__ import annotations

import itertools

import pytest

from capwatch.assess.planner import BreadthFirstPlanner, PlannerGaveUp, PlanningTask
from capwatch.assess.search import GroundingLimitExceeded, ground_operators, static_predicates
from capwatch.model import Grounder, parse_domain
from capwatch.model.domain import Domain
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


def _cross_product(domain: Domain, objects: dict[str, tuple[str, ...]],
                   init: frozenset[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """Every ground action whose static preconditions hold, by the plain cross product."""
    static = static_predicates(domain)
    out = []
    for action in domain.actions:
        pools = [objects.get(p.type, ()) for p in action.parameters]
        for args in itertools.product(*pools):
            binding = dict(zip(action.parameter_names, args, strict=True))
            if not action.admits(args):
                continue
            if all(a.ground(binding) in init for a in action.pre_pos
                   if a.predicate in static) and not any(
                    a.ground(binding) in init for a in action.pre_neg
                    if a.predicate in static):
                out.append((action.name, *args))
    return out


@pytest.mark.parametrize("name", ["ferry", "hanoi", "hiking", "tpp", "barman", "woodworking",
                                  "elevators", "transport"])
def test_grounding_lists_what_the_cross_product_lists_in_its_order(name: str) -> None:
    """Parameters are bound in an order that prunes early, yet the operators come out as
    the cross product lists them (which plan a search finds depends on that order)."""
    domain = read_domain(IPC / name / "domain.pddl")
    problem = read_problem(IPC / name / "problem.pddl")
    objects = problem.objects_by_type(domain)
    ops = ground_operators(Grounder(domain), objects, problem.init)
    assert [(op.action.name, *op.args) for op in ops] == _cross_product(
        domain, objects, problem.init)


def test_static_links_between_parameters_prune_before_the_cross_product() -> None:
    """A sokoban push links ?ppos, ?from, ?to and ?dir by static MOVE-DIR facts declared
    after the player and stone: bound in declaration order, they were enumerated as
    location³ x direction (millions of steps) before any fact was checked."""
    domain = read_domain(IPC / "sokoban" / "domain.pddl")
    problem = read_problem(IPC / "sokoban" / "problem.pddl")
    ops = ground_operators(Grounder(domain), problem.objects_by_type(domain), problem.init,
                           max_groundings=200_000)
    pushes = [op for op in ops if op.action.name.startswith("push")]
    assert pushes and all(("move-dir", *op.args[2:4], op.args[5]) in problem.init
                          for op in pushes)
