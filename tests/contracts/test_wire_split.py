"""The fast decoder's splitter (contracts/wire_split.py): the C function and its Python
reference cut the same messages the same way; what they cut is what a JSON parser reads;
and whatever they return for a message that is not valid JSON, the decoder still agrees
with the schema's."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire, wire_fast, wire_split
from capwatch.contracts.wire import DecodeLimits
from tests.support.fuzzing import examples

LIMITS = DecodeLimits(max_message_bytes=100_000, max_state_atoms=100)

SPLITTERS: dict[str, wire_split.Split] = {"Python": wire_split.reference}
if wire_split.SPLIT is not None:
    SPLITTERS["C"] = wire_split.SPLIT

# Names with what a scanner could trip on: brackets, quotes, backslashes, braces,
# colons, commas, non-ASCII (escaped by json.dumps unless ensure_ascii=False).
_names = st.one_of(
    st.sampled_from(["at", "r", "w1", "]", "[", "a]b", "[[", "]]", 'q"', "\\", "{", "}", ":",
                     ",", "é", "\u2028", "x" * 40]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=6))
_state = st.lists(st.lists(_names, min_size=1, max_size=4), max_size=30)
_style = st.sampled_from([{}, {"separators": (",", ":")}, {"indent": 1},
                          {"separators": (" ,", " : ")}, {"ensure_ascii": False}])


@st.composite
def _messages(draw: st.DrawFn) -> bytes:
    event: dict[str, Any] = {
        "type": "transition", "agent_id": "a-1", "family": draw(_names),
        "state": draw(_state), "action": draw(st.lists(_names, min_size=1, max_size=3)),
        "next_state": draw(_state), "step": draw(st.integers(0, 9)),
        "time": "2026-01-02T03:04:05Z", "executed": draw(st.booleans())}
    keys = draw(st.permutations(list(event)))
    ordered = {k: event[k] for k in keys[:draw(st.integers(4, len(keys)))]}
    return json.dumps(ordered, **draw(_style)).encode()


_BYTES = [b"[", b"]", b"{", b"}", b'"', b"\\", b",", b":", b" ", b"0", b"x", b"\xff",
          b'"state":', b'"next_state":[]', b'""']


@st.composite
def _mutated(draw: st.DrawFn) -> bytes:
    raw = draw(_messages())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(raw)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "cut"]))
        piece = draw(st.sampled_from(_BYTES))
        if kind == "insert":
            raw = raw[:at] + piece + raw[at:]
        elif kind == "delete":
            raw = raw[:at] + raw[at + draw(st.integers(1, 4)):]
        elif kind == "replace":
            raw = raw[:at] + piece + raw[at + len(piece):]
        else:
            raw = raw[:at]
    return raw


def _pairs(raw: bytes) -> list[tuple[str, Any]] | None:
    """The top-level members as a strict parser reads them, in order, repeats kept."""
    try:
        msgspec.json.decode(raw)  # strict JSON (json.loads takes NaN, say)
        got = json.loads(raw, object_pairs_hook=lambda pairs: pairs)
    except (msgspec.DecodeError, ValueError):
        return None
    return got if isinstance(got, list) else None


def _check(raw: bytes) -> None:
    cuts = {name: split(raw) for name, split in SPLITTERS.items()}
    assert len(set(map(repr, cuts.values()))) == 1, (raw, cuts)
    cut = cuts["Python"]
    if cut is None:
        return
    envelope, state, next_state, keys = cut
    assert state[:1] == next_state[:1] == b"["
    assert state[-1:] == next_state[-1:] == b"]"
    assert len(envelope) == len(raw) - len(state) - len(next_state) + 4
    pieces = _pairs(envelope)
    try:
        values = msgspec.json.decode(state), msgspec.json.decode(next_state)
    except msgspec.DecodeError:
        return
    if pieces is None:
        return
    # The envelope and both texts are valid: so is the message, with the same members
    # (the states' where the envelope has []), none twice, as many as counted.
    whole = _pairs(raw)
    assert whole is not None, raw
    assert len(whole) == keys == len({k for k, _ in whole})
    members = dict(whole)
    assert (members["state"], members["next_state"]) == values
    assert {**dict(pieces), "state": values[0], "next_state": values[1]} == members


@settings(max_examples=examples(400), deadline=None)
@given(_messages())
def test_valid_messages_are_cut_where_a_parser_reads_the_states(raw: bytes) -> None:
    _check(raw)
    cut = wire_split.reference(raw)
    event = json.loads(raw)
    if b"\\" in raw or "state" not in event or "next_state" not in event:
        assert cut is None
        return
    assert cut is not None
    assert json.loads(cut[1]) == event["state"] and json.loads(cut[2]) == event["next_state"]
    assert cut[3] == len(event)


@settings(max_examples=examples(800), deadline=None)
@given(_mutated())
def test_any_bytes_cut_the_same_both_ways_and_never_wrongly(raw: bytes) -> None:
    _check(raw)


@pytest.mark.parametrize("raw", [
    b"", b"{", b"}", b"[]", b"{}", b'{"state"', b'{"state":', b'{"state":[', b'{"state":[]',
    b'{"state":[],"next_state":[]}', b'{"state":[],"next_state":[]} x',
    b' {"state" : [ ] , "next_state" : [ ] } \n', b'{"state":[],"state":[],"next_state":[]}',
    b'{"state":[],"next_state":{}}', b'{"state":"[]","next_state":[]}',
    b'{"state":[["a]"]],"next_state":[["[b"]]}', b'{"state":[["a\\"]"]],"next_state":[]}',
    b'{"a":1,"b":tru,"state":[],"next_state":[]}', b'{"state":[]"next_state":[]}',
    b'{"state":[' + b'["' + b"]" * 100 + b'"],' * 50 + b'[]],"next_state":[]}',
    b'{"state":[' + b'["' + b"x" * 31 + b'"]' + b"]" * 3 + b',"next_state":[]}',
    b'{"s' + b"x" * 100 + b'":0,' * 33 + b'"state":[],"next_state":[]}',
], ids=repr)
def test_edge_cases_cut_the_same_both_ways(raw: bytes) -> None:
    _check(raw)


def test_what_is_cut() -> None:
    raw = b'{"next_state": [["b", "]"]], "type": "transition",\n "state":[["a"]] }'
    envelope, state, next_state, keys = wire_split.reference(raw) or ((), b"", b"", 0)
    assert (envelope, state, next_state, keys) == (
        b'{"next_state": [], "type": "transition",\n "state":[] }', b'[["a"]]',
        b'[["b", "]"]]', 3)
    for refused in (raw.replace(b'"a"', b'"\\u0061"'),  # a backslash anywhere
                    raw.replace(b'"type"', b'"state"'),  # a key twice
                    raw.replace(b'[["a"]]', b'"a"')):  # a state that is no array
        assert wire_split.reference(refused) is None


@pytest.mark.parametrize("way", list(SPLITTERS))
@settings(max_examples=examples(300), deadline=None)
@given(raw=_mutated())
def test_the_decoder_agrees_with_the_schema_on_any_bytes(way: str, raw: bytes) -> None:
    kept = wire_fast._SPLIT
    wire_fast._SPLIT = SPLITTERS[way]
    try:
        memo: list[Any] = [None, None]
        for _ in range(2):  # the second time through the memo and the state texts read
            assert wire_fast.decode(raw, LIMITS, memo=memo) == wire.decode(raw, LIMITS), raw
    finally:
        wire_fast._SPLIT = kept
