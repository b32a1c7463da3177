"""The fast decoder reads known atoms from their text (wire_atoms): whatever the names
and the spacing, it reads what the schema's decoder reads."""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire, wire_atoms, wire_fast, wire_keys
from capwatch.contracts.wire import DeadLetter, DecodeLimits
from tests.support.fuzzing import examples

# Both ways the fast decoder can take a transition event (conftest.py).
pytestmark = pytest.mark.usefixtures("splitter")

LIMITS = DecodeLimits(max_message_bytes=100_000, max_state_atoms=20)

_names = st.one_of(
    st.sampled_from(["at", "r", "w1", "w2", "]", "[", "a]b", 'q"', "\\", ",", ":", '":',
                     "é", "{}", "]]", "x,", "\u2028"]),
    st.text(alphabet=st.characters(blacklist_categories=["Cc", "Cs", "Zs", "Zl", "Zp"],
                                   blacklist_characters="()"),
            min_size=1, max_size=4))
_atom = st.lists(_names, min_size=1, max_size=3)
_state = st.lists(_atom, max_size=6)
_style = st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 1},
                          {"separators": (" ,", " : ")}, {"ensure_ascii": False}])


def event(state: Any, next_state: Any, style: dict[str, Any]) -> bytes:
    return json.dumps({"type": "transition", "agent_id": "a-1", "family": "f",
                       "state": state, "action": ["move", "r"], "next_state": next_state},
                      **style).encode()


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(_state, _style), min_size=2, max_size=6), st.booleans())
def test_states_read_from_known_texts_are_the_schemas(steps: list[tuple[Any, Any]],
                                                      short: bool) -> None:
    # short: as the decoder reads states of any length (short ones are decoded whole, and
    # their messages scanned whole for repeated keys).
    memo: list[wire_fast.StateMemo | None] = [None]
    with patch.object(wire_fast, "_SMALL_STATE", 0 if short else wire_fast._SMALL_STATE), \
            patch.object(wire_keys, "FIND_STATES", 0 if short else wire_keys.FIND_STATES):
        for (state, style), (after, _) in pairwise(steps):
            raw = event(state, after, style)
            for _ in range(2):  # the second time, what the first taught is used
                assert wire_fast.decode(raw, LIMITS, memo=memo) \
                    == wire.decode(raw, LIMITS), raw


def test_a_taught_state_is_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(18)]
    state = [["at", "r", "w1"], ["clear", "w2"], *scenery]
    after = [["at", "r", "w2"], ["clear", "w1"], *scenery]
    assert len(json.dumps(state)) > wire_fast._SMALL_STATE  # short ones are decoded whole
    for style in ({}, {"separators": (",", ":")}, {"indent": 2}):
        raw = event(state, after, style)
        first = wire_fast.decode(raw, LIMITS)

        def parse(text: bytes) -> Any:
            raise AssertionError("parsed a known state")
        monkeypatch.setattr(wire_fast, "_STATE", parse)
        assert wire_fast.decode(raw, LIMITS) == first == wire.decode(raw, LIMITS)
        monkeypatch.undo()


def test_a_piece_is_taught_only_as_the_atom_it_holds() -> None:
    # A name holding "]" cuts its atom in two: nothing of that state is taught, and the
    # state is read by the full decoder every time.
    raw = event([["at", "a]b"], ["at", "c"], *[["at", f"{i:040}"] for i in range(15)]],
                [["at", "c"]], {})
    for _ in range(2):
        got = wire_fast.decode(raw, LIMITS)
        assert got == wire.decode(raw, LIMITS)
        assert not isinstance(got, DeadLetter) and ("at", "a]b") in got[0].state
    assert wire_atoms.ids(b'[["at", "a]b"], ["at", "c"]]') is None


def test_the_pieces_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    wire_atoms.forget()  # the process-wide table, as earlier tests left it, past the bound
    monkeypatch.setattr(wire_atoms, "MAX_PIECES", 30)
    for m in range(40):
        state = [["at", f"o{m}-{i}", "w" * 50] for i in range(8)]
        raw = event(state, state[1:], {})
        got = wire_fast.decode(raw, LIMITS)
        assert got == wire.decode(raw, LIMITS)
        assert len(wire_atoms.PIECES) <= 30 and len(wire_atoms._OLDER) <= 30


def test_pieces_in_use_survive_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # Writers' own spacings make their own pieces: past the bound, the pieces of a state
    # still in use are kept (they were cleared with all the others, and every state was
    # parsed again after each overflow), while the bound still holds.
    wire_atoms.forget()
    monkeypatch.setattr(wire_atoms, "MAX_PIECES", 30)
    hot = [["at", f"h{i}", "w" * 40] for i in range(8)]
    hot_text = json.dumps(hot).encode()
    assert len(hot_text) > wire_fast._SMALL_STATE
    hot_raw = event(hot, hot, {})
    assert wire_fast.decode(hot_raw, LIMITS) == wire.decode(hot_raw, LIMITS)
    hot_ids = wire_atoms.ids(hot_text)
    assert hot_ids is not None
    turns = 0
    for m in range(40):
        cold = [["at", f"o{m}-{i}", "w" * 40] for i in range(8)]
        raw = event(cold, cold[1:], {"separators": (",", ":")} if m % 2 else {})
        older = wire_atoms._OLDER
        assert wire_fast.decode(raw, LIMITS) == wire.decode(raw, LIMITS)
        turns += wire_atoms._OLDER is not older
        assert len(wire_atoms.PIECES) <= 30 and len(wire_atoms._OLDER) <= 30
        # The hot state is read from its pieces, never parsed again.
        assert wire_atoms.ids(hot_text) == hot_ids
        with patch.object(wire_fast, "_STATE", side_effect=AssertionError("parsed")):
            assert wire_fast.decode(hot_raw, LIMITS) == wire.decode(hot_raw, LIMITS)
    assert turns >= 10  # the bound was passed over and over


def test_repeated_atoms_and_repeated_pieces_diff_as_the_schema_reads_them() -> None:
    # The next state's set is made from the state's by the symmetric difference of their
    # atoms' ids: an atom given twice (by one piece, or by two spaced otherwise) must
    # neither cancel itself out nor linger.
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(12)]
    twice = [["at", "r", "w1"], ["at", "r", "w1"], *scenery]
    states = [twice, [["at", "r", "w2"], *scenery], twice, [*scenery, ["at", "r", "w1"]],
              scenery, [["at", "r", "w1"], *scenery, ["at", "r", "w1"]], twice[1:]]
    memo: list[wire_fast.StateMemo | None] = [None]
    for state, after in pairwise(states):
        for raw in (event(state, after, {}),
                    event(state, after, {}).replace(b'["at", "r", "w1"]]',
                                                    b'[ "at","r", "w1"]]', 1)):
            assert wire_fast.decode(raw, LIMITS, memo=memo) == wire.decode(raw, LIMITS), raw
    assert memo[0] is not None and memo[0][3] is not None  # read from pieces, diffed


def test_the_state_texts_are_bounded_and_those_in_use_kept(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The cache of whole state texts holds two generations of at most MAX_STATE_BYTES
    # (by its estimate of their memory); a text read again in every generation stays.
    wire_atoms.forget()
    hot = [["at", f"h{i}", "w" * 40] for i in range(8)]
    hot_text = json.dumps(hot).encode()
    bound = 3 * wire_atoms._state_cost(hot_text)
    monkeypatch.setattr(wire_atoms, "MAX_STATE_BYTES", bound)
    hot_raw = event(hot, hot, {})
    assert wire_fast.decode(hot_raw, LIMITS) == wire.decode(hot_raw, LIMITS)
    kept = wire_atoms.known_state(hot_text)
    assert kept is not None
    for m in range(30):
        cold = [["at", f"o{m}-{i}", "w" * 40] for i in range(8)]
        raw = event(cold, cold[1:], {})
        assert wire_fast.decode(raw, LIMITS) == wire.decode(raw, LIMITS)
        for table in (wire_atoms.STATES, wire_atoms._OLDER_STATES):
            assert sum(map(wire_atoms._state_cost, table)) <= bound
        # The very read kept: its set is the same object (the read's tuple itself is
        # made anew at each return when wire_atoms is compiled: mypyc unboxes tuples).
        again = wire_atoms.known_state(hot_text)
        assert again is not None and again[1] is kept[1] and again == kept
    # The first one-off texts were dropped, the last one is kept.
    first = json.dumps([["at", f"o0-{i}", "w" * 40] for i in range(8)]).encode()
    assert first not in wire_atoms.STATES and first not in wire_atoms._OLDER_STATES
    assert json.dumps(cold).encode() in wire_atoms.STATES


_WRITERS = [{}, {"separators": (",", ":")}, {"indent": 2}, {"separators": (" ,\t", ":")}]


@pytest.mark.parametrize("style", _WRITERS, ids=repr)
def test_an_atom_first_in_one_state_and_later_in_another_is_one_piece(
        style: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # The first piece is spelt with the second one's separator (wire_atoms._first): the
    # atoms a writer's states start with make no pieces of their own, and a state that
    # starts with an atom seen only later in others is read from the pieces it has.
    wire_atoms.forget()
    atoms = [["at", f"r{i}", f"w{i:030}"] for i in range(12)]
    raw = event(atoms, atoms[1:], style)
    assert wire_fast.decode(raw, LIMITS) == wire.decode(raw, LIMITS)
    assert len(wire_atoms.PIECES) == len(atoms)

    def parse(text: bytes) -> Any:
        raise AssertionError("parsed a state of known atoms")
    monkeypatch.setattr(wire_fast, "_STATE", parse)
    moved = [*atoms[5:], *atoms[:5]]  # atoms[5] first, atoms[0] later
    raw = event(moved, moved[::-1], style)
    monkeypatch.setattr(wire_fast, "_CANONICAL", None)  # read as sent, by its pieces
    assert wire_fast.decode(raw, LIMITS) == wire.decode(raw, LIMITS)
    assert len(wire_atoms.PIECES) == len(atoms)
    wire_atoms.forget()


@pytest.mark.parametrize("text", [
    b'[["at", "a"] ["at", "b"], ["at", "c"]]',  # no comma after the first atom
    b'[["at", "a"], ["at", "b"] ["at", "c"]]',
    b'[x["at", "a"], ["at", "b"]]',
    b'[,["at", "a"], ["at", "b"]]',
    b'[["at", "a"],, ["at", "b"]]',
    b'[["at", "a"], x, ["at", "b"]]',
    b'[["at", "a"], "x" ["at", "b"]]',
    b'[["at", "a"],["at", "b"], ["at", "c"]]',  # valid, two separators
    b'[ \t["at", "a"],\n["at", "b"]]',
    b'[["at", "a"]]',
    b'[]',
], ids=repr)
def test_a_first_piece_is_read_as_its_state_reads(text: bytes) -> None:
    # Every piece of these texts but the first, spelt with its separator, is known
    # (taught by a valid state first); the first piece borrows the second's separator:
    # whatever the bytes, the state reads as the schema reads it, or is refused alike.
    wire_atoms.forget()
    filler = [["at", f"{i:040}"] for i in range(8)]
    for style in ({}, {"separators": (",", ":")}, {"separators": (",\n", ":")}):
        taught = event([["at", "z"], ["at", "a"], ["at", "b"], ["at", "c"], *filler],
                       filler, style)
        assert wire_fast.decode(taught, LIMITS) == wire.decode(taught, LIMITS)
    state = text[:-1] + b", " + json.dumps(filler)[1:].encode() if text != b"[]" \
        else json.dumps(filler).encode()
    raw = event("S", filler, {}).replace(b'"S"', state)
    assert wire_fast.decode(raw, LIMITS) == wire.decode(raw, LIMITS)
    wire_atoms.forget()


def test_names_found_valid_are_remembered_and_bad_ones_still_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    wire_atoms.forget()
    monkeypatch.setattr(wire_atoms, "MAX_NAMES", 3)
    wire_atoms._NAMES.clear()
    try:
        wire_atoms.learn([("at", "r1", "w1")])
        assert {"at", "r1", "w1"} == wire_atoms._NAMES
        # A bad name beside remembered ones: refused, nothing learnt, not remembered.
        for bad in [("at", "r 1"), ("at", "(r1)"), ("at", ""), ("at", "r\x01")]:
            with pytest.raises(wire_atoms.Invalid):
                wire_atoms.learn([("at", "r1"), bad])
            assert ("at", "r1") not in wire_atoms.ID and bad not in wire_atoms.ID
            assert bad[1] not in wire_atoms._NAMES
        # The bound: full, the names go and the new one comes in.
        wire_atoms.learn([("at", "r2")])
        assert {"r2"} == wire_atoms._NAMES
        assert {("at", "r1", "w1"), ("at", "r2")} <= set(wire_atoms.ID)
    finally:
        wire_atoms._NAMES.clear()
        wire_atoms.forget()


def test_a_state_of_a_few_new_pieces_is_read_by_its_pieces(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A fleet's first pass: each state brings a few atoms never seen among known ones.
    # Only those pieces are read (the whole text is not parsed), and what is read is
    # what the schema reads; an invalid new atom, or too many atoms, learns nothing.
    scenery = [["road", f"waypoint{i}", f"waypoint{i + 1}"] for i in range(16)]
    first = [["at", "r", "w1"], *scenery]
    assert wire_fast.decode(event(first, first, {}), LIMITS) \
        == wire.decode(event(first, first, {}), LIMITS)

    def parse(text: bytes) -> Any:
        raise AssertionError("parsed a state of known and new pieces whole")
    for k, new in enumerate((["at", "r", "w9"], ["clear", "a]b"], ["é", "x,"])):
        state = [*scenery[:k], new, *scenery[k:]]
        raw = event(state, state, {"indent": 1} if k == 1 else {})
        if k != 1:  # "a]b" cuts its atom in two: the full decoder's turn
            monkeypatch.setattr(wire_fast, "_STATE", parse)
        got = wire_fast.decode(raw, LIMITS)
        monkeypatch.undo()
        assert got == wire.decode(raw, LIMITS)
        assert not isinstance(got, DeadLetter) and tuple(new) in got[0].state
    for bad in ([["at", "r w"], *scenery], [["at", "r", "w77"], *scenery, *scenery[:4]]):
        raw = event(bad, bad, {})
        assert isinstance(wire_fast.decode(raw, LIMITS), DeadLetter)
        assert isinstance(wire.decode(raw, LIMITS), DeadLetter)
        assert tuple(bad[0]) not in wire_atoms.ID
