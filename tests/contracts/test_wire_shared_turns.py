"""The fast decoder's caches together, under bounds small enough to turn over constantly:
agents stepping between state texts they share (wire_atoms.STATES, the atoms that differ
between two reads kept by wire_fast._told) while the vocabulary turns (ids forgotten and
given again), the pieces and texts overflow, traces and refused messages come in between
and one agent runs under tighter limits. Every result is what the schema's decoder reads,
and every atom said to differ does."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from capwatch.contracts import wire, wire_atoms, wire_fast
from capwatch.contracts.wire import DeadLetter, DecodeLimits
from tests.contracts.test_wire_vocabulary import _check_tables
from tests.support.decoder_bounds import shrink_decoder

# Both ways the fast decoder can take a transition event (conftest.py).
pytestmark = pytest.mark.usefixtures("splitter")

_LIMITS = (DecodeLimits(max_message_bytes=100_000, max_state_atoms=60),
           DecodeLimits(max_message_bytes=100_000, max_state_atoms=14))


def _text(state: list[list[str]], style: int) -> str:
    if style == 1:
        return json.dumps(state, separators=(",", ":"))
    if style == 2:
        return "[ " + " ,  ".join(map(json.dumps, state)) + " ]"
    return json.dumps(state)


def _transition(agent: str, state: list[list[str]], next_state: list[list[str]],
                styles: tuple[int, int]) -> bytes:
    # The states' texts as given (their spacing is what the test varies).
    return (f'{{"type": "transition", "agent_id": {json.dumps(agent)}, "family": "f", '
            f'"state": {_text(state, styles[0])}, "action": ["move", "r"], '
            f'"next_state": {_text(next_state, styles[1])}}}').encode()


@pytest.mark.parametrize("seed", range(3))
def test_shared_steps_read_right_while_the_vocabulary_turns(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(wire_fast, "MAX_DIFF_BYTES", 3_000)
    monkeypatch.setattr(wire_fast, "_DIFFS", {})
    monkeypatch.setattr(wire_fast, "_OLDER_DIFFS", {})
    monkeypatch.setattr(wire_fast, "_diffs_bytes", 0)
    # The steps' table too (wire_fast._STEPS), over a few states' steps a generation.
    monkeypatch.setattr(wire_fast, "MAX_STEP_BYTES", 3_000)
    monkeypatch.setattr(wire_fast, "_STEPS", {})
    monkeypatch.setattr(wire_fast, "_OLDER_STEPS", {})
    monkeypatch.setattr(wire_fast, "_steps_bytes", 0)
    shrink_decoder(monkeypatch, atoms=60, pieces=40, state_bytes=5_000)
    scenery = [["road", f"w{i}", f"w{i + 1}"] for i in range(12)]
    scenes = [[["at", "r", f"w{k}"], *scenery] for k in range(8)]
    memos: dict[str, list[Any]] = {f"a{i}": [None, None] for i in range(6)}
    last: dict[str, list[list[str]]] = {}
    turns, told, fresh = wire_atoms.turns, 0, 0
    for step in range(1_200):
        memo: list[Any] | None = None
        limits = _LIMITS[0]
        r = rng.random()
        if r < 0.25:  # ever-new objects: the vocabulary turns over
            fresh += 1
            noise = [["at", f"x{fresh}-{j}", "y" * 20] for j in range(rng.randint(1, 12))]
            raw = _transition("noise", noise, noise[1:], (0, 0))
        elif r < 0.28:  # a trace over the scenes
            states = [rng.choice(scenes) for _ in range(rng.randint(2, 4))]
            raw = json.dumps({"type": "trace", "agent_id": "tracer", "family": "f",
                              "states": states,
                              "actions": [["move", "r"]] * (len(states) - 1)}).encode()
        elif r < 0.3:  # refused by the schema (a name with a space)
            raw = _transition("bad", scenes[0], [*scenes[1], ["at", "x y"]], (0, 0))
        else:
            if rng.random() < 0.01:  # a scene changes: its texts are new
                fresh += 1
                k = rng.randrange(len(scenes))
                scenes[k] = [*scenes[k][:-1], ["road", f"z{fresh}", "w0"]]
            agent = rng.choice(list(memos))
            state = last.get(agent) or rng.choice(scenes)
            after = rng.choice(scenes) if rng.random() < 0.85 else state
            if rng.random() < 0.05:
                after = [*after, ["at", "r", f"extra{rng.randrange(5)}"], *scenery[:3]]
            styles = (0, 0) if rng.random() < 0.85 else (rng.randrange(3), rng.randrange(3))
            raw = _transition(agent, state, after, styles)
            memo = memos[agent]
            memo[1] = None  # a new list per record, as Intake hands it
            limits = _LIMITS[agent == "a0"]
        got = wire_fast.decode(raw, limits, memo=memo)
        assert got == wire.decode(raw, limits), (seed, step)
        if memo is not None and not isinstance(got, DeadLetter):
            last[agent] = after
            if memo[1] is not None:
                told += 1
                assert len(set(memo[1])) == len(memo[1])
                assert set(memo[1]) == got[0].state ^ got[0].next_state, (seed, step)
        if step % 10 == 0:
            _check_tables()
    assert wire_atoms.turns - turns > 30 and told > 100
    wire_atoms.forget()


_ACTIONS = [["move", "r"], ["move", "r", "w1"], ["pick", "r", "k"], ["drop", "k"]]
_BAD_ACTIONS = ['["move", "x y"]', '"move"', "[]", '["move", 3]', '[["move"]]', "null"]


@pytest.mark.parametrize("seed", range(2))
def test_actions_read_by_their_text_are_the_vocabularys_own_atoms(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # wire_fast._ACTIONS: an action's text seen before is its interned atom, while the
    # vocabulary turns (here, often while the message's own states are read), its
    # bound overflows and invalid actions come in between with the same spellings.
    rng = random.Random(seed)
    monkeypatch.setattr(wire_fast, "MAX_ACTIONS", 3)
    shrink_decoder(monkeypatch, atoms=40, pieces=30, state_bytes=3_000)
    turns, kept = wire_atoms.turns, 0
    for step in range(1_500):
        if rng.random() < 0.08:
            action = rng.choice(_BAD_ACTIONS)
        else:
            action = json.dumps(rng.choice(_ACTIONS),
                                separators=(",", ":") if rng.random() < 0.3 else None)
        state = [["at", "r", f"w{rng.randrange(3)}"]]
        if rng.random() < 0.5:  # new objects: the vocabulary turns
            state += [["at", f"x{step}-{j}", "w0"] for j in range(rng.randint(1, 8))]
        raw = (f'{{"type": "transition", "agent_id": "a", "family": "f", '
               f'"state": {json.dumps(state)}, "action": {action}, '
               f'"next_state": {json.dumps(state[:1])}}}').encode()
        got = wire_fast.decode(raw, _LIMITS[0])
        assert got == wire.decode(raw, _LIMITS[0]), (seed, step)
        if not isinstance(got, DeadLetter):
            atom = got[0].action
            assert wire_atoms.ATOM[wire_atoms.ID[atom]] is atom, (seed, step)
            kept += bytes(action, "utf-8") in wire_fast._ACTIONS
    assert wire_atoms.turns - turns > 30 and kept > 500
    wire_atoms.forget()


@pytest.mark.parametrize("seed", range(2))
def test_a_traces_actions_read_by_their_text_are_the_vocabularys_own_atoms(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trace's actions are read as a transition's action is (wire_fast._ACTIONS), each
    # step's; an invalid one anywhere among them, or the vocabulary turning while the
    # trace's states are read, gives what the schema gives.
    rng = random.Random(seed)
    monkeypatch.setattr(wire_fast, "MAX_ACTIONS", 3)
    shrink_decoder(monkeypatch, atoms=40, pieces=30, state_bytes=3_000)
    turns, kept = wire_atoms.turns, 0
    for step in range(600):
        actions = [rng.choice(_BAD_ACTIONS) if rng.random() < 0.03
                   else json.dumps(rng.choice(_ACTIONS),
                                   separators=(",", ":") if rng.random() < 0.3 else None)
                   for _ in range(rng.randint(1, 4))]
        states = []
        for _ in range(len(actions) + 1):
            state = [["at", "r", f"w{rng.randrange(3)}"]]
            if rng.random() < 0.3:  # new objects: the vocabulary turns
                state += [["at", f"x{step}-{j}", "w0"] for j in range(rng.randint(1, 8))]
            states.append(state)
        raw = (f'{{"type": "trace", "agent_id": "a", "family": "f", '
               f'"states": {json.dumps(states)}, "actions": [{", ".join(actions)}]}}'
               ).encode()
        got = wire_fast.decode(raw, _LIMITS[0])
        assert got == wire.decode(raw, _LIMITS[0]), (seed, step)
        if not isinstance(got, DeadLetter):
            atom = got[-1].action
            assert wire_atoms.ATOM[wire_atoms.ID[atom]] is atom, (seed, step)
            kept += all(bytes(a, "utf-8") in wire_fast._ACTIONS for a in actions[-1:])
    assert wire_atoms.turns - turns > 10 and kept > 200
    wire_atoms.forget()


def test_a_long_action_text_is_read_each_time_not_kept() -> None:
    # The map of action texts is bounded in bytes too: a long text is read every time.
    action = json.dumps(["move", "r" * 200, "w" * 200]).encode()
    assert len(action) > wire_fast.MAX_ACTION_TEXT
    raw = (b'{"type": "transition", "agent_id": "a", "family": "f", "state": [], '
           b'"action": ' + action + b', "next_state": []}')
    for _ in range(2):
        got = wire_fast.decode(raw, _LIMITS[0])
        assert got == wire.decode(raw, _LIMITS[0]) and not isinstance(got, DeadLetter)
        assert got[0].action == ("move", "r" * 200, "w" * 200)
        assert action not in wire_fast._ACTIONS
    wire_atoms.forget()
