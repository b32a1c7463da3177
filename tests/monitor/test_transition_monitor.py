"""The per-agent consistency monitor."""

from __future__ import annotations

import pytest

from capwatch.model import ModelError, Verdict, parse_plan
from capwatch.model.domain import LiftedAtom
from capwatch.model.grounding import Grounder
from capwatch.model.pal import Mode, PaTuple
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.model.simulate import execute_plan
from capwatch.monitor.transition_monitor import MonitorLimits, TransitionMonitor
from tests.paths import DOMAINS


def _trace(truth_name: str = "gripper") -> list[tuple[list[list[str]], list[str],
                                                      list[list[str]]]]:
    truth = read_domain(DOMAINS / truth_name / "domain.pddl")
    problem = read_problem(DOMAINS / truth_name / "problem.pddl")
    plan = parse_plan((DOMAINS / truth_name / "optimal-plan.txt").read_text())
    g = Grounder(truth)
    state = problem.init
    out = []
    for action in plan:
        _, nxt = execute_plan(g, state, [action])
        out.append(([list(a) for a in sorted(state)], list(action),
                    [list(a) for a in sorted(nxt)]))
        state = nxt
    return out


def test_true_model_sees_only_consistent_transitions() -> None:
    monitor = TransitionMonitor(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    for i, (s, a, s2) in enumerate(_trace()):
        obs = monitor.observe_lists(s, a, s2, position=i)
        assert obs.verdict is Verdict.APPLIED
        assert obs.outcomes == 1
    assert monitor.inconsistent_count == 0
    assert monitor.counts["pick"].applied == 4
    assert monitor.contradicted() == set()


def test_drifted_model_collects_evidence_and_contradicted_pa_tuples() -> None:
    known = read_domain(DOMAINS / "gripper" / "initial-models" / "domain_1_0.pddl")
    monitor = TransitionMonitor(known)
    verdicts = [monitor.observe_lists(s, a, s2, i).verdict
                for i, (s, a, s2) in enumerate(_trace())]
    assert Verdict.INCONSISTENT in verdicts
    first = verdicts.index(Verdict.INCONSISTENT)
    assert monitor.inconsistencies[0].position == first
    # domain_1_0 flips drop's precondition on (carry ?obj ?gripper) to negative.
    carry = PaTuple("drop", LiftedAtom("carry", ("?obj", "?gripper")))
    assert carry in monitor.contradicted()
    # Always true before and false after: Table 2 leaves ⟨+,−⟩ and ⟨∅,−⟩.
    assert monitor.pinned_pa_values()[carry] == {(Mode.POS, Mode.NEG), (Mode.ABSENT, Mode.NEG)}


def test_rejected_messages_leave_no_trace() -> None:
    monitor = TransitionMonitor(read_domain(DOMAINS / "gripper" / "domain.pddl"),
                                MonitorLimits(max_state_atoms=5))
    s = [["at_robby", "rooma"]]
    with pytest.raises(ModelError, match="unknown predicate 'flying'"):
        monitor.observe_lists(s, ["move", "rooma", "roomb"], [["flying", "rooma"]])
    with pytest.raises(ModelError, match="takes 1 arguments, found 2"):
        monitor.observe_lists(s, ["move", "rooma", "roomb"], [["at_robby", "a", "b"]])
    with pytest.raises(ModelError, match="unknown action 'fly'"):
        monitor.observe_lists(s, ["fly", "rooma"], s)
    with pytest.raises(ModelError, match="more than the limit 5"):
        monitor.observe_lists([["at_robby", f"r{i}"] for i in range(6)],
                              ["move", "rooma", "roomb"], s)
    assert monitor.transitions == 0
    assert ("flying", "rooma") not in monitor.index
    assert ("at_robby", "r5") not in monitor.index


def test_repeated_atoms_in_a_message_do_not_corrupt_the_state() -> None:
    monitor = TransitionMonitor(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    s = [["at_robby", "rooma"]]
    s2 = [["at_robby", "roomb"]]
    assert monitor.observe_lists(s, ["move", "rooma", "roomb"], s2).verdict is Verdict.APPLIED
    doubled = [["at_robby", "roomb"], ["at_robby", "roomb"]]
    back = [["at_robby", "rooma"]]
    obs = monitor.observe_lists(doubled, ["move", "roomb", "rooma"], back)
    assert obs.verdict is Verdict.APPLIED


def test_replacing_the_model_drops_stale_evidence() -> None:
    truth = read_domain(DOMAINS / "gripper" / "domain.pddl")
    monitor = TransitionMonitor(read_domain(DOMAINS / "gripper" / "initial-models" /
                                            "domain_1_0.pddl"))
    for i, (s, a, s2) in enumerate(_trace()):
        monitor.observe_lists(s, a, s2, i)
    assert monitor.inconsistencies
    monitor.replace_model(truth)
    assert not monitor.inconsistencies
    for i, (s, a, s2) in enumerate(_trace()):
        assert monitor.observe_lists(s, a, s2, i).verdict is Verdict.APPLIED
