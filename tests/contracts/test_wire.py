"""Wire formats: decoding, limits, vocabulary checks and the published JSON Schemas."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.contracts.wire import (
    AgentTransition,
    DeadLetter,
    DecodeLimits,
    TransitionEvent,
    dead_letter_record,
    decode,
    encode_transition,
    json_schemas,
    vocabulary_error,
)
from capwatch.contracts.wire_schemas import render
from capwatch.model.pddl_reader import read_domain
from tests.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "capwatch" / "examples"

DESIGN_EXAMPLE = {
    "type": "transition", "agent_id": "rover-17", "family": "rover-v3",
    "episode_id": "ep-0193", "step": 12, "time": "2026-11-25T21:00:00Z",
    "state": [["at", "rover1", "waypoint1"], ["battery_half", "rover1"]],
    "action": ["sample_rock", "rover1", "store1", "waypoint1"],
    "next_state": [["at", "rover1", "waypoint1"], ["rock_sample_taken", "rover1"]],
    "optimal": False,
}


def _raw(obj: object) -> bytes:
    return json.dumps(obj).encode()


def test_the_design_brief_example_decodes_to_one_transition() -> None:
    result = decode(_raw(DESIGN_EXAMPLE))
    assert isinstance(result, list) and len(result) == 1
    t = result[0]
    assert t.agent_id == "rover-17" and t.family == "rover-v3" and t.step == 12
    assert t.action == ("sample_rock", "rover1", "store1", "waypoint1")
    assert ("battery_half", "rover1") in t.state
    assert ("rock_sample_taken", "rover1") in t.next_state
    assert t.time == datetime(2026, 11, 25, 21, tzinfo=UTC)
    assert t.executed is None


def test_a_trace_expands_into_consecutive_transitions() -> None:
    event = {"type": "trace", "agent_id": "a", "family": "f", "start_step": 5,
             "states": [[["p", "x"]], [["q", "x"]], [["q", "x"], ["r"]]],
             "actions": [["go", "x"], ["stay"]], "executed": [True, False]}
    result = decode(_raw(event))
    assert isinstance(result, list)
    assert [t.step for t in result] == [5, 6]
    assert result[0].next_state == result[1].state == frozenset({("q", "x")})
    assert [t.executed for t in result] == [True, False]


@pytest.mark.parametrize(("raw", "words"), [
    (b"not json", "Invalid JSON"),
    (b"", "Invalid JSON"),
    (b"[]", "invalid event"),
    (_raw({**DESIGN_EXAMPLE, "type": "bogus"}), "type"),
    (_raw({k: v for k, v in DESIGN_EXAMPLE.items() if k != "type"}),
     "type: Field required ('transition' or 'trace')"),
    (_raw({k: v for k, v in DESIGN_EXAMPLE.items() if k != "action"}), "action"),
    (_raw({**DESIGN_EXAMPLE, "optmal": True}), "optmal"),
    (_raw({**DESIGN_EXAMPLE, "v": 2}), "v"),
    (_raw({**DESIGN_EXAMPLE, "action": []}), "action"),
    (_raw({**DESIGN_EXAMPLE, "state": [["at", "a b"]]}), "state"),
    (_raw({**DESIGN_EXAMPLE, "step": -1}), "step"),
    (_raw({"type": "trace", "agent_id": "a", "family": "f", "states": [[]],
           "actions": [["go"]]}), "needs 2 states"),
    (b"[" * 100_000, "recursion"),
    (b"\xef\xbb\xbf" + _raw(DESIGN_EXAMPLE), "byte order mark"),
])
def test_bad_messages_become_dead_letters_with_a_reason(raw: bytes, words: str) -> None:
    result = decode(raw)
    assert isinstance(result, DeadLetter)
    assert words in result.reason
    assert result.raw == raw


def test_size_limits_are_enforced_before_and_after_parsing() -> None:
    raw = _raw(DESIGN_EXAMPLE)
    small = decode(raw, DecodeLimits(max_message_bytes=len(raw) - 1))
    assert isinstance(small, DeadLetter) and "exceeds the limit" in small.reason
    few = decode(raw, DecodeLimits(max_state_atoms=1))
    assert isinstance(few, DeadLetter) and "state has 2 atoms" in few.reason
    trace = {"type": "trace", "agent_id": "a", "family": "f",
             "states": [[], [], []], "actions": [["x"], ["y"]]}
    short = decode(_raw(trace), DecodeLimits(max_trace_steps=1))
    assert isinstance(short, DeadLetter) and "2 steps" in short.reason


def test_the_key_must_name_the_agent() -> None:
    assert isinstance(decode(_raw(DESIGN_EXAMPLE), key=b"rover-17"), list)
    other = decode(_raw(DESIGN_EXAMPLE), key=b"rover-18")
    assert isinstance(other, DeadLetter) and "does not match" in other.reason
    binary = decode(_raw(DESIGN_EXAMPLE), key=b"\xff")
    assert isinstance(binary, DeadLetter) and "UTF-8" in binary.reason


def test_vocabulary_errors_name_the_offending_symbol() -> None:
    rover = read_domain(EXAMPLES / "rover.pddl")
    (good,) = decode(_raw(DESIGN_EXAMPLE))  # type: ignore[misc]
    assert vocabulary_error(rover, good) is None

    def variant(**changes: object) -> AgentTransition:
        (t,) = decode(_raw({**DESIGN_EXAMPLE, **changes}))  # type: ignore[misc]
        return t

    assert "unknown action 'fly'" in str(vocabulary_error(rover, variant(action=["fly", "x"])))
    assert "takes 3 arguments, found 1" in str(
        vocabulary_error(rover, variant(action=["sample_rock", "rover1"])))
    assert "unknown predicate 'wet'" in str(
        vocabulary_error(rover, variant(state=[["wet", "rover1"]])))
    assert "next_state: predicate 'at' takes 2 arguments, found 1" in str(
        vocabulary_error(rover, variant(next_state=[["at", "rover1"]])))


def test_encoding_round_trips_through_the_decoder() -> None:
    t = AgentTransition("a-1", "fam", "ep", 3, datetime(2026, 1, 1, tzinfo=UTC),
                   frozenset({("p", "x")}), ("go", "x"), frozenset({("q", "x")}), True, True)
    assert decode(encode_transition(t)) == [t]
    # What goes on the wire validates against the inbound model.
    TransitionEvent.model_validate_json(encode_transition(t))


def test_dead_letter_record_keeps_the_original_bytes() -> None:
    raw = b"\x00\xffgarbage"
    rec = dead_letter_record(DeadLetter("why", raw), "topic", 2, 41,
                             datetime(2026, 1, 1, tzinfo=UTC))
    data = json.loads(rec.model_dump_json())
    assert base64.b64decode(data["raw_base64"]) == raw
    assert (data["reason"], data["source"], data["partition"], data["offset"]) == \
        ("why", "topic", 2, 41)


def test_published_json_schemas_are_up_to_date() -> None:
    directory = REPO_ROOT / "docs" / "schemas"
    schemas = json_schemas()
    stale = [stem for stem, schema in schemas.items()
             if not (directory / f"{stem}.json").is_file()
             or (directory / f"{stem}.json").read_text(encoding="utf-8") != render(schema)]
    assert not stale, ("docs/schemas is out of date for " + ", ".join(stale) +
                       ": run .venv/bin/python -m capwatch.contracts.wire_schemas")
    assert {p.stem for p in Path(directory).glob("*.json")} == set(schemas)


def test_the_transition_schema_describes_the_design_example() -> None:
    schema = json_schemas()["transition-event"]
    assert set(DESIGN_EXAMPLE) <= set(schema["properties"])
    assert set(schema["required"]) == {"type", "agent_id", "family", "state", "action",
                                       "next_state"}
