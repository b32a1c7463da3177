"""The 17 IPC domains in tests/data/domains/ipc: read, pal-tuple counts, plans execute."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.model import Grounder, LiftedAtom, Verdict, check, pal_tuples
from capwatch.model.pddl_reader import read_domain, read_plan, read_problem
from capwatch.model.simulate import execute_plan
from tests.paths import IPC, IPC_NAMES


def _plan_file(name: str) -> Path:
    return next(p for p in (IPC / name / "optimal-plan.txt", IPC / name / "plan.txt")
                if p.exists())


def test_all_seventeen_are_there() -> None:
    assert len(IPC_NAMES) == 17


# The counts of tests/data/domains/ipc/README.md (typed, no repeated variables), except
# storage: see the next test.
@pytest.mark.parametrize(("name", "pals"), [
    ("ferry", 78), ("hanoi", 30), ("visitall", 12), ("tpp", 166), ("grid", 384),
    ("freecell", 2668), ("depot", 850), ("storage", 78)])
def test_pal_tuple_counts(name: str, pals: int) -> None:
    assert len(pal_tuples(read_domain(IPC / name / "domain.pddl"))) == pals


def test_either_types_are_unions() -> None:
    """Storage declares ``(in ?x - (either storearea crate) ?p - place)`` and ``lift``
    deletes ``(in ?c ?p)`` for a crate ``?c``. The README's 74 reads the union as its first
    member only, which leaves that effect outside the pal-tuples (unlearnable); read as
    the union PDDL defines, lift and drop each gain the pa-tuple (in ?c ?p): 74 + 4 = 78."""
    domain = read_domain(IPC / "storage" / "domain.pddl")
    lift = {p.atom for p in pal_tuples(domain) if p.action == "lift"}
    assert LiftedAtom("in", ("?c", "?p")) in lift
    assert LiftedAtom("in", ("?a1", "?p")) in lift
    assert LiftedAtom("in", ("?a2", "?p")) not in lift  # an area need not be a storearea
    assert any(LiftedAtom("in", ("?c", "?p")) in o.delete
               for o in domain.action("lift").outcomes)


@pytest.mark.parametrize("name", IPC_NAMES)
def test_the_shipped_plan_reaches_the_goal(name: str) -> None:
    """Equality, constants, either types and negative preconditions all read right: the
    planner's plan executes step by step under capwatch's semantics and reaches the goal."""
    domain = read_domain(IPC / name / "domain.pddl")
    problem = read_problem(IPC / name / "problem.pddl")
    plan = read_plan(_plan_file(name))
    executed, final = execute_plan(Grounder(domain), problem.init, plan)
    assert executed == len(plan) > 0
    assert problem.goal_pos <= final and not problem.goal_neg & final
    # And the consistency check, as the monitor runs it, accepts every step.
    g = Grounder(domain)
    state = g.index.encode(problem.init)
    for step in plan:
        op = g.operator(step)
        nxt = op.apply(state)
        assert check(op, state, nxt)[0] is Verdict.APPLIED, step
        state = nxt


@pytest.mark.parametrize("name", ["hiking", "mprime"])
def test_equality_constraints_are_read_as_static_constraints(name: str) -> None:
    domain = read_domain(IPC / name / "domain.pddl")
    assert any(a.distinct for a in domain.actions)
    assert "=" not in {p.name for p in domain.predicates}
    assert "=" not in {x.atom.predicate for x in pal_tuples(domain)}


@pytest.mark.parametrize("name", ["barman", "elevators", "openstacks", "parking", "sokoban",
                                  "transport", "woodworking"])
def test_action_costs_are_kept(name: str) -> None:
    domain = read_domain(IPC / name / "domain.pddl")
    problem = read_problem(IPC / name / "problem.pddl")
    assert "total-cost" in {f.name for f in domain.functions}
    assert any(a.numeric for a in domain.actions)
    assert problem.metric == "minimize (total-cost)"
    assert (("total-cost",), 0.0) in problem.numeric_init
    assert "total-cost" not in {p.atom.predicate for p in pal_tuples(domain)}
