"""The fast decoder's trace splitter (contracts/wire_split.py, ``split_trace``): the C
function and its Python reference cut the same messages the same way, on valid traces and
on hostile bytes; what they cut is what a JSON parser reads; and the decoder, taking
either, still agrees with the schema's decoder (a bad message a dead letter, with the
schema's reason)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire, wire_atoms, wire_fast, wire_split
from capwatch.contracts.wire import DecodeLimits
from tests.contracts._split_fuzz import mutated, pairs
from tests.support.fuzzing import examples

LIMITS = DecodeLimits(max_message_bytes=100_000, max_state_atoms=100)

SPLITTERS: dict[str, wire_split.SplitTrace] = {"Python": wire_split.reference_trace}
if wire_split.SPLIT_TRACE is not None:
    SPLITTERS["C"] = wire_split.SPLIT_TRACE

# Names with what a scanner could trip on: brackets, quotes, backslashes, braces,
# colons, commas, non-ASCII (escaped by json.dumps unless ensure_ascii=False).
_names = st.one_of(
    st.sampled_from(["at", "r", "w1", "]", "[", "a]b", "[[", "]]", 'q"', "\\", "{", "}", ":",
                     ",", "é", "\u2028", "states", "x" * 40]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=6))
_atom = st.lists(_names, min_size=1, max_size=4)
_state = st.lists(_atom, max_size=12)
_style: st.SearchStrategy[dict[str, Any]] = st.sampled_from([
    {}, {"separators": (",", ":")}, {"indent": 1}, {"indent": "\t"},
    {"separators": (" ,", " : ")}, {"ensure_ascii": False}])


@st.composite
def _traces(draw: st.DrawFn) -> bytes:
    steps = draw(st.integers(0, 5))
    event: dict[str, Any] = {
        "type": "trace", "agent_id": "a-1", "family": draw(_names),
        "states": draw(st.lists(_state, min_size=steps + draw(st.sampled_from([0, 1, 1, 2])),
                                max_size=steps + 2)),
        "actions": draw(st.lists(_atom, min_size=steps, max_size=steps)),
        "start_step": draw(st.integers(0, 9)), "time": "2026-01-02T03:04:05Z",
        "executed": draw(st.lists(st.booleans(), min_size=steps, max_size=steps)),
        "episode_id": draw(_names), "v": 1, "optimal": draw(st.booleans())}
    keys = draw(st.permutations(list(event)))
    ordered = {k: event[k] for k in keys[:draw(st.integers(3, len(keys)))]}
    return json.dumps(ordered, **draw(_style)).encode()


_BYTES = [b"[", b"]", b"{", b"}", b'"', b"\\", b",", b":", b" ", b"0", b"x", b"\xff",
          b'"states":', b'"states":[]', b'"states":[[]]', b",[]", b'""', b"[],"]


def _mutated() -> st.SearchStrategy[bytes]:
    return mutated(_traces(), _BYTES)


def _check(raw: bytes) -> None:
    cuts = {name: split(raw) for name, split in SPLITTERS.items()}
    assert len(set(map(repr, cuts.values()))) == 1, (raw, cuts)
    cut = cuts["Python"]
    if cut is None:
        return
    envelope, states, keys = cut
    for text in states:
        assert text[:1] == b"[" and text[-1:] == b"]"
    assert b"[]" in envelope
    try:
        values = [msgspec.json.decode(text) for text in states]
    except (msgspec.DecodeError, ValueError):  # ValueError: not UTF-8
        return
    pieces = pairs(envelope)
    if pieces is None:
        return
    # The envelope and every text are valid: so is the message, with the same members
    # (the states' where the envelope has []), none twice, as many as counted.
    whole = pairs(raw)
    assert whole is not None, raw
    assert len(whole) == keys == len({k for k, _ in whole})
    members = dict(whole)
    assert members["states"] == values
    assert {**dict(pieces), "states": values} == members


@settings(max_examples=examples(400), deadline=None)
@given(_traces())
def test_valid_traces_are_cut_where_a_parser_reads_the_states(raw: bytes) -> None:
    _check(raw)
    cut = wire_split.reference_trace(raw)
    event = json.loads(raw)
    if "states" not in event:
        assert cut is None
        return
    assert cut is not None
    assert [json.loads(text) for text in cut[1]] == event["states"]
    assert cut[2] == len(event)


@settings(max_examples=examples(800), deadline=None)
@given(_mutated())
def test_any_bytes_cut_the_same_both_ways_and_never_wrongly(raw: bytes) -> None:
    _check(raw)


@pytest.mark.parametrize("raw", [
    b"", b"{", b"}", b"[]", b"{}", b'{"states"', b'{"states":', b'{"states":[',
    b'{"states":[]}', b'{"states":[[]]}', b'{"states":[[],]}', b'{"states":[,[]]}',
    b'{"states":[[] []]}', b'{"states":[[],[]]} x', b'{"states":[[]],"states":[[]]}',
    b' {"states" : [ [ ] , [ ] ] } \r\n', b'{"states":[{}]}', b'{"states":["[]"]}',
    b'{"states":[[],1]}', b'{"states":[[["a]"]],[["[b"]]]}', b'{"states":[[["a\\"]"]]]}',
    b'{"states":{}}', b'{"states":"[]"}', b'{"state":[],"next_state":[]}',
    b'{"states":[' + b'[["' + b"]" * 100 + b'"]],' * 50 + b'[]]}',
    b'{"states":[[' + b'["' + b"x" * 31 + b'"]' + b"]" * 3 + b'}',
    b'{"s' + b"x" * 100 + b'":0,' * 33 + b'"states":[[]]}',
    b'{"states":[ ]}', b'{"states":[[] ]}', b'{"states":[[] , ]}', b'{"states":[[] , [] ]}',
    b'{"states":[[]],"x":{}}', b'{"states":[[]], "states2":[}', b'{"states":[[]}',
    b'{"states":[[],]', b'{"states":[[]', b'{"states":[[] x]}', b'{"states":[[]]]}',
], ids=repr)
def test_edge_cases_cut_the_same_both_ways(raw: bytes) -> None:
    _check(raw)


def test_what_is_cut() -> None:
    raw = (b'{"states": [ [["a"]] ,\r\n [["b", "]"]],[]], "type": "trace",\n'
           b' "actions":[["x"], ["y"]] }')
    assert wire_split.reference_trace(raw) == (
        b'{"states": [], "type": "trace",\n "actions":[["x"], ["y"]] }',
        [b'[["a"]]', b'[["b", "]"]]', b"[]"], 3)
    for refused in (raw.replace(b'"type"', b'"typ\\u0065"'),  # a key with an escape
                    raw.replace(b'"type"', b'"states"'),  # a key twice
                    raw.replace(b'[["a"]]', b'"a"'),  # a state that is no array
                    raw.replace(b'[]]', b'[],]')):  # a comma before the bracket
        assert wire_split.reference_trace(refused) is None


def _with(way: str) -> tuple[Any, Any]:
    kept = wire_fast._SPLIT_TRACE, wire_fast._SPLIT
    # Pure Python builds no splitter: the decoder takes the trace splitter's way there
    # only when a test sets it, as here.
    wire_fast._SPLIT_TRACE = SPLITTERS[way]
    return kept


@pytest.mark.parametrize("way", list(SPLITTERS))
@settings(max_examples=examples(300), deadline=None)
@given(raw=st.one_of(_traces(), _mutated()))
def test_the_decoder_agrees_with_the_schema_on_any_bytes(way: str, raw: bytes) -> None:
    kept = _with(way)
    try:
        memo: list[Any] = [None, None, None]
        for _ in range(2):  # the second time through the memo and the pieces known
            assert wire_fast.decode(raw, LIMITS, memo=memo) == wire.decode(raw, LIMITS), raw
    finally:
        wire_fast._SPLIT_TRACE, wire_fast._SPLIT = kept


@pytest.mark.parametrize("way", list(SPLITTERS))
def test_a_cut_trace_reads_as_the_schema_reads_and_bad_ones_are_dead_letters(
        way: str) -> None:
    wire_atoms.forget()
    kept = _with(way)
    handed: list[bytes] = []
    split = SPLITTERS[way]

    def counted(raw: bytes) -> tuple[bytes, list[bytes], int] | None:
        handed.append(raw)
        return split(raw)
    wire_fast._SPLIT_TRACE = counted
    try:
        states = [[["at", "r", f"w{i}"], ["clear", f"w{i + 1}"]] + [["road", "w0", f"w{j}"]
                                                                       for j in range(12)]
                  for i in range(4)]
        event = {"type": "trace", "agent_id": "a-1", "family": "f", "states": states,
                 "actions": [["go", f"w{i}"] for i in range(3)], "start_step": 4}
        raw = json.dumps(event, indent=2).encode()
        got = wire_fast.decode(raw, LIMITS, memo=[None, None, None])
        assert got == wire.decode(raw, LIMITS)
        assert not isinstance(got, wire.DeadLetter) and len(got) == 3
        assert handed == [raw]  # the trace splitter's way, not the union's
        assert wire_split.reference_trace(raw) is not None
        bad = [
            # The tag missing: msgspec takes it as given when it decodes a trace alone,
            # the member count does not.
            json.dumps({k: v for k, v in event.items() if k != "type"}).encode(),
            json.dumps({**event, "states": states[:3]}).encode(),  # one state short
            json.dumps({**event, "states": [*states[:3], [["at", 1]]]}).encode(),
            json.dumps({**event, "states": [*states[:3], [[]]]}).encode(),  # an empty atom
            json.dumps({**event, "extra": 1}).encode(),
            json.dumps({**event, "type": "transition"}).encode(),
            json.dumps(event).encode().replace(b'"family"', b'"agent_id"'),  # a key twice
        ]
        for raw in bad:
            got = wire_fast.decode(raw, LIMITS, memo=[None, None, None])
            assert isinstance(got, wire.DeadLetter), raw
            assert got == wire.decode(raw, LIMITS)
    finally:
        wire_fast._SPLIT_TRACE, wire_fast._SPLIT = kept
