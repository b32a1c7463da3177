"""The wire's ``executed`` decides a transition whose state did not change.

An unchanged state reads as a refusal where the model says the action does not apply, and
as an execution that changed nothing where it applies. A producer that says otherwise
contradicts the model. Before, the monitor never read the field: an agent that had lost a
precondition (hiking's put_down no longer requiring (up ?t)) and ran the action where its
effects held already (the tent down) looked like a refusal, so the drift was never seen
(oper17's run over a real broker: 0 inconsistencies in ~500 episodes of such an agent, ~1.6%
of whose steps were that), though every such step said ``"executed": true``."""

from __future__ import annotations

from capwatch.model import Verdict
from capwatch.model.domain import LiftedAtom
from capwatch.model.pal import Mode, PaTuple
from capwatch.model.pddl_domain import parse_domain
from capwatch.monitor.transition_monitor import TransitionMonitor

TENT = parse_domain("""(define (domain tent)
  (:requirements :typing)
  (:types tent)
  (:predicates (up ?t - tent) (down ?t - tent) (staked ?t - tent))
  (:action put_down :parameters (?t - tent)
    :precondition (up ?t) :effect (and (down ?t) (not (up ?t))))
  (:action stake :parameters (?t - tent)
    :precondition (down ?t) :effect (staked ?t)))""", "tent")
DOWN = frozenset({("down", "t1")})
STAKED = frozenset({("down", "t1"), ("staked", "t1")})


def test_an_execution_said_where_a_precondition_is_false_is_inconsistent() -> None:
    monitor = TransitionMonitor(TENT)
    assert monitor.observe(DOWN, ("put_down", "t1"), DOWN, 0).verdict \
        is Verdict.NOT_APPLICABLE  # not said: a refusal, as before
    assert monitor.observe(DOWN, ("put_down", "t1"), DOWN, 1, executed=False).verdict \
        is Verdict.NOT_APPLICABLE
    obs = monitor.observe(DOWN, ("put_down", "t1"), DOWN, 2, executed=True)
    assert obs.verdict is Verdict.INCONSISTENT
    why = monitor.last_inconsistency().explanation
    assert why.executed is True
    up = PaTuple("put_down", LiftedAtom("up", ("?t",)))
    assert up in {c.pa for c in why.contradicted}


def test_a_refusal_said_where_the_action_applies_and_changes_nothing_is_inconsistent() -> None:
    monitor = TransitionMonitor(TENT)
    assert monitor.observe(STAKED, ("stake", "t1"), STAKED, 0).verdict is Verdict.APPLIED
    assert monitor.observe(STAKED, ("stake", "t1"), STAKED, 1, executed=True).verdict \
        is Verdict.APPLIED
    obs = monitor.observe(STAKED, ("stake", "t1"), STAKED, 2, executed=False)
    assert obs.verdict is Verdict.INCONSISTENT
    why = monitor.last_inconsistency().explanation
    assert why.executed is False and not why.contradicted
    # A precondition gained: each atom the action does not mention yet, required at the
    # value it did not have (staked held: now required false; up did not: now required).
    blocking = {c.pa.atom.predicate: {v[0] for v in c.possible}
                for c in why.missing_precondition_candidates}
    assert blocking == {"staked": {Mode.NEG}, "up": {Mode.POS}}


def test_a_changed_state_said_not_executed_is_inconsistent() -> None:
    # A refused action changes nothing (PDDL, and the query protocol's start state after a
    # refused step): an agent saying it did not execute while its state changed contradicts
    # itself. Before, a change the model explains was counted applied, silently.
    up = frozenset({("up", "t1")})
    monitor = TransitionMonitor(TENT)
    assert monitor.observe(up, ("put_down", "t1"), DOWN, 0).verdict is Verdict.APPLIED
    assert monitor.observe(up, ("put_down", "t1"), DOWN, 1, executed=True).verdict \
        is Verdict.APPLIED
    obs = monitor.observe(up, ("put_down", "t1"), DOWN, 2, executed=False)
    assert obs.verdict is Verdict.INCONSISTENT
    assert monitor.last_inconsistency().next_state == DOWN
    # A change the model cannot explain stays inconsistent, said or not.
    assert monitor.observe(DOWN, ("put_down", "t1"), STAKED, 3, executed=False).verdict \
        is Verdict.INCONSISTENT


def test_check_declared_rules_for_every_combination() -> None:
    from capwatch.model.consistency import check_declared
    from capwatch.model.grounding import Grounder

    grounder = Grounder(TENT)
    op = grounder.operator(("put_down", "t1"))
    up, down = grounder.index.encode({("up", "t1")}), grounder.index.encode(DOWN)
    applies = {None: Verdict.APPLIED, True: Verdict.APPLIED, False: Verdict.INCONSISTENT}
    for said, verdict in applies.items():
        assert check_declared(op, up, down, said)[0] is verdict, said
    refused = {None: Verdict.NOT_APPLICABLE, True: Verdict.INCONSISTENT,
               False: Verdict.NOT_APPLICABLE}
    for said, verdict in refused.items():
        assert check_declared(op, down, down, said)[0] is verdict, said
