"""An agent on an atom index of its own checks its states' atoms as one on its family's
index does, whether its index's map doubles as the map of checked atoms or not."""

from __future__ import annotations

import pytest

from capwatch.model import ModelError
from capwatch.model.domain import (
    Action,
    Domain,
    LiftedAtom,
    Outcome,
    Parameter,
    Predicate,
)
from capwatch.model.grounding import (
    SHARED_INDEX_ATOMS,
    SHARED_INDEX_STATES,
    SharedGrounding,
    closed_vocabulary,
)
from capwatch.monitor.transition_monitor import TransitionMonitor


def _domain(declare_q: bool) -> Domain:
    """``mark(?x)`` makes ``(q ?x)`` true; ``q`` declared or not (a model built in code
    rather than parsed, where nothing checks the actions' atoms)."""
    x = Parameter("?x")
    predicates = (Predicate("p", (x,)),) + ((Predicate("q", (x,)),) if declare_q else ())
    mark = Action("mark", (x,), pre_pos=frozenset({LiftedAtom("p", ("?x",))}),
                  outcomes=(Outcome(add=frozenset({LiftedAtom("q", ("?x",))})),))
    return Domain("d", predicates, (mark,))


def test_a_vocabulary_is_closed_when_every_atom_its_actions_mention_is_declared() -> None:
    assert closed_vocabulary(_domain(True))
    assert not closed_vocabulary(_domain(False))
    assert SharedGrounding(_domain(True)).closed
    assert not SharedGrounding(_domain(False)).closed


@pytest.mark.parametrize("declare_q", [True, False])
@pytest.mark.parametrize("family", ["full", "none"])
def test_an_atom_grounding_interned_is_still_checked_in_a_state(declare_q: bool,
                                                                family: str) -> None:
    domain = _domain(declare_q)
    # A family index with no room (every agent on an index of its own), or no family.
    shared = SharedGrounding(domain, 0) if family == "full" else None
    monitor = TransitionMonitor(domain, shared=shared)
    assert not monitor.shares_index
    before, after = frozenset({("p", "o")}), frozenset({("p", "o"), ("q", "o")})
    if declare_q:
        assert monitor.observe(before, ("mark", "o"), after).verdict.name == "APPLIED"
        return
    # Grounding mark(o) interns (q o) in the agent's index; the state holding it is
    # refused all the same, and nothing is counted.
    with pytest.raises(ModelError, match="unknown predicate 'q'"):
        monitor.observe(before, ("mark", "o"), after)
    assert ("q", "o") in monitor.index
    assert monitor.transitions == 0


@pytest.mark.parametrize("bad", [("p", "o", "extra"), ("r", "o"), ()])
@pytest.mark.parametrize("family", ["full", "open", "none"])
def test_one_bad_atom_among_many_new_ones_refuses_the_state_and_interns_nothing(
        bad: tuple[str, ...], family: str) -> None:
    domain = _domain(True)
    shared = {"full": SharedGrounding(domain, 0), "open": SharedGrounding(domain),
              "none": None}[family]
    monitor = TransitionMonitor(domain, shared=shared)
    state = frozenset({("p", f"o{i}") for i in range(200)} | {("p", "o")})
    index = monitor.index
    atoms = len(index)
    message = "empty atom" if not bad else "unknown predicate 'r'" if bad[0] == "r" \
        else "predicate 'p' takes 1 arguments, found 2"
    with pytest.raises(ModelError, match=message):
        monitor.observe(state | {bad}, ("mark", "o"), state | {bad, ("q", "o")})
    # Grounding mark(o) may have interned its own atoms; no atom of the state was.
    assert monitor.index is index and len(index) <= atoms + 2
    assert not any(a in index for a in state if a != ("p", "o"))
    assert monitor.transitions == 0
    assert monitor.observe(state, ("mark", "o"), state | {("q", "o")}).verdict.name == \
        "APPLIED"


def _agent_state(first: int, n: int) -> frozenset[tuple[str, ...]]:
    return frozenset(("p", f"o{i}") for i in range(first, first + n))


def test_agents_with_large_states_widen_their_familys_index_small_ones_do_not() -> None:
    domain = _domain(True)
    half = SHARED_INDEX_ATOMS // 2 + 100
    shared = SharedGrounding(domain)
    large = []
    for k in range(3):  # three states of fresh atoms: more than the index's bound
        monitor = TransitionMonitor(domain, shared=shared)
        state = _agent_state(k * half, half)
        after = state | {("q", f"o{k * half}")}
        assert monitor.observe(state, ("mark", f"o{k * half}"), after).verdict.name == "APPLIED"
        assert monitor.shares_index
        large.append((monitor, after))
    assert len(shared.index) > SHARED_INDEX_ATOMS
    assert len(shared.index) <= SHARED_INDEX_STATES * half
    # Each one's last state is its own atoms, whatever bits the others took.
    for m, a in large:
        idle = m.idle_state(a)
        assert idle is not None and m.index.decode(idle[2]) == a

    small = SharedGrounding(domain)
    k, monitor = 0, TransitionMonitor(domain, shared=small)
    while monitor.shares_index:
        monitor = TransitionMonitor(domain, shared=small)
        state = _agent_state(k * 40, 40)
        monitor.observe(state, ("mark", f"o{k * 40}"), state | {("q", f"o{k * 40}")})
        k += 1
    # Forty-atom states fill the index to its bound and no further: the agent that did
    # not fit is on an index of its own.
    assert len(small.index) <= SHARED_INDEX_ATOMS and k * 40 > SHARED_INDEX_ATOMS - 80
    assert not monitor.shares_index and len(monitor.index) >= 40


def test_every_new_agents_atoms_are_checked_and_a_refused_record_interns_nothing() -> None:
    """Agents naming objects of their own (each on an index of its own) have every atom new
    to their index checked against the model, in the state and in the next state alike,
    whether the decoder tells which atoms the step flipped or not; a refused transition
    leaves the index as it was."""
    domain = _domain(True)
    shared = SharedGrounding(domain, 0)  # every agent on an index of its own
    for k in range(3):
        monitor = TransitionMonitor(domain, shared=shared)
        objects = [f"o{k}-{i}" for i in range(3)]
        before = frozenset(("p", o) for o in objects)
        after = before | {("q", objects[0])}
        assert monitor.observe(before, ("mark", objects[0]), after).verdict.name == "APPLIED"
        assert not monitor.shares_index and set(monitor.index.atoms) >= before | after
    for flipped in (None, [("q", "x"), ("r", "x")]):
        monitor = TransitionMonitor(domain, shared=shared)
        with pytest.raises(ModelError, match="unknown predicate 'r'"):
            monitor.observe(frozenset({("p", "x"), ("r", "x")}), ("mark", "x"),
                            frozenset({("p", "x"), ("q", "x")}), flipped=flipped)
        assert ("r", "x") not in monitor.index
        # Only the next state's atom is wrong: refused too.
        with pytest.raises(ModelError, match="predicate 'q' takes 1 arguments, found 2"):
            monitor.observe(frozenset({("p", "x")}), ("mark", "x"),
                            frozenset({("p", "x"), ("q", "x", "y")}),
                            flipped=None if flipped is None else [("q", "x", "y")])
        assert ("q", "x", "y") not in monitor.index and monitor.transitions == 0
        assert monitor.observe(frozenset({("p", "x")}), ("mark", "x"),
                               frozenset({("p", "x"), ("q", "x")}),
                               flipped=None if flipped is None else [("q", "x")]
                               ).verdict.name == "APPLIED"


@pytest.mark.parametrize("flips", [False, True])
@pytest.mark.parametrize("family", ["full", "none", "open"])
def test_states_encoded_from_new_atoms_hold_exactly_their_atoms(family: str,
                                                                flips: bool) -> None:
    """The state's atoms new to an index of the agent's own are numbered as one run of
    bits (TransitionMonitor._encode_new): whatever the index held before (the action's
    grounding, earlier states) and across a move to a new index when it is full, every
    mask kept decodes to its very state, and the verdicts are those of an agent on its
    family's index. ``flips``: the decoder tells which atoms each step flipped, so the
    run is numbered without being mapped (AtomIndex.defer_new) until the next record."""
    import random

    from capwatch.monitor.observations import MonitorLimits

    rng = random.Random(7)
    domain = _domain(True)
    limits = MonitorLimits(max_state_atoms=30, own_index_room=20)  # full at 100 atoms
    shared = {"full": SharedGrounding(domain, 0), "open": SharedGrounding(domain, 10**6),
              "none": None}[family]
    reference = SharedGrounding(domain, 10**6)
    for agent in range(6):
        monitor = TransitionMonitor(domain, limits, shared)
        check = TransitionMonitor(domain, limits, reference)
        objects = [f"a{agent}-{i}" for i in range(rng.randrange(1, 50))]
        start = rng.sample(objects, rng.randrange(1, min(len(objects), 12) + 1))
        state = frozenset(("p", o) for o in start)
        for step in range(60):
            if rng.random() < 0.5:
                objects.append(f"a{agent}-n{step}")  # a new object now and then
            target = rng.choice(objects)
            kind = rng.random()
            if kind < 0.6:  # mark a p-atom: applied if (p target) holds
                state = state | {("p", target)}
                after = state | {("q", target)}
            elif kind < 0.7:  # a wrong effect: inconsistent
                after = state | {("p", rng.choice(objects))}
            elif kind < 0.8:  # an atom lost: inconsistent (a step that deletes, flipped)
                after = state - {rng.choice(sorted(state))}
            else:  # the state unchanged
                after = state
            if rng.random() < 0.5:  # sometimes a state of other atoms: a gap
                state = frozenset(("p", o) for o in rng.sample(objects, min(len(objects), 9)))
                after = state | {("q", target)} if kind < 0.6 else after | state
            flipped = list(state ^ after) if flips and after is not state else None
            got = monitor.observe(state, ("mark", target), after, step, flipped=flipped)
            want = check.observe(state, ("mark", target), after, step)
            assert got.verdict is want.verdict
            assert monitor.index.decode(got.state) == state
            kept = [t for buf in monitor.executed.values() for t in buf if t.position == step]
            for t in kept:
                assert monitor.index.decode(t.state) == state
                assert monitor.index.decode(t.next_state) == after
            if family != "open":
                assert not monitor.shares_index
            state = after


def test_a_first_record_left_unmapped_is_held_as_bytes_and_thawed_exactly() -> None:
    """A new agent's first state on an index of its own is interned without being mapped
    (AtomIndex.defer_new); its idle state (what freezing holds) rebuilds a monitor whose
    next record gets the verdict and the masks of one that was never frozen, and the
    unfrozen one maps its atoms when it needs them."""
    from capwatch.monitor.observations import MonitorLimits

    domain = _domain(True)
    limits = MonitorLimits()
    shared = SharedGrounding(domain, 0)  # full: every agent on an index of its own
    state = frozenset({("p", "a"), *(("p", f"o{i}") for i in range(40))})
    after = state | {("q", "a")}
    kept = TransitionMonitor(domain, limits, shared)
    first = kept.observe(state, ("mark", "a"), after, 0, flipped=[("q", "a")])
    assert first.verdict.name == "APPLIED"
    assert kept.index.decode(first.state) == state
    idle = kept.idle_state(after)
    assert idle is not None
    thawed = TransitionMonitor.from_idle_state(domain, limits, shared, idle, after)
    later = after | {("p", "b")}
    for monitor in (kept, thawed):
        got = monitor.observe(later, ("mark", "b"), later | {("q", "b")}, 1,
                              flipped=[("q", "b")])
        assert got.verdict.name == "APPLIED"
        assert monitor.index.decode(got.state) == later
        t = monitor.executed["mark"][-1]
        assert monitor.index.decode(t.next_state) == later | {("q", "b")}
        assert ("p", "o7") in monitor.index.bits
    assert kept.index.atoms == thawed.index.atoms


def test_a_familys_groundings_are_bounded_and_those_in_use_are_kept() -> None:
    """Agents naming objects of their own ground one-off actions: the family keeps at most
    two generations of GROUNDINGS of them, a grounding used again since the last turn is
    kept across it, and one dropped is grounded again to the same atoms."""
    from capwatch.model import grounding

    domain = _domain(True)
    shared = SharedGrounding(domain)
    busy = shared.ground(("mark", "busy"))
    for k in range(3 * grounding.GROUNDINGS):
        shared.ground(("mark", f"o{k}"))
        if k % 1000 == 0:
            assert shared.ground(("mark", "busy")) is busy  # in use: kept
        assert len(shared._ground) + len(shared._older) <= 2 * grounding.GROUNDINGS
    first = shared.ground(("mark", "o0"))  # dropped long ago: grounded again
    assert first[2] == (("p", "o0"),) and first[4] == (((), (("q", "o0"),)),)
