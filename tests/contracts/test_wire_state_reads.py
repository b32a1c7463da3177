"""The hot path's decoder with each agent's memo and the fleet-wide reads of state texts
(wire_atoms.known_state): the next state made from the state by the atoms that differ,
and a text read by one agent read again for another, always what the schema reads.
Split from test_wire_fast.py, whose events and helpers it uses."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch import native
from capwatch.contracts import wire, wire_atoms, wire_fast
from capwatch.contracts.wire import DeadLetter, DecodeLimits
from tests.contracts.test_wire_fast import TRACE, TRANSITION, variant
from tests.support.fuzzing import examples

# Both ways the fast decoder can take a transition event (conftest.py).
pytestmark = pytest.mark.usefixtures("splitter")

_WIDE = DecodeLimits(max_message_bytes=100_000, max_state_atoms=100)
_ATOMS = [["at", "rover", f"waypoint{i}"] for i in range(24)]


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.sets(st.sampled_from(range(len(_ATOMS))), min_size=12), min_size=2,
                max_size=10))
def test_the_atoms_a_next_state_was_made_by_are_exactly_those_that_differ(
        states: list[set[int]]) -> None:
    # With a second item in the memo, the decoder says which atoms it made the next
    # state from the state by; the monitor encodes the next state by them alone, so they
    # must be exactly the atoms in one of the two states, none twice.
    # Every atom's text known first, also as a state's first atom (any agent teaches
    # them): a state holding an atom's text never seen is parsed whole, and no atoms are
    # told then. A split state's text is canonical (atoms sorted), so each atom is made a
    # state's first by atoms that sort after it, not by turning the list.
    fillers = [["zz", "filler", f"f{i}"] for i in range(10)]
    for state in (_ATOMS, *([atom, *fillers] for atom in _ATOMS)):
        wire_fast.decode(variant(TRANSITION, state=state, next_state=state), _WIDE)
    memo: list[Any] = [None, None]
    told = 0
    for before, after in itertools.pairwise(states):
        raw = variant(TRANSITION, state=[_ATOMS[i] for i in sorted(before)],
                      next_state=[_ATOMS[i] for i in sorted(after)])
        got = wire_fast.decode(raw, _WIDE, memo=memo)
        assert got == wire.decode(raw, _WIDE) and not isinstance(got, DeadLetter)
        flipped = memo[1]
        if flipped is not None:
            told += 1
            assert len(set(flipped)) == len(flipped)
            assert set(flipped) == got[0].state ^ got[0].next_state
    # Over 256 bytes, a next state other than the state is made from it (atoms known).
    assert told == sum(a != b for a, b in itertools.pairwise(states))


def test_a_state_text_read_before_is_its_read_for_any_agent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A state's whole text read before (by any agent) is read again in one lookup: the
    # same set, and the atoms that differ from the agent's state told by the two sets.
    # Under limits its atoms exceed, it is refused as the schema refuses it.
    wire_atoms.forget()
    # Atoms in order as bytes (waypoint02 before waypoint10): a text out of order is read
    # by its canonical text when the agent's memo does not recognise it (wire_split).
    scenery = [["road", f"waypoint{i:02}", f"waypoint{i + 1:02}"] for i in range(16)]
    shared = [["at", "r", "w3"], *scenery]
    first = variant(TRANSITION, agent_id="rover-1", state=[["at", "r", "w1"], *scenery],
                    next_state=shared)
    second = variant(TRANSITION, agent_id="rover-2", state=[["at", "r", "w2"], *scenery],
                     next_state=shared)
    memos: list[list[Any]] = [[None, None], [None, None]]
    for memo, raw in zip(memos, (first, second), strict=True):
        for _ in range(2):  # the second time, the next state from the agent's memo
            assert wire_fast.decode(raw, _WIDE, memo=memo) == wire.decode(raw, _WIDE)
    a = wire_fast.decode(first, _WIDE)
    def unexpected(*args: Any) -> Any:
        raise AssertionError("read by pieces or parsed")
    with monkeypatch.context() as m:
        m.setattr(wire_atoms, "ids", unexpected)
        m.setattr(wire_fast, "_STATE", unexpected)
        # rover-2's memo is its next state: its state, another text, is read whole too.
        memo = memos[1]
        b = wire_fast.decode(second, _WIDE, memo=memo)
        assert b == wire.decode(second, _WIDE)
        assert not isinstance(a, DeadLetter) and not isinstance(b, DeadLetter)
        assert b[0].next_state is a[0].next_state
        assert memo[1] is not None and len(set(memo[1])) == len(memo[1])
        assert set(memo[1]) == b[0].state ^ b[0].next_state == {("at", "r", "w2"),
                                                                ("at", "r", "w3")}
        narrow = DecodeLimits(max_message_bytes=100_000, max_state_atoms=16)
        refused = wire.decode(second, narrow)
        assert isinstance(refused, DeadLetter)
        assert wire_fast.decode(second, narrow, memo=[memo[0], None]) == refused


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sets(st.sampled_from(range(len(_ATOMS))),
                                                      min_size=12),
                          st.sets(st.sampled_from(range(len(_ATOMS))), min_size=12),
                          st.integers(12, 24)),
                min_size=2, max_size=12))
def test_agents_sharing_state_texts_read_what_the_schema_reads(
        steps: list[tuple[int, set[int], set[int], int]]) -> None:
    # Three agents, each with its memo, send states from one pool: a text one of them
    # sent is read whole for the others (wire_atoms.known_state), under limits its atoms
    # may exceed; the result is the schema's and the atoms told are exactly those that
    # differ.
    memos: list[list[Any]] = [[None, None] for _ in range(3)]
    for agent, before, after, most in steps:
        limits = DecodeLimits(max_message_bytes=100_000, max_state_atoms=most)
        raw = variant(TRANSITION, agent_id=f"rover-{agent}",
                      state=[_ATOMS[i] for i in sorted(before)],
                      next_state=[_ATOMS[i] for i in sorted(after)])
        memo = memos[agent]
        got = wire_fast.decode(raw, limits, memo=memo)
        assert got == wire.decode(raw, limits), raw
        if memo[1] is not None and not isinstance(got, DeadLetter):
            assert len(set(memo[1])) == len(memo[1])
            assert set(memo[1]) == got[0].state ^ got[0].next_state


def test_a_step_between_shared_states_is_diffed_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Agents of a family step between the states they share: the atoms that differ
    # between two reads are found once (wire_fast._told) and handed to every agent
    # making that step; the table of them holds two generations within its bound.
    wire_atoms.forget()
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(16)]
    at = [[["at", "r", f"w{k}"], *scenery] for k in range(40)]
    for state in at:  # every text read before, by some agent
        wire_fast.decode(variant(TRANSITION, agent_id="scout", state=state,
                                 next_state=state), _WIDE)
    told: list[Any] = []
    for agent in ("rover-1", "rover-2"):
        memo: list[Any] = [None, None]
        for k in range(2):
            raw = variant(TRANSITION, agent_id=agent, state=at[k], next_state=at[k + 1])
            assert wire_fast.decode(raw, _WIDE, memo=memo) == wire.decode(raw, _WIDE)
        assert set(memo[1]) == {("at", "r", "w1"), ("at", "r", "w2")}
        told.append(memo[1])
    assert told[0] is told[1]  # rover-1's, found again for rover-2
    cost = 300 + 8 * (2 * 17 + 2)
    monkeypatch.setattr(wire_fast, "MAX_DIFF_BYTES", 3 * cost)
    monkeypatch.setattr(wire_fast, "_diffs_bytes", 0)
    wire_fast._DIFFS.clear()  # earlier tests' steps
    wire_fast._OLDER_DIFFS.clear()
    memo = [None, None]
    for k in range(39):
        raw = variant(TRANSITION, state=at[k], next_state=at[k + 1])
        assert wire_fast.decode(raw, _WIDE, memo=memo) == wire.decode(raw, _WIDE)
        assert set(memo[1]) == {("at", "r", f"w{k}"), ("at", "r", f"w{k + 1}")}
        for table in (wire_fast._DIFFS, wire_fast._OLDER_DIFFS):
            assert len(table) <= 3
            for before, after, atoms in table.values():
                assert set(atoms) == {wire_atoms.ATOM[i] for i in before} \
                    ^ {wire_atoms.ATOM[i] for i in after}


def test_a_step_taken_before_from_the_same_read_is_found_by_its_text() -> None:
    # wire_fast._STEPS: a next state some agent stepped to from the very read an agent's
    # memo holds is that step's read, found by comparing texts, without wire_atoms.STATES
    # (emptied here: a lookup there would miss, and the memo would keep a hash).
    wire_atoms.forget()
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(16)]
    at = [[["at", "r", f"w{k}"], *scenery] for k in range(3)]
    assert len(json.dumps(at[0])) > 512  # a memo keeps a text this long by the table's copy
    for state in at:  # every text read before
        wire_fast.decode(variant(TRANSITION, agent_id="scout", state=state,
                                 next_state=state), _WIDE)
    first: list[Any] = [None, None]
    raw = variant(TRANSITION, agent_id="rover-1", state=at[0], next_state=at[1])
    assert wire_fast.decode(raw, _WIDE, memo=first) == wire.decode(raw, _WIDE)
    second = [first[0], None]  # another agent whose memo holds the same read of at[1]
    raw = variant(TRANSITION, agent_id="rover-1", state=at[1], next_state=at[2])
    assert wire_fast.decode(raw, _WIDE, memo=first) == wire.decode(raw, _WIDE)
    wire_atoms.STATES.clear()
    wire_atoms._OLDER_STATES.clear()
    raw = variant(TRANSITION, agent_id="rover-2", state=at[1], next_state=at[2])
    got = wire_fast.decode(raw, _WIDE, memo=second)
    assert got == wire.decode(raw, _WIDE)
    assert second[0][0] is first[0][0]  # the step's own text, not a hash
    assert second[0][2] is first[0][2]  # the same set, which the monitor then reuses
    assert second[1] is first[1]
    assert set(second[1]) == {("at", "r", "w1"), ("at", "r", "w2")}
    # Under tighter limits the message is refused, with the schema's reason.
    tight = DecodeLimits(max_message_bytes=100_000, max_state_atoms=16)
    assert wire_fast.decode(raw, tight, memo=[first[0], None]) == wire.decode(raw, tight)
    wire_atoms.forget()


def test_a_trace_reads_its_states_as_a_transition_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A trace's states are read from their texts: once their atoms' texts are known, none
    # is parsed, each is made from the one before by the atoms that differ, and the
    # transitions are the schema's; its passing states are not remembered whole.
    wire_atoms.forget()
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(16)]
    states = [[["at", "r", f"w{k % 7}"], *scenery] for k in range(30)]
    states[9] = states[9] + [states[9][0]]  # an atom given twice
    states[12] = [["at", "r", "w1"]]  # a short one, parsed whole
    actions = [["move", "r", f"w{k % 7}", f"w{(k + 1) % 7}"] for k in range(29)]
    raw = variant(TRACE, states=states, actions=actions, executed=[True] * 29)
    first = wire_fast.decode(raw, _WIDE)
    assert isinstance(first, list)
    assert first == wire.decode(raw, _WIDE) and len(first) == 29
    assert not any(json.dumps(s).encode() in wire_atoms.STATES for s in states)
    parsed: list[bytes] = []
    whole = wire_fast._STATE

    def parse(text: bytes) -> Any:
        parsed.append(bytes(text))
        return whole(text)
    monkeypatch.setattr(wire_fast, "_STATE", parse)
    again = variant(TRACE, agent_id="rover-2", states=states, actions=actions,
                    executed=[True] * 29)
    assert wire_fast.decode(again, _WIDE) == wire.decode(again, _WIDE)
    assert parsed == [json.dumps(states[12]).encode()]
    # Over the limit on atoms: refused as the schema refuses it, wherever the state is.
    narrow = DecodeLimits(max_message_bytes=100_000, max_state_atoms=17)
    refused = wire.decode(raw, narrow)
    assert isinstance(refused, DeadLetter) and wire_fast.decode(raw, narrow) == refused


def test_the_steps_table_counts_what_a_step_adds_and_turns_with_the_state_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A step's text is wire_atoms.STATES' own object: counting it here too made the table
    # turn before a fleet's steps came round again (session 14). Instead it turns with
    # STATES, so no step holds a text STATES let go of beyond one of its generations.
    monkeypatch.setattr(wire_fast, "_STEPS", {})
    monkeypatch.setattr(wire_fast, "_OLDER_STEPS", {})
    monkeypatch.setattr(wire_fast, "_steps_bytes", 0)
    monkeypatch.setattr(wire_fast, "_steps_turn", wire_atoms.state_turns)
    monkeypatch.setattr(wire_fast, "MAX_STEP_BYTES", 100_000)
    generation = wire_atoms.generation
    reads = [[i, i + 1] for i in range(20)]
    texts = [bytes([65 + i]) * 50_000 for i in range(20)]  # 1 MB of texts in all
    steps: list[tuple[bytes, int, frozenset[Any], list[int], list[Any]]] = [
        (text, 2, frozenset(), [0], []) for text in texts]
    for read, step in zip(reads, steps, strict=True):
        wire_fast._keep_step(read, generation, step)
    assert all(wire_fast._step_from(read, generation, step[0]) == step
               for read, step in zip(reads, steps, strict=True))
    turns = wire_atoms.state_turns
    monkeypatch.setattr(wire_atoms, "state_turns", turns + 1)
    later: tuple[bytes, int, frozenset[Any], list[int], list[Any]] = (
        b"[]", 0, frozenset(), [], [])
    wire_fast._keep_step([99], generation, later)
    # One turn of STATES: the steps are the older generation's, still found.
    assert wire_fast._step_from(reads[0], generation, texts[0]) == steps[0]
    monkeypatch.setattr(wire_atoms, "state_turns", turns + 3)
    wire_fast._keep_step([98], generation, later)
    assert wire_fast._step_from(reads[0], generation, texts[0]) is None
    assert wire_fast._step_from([99], generation, b"[]") is None


def test_a_traces_passing_states_are_looked_up_while_lookups_find_them() -> None:
    # The estimate: looked up while at least one lookup in PASSING_HIT_SHARE finds its
    # text, else one passing state in PASSING_PROBE; the hits of the probes bring the
    # lookups back.
    passing = wire_fast._Passing()
    for _ in range(wire_fast.PASSING_WARM):
        assert passing.worth()
        passing.tally(False)
    looked = 0
    for _ in range(10 * wire_fast.PASSING_PROBE):
        if passing.worth():
            looked += 1
            passing.tally(False)
    assert looked == 10
    for _ in range(30 * wire_fast.PASSING_PROBE):  # 30 probes: 30 hits past 42 misses
        if passing.worth():
            passing.tally(True)
    assert passing.worth() and passing.hits * wire_fast.PASSING_HIT_SHARE >= passing.tries
    for _ in range(5000):  # the window: the counts stay bounded
        passing.tally(True)
    assert passing.tries < wire_fast.PASSING_WINDOW


def test_a_trace_whose_passing_states_are_not_looked_up_reads_what_the_schema_reads() -> None:
    # Passing states known as texts (a transition sent them) read by their pieces when
    # the decoder no longer looks them up: the same transitions either way.
    wire_atoms.forget()
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(16)]
    states = [[["at", "r", f"w{k % 7}"], *scenery] for k in range(20)]
    actions = [["move", "r", f"w{k % 7}", f"w{(k + 1) % 7}"] for k in range(19)]
    for k in range(19):
        step = variant(TRANSITION, agent_id=f"rover-{k}", state=states[k],
                       action=actions[k], next_state=states[k + 1])
        assert wire_fast.decode(step, _WIDE) == wire.decode(step, _WIDE)
    raw = variant(TRACE, states=states, actions=actions, executed=[True] * 19)
    for tries, hits in ((0, 0), (10_000, 0)):
        wire_fast._PASSING.tries, wire_fast._PASSING.hits = tries, hits
        memo: list[Any] = [None, None, None]
        got = wire_fast.decode(raw, _WIDE, memo=memo)
        assert got == wire.decode(raw, _WIDE)
        assert isinstance(got, list) and memo[2] is not None
        for flipped, t in zip(memo[2], got, strict=True):
            if flipped is not None:
                assert set(flipped) == t.state ^ t.next_state
    wire_fast._PASSING.tries = wire_fast._PASSING.hits = 0
    wire_atoms.forget()


@pytest.mark.skipif(native.compiled(), reason=(
    "compiled, wire_fast calls its _step_from in C and the stand-in below cannot see it; "
    "`make test` runs tests/contracts again as pure Python (Makefile, PURE_TESTS)"))
def test_a_step_from_a_passing_state_read_by_its_pieces_is_not_looked_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A passing state read by its pieces has a fresh ids list, from which no step was
    # kept: the steps table is not searched for the next state's text (it can only
    # miss), and the transitions are the schema's. The step from the first state, read
    # whole, still is.
    wire_atoms.forget()
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(16)]
    atoms = [[["at", "r", f"w{k % 7}"], *scenery] for k in range(12)]
    for k in range(11):  # every atom's text known, no passing state's text
        step = variant(TRANSITION, agent_id=f"rover-{k}", state=atoms[k],
                       action=["move", "r"], next_state=atoms[k])
        assert wire_fast.decode(step, _WIDE) == wire.decode(step, _WIDE)
    # Each passing state in another order than any text sent before: read by its pieces.
    states = [atoms[k][1:] + atoms[k][:1] if 0 < k < 11 else atoms[k] for k in range(12)]
    actions = [["move", "r", f"w{k % 7}", f"w{(k + 1) % 7}"] for k in range(11)]
    looked: list[list[int]] = []
    lookup = wire_fast._step_from

    def step_from(state_ids: list[int], generation: int, text: bytes) -> Any:
        looked.append(state_ids)
        return lookup(state_ids, generation, text)
    monkeypatch.setattr(wire_fast, "_step_from", step_from)
    wire_fast._PASSING.tries, wire_fast._PASSING.hits = 10_000, 0
    raw = variant(TRACE, states=states, actions=actions, executed=[True] * 11)
    memo: list[Any] = [None, None, None]
    got = wire_fast.decode(raw, _WIDE, memo=memo)
    assert got == wire.decode(raw, _WIDE)
    assert isinstance(got, list) and memo[2] is not None and all(memo[2])
    assert len(looked) == 1  # from the first state (11 before: one a step)
    wire_fast._PASSING.tries = wire_fast._PASSING.hits = 0
    wire_atoms.forget()


def test_a_trace_starting_from_its_agents_last_state_in_another_order_is_that_set() -> None:
    # A producer iterating a hash set sends an agent's last state again, in another
    # order, as its next trace's first state: the memo does not recognise the text, and
    # the state is made from the memo's set by the ids that differ (none): the memo's
    # very set, whose encoding the monitor reuses. A first state that differs, or another
    # agent's memo, gives the schema's states all the same.
    wire_atoms.forget()
    scenery = [["road", f"waypoint{i:02}", f"waypoint{i + 1:02}"] for i in range(16)]
    here = [["at", "r", "w1"], *scenery]
    there = [["at", "r", "w2"], *scenery]
    for agent, state in (("scout-1", here), ("scout-2", there)):  # atoms' texts taught
        raw = variant(TRANSITION, agent_id=agent, state=state[::-1], next_state=state[::-1])
        assert wire_fast.decode(raw, _WIDE) == wire.decode(raw, _WIDE)
    memos: dict[str, list[Any]] = {"rover-1": [None, None, None],
                                   "rover-2": [None, None, None]}
    last = {}
    for agent, state in (("rover-1", here), ("rover-2", there)):
        raw = variant(TRANSITION, agent_id=agent, state=state, next_state=state)
        got = wire_fast.decode(raw, _WIDE, memo=memos[agent])
        assert isinstance(got, list) and got == wire.decode(raw, _WIDE)
        last[agent] = got[0].next_state
    actions = [["move", "r", "w1", "w2"], ["move", "r", "w2", "w1"]]
    for agent, first in (("rover-1", here), ("rover-2", here), ("rover-1", there)):
        raw = variant(TRACE, agent_id=agent, states=[first[::-1], there, here],
                      actions=actions, executed=[True, True])
        memo = memos[agent]
        before = last[agent]
        got = wire_fast.decode(raw, _WIDE, memo=memo)
        assert isinstance(got, list) and got == wire.decode(raw, _WIDE)
        if got[0].state == before:
            assert got[0].state is before
        assert got[0].state == frozenset(map(tuple, first))
        last[agent] = got[-1].next_state
        assert memo[0] is not None and memo[0][2] is last[agent]
    narrow = DecodeLimits(max_message_bytes=100_000, max_state_atoms=16)
    raw = variant(TRACE, states=[here[::-1], there, here], actions=actions,
                  executed=[True, True])
    refused = wire.decode(raw, narrow)
    assert isinstance(refused, DeadLetter)
    assert wire_fast.decode(raw, narrow, memo=memos["rover-1"]) == refused
    wire_atoms.forget()
