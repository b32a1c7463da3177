"""One rule for the characters of every id and name on the wire (wire_text): the pydantic
schema, the fast decoder and the agent protocol's answers refuse the same code points,
and a refused event is a dead letter whose reason names the field and the code point."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from capwatch.contracts import wire, wire_atoms, wire_fast, wire_text
from capwatch.contracts.agent_protocol import QueryResponse
from capwatch.contracts.wire import DeadLetter, DecodeLimits
from tests.contracts.test_wire_fast import TRACE, TRANSITION, variant
from tests.support.fuzzing import examples

pytestmark = pytest.mark.usefixtures("splitter")

LIMITS = DecodeLimits(max_message_bytes=4000, max_state_atoms=3, max_trace_steps=2)

REFUSED = {
    "\u202e": "Cf",  # right-to-left override (Trojan Source)
    "\u200b": "Cf",  # zero-width space
    "\u2066": "Cf",  # left-to-right isolate
    "\ufeff": "Cf",  # BOM / zero-width no-break space
    "\u00ad": "Cf",  # soft hyphen
    "\ue000": "Co",  # private use
    "\U000f0000": "Co",  # supplementary private use
    "\x7f": "Cc",  # DEL
    "\x85": "Cc",  # NEL
    "\u2029": "Zp",
}
ALLOWED = ["d1", "rover v1", "caf\u00e9", "cafe\u0301", "\u00e9t\u00e9", "\u4e16\u754c",
           "x\u00a0y"]


def decode_both(raw: bytes) -> Any:
    slow = wire.decode(raw, LIMITS, partition=1, offset=2)
    fast = wire_fast.decode(raw, LIMITS, partition=1, offset=2)
    assert fast == slow, raw
    return slow


def _unassigned() -> str:
    return next(chr(c) for c in range(0x0378, 0x10FFFF) if unicodedata.category(chr(c)) == "Cn")


@pytest.mark.parametrize("char", [*REFUSED, _unassigned()], ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("field", ["family", "episode_id", "object", "predicate", "action",
                                   "trace object"])
def test_a_refused_character_is_a_dead_letter_naming_field_and_code_point(
        char: str, field: str) -> None:
    wire_atoms._NAMES.clear()
    text = f"d1{char}"
    if field in ("family", "episode_id"):
        raw = variant(TRANSITION, **{field: text})
        where = field
    elif field == "object":
        raw = variant(TRANSITION, next_state=[["at", "r", text]])
        where = "next_state.0.2"
    elif field == "predicate":
        raw = variant(TRANSITION, state=[[text, "r"]])
        where = "state.0.0"
    elif field == "action":
        raw = variant(TRANSITION, action=["move", text])
        where = "action.1"
    else:
        raw = variant(TRACE, states=[[["at", "r", "w1"]], [["at", "r", text]],
                                     [["at", "r", "w1"]]])
        where = "states.1.0.2"
    letter = decode_both(raw)
    assert isinstance(letter, DeadLetter)
    assert where in letter.reason and f"U+{ord(char):04X}" in letter.reason, letter.reason


@pytest.mark.parametrize("text", ALLOWED)
def test_allowed_text_is_kept_as_sent(text: str) -> None:
    name = text.replace(" ", "_").replace("\u00a0", "_")
    got = decode_both(variant(TRANSITION, family=text, next_state=[["at", "r", name]]))
    assert not isinstance(got, DeadLetter)
    # Not NFC-normalised: a decomposed accent stays decomposed.
    assert got[0].family == text and ("at", "r", name) in got[0].next_state


def test_a_name_refused_after_a_look_alike_was_accepted() -> None:
    # The names cache must not let the look-alike through on the fast path.
    assert not isinstance(decode_both(variant(TRANSITION)), DeadLetter)
    assert isinstance(decode_both(variant(TRANSITION, next_state=[["at", "r", "w2\u200b"]])),
                      DeadLetter)


_CHARS = st.one_of(st.characters(), st.sampled_from([*REFUSED, "a", "\u0301", " "]))


@settings(max_examples=examples(400), deadline=None)
@given(st.text(_CHARS, min_size=1, max_size=5), st.sampled_from(
    ["family", "episode_id", "object", "action"]))
def test_random_text_agrees_between_the_decoders_and_the_rule(text: str, field: str) -> None:
    wire_atoms._NAMES.clear()
    if field in ("family", "episode_id"):
        raw = variant(TRANSITION, **{field: text})
    elif field == "object":
        raw = variant(TRANSITION, state=[["at", "r", text]])
    else:
        raw = variant(TRANSITION, action=[text, "r"])
    got = decode_both(raw)
    if wire_text.fault(text) is not None:
        assert isinstance(got, DeadLetter)


@pytest.mark.parametrize("char", list(REFUSED))
def test_an_agent_answer_with_a_refused_character_is_not_read(char: str) -> None:
    answer = {"results": [{"executed": 1, "state": [["at", "r", f"w{char}"]]}]}
    with pytest.raises(ValidationError, match=f"U\\+{ord(char):04X}"):
        QueryResponse.model_validate_json(json.dumps(answer))


def test_ascii_is_answered_without_a_loop() -> None:
    assert wire_text.fault("rover-v1 (blocks)") is None
    assert wire_text.fault("a\x7fb") is not None and "U+007F" in str(wire_text.fault("a\x7f"))


_NAME_ADAPTER: TypeAdapter[str] = TypeAdapter(wire.Name)


@settings(max_examples=examples(400), deadline=None)
@given(st.text(st.one_of(_CHARS, st.sampled_from(["(", ")", "\t", "\n", "\u00a0"])),
               max_size=6) | st.sampled_from(["w" * 256, "w" * 257]))
def test_name_fault_is_the_schemas_name(text: str) -> None:
    """name_fault (the agent-side client's check) refuses exactly what the schema's Name
    refuses, and the fast decoder's name check (wire_atoms) likewise."""
    try:
        _NAME_ADAPTER.validate_python(text)
        schema_ok = True
    except ValidationError:
        schema_ok = False
    assert (wire_text.name_fault(text) is None) == schema_ok, text
    assert (wire_atoms._NAME.match(text) is not None
            and wire_text.fault(text) is None) == schema_ok, text
