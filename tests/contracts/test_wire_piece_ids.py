"""The pieces' lookup in C (``_wire_split.piece_ids``, wire_atoms.ids' way when compiled)
against its Python reference (wire_atoms.reference_ids over one table): the same ids, or
None, for state texts of any spelling, for tables holding any of their pieces, and for
mutated bytes."""

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


@settings(max_examples=examples(1500), deadline=None)
@given(_case())
def test_the_c_lookup_is_the_reference(case: tuple[bytes, dict[bytes, int]]) -> None:
    text, table = case
    assert wire_split.PIECE_IDS is not None
    assert wire_split.PIECE_IDS(text, table) == _reference(text, table), (text, table)


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


def test_refuses_what_is_not_bytes_and_a_dict() -> None:
    assert wire_split.PIECE_IDS is not None
    with pytest.raises(TypeError):
        wire_split.PIECE_IDS(bytearray(b"[]"), {})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire_split.PIECE_IDS(b"[]", [])  # type: ignore[arg-type]
