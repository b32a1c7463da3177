"""AtomIndex.encode: the same mask and the same interning order whatever path it takes
(small sets by adding bits, narrow indexes by or-ing them, wide ones by packing bytes)."""

from __future__ import annotations

import contextlib
import random
from functools import reduce
from operator import or_

import pytest

from capwatch.model.grounding import (
    SMALL_STATE,
    WIDE_INDEX,
    AtomIndex,
    IndexFull,
    bit_positions,
    decode_bits,
)


def _plain(index: AtomIndex, atoms: list[tuple[str, ...]]) -> int:
    return reduce(or_, map(index.bit, atoms), 0)


@pytest.mark.parametrize("width", [10, WIDE_INDEX + 1_000])
@pytest.mark.parametrize("size", [0, 1, SMALL_STATE, SMALL_STATE + 1, 3_000])
def test_encoding_matches_or_ing_every_bit(width: int, size: int) -> None:
    rng = random.Random(size * 7 + width)
    known: list[tuple[str, ...]] = [("p", str(i)) for i in range(width)]
    new: list[tuple[str, ...]] = [("q", str(i)) for i in range(5)]
    a, b = AtomIndex(), AtomIndex()
    for atom in known:
        a.bit(atom)
        b.bit(atom)
    chosen = rng.sample(known, min(size, width))
    for state in (frozenset(chosen), set(chosen), chosen + chosen[:3],
                  iter(chosen), chosen + new + new[:2]):
        listed = list(state)
        assert a.encode(iter(listed) if not isinstance(state, (set, frozenset)) else state) \
            == _plain(b, listed)
    # New atoms were interned in the same order, at the same bits.
    assert len(a) == len(b) and all(a.bit(atom) == b.bit(atom) for atom in new)


@pytest.mark.parametrize("before", [0, 5, 8_190])
@pytest.mark.parametrize("limit", [None, 3, 12, 8_200])
def test_adding_in_bulk_interns_as_bit_does_one_by_one(before: int, limit: int | None
                                                       ) -> None:
    known = [("p", str(i)) for i in range(before)]
    # Repeats, atoms already in the index, new ones: the new ones in their first order.
    atoms = [("q", "1"), ("q", "0"), ("q", "1"), *known[:3], *(("r", str(i)) for i in range(9))]
    a, b = AtomIndex(limit), AtomIndex(limit)
    full = []
    for index in (a, b):
        try:
            for atom in known:
                index.bit(atom)
        except IndexFull:
            pass
    try:
        a.add(atoms)
    except IndexFull:
        full.append("a")
    try:
        for atom in atoms:
            b.bit(atom)
    except IndexFull:
        full.append("b")
    assert full in ([], ["a", "b"])
    assert a.atoms == b.atoms and a.bits == b.bits and a.full == b.full


@pytest.mark.parametrize("before", [0, 5])
@pytest.mark.parametrize("limit", [None, 3, 12])
def test_adding_a_set_interns_its_new_atoms_once_each_up_to_the_limit(
        before: int, limit: int | None) -> None:
    known = [("p", str(i)) for i in range(before)]
    index = AtomIndex(limit)
    with contextlib.suppress(IndexFull):
        index.add(known)
    kept = dict(index.bits)
    new = {("r", str(i)) for i in range(9)}
    room = (limit if limit is not None else 10**9) - len(index)
    try:
        index.add(frozenset({*known[:3], *new}))
        assert len(new) <= room
    except IndexFull:
        assert len(new) > room
    assert {a: index.bits[a] for a in kept} == kept  # atoms interned before keep their bits
    added = [a for a in index.atoms if a not in kept]
    assert set(added) <= new and len(added) == min(len(new), max(0, room))
    # Numbered as interning one by one numbers them: bit k for the k-th atom.
    assert index.bits == {a: 1 << k for k, a in enumerate(index.atoms)}


@pytest.mark.parametrize("width", [1, 8, 64, 65, 300, 4096])
def test_decode_bits_finds_every_bit_set_whichever_way_it_counts_them(width: int) -> None:
    # Few bits are found by bit_positions' loop, many (past _MANY_BITS) by numpy.
    rng = random.Random(width)
    atoms = [("p", f"o{i}") for i in range(width)]
    for k in sorted({0, 1, width // 3, width // 2, width - 1, width}):
        bits = rng.sample(range(width), k)
        mask = sum(1 << b for b in bits)
        assert decode_bits(atoms, mask) == frozenset(atoms[b] for b in bits)
        assert sorted(bit_positions(mask)) == sorted(bits)
