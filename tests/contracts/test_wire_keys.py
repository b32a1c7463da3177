"""wire_keys' written-out layout (the states found after ``"state":`` / ``"state": ``)
decides exactly as the general search by pattern does, on events laid out, spaced and
repeated every way: it is only a faster route to the same answer."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire_fast, wire_keys
from tests.support.fuzzing import examples

_FIELDS: dict[str, Any] = {
    "type": "transition", "agent_id": "rover-1", "family": "rover-v1", "episode_id": "e1",
    "step": 3, "time": "2026-01-02T03:04:05Z", "optimal": True, "executed": True,
    "state": [["at", "r", "w1"], ["free", "r"]], "action": ["move", "r", "w1", "w2"],
    "next_state": [["at", "r", "w2"], ["free", "r"]],
}
_SEPARATORS = [":", ": ", " :", ":  ", ":\n", "\t:", ": \t"]
_NAMES = st.sampled_from(["r", "w1", "a:b", "state", '"state": [', "next_state", "]", "x"])
_STATE = st.lists(st.lists(_NAMES, min_size=1, max_size=3), max_size=4)


def _layout(order: list[str], seps: list[str], values: dict[str, Any],
            repeated: list[tuple[int, str, Any]]) -> bytes:
    parts = [f"{json.dumps(k)}{sep}{json.dumps(values[k])}" for k, sep in
             zip(order, seps, strict=True)]
    for at, k, value in repeated:
        parts.insert(at % (len(parts) + 1), f"{json.dumps(k)}: {json.dumps(value)}")
    return ("{" + ", ".join(parts) + "}").encode()


@settings(max_examples=examples(400), deadline=None)
@given(st.permutations(sorted(_FIELDS)), st.lists(st.sampled_from(_SEPARATORS),
                                                 min_size=len(_FIELDS), max_size=len(_FIELDS)),
       _STATE, _STATE, st.sampled_from(["rover-v1", "state", "next_state", "f:1"]),
       st.lists(st.tuples(st.integers(0, 20), st.sampled_from(sorted(_FIELDS)), _STATE),
                max_size=2))
def test_the_written_out_layout_decides_as_the_general_search(
        order: list[str], seps: list[str], state: Any, next_state: Any, family: str,
        repeated: list[tuple[int, str, Any]]) -> None:
    values = {**_FIELDS, "state": state, "next_state": next_state, "family": family}
    raw = _layout(order, seps, values, repeated)
    try:
        event = wire_fast._TRANSITION(raw)
    except msgspec.ValidationError:
        return  # a repeated key of another type: refused by msgspec already
    fields = len(_FIELDS)
    s, n, t = bytes(event.state), bytes(event.next_state), bytes(event.time)
    general = wire_keys._found_keys_unique(raw, fields, s, n, t)
    old = wire_keys.FIND_STATES
    wire_keys.FIND_STATES = 0
    try:
        fast = wire_keys.transition_keys_unique(raw, fields, s, n, t)
    finally:
        wire_keys.FIND_STATES = old
    assert fast == general, raw
    if repeated:
        assert not fast, raw  # a key given twice is never taken


@pytest.mark.parametrize("raw", [
    b'{"state"', b'{"state":', b'{"state": [1]', b'{"state":[1],"next_state"',
    b'{"state":[1],"next_state":', b'{"state":[1],"next_state":[2]',
])
def test_a_cut_message_is_no_layout_and_raises_nothing(
        raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    # The decoder calls it only on JSON msgspec read whole; cut short, it still answers.
    monkeypatch.setattr(wire_keys, "FIND_STATES", 0)
    assert wire_keys.transition_keys_unique(raw, 2, b"[1]", b"[2]", b"") \
        == wire_keys._found_keys_unique(raw, 2, b"[1]", b"[2]", b"")
