"""Breadth-first optimal planning over the grounded model."""

from __future__ import annotations

import pytest

from capwatch.assess.search import (
    Goal,
    PlannerGaveUp,
    Targets,
    breadth_first,
    ground_operators,
    optimal_plan,
    static_predicates,
)
from capwatch.model.domain import Problem
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import parse_plan, read_domain, read_problem
from capwatch.model.simulate import execute_plan
from tests.paths import DETERMINISTIC_NAMES, DOMAINS


def _reaches_goal(domain_name: str, plan: list[tuple[str, ...]]) -> bool:
    domain = read_domain(DOMAINS / domain_name / "domain.pddl")
    problem = read_problem(DOMAINS / domain_name / "problem.pddl")
    executed, final = execute_plan(Grounder(domain), problem.init, plan)
    return (executed == len(plan) and problem.goal_pos <= final
            and not (problem.goal_neg & final))


@pytest.mark.parametrize("name", DETERMINISTIC_NAMES)
def test_plan_is_valid_and_as_short_as_the_reference_optimal_plan(name: str) -> None:
    domain = read_domain(DOMAINS / name / "domain.pddl")
    problem = read_problem(DOMAINS / name / "problem.pddl")
    reference = parse_plan((DOMAINS / name / "optimal-plan.txt").read_text())
    plan = optimal_plan(domain, problem)
    assert plan is not None
    assert _reaches_goal(name, plan)
    assert _reaches_goal(name, reference)
    assert len(plan) == len(reference)


def test_goal_already_true_gives_empty_plan() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    solved = Problem("p", domain.name, problem.objects, problem.init,
                     goal_pos=frozenset({("at_robby", "rooma")}))
    assert optimal_plan(domain, solved) == []


def test_unreachable_goal_returns_none() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    # A ball can never be in two rooms at once in gripper.
    impossible = Problem("p", domain.name, problem.objects, problem.init,
                         goal_pos=frozenset({("at", "ball1", "rooma"), ("at", "ball1", "roomb")}))
    assert optimal_plan(domain, impossible) is None


def test_state_limit_raises_instead_of_claiming_unsolvable() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    with pytest.raises(PlannerGaveUp):
        optimal_plan(domain, problem, max_states=5)


def test_static_preconditions_prune_grounding() -> None:
    domain = read_domain(DOMAINS / "miconic" / "domain.pddl")
    problem = read_problem(DOMAINS / "miconic" / "problem.pddl")
    static = static_predicates(domain)
    assert {"origin", "destin", "above"} <= static
    assert "boarded" not in static
    ops = ground_operators(Grounder(domain), problem.objects_by_type(domain), problem.init)
    static_true = {a for a in problem.init if a[0] in static}
    for op in ops:
        for atom in op.action.pre_pos:
            if atom.predicate in static:
                binding = dict(zip(op.action.parameter_names, op.args, strict=True))
                assert atom.ground(binding) in static_true


def test_probabilistic_actions_use_every_outcome() -> None:
    from capwatch.model.pddl_reader import parse_domain

    domain = parse_domain("""
    (define (domain coin) (:requirements :probabilistic-effects)
      (:predicates (heads) (tails) (tossed))
      (:action toss :parameters ()
        :precondition (and (not (tossed)))
        :effect (and (tossed) (probabilistic 0.9 (heads) 0.1 (tails)))))
    """)
    grounder = Grounder(domain)
    ops = ground_operators(grounder, {}, frozenset())
    # Only the unlikely outcome reaches the goal: the determinisation must still find it.
    goal = Goal.of(grounder, [("tails",)])
    assert breadth_first(ops, 0, goal).plan == [("toss",)]


def test_exact_targets_are_reached_only_within_their_own_step_limits() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    grounder = Grounder(domain)
    ops = ground_operators(grounder, problem.objects_by_type(domain), problem.init)
    states = [grounder.index.encode(problem.init)]
    for step in parse_plan((DOMAINS / "gripper" / "optimal-plan.txt").read_text()):
        states.append(grounder.operator(tuple(step)).apply(states[-1]))
    # Prefixes of an optimal plan are shortest paths to the states they pass through.
    start = states[0]
    too_tight = breadth_first(ops, start, Targets({states[3]: 2}))
    assert too_tight.plan is None and too_tight.end is None and too_tight.generated > 1
    exact = breadth_first(ops, start, Targets({states[3]: 3}))
    assert exact.plan is not None and len(exact.plan) == 3 and exact.end == states[3]
    # The nearer target is met first but outside its limit; the farther one counts.
    farther = breadth_first(ops, start, Targets({states[2]: 1, states[4]: 4}))
    assert farther.end == states[4] and farther.plan is not None and len(farther.plan) == 4
    assert breadth_first(ops, start, Targets({states[4]: 9}), max_depth=3).plan is None
