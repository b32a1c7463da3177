"""Hostile domain files get a clear error, never a RecursionError, a traceback or a hang."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.model import PDDLError, parse_domain, parse_plan, parse_problem
from capwatch.model.pal import count_pal_tuples
from capwatch.model.pddl_reader import read_domain, read_plan, read_problem
from capwatch.model.sexpr import DEFAULT_MAX_DEPTH

DEEP = 1000


def _nested(inner: str, depth: int = DEEP) -> str:
    return "(and " * depth + inner + ")" * depth


@pytest.mark.parametrize(("text", "parse"), [
    ("(define (domain d) (:predicates (p ?x)) (:action a :parameters (?x) :precondition "
     + _nested("(p ?x)") + " :effect (p ?x)))", parse_domain),
    ("(define (domain d) (:predicates (p ?x)) (:action a :parameters (?x) :effect "
     + _nested("(p ?x)") + "))", parse_domain),
    ("(define (domain d) (:predicates (p ?x)) (:action a :parameters (?x) :effect "
     "(probabilistic 0.5 " + _nested("(p ?x)") + ")))", parse_domain),
    ("(define (domain d) (:predicates " + "(" * DEEP + ")" * DEEP + "))", parse_domain),
    ("(define (problem p) (:domain d) (:objects a) (:init (p a)) (:goal "
     + _nested("(p a)") + "))", parse_problem),
    ("(define (problem p) (:domain d) (:objects a) (:init " + _nested("(p a)") + "))",
     parse_problem),
    ("(pick a b)\n" + "(" * DEEP + ")" * DEEP, parse_plan),
    ("(" * DEEP, parse_domain),
])
def test_deep_nesting_is_refused_with_its_position(text: str, parse: object) -> None:
    with pytest.raises(PDDLError) as info:
        parse(text, "deep.pddl")  # type: ignore[operator]
    assert f"nested deeper than {DEFAULT_MAX_DEPTH} levels" in str(info.value)
    assert str(info.value).startswith("deep.pddl:")


def test_nesting_below_the_limit_still_reads() -> None:
    text = ("(define (domain d) (:predicates (p ?x)) (:action a :parameters (?x) "
            ":precondition " + _nested("(p ?x)", 80) + " :effect (p ?x)))")
    assert parse_domain(text).action("a").pre_pos


@pytest.mark.parametrize("read", [read_domain, read_problem, read_plan])
def test_a_file_that_is_not_utf8_is_named_with_the_position(read: object,
                                                             tmp_path: Path) -> None:
    path = tmp_path / "latin1.pddl"
    path.write_bytes("(define (domain caf\u00e9)\n  ; caf\u00e9\n)".encode("latin-1"))
    with pytest.raises(PDDLError) as info:
        read(path)  # type: ignore[operator]
    assert str(info.value) == (f"{path}:1:20: not UTF-8 text: byte 0xe9 cannot be decoded "
                               "(save the file as UTF-8)")


def _wide(n: int, arity: int) -> str:
    params = " ".join(f"?x{i}" for i in range(n))
    args = " ".join(f"?a{i}" for i in range(arity))
    return (f"(define (domain wide) (:predicates (p {args}) (q ?a))\n"
            f"(:action a :parameters ({params}) :precondition (q ?x0) :effect (q ?x1)))")


def test_an_action_with_too_many_parameters_is_refused() -> None:
    with pytest.raises(PDDLError, match=r"wide:2:24: action a has 101 parameters, more than "
                                        r"the 100 capwatch accepts"):
        parse_domain(_wide(101, 1), "wide")
    assert parse_domain(_wide(20, 1), "wide", max_parameters=20).action("a").arity == 20


def test_a_model_with_too_many_pal_tuples_is_refused_without_enumerating_them_all() -> None:
    # 40 parameters and a 5-ary predicate: 2 * 40*39*38*37*36 = 158 million pal-tuples.
    with pytest.raises(PDDLError, match=r"wide:2:1: action a \(40 parameters\) takes the "
                                        r"model past 200000 pal-tuples"):
        parse_domain(_wide(40, 5), "wide")
    # Wide but not deep: 40 parameters and unary/binary predicates read fine.
    domain = parse_domain(_wide(40, 2), "wide")
    assert count_pal_tuples(domain) == 2 * (40 * 39 + 40)
    with pytest.raises(PDDLError, match="past 1000 pal-tuples"):
        parse_domain(_wide(40, 2), "wide", max_pal_tuples=1000)
