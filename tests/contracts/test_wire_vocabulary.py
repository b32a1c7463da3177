"""The fast decoder's vocabulary (wire_atoms.ID/ATOM) past its bound: it turns in two
generations, the atoms still in use are kept, an id means one atom within a generation,
and whatever an agent's memo held from before a turn, every set and every atom said to
differ is what the schema's decoder reads."""

from __future__ import annotations

import json
import random
from typing import Any
from unittest.mock import patch

import pytest

from capwatch.contracts import wire, wire_atoms, wire_fast
from capwatch.contracts.wire import DeadLetter, DecodeLimits
from tests.support.decoder_bounds import shrink_decoder

# Both ways the fast decoder can take a transition event (conftest.py).
pytestmark = pytest.mark.usefixtures("splitter")

LIMITS = DecodeLimits(max_message_bytes=100_000, max_state_atoms=60)


def _event(agent: str, state: Any, next_state: Any, compact: bool = False) -> bytes:
    return json.dumps({"type": "transition", "agent_id": agent, "family": "f",
                       "state": state, "action": ["move", "r"], "next_state": next_state},
                      separators=(",", ":") if compact else None).encode()


def _check_tables() -> None:
    """Every id a table holds names a known atom, and ID and ATOM are inverses."""
    known = {i: a for i, a in enumerate(wire_atoms.ATOM) if a != ()}
    assert len(wire_atoms.ID) == len(known)
    assert all(wire_atoms.ID[a] == i for i, a in known.items())
    assert set(wire_atoms._FREE) == set(range(len(wire_atoms.ATOM))) - set(known)
    for pieces in (wire_atoms.PIECES, wire_atoms._OLDER):
        assert all(i in known for i in pieces.values())
    for states in (wire_atoms.STATES, wire_atoms._OLDER_STATES):
        for _, atoms, ids, _text in states.values():
            if ids is not None:
                assert frozenset(map(wire_atoms.ATOM.__getitem__, ids)) == atoms


@pytest.mark.parametrize("seed", range(4))
def test_sets_stay_right_across_vocabulary_turns(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Agents walk states of a pool of atoms larger than a generation of the vocabulary,
    # each keeping its memo (the atoms' ids of its last next state) from before the turns
    # that forget some of those atoms and learn them again under new ids. A set built
    # from a stale id, or an atom said to differ that does not, fails here.
    rng = random.Random(seed)
    shrink_decoder(monkeypatch, atoms=60, pieces=40, state_bytes=20_000)
    pool = [["at", f"obj{i}", "w" * 12] for i in range(120)]
    fresh = (["at", f"new{k}", "w" * 12] for k in range(10**6))
    memos: dict[str, list[Any]] = {f"a{i}": [None, None] for i in range(5)}
    last: dict[str, list[list[str]]] = {}
    turns, told = wire_atoms.turns, 0
    for _ in range(1_500):
        agent = rng.choice(list(memos))
        state = last.get(agent) or rng.sample(pool, 15)
        if rng.random() < .1:
            state = rng.sample(pool, 15)  # a reset: another text than the memo's
        after = [a for a in state if rng.random() < .85] + rng.sample(pool, rng.randint(0, 3))
        if rng.random() < .3:
            after.append(next(fresh))  # an object never named before
        if rng.random() < .05:
            after = state
        raw = _event(agent, state, after, compact=rng.random() < .3)
        got = wire_fast.decode(raw, LIMITS, memo=memos[agent])
        assert got == wire.decode(raw, LIMITS), raw
        assert not isinstance(got, DeadLetter)
        flipped = memos[agent][1]
        if flipped is not None:
            told += 1
            assert len(set(flipped)) == len(flipped)
            assert set(flipped) == got[0].state ^ got[0].next_state
        last[agent] = after
        _check_tables()
    assert wire_atoms.turns - turns > 20 and told > 100
    wire_atoms.forget()


def test_a_state_in_use_is_never_parsed_again_across_turns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A fleet's states in use keep their atoms while ever-new objects pass through the
    # vocabulary's bound over and over: the hot state is read from its pieces or its
    # text, never parsed whole (forgetting the vocabulary at once cleared the pieces too,
    # and every large state was parsed again after each overflow).
    monkeypatch.setattr(wire_atoms, "MAX_ATOMS", 40)
    monkeypatch.setattr(wire_atoms, "MAX_PIECES", 30)
    wire_atoms.forget()
    hot = [["at", f"h{i}", "w" * 40] for i in range(8)]
    hot_text = json.dumps(hot).encode()
    assert len(hot_text) > wire_fast._SMALL_STATE
    monkeypatch.setattr(wire_atoms, "MAX_STATE_BYTES", 3 * wire_atoms._state_cost(hot_text))
    hot_raw = _event("hot", hot, hot)
    assert wire_fast.decode(hot_raw, LIMITS) == wire.decode(hot_raw, LIMITS)
    hot_ids = wire_atoms.ids(hot_text)
    assert hot_ids is not None
    turns = wire_atoms.turns
    for m in range(40):
        cold = [["at", f"o{m}-{i}", "w" * 40] for i in range(8)]
        raw = _event("cold", cold, cold[1:])
        assert wire_fast.decode(raw, LIMITS) == wire.decode(raw, LIMITS)
        # Two generations, and at most the atoms the current pieces and texts hold.
        assert len(wire_atoms.ID) <= 40 + 30 + 3 * len(hot)
        with patch.object(wire_fast, "_STATE", side_effect=AssertionError("parsed")):
            assert wire_fast.decode(hot_raw, LIMITS) == wire.decode(hot_raw, LIMITS)
        assert wire_atoms.ids(hot_text) == hot_ids  # the same ids: never learnt again
        _check_tables()
    assert wire_atoms.turns - turns >= 10
    wire_atoms.forget()


def test_an_id_names_one_atom_within_a_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    # A forgotten atom's id is given to another one only in a later generation: a holder
    # of ids (an agent's memo) tells them by their generation, and an agent's state set
    # made from ids of another generation would be silently wrong.
    monkeypatch.setattr(wire_atoms, "MAX_ATOMS", 20)
    wire_atoms.forget()
    given: dict[tuple[int, int], tuple[str, ...]] = {}
    for m in range(30):
        atoms = [("at", f"o{m}-{i}") for i in range(4)]
        wire_atoms.learn(atoms)
        for a in atoms:
            assert given.setdefault((wire_atoms.generation, wire_atoms.ID[a]), a) == a
        for i, slot in enumerate(wire_atoms.ATOM):
            if slot != ():
                assert given.setdefault((wire_atoms.generation, i), slot) == slot
    # Bounded: the forgotten atoms' slots are given again.
    assert len(wire_atoms.ATOM) <= 20 and wire_atoms.turns >= 5
    wire_atoms.forget()


def test_a_memo_from_before_its_atoms_were_forgotten_is_not_diffed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An agent's memo holds the ids of its last state; the atoms are then forgotten
    # (nothing else held them through the turns) and learnt again under new ids from
    # another agent's texts. The agent's next state, read from those pieces, must not be
    # made from its state by the ids that differ: every one of its atoms differs by id.
    shrink_decoder(monkeypatch, atoms=40, pieces=20, state_bytes=3_000)
    state = [["at", f"s{i}", "w" * 30] for i in range(10)]
    memo: list[Any] = [None, None]
    raw = _event("sleeper", state, state)
    assert wire_fast.decode(raw, LIMITS, memo=memo) == wire.decode(raw, LIMITS)
    stale = memo[0][3]
    assert stale is not None
    for m in range(30):  # others' ever-new objects turn the vocabulary over and over
        cold = [["at", f"o{m}-{i}", "w" * 30] for i in range(10)]
        assert wire_fast.decode(_event("cold", cold, cold), LIMITS) \
            == wire.decode(_event("cold", cold, cold), LIMITS)
    assert not set(map(wire_atoms.ATOM.__getitem__, stale)) & set(map(tuple, state))
    after = state[1:]
    taught = _event("other", [*after, ["at", "x", "y"]], after)
    assert wire_fast.decode(taught, LIMITS) == wire.decode(taught, LIMITS)
    assert wire_atoms.ids(json.dumps(after).encode()) is not None  # new ids, other texts
    wire_atoms.STATES.clear()
    wire_atoms._OLDER_STATES.clear()  # read from its pieces, not its whole text
    raw = _event("sleeper", state, after)
    got = wire_fast.decode(raw, LIMITS, memo=memo)
    assert got == wire.decode(raw, LIMITS)
    assert not isinstance(got, DeadLetter)
    assert memo[1] is None or set(memo[1]) == got[0].state ^ got[0].next_state
    wire_atoms.forget()
