"""The replay names a transition said not executed whose state changed: a refused action
changes nothing, so no model explains it, and the assessment of such evidence (the monitor
makes it evidence: ``check_declared``) fails closed saying why, rather than with the
misleading "was refused, but the model says it applies" or "no outcome of the model"."""

from __future__ import annotations

from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.model.pddl_domain import parse_domain

TENT = parse_domain("""(define (domain tent)
  (:requirements :typing)
  (:types tent)
  (:predicates (up ?t - tent) (down ?t - tent))
  (:action put_down :parameters (?t - tent)
    :precondition (up ?t) :effect (and (down ?t) (not (up ?t)))))""", "tent")
UP = frozenset({("up", "t1")})
DOWN = frozenset({("down", "t1")})


def test_a_changed_state_said_not_executed_is_unexplained_with_its_reason() -> None:
    said = [Transition(UP, ("put_down", "t1"), DOWN, executed=flag, source=str(flag))
            for flag in (None, True, False)]
    (bad,) = replay(TENT, said)
    assert bad.source == "False" and bad.executed == 0
    assert bad.reason == "(put_down t1) was said not executed, but the state changed"
    # The same change with the precondition false: the same reason, not "no outcome".
    (bad,) = replay(TENT, [Transition(DOWN, ("put_down", "t1"), UP, executed=False)])
    assert "said not executed, but the state changed" in bad.reason
