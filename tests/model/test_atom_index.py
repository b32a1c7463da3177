"""AtomIndex.encode: the same mask and the same interning order whatever path it takes
(small sets by adding bits, narrow indexes by or-ing them, wide ones by packing bytes)."""

from __future__ import annotations

import random
from functools import reduce
from operator import or_

import pytest

from capwatch.model.grounding import SMALL_STATE, WIDE_INDEX, AtomIndex


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
