"""What real domain files use: action costs, equality, constants, either types, negative
preconditions, deep type hierarchies; and what capwatch refuses, with its position."""

from __future__ import annotations

import pytest

from capwatch.model import (
    Grounder,
    PDDLError,
    Verdict,
    check,
    domain_from_json,
    domain_to_json,
    explain,
    pal_tuples,
    parse_domain,
    parse_problem,
    write_domain,
    write_problem,
)
from capwatch.model.domain import LiftedAtom, NumericEffect

COSTS = """(define (domain roads)
  (:requirements :typing :action-costs)
  (:types place)
  (:predicates (at ?p - place) (road ?a ?b - place))
  (:functions (total-cost) - number (length ?a ?b - place) - number)
  (:action drive :parameters (?from ?to - place)
    :precondition (and (at ?from) (road ?from ?to))
    :effect (and (not (at ?from)) (at ?to) (increase (total-cost) (length ?from ?to))))
  (:action wait :parameters (?p - place) :precondition (at ?p)
    :effect (and (increase (total-cost) 2.5))))
"""
COSTS_PROBLEM = """(define (problem p) (:domain roads) (:objects a b - place)
  (:init (at a) (road a b) (= (length a b) 7) (= (total-cost) 0))
  (:goal (at b)) (:metric minimize (total-cost)))
"""


def test_action_costs_are_metadata_and_written_back() -> None:
    domain = parse_domain(COSTS)
    drive = domain.action("drive")
    assert drive.numeric == (NumericEffect(LiftedAtom("total-cost"),
                                           LiftedAtom("length", ("?from", "?to"))),)
    assert domain.action("wait").numeric[0].value == 2.5
    assert {f.name for f in domain.functions} == {"total-cost", "length"}
    # Not pal-tuples, not predicates: 2 actions x predicates over their parameters only.
    assert {p.atom.predicate for p in pal_tuples(domain)} == {"at", "road"}
    text = write_domain(domain)
    assert "(increase (total-cost) (length ?from ?to))" in text
    assert "(increase (total-cost) 2.5)" in text and ":action-costs" in text
    assert parse_domain(text) == domain
    assert domain_from_json(domain_to_json(domain)) == domain
    problem = parse_problem(COSTS_PROBLEM)
    assert problem.numeric_init == ((("length", "a", "b"), 7.0), (("total-cost",), 0.0))
    assert problem.metric == "minimize (total-cost)"
    assert problem.init == {("at", "a"), ("road", "a", "b")}
    again = parse_problem(write_problem(problem))
    assert again == problem and again.metric == problem.metric


def test_a_model_without_the_new_fields_serialises_as_before() -> None:
    plain = parse_domain(COSTS.replace("(increase (total-cost) (length ?from ?to))", "")
                         .replace("(increase (total-cost) 2.5)", "")
                         .replace("(:functions (total-cost) - number "
                                  "(length ?a ?b - place) - number)", ""))
    data = domain_to_json(plain)
    assert "functions" not in data
    assert all(set(a) == {"name", "parameters", "precondition", "outcomes"}
               for a in data["actions"])


EQUALITY = """(define (domain swap)
  (:requirements :typing :equality :negative-preconditions)
  (:types thing)
  (:constants home - thing)
  (:predicates (has ?a ?b - thing) (free ?a - thing))
  (:action give :parameters (?a ?b - thing)
    :precondition (and (has ?a ?b) (not (= ?a ?b)) (not (free ?b)) (not (= ?b home)))
    :effect (and (not (has ?a ?b)) (has ?b ?a) (free home)))
  (:action keep :parameters (?a ?b - thing)
    :precondition (and (= ?a ?b) (has ?a ?b))
    :effect (free ?a)))
"""


def test_equality_is_a_static_constraint_respected_in_grounding_and_consistency() -> None:
    domain = parse_domain(EQUALITY)
    give, keep = domain.action("give"), domain.action("keep")
    assert give.distinct == {("?a", "?b"), ("?b", "home")} and not give.equal
    assert keep.equal == {("?a", "?b")}
    assert give.admits(("x", "y")) and not give.admits(("x", "x"))
    assert not give.admits(("x", "home"))
    assert keep.admits(("x", "x")) and not keep.admits(("x", "y"))
    g = Grounder(domain)
    idx = g.index
    state = idx.encode({("has", "x", "x"), ("has", "x", "y")})
    ok = g.operator(("give", "x", "y"))
    assert ok.admitted and ok.applicable(state)
    barred = g.operator(("give", "x", "x"))
    assert not barred.admitted and not barred.applicable(state)
    # The precondition atoms hold, but (not (= ?a ?b)) does not: nothing may change.
    assert check(barred, state, state)[0] is Verdict.NOT_APPLICABLE
    after = idx.encode({("has", "x", "y"), ("free", "home")})
    assert check(barred, state, after)[0] is Verdict.INCONSISTENT
    why = explain(domain, ("give", "x", "x"), idx.decode(state), idx.decode(after))
    assert why.violated_constraints == ("(not (= ?a ?b))",)
    assert check(g.operator(("keep", "x", "x")), state,
                 state | idx.bit(("free", "x")))[0] is Verdict.APPLIED
    assert not g.operator(("keep", "x", "y")).applicable(state)
    text = write_domain(domain)
    assert "(not (= ?a ?b))" in text and "(= ?a ?b)" in text and ":equality" in text
    assert parse_domain(text) == domain
    assert domain_from_json(domain_to_json(domain)) == domain


def test_constants_and_negative_preconditions_in_action_schemas() -> None:
    domain = parse_domain(EQUALITY)
    give = domain.action("give")
    assert LiftedAtom("free", ("home",)) in give.outcomes[0].add
    assert LiftedAtom("free", ("?b",)) in give.pre_neg
    g = Grounder(domain)
    state = g.index.encode({("has", "x", "y"), ("free", "y")})
    assert not g.operator(("give", "x", "y")).applicable(state)
    # Atoms over constants are kept in the model but are not pal-tuples.
    assert LiftedAtom("free", ("home",)) not in {p.atom for p in pal_tuples(domain)}


EITHER = """(define (domain depots)
  (:types crate area hoist - object store - area)
  (:predicates (in ?x - (either store crate)) (holds ?h - hoist ?x - (either crate store)))
  (:action lift :parameters (?h - hoist ?c - crate ?a - area ?s - store)
    :precondition (in ?c) :effect (and (not (in ?c)) (holds ?h ?c))))
"""
EITHER_PROBLEM = """(define (problem p) (:domain depots)
  (:objects c1 - crate a1 - area s1 - store h - hoist) (:init (in c1)) (:goal (holds h c1)))
"""


def test_either_types_are_unions() -> None:
    domain = parse_domain(EITHER)
    union = "(either crate store)"
    assert {p.type for pr in domain.predicates for p in pr.parameters} == {union, "hoist"}
    lift = {p.atom for p in pal_tuples(domain) if p.action == "lift"}
    assert {LiftedAtom("in", ("?c",)), LiftedAtom("in", ("?s",))} <= lift
    assert LiftedAtom("in", ("?a",)) not in lift  # an area is not necessarily a store
    by_type = parse_problem(EITHER_PROBLEM).objects_by_type(domain)
    assert by_type[union] == ("c1", "s1")
    text = write_domain(domain)
    assert f"?x - {union}" in text
    assert parse_domain(text) == domain


def test_deep_type_hierarchies() -> None:
    chain = " ".join(f"t{i} - t{i + 1}" for i in range(40))
    text = f"""(define (domain deep) (:types {chain})
      (:predicates (p ?x - t25) (q ?x - t3))
      (:action a :parameters (?x - t0 ?y - t30) :precondition (p ?x) :effect (q ?x)))"""
    domain = parse_domain(text)
    assert domain.types.is_subtype("t0", "t40") and not domain.types.is_subtype("t30", "t25")
    atoms = {p.atom for p in pal_tuples(domain)}
    assert atoms == {LiftedAtom("p", ("?x",)), LiftedAtom("q", ("?x",))}
    problem = parse_problem("(define (problem d) (:domain deep) (:objects o - t0) (:init))")
    assert problem.objects_by_type(domain)["t40"] == ("o",)
    assert parse_domain(write_domain(domain)) == domain


HEAD = "(define (domain d) (:predicates (p ?x) (q ?x))\n"


@pytest.mark.parametrize(("body", "construct", "line", "column"), [
    ("(:action a :parameters (?x) :precondition (or (p ?x) (q ?x)) :effect (p ?x)))",
     "disjunction 'or'", 2, 43),
    ("(:action a :parameters (?x) :precondition (imply (p ?x) (q ?x)) :effect (p ?x)))",
     "'imply'", 2, 43),
    ("(:action a :parameters (?x) :precondition (exists (?y) (p ?y)) :effect (p ?x)))",
     "quantifier 'exists'", 2, 43),
    ("(:action a :parameters (?x) :precondition (and (p ?x) (forall (?y) (p ?y)))\n"
     " :effect (p ?x)))", "quantifier 'forall'", 2, 55),
    ("(:action a :parameters (?x) :precondition (p ?x)\n"
     "  :effect (when (p ?x) (q ?x))))", "conditional effect 'when'", 3, 11),
    ("(:action a :parameters (?x) :effect (forall (?y) (q ?y))))",
     "quantifier 'forall'", 2, 37),
    ("(:action a :parameters (?x) :precondition (not (and (p ?x))) :effect (p ?x)))",
     "'not' over 'and'", 2, 48),
    ("(:derived (p ?x) (q ?x)))", "derived predicates (:derived)", 2, 1),
    ("(:durative-action a :parameters (?x) :duration (= ?duration 1)))",
     "durative actions (:durative-action)", 2, 1),
    ("(:functions (f ?x)) (:action a :parameters (?x) :effect (decrease (f ?x) 1)))",
     "numeric fluent effect 'decrease'", 2, 57),
    ("(:functions (f ?x)) (:action a :parameters (?x) :precondition (> (f ?x) 1)\n"
     " :effect (p ?x)))", "numeric condition '>'", 2, 63),
    ("(:action a :parameters (?x) :effect (probabilistic 0.5 (and (p ?x)\n"
     " (increase (total-cost) 1)))))", "an action cost inside 'probabilistic'", 3, 2),
])
def test_unsupported_constructs_are_refused_with_their_name_and_position(
        body: str, construct: str, line: int, column: int) -> None:
    with pytest.raises(PDDLError) as info:
        parse_domain(HEAD + body, "dom.pddl")
    message = str(info.value)
    assert message.startswith(f"dom.pddl:{line}:{column}: {construct} is not supported")
    assert "\n" not in message


def test_costs_need_declared_functions() -> None:
    with pytest.raises(PDDLError, match="unknown function 'total-cost'"):
        parse_domain(HEAD + "(:action a :parameters (?x) :effect (increase (total-cost) 1)))")


def test_equality_in_a_goal_is_refused() -> None:
    text = "(define (problem p) (:domain d) (:objects a b) (:goal (and (not (= a b)))))"
    with pytest.raises(PDDLError, match=r"p:1:65: '=' is not supported in :goal"):
        parse_problem(text, "p")
