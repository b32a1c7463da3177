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


def _stepped(state: frozenset[tuple[str, ...]], before: list[int], after: list[int]
             ) -> frozenset[tuple[str, ...]]:
    # The contract's set: the state less the atoms of ids only before holds, with those of
    # ids only after holds.
    gone = {_ATOMS[i] for i in set(before) - set(after)}
    new = {_ATOMS[i] for i in set(after) - set(before)}
    return frozenset((state - gone) | new)


@settings(max_examples=examples(1500), deadline=None)
@given(_ids, _ids, st.booleans(), st.sets(st.integers(0, len(_ATOMS) - 1), max_size=40))
def test_the_c_step_is_the_reference(before: list[int], after: list[int], overlap: bool,
                                     extra: set[int]) -> None:
    if overlap:  # a step: most ids shared
        after = before[: len(before) // 2] + after[:5]
    assert wire_split.STEP is not None
    # Under the decoder's invariant: the state is before's atoms, as the reference takes it.
    state = frozenset(_ATOMS[i] for i in before)
    flipped, got = wire_split.STEP(state, before, after, list(_ATOMS))
    assert flipped == _expected(before, after)
    assert type(got) is frozenset
    assert got == frozenset(_ATOMS[i] for i in after)
    ref_flipped, ref = _reference_step(state, before, after)
    assert got == ref and sorted(flipped) == sorted(ref_flipped)
    # A set made in place (its slots of atoms taken out hold the set's dummy) hashes,
    # iterates and counts as one made afresh: the monitor keys tables by states.
    fresh = frozenset(_ATOMS[i] for i in after)
    assert hash(got) == hash(fresh) and len(got) == len(fresh)
    assert sorted(got) == sorted(fresh) and {got: 1}.get(fresh) == 1
    if not flipped:
        assert got is state  # the very object: the monitor reuses its encoding
    # Any other set: the two halves applied as the contract says (never a wrong atom kept).
    other = frozenset(_ATOMS[i] for i in extra)
    flipped, got = wire_split.STEP(other, before, after, list(_ATOMS))
    assert got == (_stepped(other, before, after) if flipped else other)


def _reference_step(state: frozenset[tuple[str, ...]], before: list[int], after: list[int]
                    ) -> tuple[list[tuple[str, ...]], frozenset[tuple[str, ...]]]:
    # wire_fast.reference_step over this module's atoms (it maps ids by the vocabulary's).
    wire_atoms.forget()
    try:
        wire_atoms.learn(_ATOMS)
        assert all(wire_atoms.ID[a] == i for i, a in enumerate(_ATOMS))
        return wire_fast.reference_step(state, before, after)
    finally:
        wire_atoms.forget()


def test_the_c_step_refuses_what_it_cannot_read() -> None:
    assert wire_split.STEP is not None
    state = frozenset(_ATOMS[:3])
    with pytest.raises(TypeError):
        wire_split.STEP(set(_ATOMS[:3]), [1], [2], list(_ATOMS))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire_split.STEP(state, (1,), [2], list(_ATOMS))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        wire_split.STEP(state, [1], [2])  # type: ignore[call-arg]
    with pytest.raises(IndexError):
        wire_split.STEP(state, [1], [5], list(_ATOMS[:3]))
    with pytest.raises(TypeError):  # an atom that cannot be a set's
        wire_split.STEP(state, [0], [1], [("a",), ["b"]])
    flipped, same = wire_split.STEP(state, [1, 2], [2, 1], list(_ATOMS[:3]))
    assert flipped == [] and same is state


def test_the_c_step_takes_out_an_equal_atom_not_the_very_object() -> None:
    # The state holds an atom equal to the vocabulary's but another object (the
    # contract's set is by equality): taken out all the same (the way of two copies).
    assert wire_split.STEP is not None
    atoms = list(_ATOMS[:4])
    twin = tuple(list(atoms[1]))
    assert twin == atoms[1] and twin is not atoms[1]
    state = frozenset([atoms[0], twin, atoms[2]])
    flipped, got = wire_split.STEP(state, [0, 1, 2], [0, 2, 3], atoms)
    assert flipped == [atoms[1], atoms[3]]
    assert got == frozenset([atoms[0], atoms[2], atoms[3]])
    assert hash(got) == hash(frozenset([atoms[0], atoms[2], atoms[3]]))
    # An atom to take out that the set does not hold at all: nothing taken out.
    flipped, got = wire_split.STEP(frozenset([atoms[0]]), [0, 1], [0], atoms)
    assert flipped == [atoms[1]] and got == frozenset([atoms[0]])
