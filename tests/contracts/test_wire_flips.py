"""Two state reads' ids diffed in C (``_wire_split.flips``, wire_fast's way when compiled)
against its Python reference (wire_fast.reference_flips): the same atoms, each once, in
the order of the state's ids and then the next state's; and a decoder that reads a
state from the one before by them agrees with one that reads every state whole."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capwatch.contracts import wire_atoms, wire_fast, wire_split
from tests.support.fuzzing import examples

pytestmark = pytest.mark.skipif(wire_split.FLIPS is None,
                                reason="the C diff is built with the compiled hot path")

_ATOMS = [("at", f"r{i}") for i in range(600)]
_ids = st.lists(st.integers(0, len(_ATOMS) - 1), max_size=300)


def _expected(before: list[int], after: list[int]) -> list[tuple[str, ...]]:
    only_before = set(before) - set(after)
    only_after = set(after) - set(before)
    out: list[tuple[str, ...]] = []
    for ids, only in ((before, only_before), (after, only_after)):
        for i in ids:
            if i in only and _ATOMS[i] not in out:
                out.append(_ATOMS[i])
    return out


@settings(max_examples=examples(1500), deadline=None)
@given(_ids, _ids, st.booleans())
def test_the_c_diff_is_the_reference(before: list[int], after: list[int],
                                     overlap: bool) -> None:
    if overlap:  # a step: most ids shared
        after = before[: len(before) // 2] + after[:5]
    assert wire_split.FLIPS is not None
    got = wire_split.FLIPS(before, after, list(_ATOMS))
    assert got == _expected(before, after)
    # The Python way, in a set's order: the same atoms, each once (with atoms of the
    # vocabulary, whose ids these are).
    assert sorted(got) == sorted(set(_ATOMS[i] for i in set(before) ^ set(after)))


@pytest.mark.parametrize(("before", "after"), [
    ([], []), ([1], []), ([], [1]), ([1, 1, 1], [1]), ([1, 2, 2], [2, 3, 3]),
    (list(range(200)), list(range(1, 201))), ([599, 0], [0, 599]),
    (list(range(0, 600, 2)), list(range(1, 600, 2))),  # the table grown past the stack's
])
def test_edge_cases(before: list[int], after: list[int]) -> None:
    assert wire_split.FLIPS is not None
    assert wire_split.FLIPS(before, after, list(_ATOMS)) == _expected(before, after)


def test_refuses_what_is_not_ids_of_the_vocabulary() -> None:
    assert wire_split.FLIPS is not None
    with pytest.raises(TypeError):
        wire_split.FLIPS((1,), [2], [])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire_split.FLIPS([1], ["a"], [])  # type: ignore[list-item]
    with pytest.raises(IndexError):
        wire_split.FLIPS([1], [5], list(_ATOMS[:3]))
    with pytest.raises(IndexError):
        wire_split.FLIPS([-1], [], list(_ATOMS[:3]))
    assert wire_split.FLIPS([1, 5], [5, 1], list(_ATOMS[:3])) == []  # none looked up


def test_reference_is_the_sets_difference() -> None:
    wire_atoms.forget()
    try:
        wire_atoms.learn(_ATOMS[:10])
        ids = [wire_atoms.ID[a] for a in _ATOMS[:10]]
        got = wire_fast.reference_flips(ids[:6], ids[3:])
        assert sorted(got) == sorted(_ATOMS[:3] + _ATOMS[6:10])
    finally:
        wire_atoms.forget()
