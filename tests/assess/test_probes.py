"""Packing probes into one plan-outcome query and reading the answer back."""

from __future__ import annotations

from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.probes import (
    FAIL,
    RESAMPLE,
    RESTORE,
    RISKY,
    SAFE,
    ObjectFactory,
    Probe,
    pack,
    read_answer,
)
from capwatch.contracts.agent_protocol import QueryRequest
from capwatch.model.domain import (
    Action,
    GroundAction,
    GroundAtom,
    LiftedAtom,
    Outcome,
    Parameter,
)
from capwatch.model.pal import Mode, PaTuple, delta
from capwatch.model.pddl_reader import parse_domain

X = Parameter("?x", "block")
HOLD = LiftedAtom("holding", ("?x",))
EMPTY = LiftedAtom("handempty", ())
PUT = Action("put", (X,), frozenset({HOLD}),
             outcomes=(Outcome(frozenset({EMPTY}), frozenset({HOLD})),))
GRAB = Action("grab", (X,), frozenset({EMPTY}),
              outcomes=(Outcome(frozenset({HOLD}), frozenset({EMPTY})),))
ACTIONS = {"put": PUT, "grab": GRAB}


LOOK = Action("look", (X,), frozenset({HOLD}))


def test_expected_failures_go_last() -> None:
    fail = Probe("look", {HOLD: False}, FAIL, "f")
    risky = Probe("look", {HOLD: True}, RISKY, "r", risky=1)
    safe = Probe("look", {HOLD: True}, SAFE, "s")
    q = pack([safe], [risky], [fail], {"look": LOOK}, ObjectFactory(set()))
    assert q is not None
    assert [s.probe.kind for s in q.steps] == [SAFE, RISKY, FAIL]


def test_a_step_that_would_not_see_its_designed_state_is_left_out() -> None:
    safe = Probe("put", {HOLD: True, EMPTY: False}, SAFE, "s")
    fail = Probe("grab", {HOLD: False, EMPTY: False}, FAIL, "f")
    q = pack([safe], [], [fail], ACTIONS, ObjectFactory({"a"}),
             effect=lambda pa: Mode.POS if pa.atom == EMPTY and pa.action == "put"
             else Mode.UNKNOWN)
    assert q is not None
    assert [s.probe.kind for s in q.steps] == [SAFE]  # handempty after put is true, not false
    args = [s.ground_action[1] for s in q.steps]
    assert "a" not in args and len(set(args)) == len(args)


def test_shared_atom_is_chained_only_when_the_earlier_effect_is_known() -> None:
    first = Probe("put", {HOLD: True, EMPTY: False}, SAFE, "s")
    second = Probe("grab", {HOLD: False, EMPTY: True}, RISKY, "r")
    known = pack([first], [second], [], ACTIONS, ObjectFactory(set()),
                 effect=lambda pa: Mode.POS if pa.action == "put" else Mode.UNKNOWN)
    unknown = pack([first], [second], [], ACTIONS, ObjectFactory(set()))
    assert known is not None and unknown is not None
    assert len(known.steps) == 2
    assert len(unknown.steps) == 1


def test_restoring_steps_go_between_steps_whose_effect_on_a_shared_atom_is_chance() -> None:
    """A two-draw query (docs/assessment.md): grab's effect on handempty is not known (as
    a chance one), put sets it whatever it was; put's steps, free on handempty, go only
    where a grab left it unknown, so the grabs interleave with them. Before, the packing
    had no free atom and stopped at the first grab."""
    grabs = [Probe("grab", {HOLD: False, EMPTY: True}, RESAMPLE, "g") for _ in range(3)]
    puts = [Probe("put", {HOLD: True, EMPTY: True}, RESTORE, "p", free=frozenset({EMPTY}))
            for _ in range(2)]
    effect = lambda pa: Mode.POS if pa.action == "put" else Mode.UNKNOWN  # noqa: E731
    q = pack([*grabs, *puts], [], [], ACTIONS, ObjectFactory(set()), effect=effect)
    assert q is not None
    assert [s.ground_action[0] for s in q.steps] == ["grab", "put", "grab", "put", "grab"]
    assert ("handempty",) in q.state
    # Held from the start, on objects of its own: each put runs whatever handempty is.
    puts_held = [("holding", s.ground_action[1]) for s in q.steps if s.probe.kind == RESTORE]
    assert all(g in q.state for g in puts_held)
    # Where nothing left handempty unknown, a restoring step is not sent at all.
    assert pack(puts, [], [], ACTIONS, ObjectFactory(set()), effect=effect) is None


def test_read_answer_reports_before_after_and_the_failed_step() -> None:
    a = Probe("put", {HOLD: True, EMPTY: False}, SAFE, "s")
    b = Probe("put", {HOLD: False, EMPTY: False}, FAIL, "f")
    q = pack([a], [], [b], {"put": PUT}, ObjectFactory(set()))
    assert q is not None and len(q.steps) == 1  # both touch handempty, effect unknown
    x = q.steps[0].ground_action[1]
    answer = QueryResult(1, frozenset({("handempty",)}))
    executed, failed = read_answer(q, answer)
    seen = executed[0][1]
    assert seen[PaTuple("put", HOLD)] == (True, False)
    assert seen[PaTuple("put", EMPTY)] == (False, True)
    assert failed is None
    refused = read_answer(q, QueryResult(0, q.state))
    assert refused[0] == []
    assert refused[1] is not None
    assert refused[1][1][PaTuple("put", HOLD)] is True
    assert x.startswith("q")


UNION_DOMAIN = """(define (domain depots)
  (:types crate area hoist - object store - area)
  (:predicates (in ?x - (either store crate)) (holds ?h - hoist ?x - (either crate store)))
  (:action lift :parameters (?h - hoist ?x - (either crate store))
    :precondition (in ?x) :effect (and (not (in ?x)) (holds ?h ?x)))
  (:action drop :parameters (?h - hoist ?x - (either crate store))
    :precondition (holds ?h ?x) :effect (and (in ?x) (not (holds ?h ?x)))))
"""


class _Wire:
    """An agent behind the wire's own check: every query is a ``QueryRequest`` first."""

    def __init__(self, agent: SimulatedAgent) -> None:
        self.agent = agent
        self.queries = 0

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        QueryRequest.of(state, plan)  # raises where a name breaks wire.Name
        self.queries += 1
        return self.agent.query(state, plan, samples)


def test_a_union_typed_parameter_gets_a_name_the_wire_accepts() -> None:
    """Fresh objects were named ``q<type><n>``: ``q(either crate store)1`` for a union
    type, which the wire's name check (no spaces nor parentheses) rejects, so an HTTP
    agent refused every query of such an action."""
    name = ObjectFactory(set()).new("(either crate store)")
    assert name.startswith("qcrate")
    QueryRequest.of({("in", name)}, [("lift", "h", name)])
    known = parse_domain(UNION_DOMAIN)
    lift = known.action("lift")
    (o,) = lift.outcomes
    truth = known.replace_action(lift.replace(outcomes=(Outcome(o.add, frozenset()),)))
    state = frozenset({("in", "c1")})
    stream = [Transition(state, ("lift", "h1", "c1"), frozenset({("holds", "h1", "c1"),
                                                                   ("in", "c1")}),
                         source="stream[0]")]
    wire = _Wire(SimulatedAgent(truth))
    result = assess(known, stream, wire, method="verify", budget=200)
    assert wire.queries > 0
    assert delta(result.domain(), truth) == 0
