"""The pieces' lookup in C (``_wire_split.piece_ids``, wire_atoms.ids' way when compiled)
against its Python reference (wire_atoms.reference_ids over one table): the same ids, or
None, for state texts of any spelling, for tables holding any of their pieces, and for
mutated bytes; over a dict and over the C index of the same pieces (``PieceIndex``,
which hashes and compares a piece where it lies in the text); and wire_atoms.ids, whose
index may hold fewer pieces than PIECES, agrees with the reference either way."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire_atoms, wire_split
from tests.support.fuzzing import examples

pytestmark = pytest.mark.skipif(wire_split.PIECE_IDS is None,
                                reason="the C lookup is built with the compiled hot path")

_names = st.one_of(
    st.sampled_from(["at", "r", "w1", "]", "[", "a]b", "[[", "]]", 'q"', "\\", ",", "é",
                     "x" * 40]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=6))
_atom = st.lists(_names, min_size=1, max_size=4)
_style: st.SearchStrategy[dict[str, Any]] = st.sampled_from([
    {}, {"separators": (",", ":")}, {"indent": 1}, {"indent": "\t"}, {"indent": 4},
    {"separators": (" ,", " : ")}, {"ensure_ascii": False}])
_BYTES = [b"[", b"]", b",", b" ", b"\r\n", b'"', b"\\", b"x", b"\xff", b"[]", b"],["]


def _keys(text: bytes) -> list[bytes]:
    """The pieces reference_ids looks up (its cut, as wire_atoms does it)."""
    if text[:1] != b"[":
        return []
    pieces = text[1:-1].split(b"]")
    pieces.pop()
    if pieces:
        pieces[0] = wire_atoms._first(pieces)
    return pieces


@st.composite
def _case(draw: st.DrawFn) -> tuple[bytes, dict[bytes, int]]:
    state = draw(st.lists(_atom, max_size=10))
    text = json.dumps(state, **draw(_style)).encode()
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        at = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(_BYTES))
        kind = draw(st.sampled_from(["insert", "delete", "cut"]))
        if kind == "insert":
            text = text[:at] + piece + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 3)):]
        else:
            text = text[:at]
    # A state's text is an array (the splitters cut it, or msgspec read it): at least
    # "[]" (compiled, the reference's text[1:-1] of b"[" is refused by mypyc's slice).
    assume(text != b"[")
    keys = _keys(text)
    # Every piece known (the common case), some of them, or none; and others.
    known = draw(st.sampled_from(["all", "some", "none"]))
    table = {key: draw(st.integers(0, 300)) for key in keys
             if known == "all" or (known == "some" and draw(st.booleans()))}
    table.update({k: 7 for k in draw(st.lists(st.sampled_from(_BYTES), max_size=3))})
    return text, table


def _reference(text: bytes, table: dict[bytes, int]) -> list[int] | None:
    wire_atoms.forget()
    wire_atoms.PIECES.update(table)
    try:
        return wire_atoms.reference_ids(text)
    finally:
        wire_atoms.forget()


def _index(table: dict[bytes, int]) -> wire_split.Index:
    assert wire_split.PIECE_INDEX is not None
    index = wire_split.PIECE_INDEX()
    for piece, known in table.items():
        assert index.add(piece, known)  # no probe this long with so few pieces
    assert len(index) == len(table)
    return index


@settings(max_examples=examples(1500), deadline=None)
@given(_case())
def test_the_c_lookup_is_the_reference(case: tuple[bytes, dict[bytes, int]]) -> None:
    text, table = case
    assert wire_split.PIECE_IDS is not None
    expected = _reference(text, table)
    assert wire_split.PIECE_IDS(text, table) == expected, (text, table)
    index = _index(table)
    assert wire_split.PIECE_IDS(text, index) == expected, (text, table)
    for piece, known in table.items():
        assert index.get(piece) == known
    for piece in [*_keys(text), b"", b",", b"x" * 17]:
        assert index.get(piece) == table.get(piece), piece


@settings(max_examples=examples(300), deadline=None)
@given(_case(), st.integers(0, 5))
def test_ids_with_an_index_holding_fewer_pieces(case: tuple[bytes, dict[bytes, int]],
                                                 left_out: int) -> None:
    """PIECES written behind the index's back (as a piece too long to probe is left
    out of it): wire_atoms.ids still answers as the reference does."""
    text, table = case
    expected = _reference(text, table)
    wire_atoms.forget()
    try:
        for i, (piece, known) in enumerate(table.items()):
            if i < left_out:
                wire_atoms.PIECES[piece] = known
            else:
                wire_atoms._keep(piece, known)
        assert wire_atoms.ids(text) == expected, (text, table)
    finally:
        wire_atoms.forget()


def test_the_index_grows_and_clears() -> None:
    assert wire_split.PIECE_INDEX is not None
    index = wire_split.PIECE_INDEX()
    pieces = {f', ["at", "r{i}", "w{i % 7}"'.encode(): i for i in range(5000)}
    for piece, known in pieces.items():
        assert index.add(piece, known)
    assert len(index) == len(pieces)
    assert all(index.get(p) == k for p, k in pieces.items())
    text = b"[" + b"]".join(p.lstrip(b",") if i == 0 else p
                            for i, p in enumerate(pieces)) + b"]]"
    assert wire_split.PIECE_IDS is not None
    assert wire_split.PIECE_IDS(text, index) == list(pieces.values())
    assert index.add(next(iter(pieces)), -1) and index.get(next(iter(pieces))) == -1
    index.clear()
    assert len(index) == 0 and index.get(next(iter(pieces))) is None
    assert wire_split.PIECE_IDS(text, index) is None


@pytest.mark.parametrize("text", [
    b"", b"]", b"[]", b"[ ]", b"[]x", b"[[]]", b'[["a"]]', b'[["a"]] ', b'[["a"]x]',
    b'[ ["a"] ]', b'[\n  ["a"],\n  ["b"]\n]', b'[["a"],["b"]]', b'[ ["a"], ["b"] ]',
    b'[["a"]["b"]]', b'[["a"],["b"]', b'[x["a"],["b"]]', b'[["a"],"b"]]', b"[]]]", b"[,]",
    b'[["a]b"],["c"]]', b'[\t["a"]\t,\t["b"]\t]', b'[["a"] , ["b"] , ["c"]]',
], ids=repr)
def test_edge_cases_every_table(text: bytes) -> None:
    assert wire_split.PIECE_IDS is not None
    keys = _keys(text)
    for table in ({}, {k: i for i, k in enumerate(keys)},
                  {k: i for i, k in enumerate(keys[1:])}, {k: i for i, k in enumerate(keys[:1])}):
        assert wire_split.PIECE_IDS(text, table) == _reference(text, table), (text, table)


@pytest.mark.parametrize("n", [511, 512, 513, 1500])
def test_states_of_more_pieces_than_the_c_lookup_notes_ahead(n: int) -> None:
    # piece_ids notes the first 512 pieces' ends while counting them, and finds the
    # rest again as it looks them up.
    assert wire_split.PIECE_IDS is not None
    text = json.dumps([["at", f"r{i}", f"w{i % 7}"] for i in range(n)], indent=1).encode()
    keys = _keys(text)
    assert len(keys) == n
    for table in ({k: i for i, k in enumerate(keys)}, {k: i for i, k in enumerate(keys[:-1])}):
        expected = _reference(text, table)
        assert wire_split.PIECE_IDS(text, table) == expected
        assert wire_split.PIECE_IDS(text, _index(table)) == expected
    assert wire_split.PIECE_IDS(text, {k: i for i, k in enumerate(keys)}) == list(range(n))


def test_refuses_what_is_not_bytes_and_a_dict() -> None:
    assert wire_split.PIECE_IDS is not None and wire_split.PIECE_INDEX is not None
    index = wire_split.PIECE_INDEX()
    with pytest.raises(TypeError):
        index.add("x", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        index.add(b"x", "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        index.get("x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire_split.PIECE_IDS(bytearray(b"[]"), {})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire_split.PIECE_IDS(b"[]", [])
