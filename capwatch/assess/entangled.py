"""Evidence on a ground atom that several atoms of an executed action name (repeated objects).

``move_down(h1, h1)`` grounds ``(at ?hfrom)`` and ``(at ?hto)`` to the one atom
``(at h1)``. What is seen of it after the step is the joint work of both effects under
PDDL semantics (delete, then add: :func:`~capwatch.model.consistency.joint_explains`), so
Table 2 cannot be applied to either pa-tuple alone. Here the version space is narrowed by
the joint explanation instead: a value stays possible for one pa-tuple while some values
of its partners (within what the evidence still allows them) explain the step. Evidence
that determines nothing is kept as explained by the semantics, never as a conflict.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from capwatch.assess.versionspace import Conflict, VersionSpace, mask_of, values_of
from capwatch.model.consistency import MAX_ENTANGLED, joint_explains
from capwatch.model.domain import GroundAtom
from capwatch.model.pal import PaTuple, PaValue, Presence


def joint_allowed(masks: Sequence[int], presence: Presence,
                  fixed: Sequence[PaValue] = ()) -> list[int] | None:
    """Per pa-tuple on one ground atom, the values some choice of the others' allows
    (with ``fixed``, atoms outside the pal-tuples as modelled). None: too many to enumerate,
    or no choice at all explains the step (the caller keeps the masks as they are)."""
    if len(masks) > MAX_ENTANGLED:
        return None
    options = [values_of(m) for m in masks]
    allowed = [0] * len(masks)
    for combo in itertools.product(*options):
        if joint_explains([*combo, *fixed], presence):
            for i, v in enumerate(combo):
                allowed[i] |= mask_of([v])
    return allowed


def update_entangled(vs: VersionSpace, ground: Mapping[PaTuple, GroundAtom],
                     fixed: Mapping[GroundAtom, Sequence[PaValue]],
                     state: frozenset[GroundAtom], next_state: frozenset[GroundAtom],
                     known: Mapping[PaTuple, PaValue], evidence: str) -> list[PaTuple]:
    """Narrow ``vs`` with an executed step's entangled atoms; returns the pa-tuples whose
    known values jointly fail to explain the step (the known model is wrong about them,
    although no single one of them is ruled out on its own)."""
    groups: dict[GroundAtom, list[PaTuple]] = {}
    for pa, g in ground.items():
        groups.setdefault(g, []).append(pa)
    doubted: list[PaTuple] = []
    for g, pas in sorted(groups.items()):
        outside = fixed.get(g, ())
        if len(pas) + len(outside) < 2:
            continue
        presence = (g in state, g in next_state)
        allowed = joint_allowed([vs.masks[pa] for pa in pas], presence, outside)
        if allowed is not None and not any(allowed):
            vs.conflicts.append(Conflict(None, evidence, f"no values of the pa-tuples on {g} "
                                                         f"explain it jointly"))
        elif allowed is not None:
            for pa, mask in zip(pas, allowed, strict=True):
                vs.restrict(pa, mask, evidence + f" (jointly with the others on {g})")
        if all(pa in known for pa in pas) and not joint_explains(
                [*(known[pa] for pa in pas), *outside], presence):
            doubted.extend(pas)
    return doubted
