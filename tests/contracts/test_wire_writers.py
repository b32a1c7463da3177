"""Events as any JSON writer may spell them: every character possibly written as a
``\\u`` escape (upper or lower case hex, surrogate pairs, ``\\/``), the keys too; any JSON
whitespace between tokens; keys in any order, sometimes one given twice; names holding
quotes, backslashes, brackets, colons and ``"state":``. Agents step on from their last
next state (its very text, or respaced), each with its memo. Every message decodes as
the schema's decoder reads it, whether the keys are counted whole or outside the states
(wire_keys), and every atom said to differ does."""

from __future__ import annotations

import random
from typing import Any

import pytest

from capwatch.contracts import wire, wire_atoms, wire_fast, wire_keys
from capwatch.contracts.wire import DeadLetter, DecodeLimits

# Both ways the fast decoder can take a transition event (conftest.py).
pytestmark = pytest.mark.usefixtures("splitter")

_LIMITS = DecodeLimits(max_message_bytes=100_000, max_state_atoms=60)
_NAMES = ["at", "r", "w1", "w2", "a:b", "a]b", "[x", 'q"t', "b\\s", "é", "\U0001d11ex",
          '"state":[', "next_state", "a/b", "日本"]


def _spaces(rng: random.Random) -> str:
    return "" if rng.random() < 0.7 else "".join(rng.choice(" \t\n\r")
                                                  for _ in range(rng.randint(1, 3)))


def _string(text: str, rng: random.Random, escape: float) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\' or code < 0x20 or rng.random() < escape:
            if code > 0xFFFF:
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04X}")
            else:
                out.append(f"\\u{code:04x}" if rng.random() < 0.5 else f"\\u{code:04X}")
        elif ch == "/" and rng.random() < 0.5:
            out.append("\\/")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _json(value: Any, rng: random.Random, escape: float) -> str:
    if isinstance(value, str):
        return _string(value, rng, escape)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return "[" + _spaces(rng) + ",".join(_json(v, rng, escape) + _spaces(rng)
                                         for v in value) + "]"


def _atom(rng: random.Random) -> list[str]:
    return [rng.choice(_NAMES) for _ in range(rng.randint(1, 3))]


def _event(rng: random.Random, agent: str, state: str, next_state: str, escape: float
           ) -> tuple[bytes, bool]:
    """A transition's bytes (the states' texts as given) and whether a key came twice."""
    fields: list[tuple[str, str]] = [
        ("type", _json("transition", rng, escape)), ("agent_id", _json(agent, rng, escape)),
        ("family", _json(rng.choice(["f", "f:1", 'f"state": [']), rng, escape)),
        ("state", state), ("action", _json(_atom(rng), rng, escape)),
        ("next_state", next_state)]
    for key, value in (("step", 3), ("optimal", True), ("time", "2026-01-02T03:04:05Z"),
                       ("episode_id", "e:1")):
        if rng.random() < 0.5:
            fields.append((key, _json(value, rng, escape)))
    rng.shuffle(fields)
    twice = rng.random() < 0.06
    if twice:
        key, value = rng.choice(fields)
        if rng.random() < 0.5:  # another value, of the same type
            value = _json([_atom(rng) for _ in range(rng.randint(0, 3))], rng, escape) \
                if key in ("state", "next_state", "action") else value
        fields.insert(rng.randrange(len(fields) + 1), (key, value))
    parts = [_spaces(rng) + _string(k, rng, escape / 2) + _spaces(rng) + ":" + _spaces(rng)
             + v + _spaces(rng) for k, v in fields]
    return ("{" + ",".join(parts) + "}").encode("utf-8", "surrogatepass"), twice


@pytest.mark.parametrize("find_states", [False, True], ids=["counted whole", "found"])
@pytest.mark.parametrize("seed", range(2))
def test_events_spelt_any_way_decode_as_the_schema_reads_them(
        seed: int, find_states: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    if find_states:
        monkeypatch.setattr(wire_keys, "FIND_STATES", 0)
    schema = wire.decode
    slow = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal slow
        slow += 1
        return schema(*args, **kwargs)

    monkeypatch.setattr(wire, "decode", counted)
    agents: dict[str, tuple[list[list[str]], str]] = {}
    memos: dict[str, list[Any]] = {}
    messages = 400
    for step in range(messages):
        agent = rng.choice(["a1", "a2", "a3"])
        escape = rng.choice([0.0, 0.0, 0.1, 0.5])
        last = agents.get(agent)
        if last is None or rng.random() < 0.1:
            state = [_atom(rng) for _ in range(rng.choice([0, 2, 12, 40]))]
            state_text = _json(state, rng, escape)
        else:
            state, state_text = last
            if rng.random() < 0.3:
                state_text = _json(state, rng, escape)  # the same atoms, respaced
        after = list(state)
        for _ in range(rng.randint(0, 2)):
            if after and rng.random() < 0.5:
                after.pop(rng.randrange(len(after)))
            else:
                after.insert(rng.randrange(len(after) + 1), _atom(rng))
        after_text = state_text if after == state and rng.random() < 0.5 \
            else _json(after, rng, escape)
        raw, twice = _event(rng, agent, state_text, after_text, escape)
        memo = memos.setdefault(agent, [None, None])
        got = wire_fast.decode(raw, _LIMITS, memo=memo)
        assert got == schema(raw, _LIMITS), (seed, step, raw)
        if twice:
            assert isinstance(got, DeadLetter) and "twice" in got.reason, raw
            continue
        assert not isinstance(got, DeadLetter), (got, raw)
        agents[agent] = after, after_text
        t = got[0]
        if memo[1] is not None:
            assert sorted(memo[1]) == sorted(t.state ^ t.next_state), raw
        assert wire_atoms.ATOM[wire_atoms.ID[t.action]] is t.action
    # Most valid messages stay on the fast path: the test checks the fast decoder.
    assert slow < messages * 0.15, slow
