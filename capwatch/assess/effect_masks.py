"""An outcome's possible effects on one atom as bits over the effect modes (add, delete,
absent), and what a step's values before and after say about them.

The arithmetic :mod:`capwatch.assess.outcomes` and :mod:`capwatch.assess.design` share:
which effects leave an atom as seen, what values an effect set can leave, at which value
before a step two effects differ, and the action's summary effect over its outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence

from capwatch.model.pal import Mode

EffectMask = int
"""Bits over the effect modes an outcome may have on one atom."""

POS, NEG, ABSENT = 1, 2, 4
ANY: EffectMask = POS | NEG | ABSENT


def signature(before: bool | None, after: bool | None) -> EffectMask:
    """The effect modes of the outcome that ran which leave the atom as seen."""
    if after is None:
        return ANY
    if before is None:
        return POS | ABSENT if after else NEG | ABSENT
    if before == after:
        return POS | ABSENT if after else NEG | ABSENT
    return POS if after else NEG


def posts(mask: EffectMask, before: bool) -> set[bool]:
    """The atom's values after a step of an outcome with these possible effects, when it
    ran with the atom at ``before``."""
    out = set()
    if mask & POS:
        out.add(True)
    if mask & NEG:
        out.add(False)
    if mask & ABSENT:
        out.add(before)
    return out


def revealing(mask: EffectMask) -> tuple[bool, ...]:
    """The atom values before a step at which an outcome with these possible effects
    leaves the atom differently for some two of them (true tells a delete from the rest,
    false an add)."""
    out = []
    if mask & NEG and mask & (POS | ABSENT):
        out.append(True)
    if mask & POS and mask & (NEG | ABSENT):
        out.append(False)
    return tuple(out)


def under(pre: Mode, mask: EffectMask) -> EffectMask:
    """An effect that restates the precondition changes nothing: it counts as absent
    (⟨+,+⟩ and ⟨−,−⟩ are not legal pa-values)."""
    same = POS if pre is Mode.POS else NEG if pre is Mode.NEG else 0
    return (mask & ~same) | ABSENT if mask & same else mask


def summary_effects(masks: Sequence[EffectMask]) -> frozenset[Mode]:
    """The action's effect modes on an atom that some choice of the outcomes' effects
    gives (add wins over delete, as in :func:`capwatch.model.pal.eff_mode`)."""
    out = set()
    if any(m & POS for m in masks):
        out.add(Mode.POS)
    if all(m & (NEG | ABSENT) for m in masks) and any(m & NEG for m in masks):
        out.add(Mode.NEG)
    if all(m & ABSENT for m in masks):
        out.add(Mode.ABSENT)
    return frozenset(out)


__all__ = ["ABSENT", "ANY", "NEG", "POS", "EffectMask", "posts", "revealing", "signature",
           "summary_effects", "under"]
