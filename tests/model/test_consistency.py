"""The transition consistency check (Def. 35) and its Table 2 explanation."""

from __future__ import annotations

import random

import pytest

from capwatch.model import Grounder, Verdict, check, explain, parse_plan
from capwatch.model.domain import LiftedAtom
from capwatch.model.pal import Mode
from capwatch.model.pddl_reader import parse_domain, read_domain, read_problem
from capwatch.model.simulate import execute_plan, step
from tests.paths import DOMAINS, STOCHASTIC


@pytest.mark.parametrize("name", ["gripper", "miconic", "blocksworld"])
def test_optimal_plan_is_consistent_with_the_true_model(name: str) -> None:
    domain = read_domain(DOMAINS / name / "domain.pddl")
    problem = read_problem(DOMAINS / name / "problem.pddl")
    plan = parse_plan((DOMAINS / name / "optimal-plan.txt").read_text())
    g = Grounder(domain)
    executed, final = execute_plan(g, problem.init, plan)
    assert executed == len(plan)
    assert problem.goal_pos <= final
    state = g.index.encode(problem.init)
    for action in plan:
        op = g.operator(action)
        ok, nxt = step(op, state)
        assert ok
        assert check(op, state, nxt) == (Verdict.APPLIED, 1)
        assert check(op, state, state ^ g.index.bit(("made-up",))) == (Verdict.INCONSISTENT, 0)
        state = nxt


def test_inapplicable_action_that_changes_nothing_is_consistent() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    g = Grounder(domain)
    op = g.operator(("pick", "ball1", "rooma", "left"))
    s = g.index.encode([("at_robby", "roomb"), ("at", "ball1", "rooma"), ("free", "left")])
    assert check(op, s, s) == (Verdict.NOT_APPLICABLE, 0)
    changed = s | g.index.bit(("carry", "ball1", "left"))
    assert check(op, s, changed)[0] is Verdict.INCONSISTENT


def test_probabilistic_outcomes_are_identified() -> None:
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()
    g = Grounder(domain)
    op = g.operator(("move-car", "l-1-1", "l-1-2"))
    s = g.index.encode([("vehicle-at", "l-1-1"), ("road", "l-1-1", "l-1-2"),
                        ("not-flattire",)])
    seen = set()
    rng = random.Random(1)
    for _ in range(200):
        ok, nxt = step(op, s, rng)
        verdict, matched = check(op, s, nxt)
        assert ok and verdict is Verdict.APPLIED
        assert bin(matched).count("1") == 1
        seen.add(matched)
    assert seen == {1, 2}


def test_explanation_points_at_the_drifted_pa_tuple() -> None:
    truth = read_domain(DOMAINS / "gripper" / "domain.pddl")
    # The known model wrongly says pick needs the gripper to be *not* free.
    known = parse_domain(
        (DOMAINS / "gripper" / "domain.pddl").read_text().replace(
            "(free ?gripper))", "(not (free ?gripper)))", 1))
    assert known != truth
    s = frozenset({("at_robby", "rooma"), ("at", "ball1", "rooma"), ("free", "left")})
    action = ("pick", "ball1", "rooma", "left")
    _, s2 = execute_plan(Grounder(truth), s, [action])
    g = Grounder(known)
    assert check(g.operator(action), g.index.encode(s), g.index.encode(s2))[0] is \
        Verdict.INCONSISTENT
    why = explain(known, action, s, s2)
    assert why.executed is True
    contradicted = {(c.pa.atom, c.current) for c in why.contradicted}
    assert contradicted == {(LiftedAtom("free", ("?gripper",)), (Mode.NEG, Mode.NEG))}
    (c,) = why.contradicted
    assert (Mode.POS, Mode.NEG) in c.possible


def test_refusal_suggests_missing_preconditions() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    s = frozenset({("at_robby", "rooma"), ("at", "ball1", "rooma"), ("free", "left")})
    why = explain(domain, ("pick", "ball1", "rooma", "left"), s, s)
    assert why.executed is None
    atoms = {c.pa.atom for c in why.missing_precondition_candidates}
    assert LiftedAtom("carry", ("?obj", "?gripper")) in atoms
    assert LiftedAtom("free", ("?gripper",)) not in atoms  # already a precondition


def test_changes_outside_the_action_arguments_are_unexplained() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    s = frozenset({("at_robby", "rooma"), ("at", "ball1", "rooma"), ("free", "left")})
    s2 = frozenset({("at_robby", "roomb"), ("at", "ball1", "rooma"), ("free", "left"),
                    ("at", "ball2", "roomb")})
    why = explain(domain, ("move", "rooma", "roomb"), s, s2)
    assert why.unexplained_atoms == {("at", "ball2", "roomb")}


def test_unknown_action_and_wrong_arity_are_errors() -> None:
    g = Grounder(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    with pytest.raises(ValueError, match="unknown action 'fly'"):
        g.operator(("fly", "a"))
    with pytest.raises(ValueError, match="takes 2 arguments, found 1"):
        g.operator(("move", "rooma"))


def test_atom_index_round_trips() -> None:
    g = Grounder(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    atoms = frozenset({("at", f"ball{i}", "rooma") for i in range(150)})
    mask = g.index.encode(atoms)
    assert g.index.decode(mask) == atoms
    assert g.index.encode_lists([list(a) for a in atoms]) == mask
