"""Object types inferred from how a stream uses the objects."""

from __future__ import annotations

from capwatch.assess.observations import infer_object_types
from capwatch.model.pddl_reader import parse_domain, read_domain, read_problem
from tests.paths import DOMAINS


def test_types_come_from_predicate_and_action_arguments() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    # Every object of the problem occurs in its initial state or goal: the inference
    # recovers the problem's own declarations.
    states = [problem.init, problem.goal_pos]
    assert infer_object_types(domain, states, []) == problem.objects_by_type(domain)
    # A gripper mentioned only as an action argument is still typed by that parameter.
    only_action = infer_object_types(domain, [], [("pick", "ball1", "rooma", "hook")])
    assert only_action == {"ball": ("ball1",), "room": ("rooma",), "gripper": ("hook",),
                           "object": ("ball1", "hook", "rooma")}


def test_unknown_names_and_wrong_arities_say_nothing() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    states = [frozenset({("at", "ball1"), ("teleported", "ball2", "rooma"), ("free", "left")})]
    actions = [("pick", "ball3", "rooma"), ("fly", "ball4", "roomb")]
    assert infer_object_types(domain, states, actions) == {"gripper": ("left",),
                                                          "object": ("left",)}


def test_supertypes_and_constants_are_included() -> None:
    domain = parse_domain("""
    (define (domain d) (:requirements :typing)
      (:types truck - vehicle vehicle place)
      (:constants depot - place)
      (:predicates (at ?v - vehicle ?p - place))
      (:action drive :parameters (?t - truck ?from ?to - place)
        :precondition (at ?t ?from) :effect (and (at ?t ?to) (not (at ?t ?from)))))
    """)
    types = infer_object_types(domain, [], [("drive", "t1", "depot", "shop")])
    assert types["truck"] == ("t1",) and types["vehicle"] == ("t1",)
    assert types["place"] == ("depot", "shop")
