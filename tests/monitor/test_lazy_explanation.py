"""An inconsistent transition's explanation is made when first read, and is the one made
at once would have been."""

from __future__ import annotations

from unittest import mock

from capwatch.model import parse_plan
from capwatch.model.consistency import explain
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.model.simulate import execute_plan
from capwatch.monitor import observations
from capwatch.monitor.transition_monitor import InconsistentTransition, TransitionMonitor
from tests.paths import DOMAINS


def _drifted_monitor() -> TransitionMonitor:
    """The gripper's true trace, watched against a drifted model (some refused)."""
    truth = read_domain(DOMAINS / "gripper" / "domain.pddl")
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    plan = parse_plan((DOMAINS / "gripper" / "optimal-plan.txt").read_text())
    monitor = TransitionMonitor(
        read_domain(DOMAINS / "gripper" / "initial-models" / "domain_1_0.pddl"))
    g, state = Grounder(truth), problem.init
    for i, action in enumerate(plan):
        _, nxt = execute_plan(g, state, [action])
        monitor.observe(frozenset(state), tuple(action), frozenset(nxt), i)
        state = nxt
    return monitor


def test_the_explanation_read_is_the_one_made_at_once() -> None:
    monitor = _drifted_monitor()
    kept = list(monitor.inconsistencies)
    assert kept
    for inc in kept:
        eager = explain(monitor.domain, inc.action, inc.state, inc.next_state)
        assert inc.explanation == eager
        assert inc == InconsistentTransition(inc.position, inc.state, inc.action,
                                             inc.next_state, eager)
        assert hash(inc) == hash(InconsistentTransition(
            inc.position, inc.state, inc.action, inc.next_state, eager))
    assert monitor.contradicted()


def test_an_inconsistency_nobody_reads_is_not_explained() -> None:
    with mock.patch.object(observations, "explain", wraps=explain) as made:
        monitor = _drifted_monitor()
        n = len(monitor.inconsistencies)
        assert n > 1 and made.call_count == 0
        first = monitor.inconsistencies[0].explanation
        assert made.call_count == 1
        # Made once: read again, the same object.
        assert monitor.inconsistencies[0].explanation is first
        assert made.call_count == 1
        assert monitor.last_inconsistency().explanation.action \
            == monitor.last_inconsistency().action
        assert made.call_count == 2


def test_a_replaced_model_does_not_explain_what_was_kept_under_the_old_one() -> None:
    monitor = _drifted_monitor()
    kept = monitor.inconsistencies[0]
    old = monitor.domain
    monitor.replace_model(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    assert not monitor.inconsistencies
    # The kept record is explained against the model it was refused by.
    assert kept.explanation == explain(old, kept.action, kept.state, kept.next_state)
