"""The fast decoder's splitter (contracts/wire_split.py): the C function and its Python
reference cut the same messages the same way; what they cut is what a JSON parser reads;
and whatever they return for a message that is not valid JSON, the decoder still agrees
with the schema's."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire, wire_fast, wire_split
from capwatch.contracts.wire import DecodeLimits
from tests.contracts._split_fuzz import mutated, pairs
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
_style: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [{}, {"separators": (",", ":")}, {"indent": 1}, {"separators": (" ,", " : ")},
     {"ensure_ascii": False}])


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


def _mutated() -> st.SearchStrategy[bytes]:
    return mutated(_messages(), _BYTES)


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
    pieces = pairs(envelope)
    try:
        values = msgspec.json.decode(state), msgspec.json.decode(next_state)
    except (msgspec.DecodeError, ValueError):  # ValueError: not UTF-8
        return
    if pieces is None:
        return
    # The envelope and both texts are valid: so is the message, with the same members
    # (the states' where the envelope has []), none twice, as many as counted.
    whole = pairs(raw)
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
    if "state" not in event or "next_state" not in event:
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
    for refused in (raw.replace(b'"type"', b'"typ\\u0065"'),  # a key with an escape
                    raw.replace(b'"type"', b'"state"'),  # a key twice
                    raw.replace(b'[["a"]]', b'"a"')):  # a state that is no array
        assert wire_split.reference(refused) is None


@pytest.mark.parametrize("at", ["first", "middle", "last"])
def test_a_message_with_a_states_member_is_not_cut_and_stays_the_schemas(at: str) -> None:
    # A trace's member: the walk stops at its key (the trace splitter walks the message
    # next), before or after the states, and the decoder still answers as the schema.
    members = [b'"type": "transition"', b'"agent_id": "a-1"', b'"family": "f"',
               b'"state": [["a"]]', b'"action": ["x"]', b'"next_state": [["b"]]']
    cut = b"{" + b", ".join(members) + b"}"
    at_index = {"first": 0, "middle": 3, "last": len(members)}[at]
    raw = b"{" + b", ".join([*members[:at_index], b'"states": [[["a"]]]',
                             *members[at_index:]]) + b"}"
    for split in SPLITTERS.values():
        assert split(cut) is not None
        assert split(raw) is None
    assert wire_fast.decode(raw) == wire.decode(raw)
    assert isinstance(wire.decode(raw), wire.DeadLetter)


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


CANONICALS: dict[str, Callable[[bytes], bytes]] = {"Python": wire_split.canonical}
if wire_split.CANONICAL is not None:
    CANONICALS["C"] = wire_split.CANONICAL
_STRICT_STATE = msgspec.json.Decoder(list[list[str]])
# Runs past 16 and 32 bytes too: the C walk skips whitespace by 16-byte blocks.
_spacing = st.sampled_from(["", " ", "  ", "\t", "\n ", "\r\n", "\n" + " " * 18,
                            "\r\n" + "\t" * 16, " " * 33])


@st.composite
def _state_texts(draw: st.DrawFn) -> tuple[bytes, list[list[str]], bool]:
    """A state's text in any order of its atoms and any spacing, its atoms, and whether
    the strings are written ASCII-only."""
    atoms = draw(_state)
    ascii_only = draw(st.booleans())
    def ws() -> str:
        return draw(_spacing)
    texts = ["[" + ws() + (ws() + "," + ws()).join(
        json.dumps(name, ensure_ascii=ascii_only) for name in atom) + ws() + "]"
        for atom in atoms]
    return ("[" + ws() + (ws() + "," + ws()).join(texts) + ws() + "]").encode(), atoms, ascii_only


IN_ORDERS: dict[str, Callable[[bytes], bool]] = {"Python": wire_split.in_order}
if wire_split.IN_ORDER is not None:
    IN_ORDERS["C"] = wire_split.IN_ORDER


def _check_canonical(text: bytes) -> bytes:
    got = {name: canonical(text) for name, canonical in CANONICALS.items()}
    # in_order: whether that implementation's canonical returns the very text.
    for name, in_order in IN_ORDERS.items():
        assert in_order(text) is (CANONICALS[name](text) is text), (name, text)
    assert len(set(got.values())) == 1, (text, got)
    out = got["Python"]
    assert wire_split.canonical(out) == out
    # Read the same atoms, as many, and refused exactly when the text is.
    def read(raw: bytes) -> Any:
        try:
            return sorted(_STRICT_STATE.decode(raw))
        except (msgspec.DecodeError, ValueError):
            return None
    assert read(out) == read(text), (text, out)
    return out


@settings(max_examples=400, deadline=None)
@given(_state_texts())
def test_a_state_text_out_of_order_is_its_atoms_sorted(drawn: tuple[bytes, list[list[str]], bool]
                                                       ) -> None:
    text, atoms, ascii_only = drawn
    out = _check_canonical(text)
    written = [json.dumps(atom, ensure_ascii=ascii_only).encode() for atom in atoms]
    pieces = _cut_atoms(text)
    if pieces == sorted(pieces):
        assert out is text or out == text  # in order: as it is, whatever its spacing
    else:
        assert out == b"[" + b", ".join(sorted(written)) + b"]"


def _cut_atoms(text: bytes) -> list[bytes]:
    """The atoms' texts of a state as written (brackets outside strings)."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c == 34:
            i = wire_split._skip_string(text, i, len(text))
            continue
        if c == 91:
            depth += 1
            if depth == 2:
                start = i
        elif c == 93:
            depth -= 1
            if depth == 1:
                out.append(text[start:i + 1])
        i += 1
    return out


@settings(max_examples=800, deadline=None)
@given(_state_texts(), st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from(_BYTES),
                                          st.sampled_from(["insert", "delete", "replace"])),
                                max_size=3))
def test_any_state_bytes_canonical_the_same_both_ways_and_never_wrongly(
        drawn: tuple[bytes, list[list[str]], bool],
        edits: list[tuple[int, bytes, str]]) -> None:
    text = drawn[0]
    for at, piece, kind in edits:
        at %= len(text) + 1
        if kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + len(piece):]
        else:
            text = text[:at] + piece + text[at + len(piece):]
    _check_canonical(text)


@pytest.mark.parametrize("text", [
    b"", b"[", b"]", b"[]", b"[ ]", b"[[]]", b'[["b"], ["a"]]', b'[["b"],["a"]]',
    b'[ ["b" ,"c"] ,\t["a"] ]', b'[["b"], ["a"], ["a"]]', b'[["b"], ["a"] x]',
    b'[["b"], [["a"]]]', b'[["b"], ["a"],]', b'[,["b"], ["a"]]', b'[["b"] ["a"]]',
    b'[["b"], ["a", 1]]', b'[["b"], {"a": 1}]', b'[["\\u0062"], ["a\\"]"]]',
    b'[["b"], ["a"]] ', b'[["b"], ["a"]', b'[["]"], ["["]]', b'[["b"], ["a\\"]',
], ids=repr)
def test_edge_cases_canonical_the_same_both_ways(text: bytes) -> None:
    _check_canonical(text)


_PAD = b" " * 40


@pytest.mark.parametrize("text", [
    # The C check decides in one pass of 32-byte blocks whether the array ends where the
    # text does: out of order, with bytes after the array's end, near and past a block.
    b'[["b"], ["a"]]' + _PAD + b"x", b'[["b"], ["a"]]]', b'[["b"], ["a"]]' + _PAD + b"]",
    b'[["b"], ["a"]' + _PAD, b'[["' + b"b" * 40 + b'"], ["a"]]]',
    b'[["b"], ["a"]] ' + b"x" * 17, b'[["b"], ["a"],' + b" " * 17 + b'["c"]]',
    # A backslash after the check has decided, or after atoms out of order were seen.
    b'[["a"], ["b"]]' + _PAD + b"\\", b'[["b"], ["a"]]' + _PAD + b'"\\"',
    b'[["b"], ["a"], ' + _PAD + b'["c\\"d"]]', b'[["a"], ["b"], ' + _PAD + b'["c\\"d"]]',
    b'[["b"], ["a"], ' + _PAD + b'["c\\\\"]]',
    # One atom holding another after atoms out of order; strings holding brackets.
    b'[["b"], ["a"], ' + _PAD + b'[["c"]]]', b'[["b"], ["a"], ' + _PAD + b'["]", "["]]',
    # Whitespace runs of every length around the blocks' sizes, every kind of it.
    *(b"[" + b" " * k + b'["b" ,' + b"\t" * k + b'"c"]' + b"\n" * k + b"," + b"\r" * k
      + b'["a"]' + b" \t\r\n" * k + b"]" for k in (0, 1, 2, 3, 15, 16, 17, 31, 32, 33)),
    *(b'[["b"], ["a"]' + b" " * k for k in (14, 15, 16, 17, 18, 30, 31, 32, 33)),
], ids=repr)
def test_texts_around_the_blocks_canonical_the_same_both_ways(text: bytes) -> None:
    _check_canonical(text)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("atoms", [13, 40, 300])
def test_many_atoms_sharing_their_beginnings_canonical_the_same_both_ways(
        seed: int, atoms: int) -> None:
    # The C sort's merges (beyond its insertion sort's 12 pieces) and its comparison of
    # the first 8 bytes as one word: names alike up to and past 8 bytes, short atoms,
    # repeats, pretty-printed as a writer indenting its JSON does.
    rng = random.Random(seed)
    names = ["at-curb", "at-curb-num", "at", "a", "car-clear", "behind-car"]
    state = [[rng.choice(names), *(f"car_{rng.randrange(12):02}"
                                   for _ in range(rng.randrange(3)))] for _ in range(atoms)]
    for indent in (None, 2):
        text = json.dumps(state, indent=indent).encode()
        out = _check_canonical(text)
        assert out == b"[" + b", ".join(sorted(json.dumps(a).encode() for a in state)) + b"]"


def test_what_is_made_canonical() -> None:
    assert wire_split.canonical(b'[ ["on", "b","a"],\n["at" ,"r"] ]') == \
        b'[["at", "r"], ["on", "b", "a"]]'
    for kept in (b'[["at", "r"], ["on", "b", "a"]]', b'[ ["at","r"] , ["on"] ]',
                 b'[["on"], [["at"]]]', b'[["on"], ["at"], 1]', b'{"a": 1}'):
        assert wire_split.canonical(kept) is kept
        # (C's canonical copies an array holding a non-array after atoms out of order.)
        for name, in_order in IN_ORDERS.items():
            assert in_order(kept) is (CANONICALS[name](kept) is kept), (name, kept)
    for text in (b'[["on", "b", "a"], ["at", "r"]]', b'[["on\\"b"], ["at"]]'):
        assert not any(in_order(text) for in_order in IN_ORDERS.values())
    # Out of order but not the array's end at the text's end: as it is, as canonical.
    assert all(in_order(b'[["on"], ["at"]] ') for in_order in IN_ORDERS.values())


# How the decoder reads a state its agent's memo misses: by its canonical text, or, when
# the memo holds ids, checked only (wire_fast._IN_ORDER) and read as sent from the memo.
_MISSED = {"rebuilt": None, "checked": wire_split.IN_ORDER or wire_split.in_order}


@pytest.mark.parametrize("missed", list(_MISSED))
@pytest.mark.parametrize("way", list(SPLITTERS))
@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False), st.integers(2, 12))
def test_an_agent_sending_its_states_in_ever_other_orders_is_read_as_the_schema_reads(
        way: str, missed: str, rng: Any, steps: int) -> None:
    # The memo does not recognise a state sent in another order: read by its canonical
    # text (wire_fast._CANONICAL, when built), and the next state too, or read as sent
    # from the memo's set; the atoms said to differ are exactly those that do.
    kept = wire_fast._SPLIT, wire_fast._IN_ORDER, wire_fast._CANONICAL
    wire_fast._SPLIT = SPLITTERS[way]
    wire_fast._IN_ORDER = _MISSED[missed]
    wire_fast._CANONICAL = wire_split.CANONICAL or wire_split.canonical
    try:
        names = [["road", f"w{i}", f"w{i + 1}"] for i in range(20)]
        state = set(rng.sample(range(20), 14))
        memo: list[Any] = [None, None]
        for _ in range(steps):
            after = state ^ {rng.randrange(20)}
            order = [names[i] for i in state]
            rng.shuffle(order)
            raw = json.dumps({"type": "transition", "agent_id": "a-1", "family": "f",
                              "state": order, "action": ["go"],
                              "next_state": rng.sample([names[i] for i in after],
                                                       len(after))}).encode()
            got = wire_fast.decode(raw, LIMITS, memo=memo)
            assert got == wire.decode(raw, LIMITS)
            assert not isinstance(got, wire.DeadLetter)
            if memo[1] is not None:
                assert set(memo[1]) == got[0].state ^ got[0].next_state
            state = after
    finally:
        wire_fast._SPLIT, wire_fast._IN_ORDER, wire_fast._CANONICAL = kept


def _orders_test(monkeypatch: pytest.MonkeyPatch, missed: str) -> list[bytes]:
    """wire_fast._CANONICAL counted (the Python one when C is not built): the texts it
    was handed; wire_fast._IN_ORDER as ``missed`` says."""
    from capwatch.contracts import wire_atoms

    wire_atoms.forget()
    wire_fast._ONCE.clear()  # texts another test sent count as seen once
    canonical = wire_split.CANONICAL or wire_split.canonical
    handed: list[bytes] = []

    def counted(text: bytes) -> bytes:
        handed.append(text)
        return canonical(text)
    monkeypatch.setattr(wire_fast, "_CANONICAL", counted)
    monkeypatch.setattr(wire_fast, "_IN_ORDER", _MISSED[missed])
    return handed


@pytest.mark.parametrize("missed", list(_MISSED))
def test_an_agent_keeping_an_order_of_its_own_is_rebuilt_once_per_text(
        monkeypatch: pytest.MonkeyPatch, missed: str) -> None:
    # An agent's atoms in a stable order that is not sorted (named after they were
    # sorted, say), its episodes restarting from their first state: each restart misses
    # its memo. The text as sent, read the first time by its canonical text (or checked
    # and read from the memo), is remembered as sent when it comes again
    # (wire_fast._admit), and then not rebuilt (nor checked).
    from capwatch.contracts import wire_atoms

    handed = _orders_test(monkeypatch, missed)
    names = [["road", f"z{20 - i:02}", f"w{i}"] for i in range(20)]  # not sorted
    walk = [names[:14], names[:13], names[1:13], names[1:14]]
    memo: list[Any] = [None, None]
    # The agent's first record (no memo yet: its states read as sent), ending where
    # each episode ends.
    raw = json.dumps({"type": "transition", "agent_id": "a-1", "family": "f",
                      "state": walk[-1], "action": ["go"], "next_state": walk[-1]}).encode()
    assert wire_fast.decode(raw, LIMITS, memo=memo) == wire.decode(raw, LIMITS)
    rebuilt = []
    remembered = []
    for _ in range(4):
        handed.clear()
        for state, after in pairwise(walk):
            raw = json.dumps({"type": "transition", "agent_id": "a-1", "family": "f",
                              "state": state, "action": ["go"],
                              "next_state": after}).encode()
            got = wire_fast.decode(raw, LIMITS, memo=memo)
            assert got == wire.decode(raw, LIMITS)
            assert not isinstance(got, wire.DeadLetter)
        rebuilt.append(len(handed))
        assert memo[0] is not None and memo[0][2] == frozenset(map(tuple, walk[-1]))
        remembered.append(json.dumps(walk[0]).encode() in wire_atoms.STATES)
    # Each episode's first record misses the memo: its two states rebuilt in the first
    # episode, again in the second (seen once before), then read as sent. Checked, none
    # is rebuilt (the memo holds ids).
    assert rebuilt == ([2, 2, 0, 0] if missed == "rebuilt" else [0, 0, 0, 0]), rebuilt
    assert remembered == [False, True, True, True]
    wire_atoms.forget()


@pytest.mark.parametrize("missed", list(_MISSED))
def test_states_in_ever_other_orders_are_not_remembered_as_sent(
        monkeypatch: pytest.MonkeyPatch, missed: str) -> None:
    # A hash set's iteration: every text a new order, never sent again. Only the
    # canonical texts are remembered whole (wire_atoms.STATES), not each order; checked
    # and read from the memo, none is built, nor remembered.
    import random

    from capwatch.contracts import wire_atoms

    handed = _orders_test(monkeypatch, missed)
    rng = random.Random(3)
    names = [["road", f"w{i}", f"w{i + 1}"] for i in range(40)]
    memo: list[Any] = [None, None]
    state = set(range(30))  # (a few atoms could come in order by chance)
    for _ in range(200):
        after = state ^ {rng.randrange(40)}
        raw = json.dumps({"type": "transition", "agent_id": "a-1", "family": "f",
                          "state": rng.sample([names[i] for i in state], len(state)),
                          "action": ["go"],
                          "next_state": rng.sample([names[i] for i in after],
                                                   len(after))}).encode()
        got = wire_fast.decode(raw, LIMITS, memo=memo)
        assert got == wire.decode(raw, LIMITS)
        state = after
    # Only the first record's two texts (no memo yet to miss: read as sent).
    as_sent = [t for t in wire_atoms.STATES if wire_split.canonical(t) != t]
    if missed == "rebuilt":
        assert len(as_sent) <= 2 and len(wire_atoms.STATES) > 150
    else:
        assert len(as_sent) <= 2 and len(wire_atoms.STATES) <= 2 and not handed
    wire_atoms.forget()
