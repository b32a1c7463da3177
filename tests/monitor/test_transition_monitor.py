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
    trace = _trace()
    for i, (s, a, s2) in enumerate(trace):
        obs = monitor.observe_lists(s, a, s2, position=i)
        assert obs.verdict is Verdict.APPLIED
        assert obs.outcomes == 1
    assert not monitor.inconsistencies and monitor.transitions == len(trace)
    assert len(monitor.executed["pick"]) == 4
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


def _frozen(trace: list[tuple[list[list[str]], list[str], list[list[str]]]]
            ) -> list[tuple[frozenset[tuple[str, ...]], tuple[str, ...],
                            frozenset[tuple[str, ...]]]]:
    return [(frozenset(map(tuple, s)), tuple(a), frozenset(map(tuple, s2)))
            for s, a, s2 in trace]


def _renamed(trace: list[tuple[frozenset[tuple[str, ...]], tuple[str, ...],
                               frozenset[tuple[str, ...]]]], suffix: str
             ) -> list[tuple[frozenset[tuple[str, ...]], tuple[str, ...],
                             frozenset[tuple[str, ...]]]]:
    """The same run over objects of another name (an agent with a vocabulary of its own)."""
    def atom(a: tuple[str, ...]) -> tuple[str, ...]:
        return (a[0], *(f"{o}{suffix}" for o in a[1:]))

    return [(frozenset(map(atom, s)), atom(a), frozenset(map(atom, s2))) for s, a, s2 in trace]


def test_agents_of_a_family_share_one_index_and_judge_as_a_private_monitor_does() -> None:
    from capwatch.model.grounding import SharedGrounding

    known = read_domain(DOMAINS / "gripper" / "initial-models" / "domain_1_0.pddl")
    trace = _frozen(_trace())
    shared = SharedGrounding(known)
    agents = [TransitionMonitor(known, shared=shared) for _ in range(3)]
    private = TransitionMonitor(known)
    for i, (s, a, s2) in enumerate(trace):
        want = private.observe(s, a, s2, i)
        for m in agents:
            got = m.observe(s, a, s2, i)
            assert (got.verdict, got.outcomes) == (want.verdict, want.outcomes)
    assert all(m.shares_index and m.index is shared.index for m in agents)
    assert len(shared.index) == len(private.index)  # the second and third agent added none
    for m in agents:
        assert m.executed_since(0, 64) == private.executed_since(0, 64)
        assert [t.explanation for t in m.inconsistencies] == \
            [t.explanation for t in private.inconsistencies]
        assert m.pinned_pa_values() == private.pinned_pa_values()


def test_an_agent_moves_to_its_own_index_when_the_shared_one_is_full() -> None:
    from capwatch.model.grounding import SharedGrounding

    known = read_domain(DOMAINS / "gripper" / "initial-models" / "domain_1_0.pddl")
    trace = _frozen(_trace())
    half = len(trace) // 2
    # ``other`` starts on objects of its own, then ``first`` runs; then ``other`` meets
    # objects nobody brought yet (another vocabulary again).
    before, after = _renamed(trace, "-b")[:half], _renamed(trace, "-c")[half:]

    def run(shared: SharedGrounding) -> tuple[TransitionMonitor, TransitionMonitor]:
        first = TransitionMonitor(known, shared=shared)
        other = TransitionMonitor(known, shared=shared)
        for i, (s, a, s2) in enumerate(before):
            other.observe(s, a, s2, i)
        for i, (s, a, s2) in enumerate(trace):
            first.observe(s, a, s2, i)
        return first, other

    sizing = SharedGrounding(known)
    run(sizing)
    shared = SharedGrounding(known, index_atoms=len(sizing.index))  # full after ``run``
    first, other = run(shared)
    assert shared.index.full and first.shares_index and other.shares_index
    private = TransitionMonitor(known)
    for i, (s, a, s2) in enumerate(before):
        private.observe(s, a, s2, i)
    for i, (s, a, s2) in enumerate(after, half):
        want = private.observe(s, a, s2, i)
        got = other.observe(s, a, s2, i)
        assert (got.verdict, got.outcomes) == (want.verdict, want.outcomes)
    assert not other.shares_index
    assert len(other.index) <= len(private.index)  # only its own atoms
    # What it kept from before the move decodes to the same transitions.
    assert other.executed_since(0, 64) == private.executed_since(0, 64)
    assert [(t.position, t.explanation) for t in other.inconsistencies] == \
        [(t.position, t.explanation) for t in private.inconsistencies]
    for i, (s, a, s2) in enumerate(trace):  # the agents that fit keep sharing
        first.observe(s, a, s2, i)
    assert first.shares_index
    with pytest.raises(ModelError):  # and the move changed no vocabulary check
        other.observe(frozenset({("flying", "rooma")}), ("move", "rooma-c", "roomb-c"),
                      frozenset())


def test_a_shared_index_gives_an_agent_whose_model_changes_an_index_of_its_own() -> None:
    from capwatch.model.grounding import SharedGrounding

    known = read_domain(DOMAINS / "gripper" / "initial-models" / "domain_1_0.pddl")
    truth = read_domain(DOMAINS / "gripper" / "domain.pddl")
    trace = _frozen(_trace())
    shared = SharedGrounding(known)
    m = TransitionMonitor(known, shared=shared)
    for i, (s, a, s2) in enumerate(trace):
        m.observe(s, a, s2, i)
    m.replace_model(truth)  # an agent's own version: not the family's baseline
    assert not m.shares_index and m.index is not shared.index
    assert all(m.observe(s, a, s2, i).verdict is Verdict.APPLIED
               for i, (s, a, s2) in enumerate(trace))
    m.replace_model(known, shared)  # back on the baseline
    assert m.shares_index
    assert not m.inconsistencies and not m.executed


ROVER = """
(define (domain rover) (:requirements :strips :typing)
  (:types rover waypoint)
  (:predicates (at ?r - rover ?w - waypoint) (visited ?w - waypoint))
  (:action navigate :parameters (?r - rover ?from - waypoint ?to - waypoint)
    :precondition (and (at ?r ?from))
    :effect (and (at ?r ?to) (not (at ?r ?from)))))
"""


@pytest.mark.parametrize("api", ["lists", "sets"])
def test_an_agent_bringing_new_objects_forever_keeps_a_bounded_index(api: str) -> None:
    """Red-team rerun of issue 12 (session 3): each state holding hundreds of objects
    never seen before grew the agent's own index without bound, and memory with the
    square of the atoms (a 2,000-atom state per message: 10 GB after 200 messages)."""
    from capwatch.model.pddl_reader import parse_domain

    limits = MonitorLimits(max_state_atoms=300, own_index_room=256)
    monitor = TransitionMonitor(parse_domain(ROVER), limits)
    largest = 0
    for m in range(60):
        scenery = [["visited", f"w{m}-{i}"] for i in range(250)]
        state = [["at", "r1", "a"], *scenery]
        after = [["at", "r1", "b"], *scenery]
        wrong = [["at", "r1", "a"], ["at", "r1", "b"], *scenery]  # the move left nothing
        if api == "lists":
            ok = monitor.observe_lists(state, ["navigate", "r1", "a", "b"], after, m)
            bad = monitor.observe_lists(state, ["navigate", "r1", "a", "b"], wrong, m)
        else:
            def fs(atoms: list[list[str]]) -> frozenset[tuple[str, ...]]:
                return frozenset(tuple(a) for a in atoms)
            ok = monitor.observe(fs(state), ("navigate", "r1", "a", "b"), fs(after), m)
            bad = monitor.observe(fs(state), ("navigate", "r1", "a", "b"), fs(wrong), m)
        assert ok.verdict is Verdict.APPLIED
        assert bad.verdict is Verdict.INCONSISTENT
        largest = max(largest, len(monitor.index))
    assert largest <= limits.own_index_atoms
    # The newest executed transition is still there, decodable, after the rebuilds.
    [(state_kept, action, _)] = monitor.executed_since(59, 1)
    assert action == ("navigate", "r1", "a", "b") and ("visited", "w59-0") in state_kept
    assert len(monitor.inconsistencies) > 0


def test_a_repeated_state_set_is_checked_as_a_new_one_would_be() -> None:
    # The decoder hands an agent's previous next-state set over again as its next state;
    # the monitor reuses that set's encoding. Verdicts must not depend on it, also across
    # a change of model (the reused set's atoms are checked against the new model).
    gripper = read_domain(DOMAINS / "gripper" / "domain.pddl")
    trace = [(frozenset(map(tuple, s)), tuple(a), frozenset(map(tuple, s2)))
             for s, a, s2 in _trace()]
    shared, fresh = TransitionMonitor(gripper), TransitionMonitor(gripper)
    previous = None
    for i, (s, a, s2) in enumerate(trace):
        state = previous if previous == s else s  # the same object, as the decoder gives
        assert shared.observe(state, a, s2, i) == fresh.observe(frozenset(s), a,
                                                                frozenset(s2), i)
        previous = s2
        if i == len(trace) // 2:
            # A model without the gripper's 'free' predicate: the next state, the very
            # set seen last, must be refused, not reused as checked.
            smaller = gripper.replace(predicates=tuple(
                p for p in gripper.predicates if p.name != "free"))
            shared.replace_model(smaller)
            with pytest.raises(ModelError):
                shared.observe(previous, *trace[i + 1][1:], i + 1)
            shared.replace_model(gripper)


@pytest.mark.parametrize("name", ["sokoban", "grid"])
def test_a_large_next_state_encoded_from_the_last_is_checked_as_a_new_one(name: str) -> None:
    # A next state of 10 atoms or more is encoded from the previous state's encoding by
    # the atoms that changed; verdicts and kept executions must be those of a monitor
    # encoding every state whole, also for a next state that changes too much or too
    # little (the step's effect dropped, or an atom added from nowhere).
    from tests.paths import IPC

    domain = read_domain(IPC / name / "domain.pddl")
    problem = read_problem(IPC / name / "problem.pddl")
    plan = parse_plan((IPC / name / "optimal-plan.txt").read_text())
    g = Grounder(domain)
    chained, fresh = TransitionMonitor(domain), TransitionMonitor(domain)
    # Told the atoms that differ, as the decoder tells them: with the previous next
    # state's very set, and with a copy (the state then encoded whole, the next by them).
    told, told_copy = TransitionMonitor(domain), TransitionMonitor(domain)
    state = frozenset(problem.init)
    stray = ("unheard-of", "x")
    for i, action in enumerate(plan[:40]):
        _, after = execute_plan(g, state, [action])
        nxt = frozenset(after)
        if i % 7 == 3:
            nxt = state  # nothing happened: the step's effect is missing
        elif i % 7 == 5:
            nxt = nxt | {next(iter(state - nxt), stray)}  # a deleted atom stays
        if stray in nxt:
            nxt = frozenset(after)
        got = chained.observe(state, tuple(action), nxt, i)
        want = fresh.observe(frozenset(state), tuple(action), frozenset(nxt), i)
        assert got.verdict is want.verdict and got.state == want.state, i
        flipped = None if nxt is state else list(state ^ nxt)
        assert told.observe(state, tuple(action), nxt, i, flipped) == got, i
        assert told_copy.observe(frozenset(state), tuple(action), nxt, i, flipped) == got, i
        assert len(state) >= 10
        state = nxt if got.verdict is not Verdict.INCONSISTENT else frozenset(after)
    assert chained.transitions == fresh.transitions == told.transitions \
        == told_copy.transitions
    assert [t.position for t in chained.inconsistencies] \
        == [t.position for t in fresh.inconsistencies] \
        == [t.position for t in told.inconsistencies] \
        == [t.position for t in told_copy.inconsistencies] != []
    assert chained.executed_since(0, 64) == fresh.executed_since(0, 64) \
        == told.executed_since(0, 64) == told_copy.executed_since(0, 64)


@pytest.mark.parametrize("name", ["sokoban", "grid"])
def test_a_new_agents_first_transition_is_encoded_as_its_states_are(name: str) -> None:
    # A new agent's first transition (and its first atoms, interned then) encodes its next
    # state from its state's mask by the atoms that changed: what it keeps must decode to
    # the very states it was given, on a shared index and on an index of its own.
    from capwatch.model.grounding import SharedGrounding
    from tests.paths import IPC

    domain = read_domain(IPC / name / "domain.pddl")
    problem = read_problem(IPC / name / "problem.pddl")
    plan = parse_plan((IPC / name / "optimal-plan.txt").read_text())
    g = Grounder(domain)
    shared = SharedGrounding(domain)
    state = frozenset(problem.init)
    for i, action in enumerate(plan[:30]):
        _, after = execute_plan(g, state, [action])
        nxt = frozenset(after)
        for m in (TransitionMonitor(domain, shared=shared), TransitionMonitor(domain)):
            obs = m.observe(state, tuple(action), nxt, i)
            assert obs.verdict is Verdict.APPLIED, i
            kept = m.executed_since(0, 1)
            assert kept == [(state, tuple(action), nxt)], i
        assert len(state) >= 10 and state != nxt
        state = nxt


@pytest.mark.parametrize("keep", [1, 3, 64])
@pytest.mark.parametrize("model", ["domain.pddl", "initial-models/domain_1_0.pddl"])
def test_executions_kept_flat_read_as_a_list_of_executed_transitions_per_action(
        keep: int, model: str) -> None:
    """The executions are kept flat (one list of values per action, no tuple per
    execution): read back, kept, compacted and held idle, they are the executions a
    list of ``ExecutedTransition`` per action, trimmed to the limit, would hold."""
    from capwatch.monitor.executions import executed_since
    from capwatch.monitor.observations import ExecutedTransition

    known = read_domain(DOMAINS / "gripper" / model)
    limits = MonitorLimits(executed_per_action=keep)
    monitor = TransitionMonitor(known, limits)
    want: dict[str, list[ExecutedTransition]] = {}
    trace = _frozen(_trace()) * 2
    verdicts = set()
    for i, (s, a, s2) in enumerate(trace):
        obs = monitor.observe(s, a, s2, i)
        verdicts.add(obs.verdict)
        mask2 = monitor.index.encode(s2)
        if obs.verdict is Verdict.APPLIED or (obs.verdict is Verdict.INCONSISTENT
                                              and obs.state != mask2):
            buf = want.setdefault(a[0], [])
            buf.append(ExecutedTransition(i, obs.state, a, mask2))
            del buf[:-keep]
        assert monitor.executed == want
        assert all(type(t) is ExecutedTransition for b in monitor.executed.values() for t in b)
    assert Verdict.APPLIED in verdicts
    assert monitor.executed_since(0, 64) == executed_since(monitor.index, want, 0, 64)
    for name, buf in want.items():
        last = monitor.last_executed(name)
        assert last == (monitor.index.decode(buf[-1].state), buf[-1].action)
    assert monitor.last_executed("no-such-action") is None
    held = monitor.idle_state(trace[-1][2])
    # Held idle (only a monitor holding no inconsistent transition is): the executions as
    # plain tuples, and rebuilt as they were.
    assert (held is None) == (Verdict.INCONSISTENT in verdicts)
    if held is not None:
        assert held[1] == tuple((name, tuple(map(tuple, buf))) for name, buf in want.items())
        again = TransitionMonitor.from_idle_state(known, limits, None, held, trace[-1][2])
        assert again.executed == want
    assert monitor.compact() == (keep > 1 or Verdict.INCONSISTENT in verdicts)
    assert monitor.executed == {name: buf[-1:] for name, buf in want.items()}
