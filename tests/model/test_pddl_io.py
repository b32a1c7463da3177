"""Reading, writing and reading back every domain and problem file in tests/data."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.model import (
    AbstractModel,
    ModelError,
    PDDLError,
    domain_from_json,
    domain_to_json,
    parse_domain,
    parse_plan,
    parse_problem,
    write_domain,
    write_problem,
)
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import DATA, DOMAINS, IPC, STOCHASTIC

ALL_FILES = sorted(DATA.glob("**/*.pddl"))
DOMAIN_FILES = [p for p in ALL_FILES if "problem" not in p.name]
PROBLEM_FILES = [p for p in ALL_FILES if "problem" in p.name]


def test_the_corpus_is_there() -> None:
    # Guards the parametrised tests below against silently testing nothing.
    assert len(ALL_FILES) > 450
    assert len(PROBLEM_FILES) == 6 + 17 + 2  # classic, stochastic, ipc, own (hoist, shuttle)
    assert len(list(IPC.glob("*/domain.pddl"))) == 17


@pytest.mark.parametrize("path", DOMAIN_FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_domain_round_trips(path: Path) -> None:
    domain = read_domain(path)
    text = write_domain(domain)
    again = parse_domain(text, "written")
    assert again == domain
    assert write_domain(again) == text
    assert domain_from_json(domain_to_json(domain)) == domain


@pytest.mark.parametrize("path", PROBLEM_FILES, ids=lambda p: str(p.relative_to(DATA)))
def test_problem_round_trips(path: Path) -> None:
    problem = read_problem(path)
    assert parse_problem(write_problem(problem)) == problem
    assert problem.init


def test_probabilistic_effects_become_outcomes() -> None:
    domain = read_domain(STOCHASTIC / "probabilistic_elevators" / "domain.pddl")
    gate = domain.action("move-left-gate")
    assert [o.probability for o in gate.outcomes] == [0.8, 0.2]
    assert {a.predicate for a in gate.outcomes[1].add} == {"underground"}
    # The deterministic delete applies in both branches.
    assert all(any(a.predicate == "at" for a in o.delete) for o in gate.outcomes)


def test_implicit_no_change_branch_is_explicit() -> None:
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl")
    move = domain.action("move-car")
    assert sorted(o.probability for o in move.outcomes) == [0.2, 0.8]
    flat = next(o for o in move.outcomes if o.probability == pytest.approx(0.8))
    assert any(a.predicate == "not-flattire" for a in flat.delete)


def test_independent_probabilistic_blocks_multiply() -> None:
    text = """(define (domain d) (:predicates (p) (q) (r))
      (:action a :parameters () :precondition (and) :effect (and (r)
        (probabilistic 0.5 (p)) (probabilistic 0.2 (q)))))"""
    action = parse_domain(text).action("a")
    probs = sorted(round(o.probability, 6) for o in action.outcomes)
    assert probs == [0.1, 0.1, 0.4, 0.4]
    assert all(any(a.predicate == "r" for a in o.add) for o in action.outcomes)


def test_lenient_reading_of_sloppy_files() -> None:
    text = """(DEFINE (DOMAIN Sloppy) (:PREDICATES (At ?x - thing))
      (:ACTION Go :PARAMETERS (?x - thing) :PRECONDITION (At ?x) :EFFECT (NOT (At ?x))))"""
    domain = parse_domain(text)
    assert domain.types.is_subtype("thing", "object")
    assert domain.action("go").pre_pos


def test_action_literals_can_be_stripped() -> None:
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl")
    stripped = domain.without_action_literals()
    assert "move-car" in domain.predicate_map
    assert "move-car" not in stripped.predicate_map
    assert not any(a.predicate == "move-car" for a in stripped.action("move-car").pre_pos)


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("(define (domain d)\n  (:predicates (p ?x))\n  (:action a :parameters (?x)\n"
         "   :precondition (q ?x) :effect (p ?x)))", 4, 18, "unknown predicate 'q'"),
        ("(define (domain d) (:predicates (p ?x))\n(:action a :parameters (?x)"
         " :precondition (p) :effect (p ?x)))", 2, 43, "takes 1 arguments, found 0"),
        ("(define (domain d)\n (:predicates (p))", 1, 1, "unclosed '('"),
        ("(define (domain d) (:predicates (p))\n (:action a :parameters ()"
         " :effect (probabilistic 1.5 (p))))", 2, 51, "probability"),
        ("(define (domain d) (:predicates (p ?x))\n (:action a :parameters (?x)"
         " :precondition (p ?y) :effect (p ?x)))", 2, 47, "unknown parameter '?y'"),
        ("(define (domain d) (:frobnicate))", 1, 20, "unknown domain section"),
    ],
)
def test_errors_name_line_column_and_problem(text: str, line: int, column: int,
                                             fragment: str) -> None:
    with pytest.raises(PDDLError) as info:
        parse_domain(text, "bad.pddl")
    err = info.value
    assert (err.source, err.line, err.column) == ("bad.pddl", line, column)
    assert fragment in str(err)
    assert str(err).startswith(f"bad.pddl:{line}:{column}:")


def test_model_json_errors_name_the_field() -> None:
    data = domain_to_json(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    del data["actions"][0]["precondition"]
    with pytest.raises(ModelError, match="precondition"):
        domain_from_json(data)


def test_plan_file_reads() -> None:
    plan = parse_plan((DOMAINS / "gripper" / "optimal-plan.txt").read_text())
    assert plan[0] == ("pick", "ball1", "rooma", "left")
    assert len(plan) == 11


def test_written_domain_keeps_modes() -> None:
    for name in ("gripper", "miconic", "blocksworld"):
        domain = read_domain(DOMAINS / name / "domain.pddl")
        again = parse_domain(write_domain(domain))
        assert AbstractModel.from_domain(again) == AbstractModel.from_domain(domain)
