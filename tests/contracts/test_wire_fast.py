"""The hot path's msgspec decoder and the pydantic schema agree on every input: the same
transitions for a valid event, the same dead-letter reason for an invalid one."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire, wire_atoms, wire_fast, wire_keys
from capwatch.contracts.wire import DeadLetter, DecodeLimits
from tests.support.fuzzing import examples

# Both ways the fast decoder can take a transition event (conftest.py).
pytestmark = pytest.mark.usefixtures("splitter")

LIMITS = DecodeLimits(max_message_bytes=4000, max_state_atoms=3, max_trace_steps=2)

TRANSITION: dict[str, Any] = {
    "type": "transition", "agent_id": "rover-1", "family": "rover-v1", "episode_id": "e1",
    "step": 3, "time": "2026-01-02T03:04:05.123456+01:00", "optimal": True, "executed": True,
    "state": [["at", "r", "w1"]], "action": ["move", "r", "w1", "w2"],
    "next_state": [["at", "r", "w2"]], "v": 1,
}
TRACE: dict[str, Any] = {
    "type": "trace", "agent_id": "rover-1", "family": "rover-v1", "start_step": 5,
    "states": [[["at", "r", "w1"]], [["at", "r", "w2"]], [["at", "r", "w1"]]],
    "actions": [["move", "r", "w1", "w2"], ["move", "r", "w2", "w1"]],
    "executed": [True, False], "time": "2026-01-02T03:04:05Z",
}


def agree(raw: bytes, key: bytes | None = None, limits: DecodeLimits = LIMITS) -> Any:
    slow = wire.decode(raw, limits, key, partition=2, offset=7)
    fast = wire_fast.decode(raw, limits, key, partition=2, offset=7)
    assert fast == slow, raw
    return slow


def variant(base: dict[str, Any], **changes: Any) -> bytes:
    event = {**base, **changes}
    return json.dumps({k: v for k, v in event.items() if v is not ...}).encode()


@pytest.fixture(params=["counted whole", "found"])
def key_count(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways the keys are counted: over the whole message, or (as a large message is
    checked) outside the states, found first."""
    if request.param == "found":
        monkeypatch.setattr(wire_keys, "FIND_STATES", 0)
    return str(request.param)


def colon_count_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the count of the keys' colons may let a message through."""
    monkeypatch.setattr(wire_keys, "keys_unique", lambda *args: False)
    monkeypatch.setattr(wire_keys, "_keys_outside", lambda *args: False)


def no_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema's (slower) decoder fails the test if the fast path hands a message to it."""
    def slow(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("took the schema's decoder")
    monkeypatch.setattr(wire, "decode", slow)  # the module wire_fast calls


def test_valid_events_decode_to_the_same_transitions() -> None:
    one = agree(variant(TRANSITION), key=b"rover-1")
    assert not isinstance(one, DeadLetter) and one[0].time is not None
    trace = agree(variant(TRACE))
    assert not isinstance(trace, DeadLetter) and [t.step for t in trace] == [5, 6]
    minimal = agree(variant(TRANSITION, episode_id=..., step=..., time=..., optimal=...,
                            executed=..., v=...))
    assert not isinstance(minimal, DeadLetter) and minimal[0].time is None


INVALID = [
    # strict types: no string → number/bool coercion, no bool for an int, no float step
    {"step": "3"}, {"step": 3.0}, {"step": True}, {"step": -1}, {"step": 2**63},
    {"optimal": "true"}, {"optimal": 1}, {"executed": "yes"}, {"executed": 0},
    {"v": 2}, {"v": "1"},
    # names and ids
    {"agent_id": "rover 1"}, {"agent_id": "rover-"}, {"agent_id": "a..b"}, {"agent_id": ""},
    {"agent_id": "a" * 129}, {"agent_id": "rover-1\n"}, {"family": "fam\n"}, {"family": ""},
    {"family": "f" * 257}, {"family": 3}, {"episode_id": "e\x01"}, {"episode_id": 1},
    {"action": ["move", "r w"]}, {"action": ["move(", "r"]}, {"action": []},
    {"action": ["a\n"]}, {"action": ["x"] * 34}, {"action": "move"}, {"action": [1]},
    {"state": [[]]}, {"state": [["at", "r\u00a0"]]}, {"state": [["at", "r\u2028"]]},
    {"state": "at"}, {"state": None}, {"next_state": [["at", 2]]},
    # format, private-use and unassigned code points (wire_text), DEL
    {"family": "f\u202e1v"}, {"episode_id": "e\u200b"}, {"family": "f\x7f"},
    {"state": [["at", "r\ue000"]]}, {"next_state": [["at", "r", "w2\u200b"]]},
    {"action": ["move", "r\u2066"]}, {"action": ["move\u0378"]},
    # time
    {"time": "yesterday"}, {"time": 1700000000}, {"time": "2026-13-01T00:00:00Z"},
    {"time": "2026-01-02"}, {"time": True},
    # shape
    {"type": "step"}, {"type": ...}, {"agent_id": ...}, {"state": ...}, {"optmal": True},
    # limits (3 atoms per state)
    {"state": [["at", "r", f"w{i}"] for i in range(4)]},
]


@pytest.mark.parametrize("change", INVALID, ids=repr)
def test_invalid_transitions_get_the_same_reason(change: dict[str, Any]) -> None:
    result = agree(variant(TRANSITION, **change))
    assert isinstance(result, DeadLetter), change


@pytest.mark.parametrize("change", [
    {"states": []}, {"actions": [["move", "r", "w1", "w2"]]}, {"executed": [True]},
    {"executed": [True, 1]}, {"start_step": "5"}, {"start_step": -1},
    {"states": [[["at", "r"]]] * 4, "actions": [["a"]] * 3},
], ids=repr)
def test_invalid_traces_get_the_same_reason(change: dict[str, Any]) -> None:
    assert isinstance(agree(variant(TRACE, **change)), DeadLetter)


@pytest.mark.parametrize("raw", [
    b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe", "\ufeff".encode() + variant(TRANSITION),
    variant(TRANSITION) + b" x", variant(TRANSITION) + b"\n", b" " + variant(TRANSITION),
    b'{"type": "transition", "agent_id": "a", "agent_id": "b", "family": "f",'
    b' "state": [], "action": ["x"], "next_state": []}',
    b'{"type": "transition", "agent_id": "\\ud800", "family": "f", "state": [],'
    b' "action": ["x"], "next_state": []}',
    b'{"type": "transition", "agent_id": "a", "family": "\\ud800", "state": [],'
    b' "action": ["x"], "next_state": []}',
    b"[" * 5000 + b"]" * 5000,
    b'{"type": "transition", "agent_id": "a", "family": "f", "state": [], "action": ["x"],'
    b' "next_state": [], "step": 1e2}',
    # What the schema decides here is the schema's business; both decoders must agree.
    variant(TRANSITION) * 2, variant(TRANSITION, v=True), variant(TRANSITION, v=1.0),
    variant(TRANSITION).replace(b"rover-v1", b"rover-\xff1"),
    variant(TRANSITION).replace(b'"at"', b'"a\xc3"'),
    variant(TRANSITION, time="2026-01-02 03:04:05"),
    variant(TRANSITION, time="2026-01-02T03:04:05"),
    variant(TRANSITION, time=None), variant(TRACE, time="2026-01-02T03:04:05.1234567Z"),
], ids=repr)
def test_odd_bytes(raw: bytes) -> None:
    agree(raw)


def test_key_and_size() -> None:
    raw = variant(TRANSITION)
    assert isinstance(agree(raw, key=b"rover-2"), DeadLetter)
    assert isinstance(agree(raw, key=b"\xff"), DeadLetter)
    assert not isinstance(agree(raw, key=b"rover-1"), DeadLetter)
    assert isinstance(agree(raw, limits=DecodeLimits(max_message_bytes=10)), DeadLetter)
    slow = wire.decode(raw, LIMITS, size=10_000, sha256="ab")
    assert wire_fast.decode(raw, LIMITS, size=10_000, sha256="ab") == slow


_text = st.one_of(st.text(max_size=6), st.sampled_from(
    ["a", "rover-1", "x.y", "at", "\n", "", "d1\u200b", "\u202e", "\ue000"]))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-3, 2**64), st.floats(allow_nan=False),
              _text),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_text, inner, max_size=3)),
    max_leaves=12)


@settings(max_examples=examples(400), deadline=None)
@given(st.sampled_from([TRANSITION, TRACE]),
       st.dictionaries(st.sampled_from(sorted({*TRANSITION, *TRACE, "extra"})),
                       st.one_of(_json, st.just(...)), max_size=3))
def test_random_changes_agree(base: dict[str, Any], changes: dict[str, Any]) -> None:
    agree(variant(base, **changes))


DUPLICATED = [
    # the last value would win silently in both parsers; another reader may keep the first
    variant(TRANSITION)[:-1] + b', "executed": false}',
    variant(TRANSITION)[:-1] + b',"agent_id":"rover-2"}',
    variant(TRANSITION)[:-1] + b', "st\\u0061te": []}',  # the same key, spelt with an escape
    variant(TRANSITION)[:-1] + b', "optimal" : false}',  # whitespace before the colon
    variant(TRANSITION)[:-1] + b',\n"step"\t:\r4}',
    variant(TRANSITION, optimal=...)[:-1] + b', "v": 1}',
    variant(TRACE)[:-1] + b', "executed": [false, true]}',
    variant(TRACE)[:-1] + b', "start_step": 0}',
    b'{"type": "transition", "type": "trace", ' + variant(TRACE)[1:],
    # the keys are counted outside the states' texts: a state given twice, a key written
    # inside the first of two states, another key with the state's bytes as its value
    b'{"state": [["at", "r", "w2"]], ' + variant(TRANSITION)[1:],
    b'{"state" : [["at", "r", "w1"]], ' + variant(TRANSITION)[1:],
    b'{"next_state": [["at", "r", "w2"]], ' + variant(TRANSITION)[1:],
    variant(TRANSITION)[:-1] + b', "state": [["at", "r", "w1"]]}',
    variant(TRANSITION)[:-1] + b', "next_state": [["at", "r", "w2"]]}',
    variant(TRANSITION, next_state=[["at", "r", "w1"]])[:-1] + b', "executed" : true}',
]


# The keys are counted as colons, less those of the states' and the time's texts (see
# wire_keys): values that would balance the count of a key given twice.
_ESCAPED_COLON = variant(TRANSITION).replace(b'"rover-v1"', b'"rover\\u003av1"')
COLONS = [
    # a colon the decoded family holds but the message's bytes do not
    _ESCAPED_COLON[:-1] + b', "optimal": false}',
    # the first of two times holds more colons than the one kept
    variant(TRANSITION)[:-1] + b', "time": "2026-01-02T03:04Z"}',
    b'{"time": "2026-01-02T03:04:05.1+01:00", ' + variant(TRANSITION, time="2026-01-02T03:04Z")[1:],
    # colons inside the states, a key given twice outside them
    variant(TRANSITION, state=[["at", "r:1", "w:2"]])[:-1] + b', "step": 4}',
    variant(TRANSITION, next_state=[["at", ":", "::"]])[:-1] + b', "family": "f"}',
    # the first of two states holds colons, the kept one none
    b'{"state": [["a:b:c"]], ' + variant(TRANSITION)[1:],
    b'{"states": [[["a:b:c"]]], ' + variant(TRACE)[1:],
    variant(TRACE, states=[[["at", "r:", "w1"]], [["at", "r", "w2"]], [["at", "r", "w1"]]])[:-1]
    + b', "start_step": 1}',
    b'{"time": "2026-01-02T03:04:05.1+01:00", ' + variant(TRACE, time="2026-01-02T03:04Z")[1:],
    # a time written with escaped colons: none in its text, the kept key given twice
    variant(TRANSITION, time=...)[:-1]
    + b', "time": "2026-01-02T03\\u003a04\\u003a05Z", "v": 1}',
]


# No "type": msgspec, decoding a transition alone, takes its tag as given, so a key
# given twice would balance the count of the keys (rev11b: read with the last value).
_UNTYPED = variant(TRANSITION, type=..., episode_id=..., step=..., time=..., optimal=...,
                   executed=..., v=...)
UNTYPED = [
    _UNTYPED[:-1] + b', "next_state": [["at", "r", "w1"]]}',
    b'{"state": [["at", "r", "w2"]], ' + _UNTYPED[1:],
    _UNTYPED[:-1] + b', "family": "other"}',
    json.dumps({"agent_id": "a-1", "family": "f", "state": [], "action": ["go"],
                "next_state": [], "v": 1}, separators=(",", ":")).encode()[:-1]
    + b',"next_state":[["q"]]}',
    # "type" elsewhere than as a key: a value, a string holding it, a key ending with it
    _UNTYPED[:-1] + b', "family": "type"}',
    _UNTYPED[:-1] + b', "family": "\\"type\\": 1"}',
    _UNTYPED[:-1] + b', "x\\"type": 1}',
]


REFUSED = [(raw, "appears twice") for raw in DUPLICATED + COLONS] + \
    [(raw, "") for raw in UNTYPED]
"""Messages that give a key twice, and what their dead letter's reason says (a message
without its type may be refused for a reason of the schema's)."""


@pytest.mark.parametrize(("raw", "reason"), REFUSED, ids=repr)
def test_a_key_given_twice_is_a_dead_letter_not_read_one_way(
        raw: bytes, reason: str, key_count: str) -> None:
    result = agree(raw)
    assert isinstance(result, DeadLetter), raw
    assert reason in result.reason, result.reason


@pytest.mark.parametrize("raw", DUPLICATED + COLONS, ids=repr)
def test_the_colon_count_alone_never_takes_a_key_given_twice(
        raw: bytes, key_count: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The count of '":' decides only when the colons do not match: here it never lets a
    # message through, so whatever passes passed the colon count.
    colon_count_only(monkeypatch)
    result = agree(raw)
    assert isinstance(result, DeadLetter) and "appears twice" in result.reason, raw


@pytest.mark.parametrize("raw", [
    variant(TRANSITION), variant(TRACE),
    json.dumps(TRANSITION, separators=(",", ":")).encode(),
    variant(TRANSITION, episode_id=..., step=..., time=..., optimal=..., executed=..., v=...),
    # colons in names: the colon count is too high, the second count decides
    variant(TRANSITION, family="fam:1", episode_id="e:1", action=["move:", "r", "w:1"],
            state=[["at", "r:", "w1"]], next_state=[["at:", "r", "w2"]]),
    json.dumps({**TRANSITION, "family": "fam:1"}, separators=(",", ":")).encode(),
    _ESCAPED_COLON,
], ids=repr)
def test_valid_events_stay_on_the_fast_path(raw: bytes, key_count: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The duplicate-key guard must not send ordinary events to the slower schema decoder."""
    no_schema(monkeypatch)
    assert not isinstance(wire_fast.decode(raw, LIMITS), DeadLetter)


def test_a_full_atom_cache_is_cleared_without_losing_the_message_at_hand(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Valid events with ever-new objects fill the fast path's atom cache; the message that
    overflows it, holding atoms seen before and new ones, is still decoded (it was an
    "internal error: KeyError" dead letter, a valid record lost)."""
    monkeypatch.setattr(wire_atoms, "MAX_ATOMS", 50)
    wire_atoms.forget()
    limits = DecodeLimits(max_state_atoms=100)
    for m in range(20):
        state = [["at", "r", "w1"], *(["at", f"o{m}-{i}", "w"] for i in range(12))]
        result = agree(variant(TRANSITION, state=state), limits=limits)
        assert not isinstance(result, DeadLetter), result
        assert len(result[0].state) == 13


def test_a_state_key_inside_another_value_changes_nothing() -> None:
    # The keys are counted outside the states' texts, found after the first "state" key:
    # here that key is inside the time, with the state's very bytes as its value.
    for extra in (b', "v" : 1}', b'}'):
        raw = variant(TRANSITION, time={"state": [["at", "r", "w1"]]})[:-1] + extra
        assert isinstance(agree(raw), DeadLetter), raw


_STATES = [[["at", "r", "w1"]], [["at", "r", "w2"]], [["at", "r", "w1"], ["at", "r", "w2"]],
           [["at", "r", f"w{i}"] for i in range(4)],  # over LIMITS' 3 atoms
           [["at", "r w"]], [["at", 2]], "at", [], [["at", "r", "w1"]] * 2]


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(_STATES))),
                          st.sampled_from(range(len(_STATES))),
                          st.sampled_from(["rover-1", "rover-2"]),
                          st.sampled_from(["transition", "trace"])),
                min_size=1, max_size=8))
def test_the_memo_of_the_last_next_state_changes_nothing(
        steps: list[tuple[int, int, str, str]]) -> None:
    # The pipeline keeps each agent's memo and hands it back with the agent's next
    # record; a state whose text equals it is not decoded again. Whatever the sequence
    # (valid, invalid, oversized, repeated, another agent's memo, a trace between), the
    # result is the schema's.
    memo: list[wire_fast.StateMemo | None] = [None]
    for s, s2, agent, kind in steps:
        if kind == "transition":
            raw = variant(TRANSITION, agent_id=agent, state=_STATES[s], next_state=_STATES[s2])
        else:
            raw = variant(TRACE, agent_id=agent, states=[_STATES[s], _STATES[s2]],
                          actions=[["move", "r", "w1", "w2"]], executed=...)
        assert wire_fast.decode(raw, LIMITS, memo=memo) == wire.decode(raw, LIMITS), raw


def test_long_states_are_remembered_by_the_shared_text() -> None:
    # States over the memo's text limit are kept as the state reads' table's own copy of
    # the text (no copy per agent): still recognised when repeated, never confused with
    # another state of the same length.
    wide = DecodeLimits(max_message_bytes=100_000, max_state_atoms=100)
    one = [["at", "r", f"w{i}"] for i in range(60)]
    other = [["at", "r", f"v{i}"] for i in range(60)]
    memo: list[wire_fast.StateMemo | None] = [None]
    first = wire_fast.decode(variant(TRANSITION, state=other, next_state=one), wide,
                             memo=memo)
    assert memo[0] is not None and isinstance(memo[0][0], bytes)
    one_text = json.dumps(one).encode()
    assert len(one_text) > wire_fast._MEMO_TEXT and memo[0][0] == one_text
    assert any(k is memo[0][0] for k in wire_atoms.STATES)
    # Another agent's memo of the same text holds the very same copy.
    other_memo: list[wire_fast.StateMemo | None] = [None]
    wire_fast.decode(variant(TRANSITION, agent_id="rover-2", next_state=one), wide,
                     memo=other_memo)
    assert other_memo[0] is not None and other_memo[0][0] is memo[0][0]
    again = wire_fast.decode(variant(TRANSITION, state=one, next_state=other), wide,
                             memo=memo)
    assert not isinstance(first, DeadLetter) and not isinstance(again, DeadLetter)
    assert again[0].state is first[0].next_state
    third = wire_fast.decode(variant(TRANSITION, state=one, next_state=one), wide, memo=memo)
    assert third == wire.decode(variant(TRANSITION, state=one, next_state=one), wide)
    assert not isinstance(third, DeadLetter) and third[0].state is not again[0].next_state


def test_a_memo_in_either_form_recognises_only_its_own_text() -> None:
    # The memo is matched without building the state's fingerprint: a short text's own
    # bytes, a long one's length and hash, or a short one's hashed (a thawed watch's,
    # hashed()). Each form of each state's memo, handed with each state of the same or
    # another length: recognised (the memo's very set) exactly when the texts are equal.
    wide = DecodeLimits(max_message_bytes=100_000, max_state_atoms=100)
    states = [[["at", "r", "w1"]], [["at", "r", "w2"]], [["at", "r", "w11"]],
              [["at", "r", f"w{i}"] for i in range(60)],
              [["at", "r", f"v{i}"] for i in range(60)],
              [["at", "r", f"w{i}"] for i in range(59)] + [["at", "r", "w99"]]]
    for kept in states:
        for state in states:
            memo: list[wire_fast.StateMemo | None] = [None]
            first = wire_fast.decode(variant(TRANSITION, next_state=kept), wide, memo=memo)
            assert not isinstance(first, DeadLetter) and memo[0] is not None
            forms = [memo[0], (wire_fast.hashed(memo[0][0]), *memo[0][1:])]
            for form in forms:
                raw = variant(TRANSITION, state=state, next_state=kept)
                got = wire_fast.decode(raw, wide, memo=[form])
                assert got == wire.decode(raw, wide), raw
                assert not isinstance(got, DeadLetter)
                assert (got[0].state is first[0].next_state) == (state == kept), (kept, state)


def test_ids_the_caller_knows_are_not_looked_up_and_others_are_checked() -> None:
    # ``known_ids``: the agent id and family of the caller's watch, which came from a message
    # decoded before. A message naming exactly them skips the id caches (they stay as
    # they were); one naming other ids is checked as ever, and refused if invalid.
    known = (TRANSITION["agent_id"], TRANSITION["family"])
    raw = variant(TRANSITION, episode_id=...)
    wire_fast._VALID_AGENT_IDS.clear()
    wire_fast._VALID_IDS.clear()
    got = wire_fast.decode(raw, LIMITS, known_ids=known)
    assert got == wire.decode(raw, LIMITS) and not isinstance(got, DeadLetter)
    assert not wire_fast._VALID_AGENT_IDS and not wire_fast._VALID_IDS
    assert wire_fast.decode(raw, LIMITS) == got  # without: looked up, and learnt
    assert TRANSITION["agent_id"] in wire_fast._VALID_AGENT_IDS
    for bad in (variant(TRANSITION, agent_id="-rover"), variant(TRANSITION, family="a\x01b"),
                variant(TRANSITION, episode_id="e\x02"),
                variant(TRANSITION, agent_id="rover-2", family="a\x01b")):
        refused = wire_fast.decode(bad, LIMITS, known_ids=known)
        assert isinstance(refused, DeadLetter) and refused == wire.decode(bad, LIMITS), bad
    other = variant(TRANSITION, agent_id="rover-2")
    assert wire_fast.decode(other, LIMITS, known_ids=known) == wire.decode(other, LIMITS)


def test_a_repeated_state_is_the_very_set_of_the_memo() -> None:
    memo: list[wire_fast.StateMemo | None] = [None]
    first = wire_fast.decode(variant(TRANSITION, next_state=[["at", "r", "w2"]]), LIMITS,
                             memo=memo)
    second = wire_fast.decode(variant(TRANSITION, state=[["at", "r", "w2"]]), LIMITS,
                              memo=memo)
    assert not isinstance(first, DeadLetter) and not isinstance(second, DeadLetter)
    assert second[0].state is first[0].next_state


def spaced(event: dict[str, Any], ws: tuple[str, str, str, str]) -> bytes:
    """``event`` written with whitespace after every ``[``/``{`` (ws[0]), before every
    ``]``/``}`` (ws[1]), around commas (ws[2]) and around colons (ws[3])."""
    def dump(v: Any) -> str:
        if isinstance(v, dict):
            items = [json.dumps(k) + ws[3] + ":" + ws[3] + dump(x) for k, x in v.items()]
        elif isinstance(v, list):
            items = [dump(x) for x in v]
        else:
            return json.dumps(v)
        open_, close = ("{", "}") if isinstance(v, dict) else ("[", "]")
        return open_ + ws[0] + (ws[2] + "," + ws[2]).join(items) + ws[1] + close
    return dump(event).encode()


JACKSON = (" ", " ", "", " ")  # colons and brackets spaced as Jackson's pretty printer does
_WIDE = DecodeLimits(max_message_bytes=100_000, max_state_atoms=100)
_LONG_STATE = [["at", "r", f"w{i}"] for i in range(40)]  # past the whole-message key scan
_LONG = {**TRANSITION, "state": _LONG_STATE, "next_state": _LONG_STATE[1:]}


@pytest.mark.parametrize("raw", [
    spaced(TRANSITION, JACKSON), spaced(TRACE, JACKSON), spaced(_LONG, JACKSON),
    spaced(TRANSITION, ("\t", "  ", "\n", "\r\n")), spaced(_LONG, ("", "\t", " ", "\t ")),
], ids=repr)
def test_events_spaced_after_their_quotes_stay_on_the_fast_path(
        raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whitespace before a colon or a closing bracket (``"key" : [ "a" ]``) is how some
    writers space JSON: such events took the schema's decoder, 3-4 times slower."""
    expected = wire.decode(raw, _WIDE)
    assert not isinstance(expected, DeadLetter), expected
    no_schema(monkeypatch)
    assert wire_fast.decode(raw, _WIDE) == expected


_SPACE = st.sampled_from(["", " ", "\t", "\n", " \r\n "])


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from([TRANSITION, TRACE, _LONG]), st.tuples(_SPACE, _SPACE, _SPACE, _SPACE),
       st.sampled_from([None, "executed", "agent_id", "state", "next_state", "type"]),
       st.sampled_from([b"", b" ", b"\t\n"]))
def test_spaced_events_and_repeated_keys_agree(
        base: dict[str, Any], ws: tuple[str, str, str, str], repeat: str | None,
        before_colon: bytes) -> None:
    raw = spaced(base, ws)
    if repeat is not None and repeat in base:
        # The key once more at the end, spaced its own way.
        again = json.dumps(base[repeat]).encode()
        raw = raw[:-1] + b', "' + repeat.encode() + b'"' + before_colon + b":" + again + b"}"
    result = agree(raw, limits=_WIDE)
    if repeat is not None and repeat in base:
        assert isinstance(result, DeadLetter) and "appears twice" in result.reason, raw
    else:
        assert not isinstance(result, DeadLetter), raw


@pytest.mark.parametrize("raw", [
    variant(TRANSITION), json.dumps(TRANSITION, separators=(",", ":")).encode(),
    json.dumps(TRANSITION, indent=2).encode(), variant(TRANSITION, time=None),
    variant(TRANSITION, episode_id=..., step=..., time=..., optimal=..., executed=..., v=...),
    variant(TRACE), json.dumps(TRACE, indent=1).encode(), variant(TRACE, time=...),
], ids=repr)
def test_the_colon_count_takes_events_with_colons_only_in_states_and_time(
        raw: bytes, key_count: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever the spacing around the keys' colons, the count alone decides.
    colon_count_only(monkeypatch)
    no_schema(monkeypatch)
    assert not isinstance(wire_fast.decode(raw, LIMITS), DeadLetter)


_POOL = [["at", "rover", f"waypoint-{i}"] for i in range(14)]  # 12 of them: past 256 bytes


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(st.permutations(range(len(_POOL))), st.integers(8, 14),
                          st.permutations(range(len(_POOL))), st.integers(8, 14),
                          st.booleans()),
                min_size=1, max_size=6))
def test_states_in_another_order_than_the_memo_change_nothing(
        steps: list[tuple[list[int], int, list[int], int, bool]]) -> None:
    # A state whose text differs from the memo's (atoms reordered, some others, a state
    # over the limit) is made from the memo's set by the atoms that differ: the result is
    # still the schema's, and the memo's very set when the atoms are the same.
    limits = DecodeLimits(max_message_bytes=100_000, max_state_atoms=12)
    memo: list[wire_fast.StateMemo | None] = [None]
    for order, k, order2, k2, jackson in steps:
        event = {**TRANSITION, "state": [_POOL[i] for i in order[:k]],
                 "next_state": [_POOL[i] for i in order2[:k2]]}
        raw = spaced(event, JACKSON) if jackson else variant(event)
        last = memo[0]
        # The memo's very set is promised once the state's text is known atom by atom (a
        # text never seen is parsed whole, whatever the memo): a decode without the memo
        # teaches it first, so that the promise does not depend on what earlier examples
        # happened to teach the process-wide vocabulary.
        assert wire_fast.decode(raw, limits) == wire.decode(raw, limits), raw
        got = wire_fast.decode(raw, limits, memo=memo)
        assert got == wire.decode(raw, limits), raw
        if last is not None and not isinstance(got, DeadLetter) \
                and got[0].state == last[2]:
            assert got[0].state is last[2]
