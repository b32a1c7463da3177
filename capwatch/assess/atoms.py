"""The atoms around Γ for one action: what probes must respect but the engine does not assess.

Precondition atoms outside Γ (a constant, a repeated parameter) must still hold when a
probe runs, as the known model states them; equality constraints ``(= ?a ?b)`` make
some of Γ's atoms fall on one ground atom, so a state can only give them one value.
"""

from __future__ import annotations

from collections.abc import Sequence

from capwatch.model.domain import Action, LiftedAtom

Fixed = tuple[LiftedAtom, bool, bool | None]
"""A precondition atom outside Γ (it mentions a constant or repeats a parameter): the value
the step needs, and its value after the step (None: unchanged). Taken from the known
model, which is the only source for atoms the engine does not assess."""


def equality_roots(action: Action) -> dict[str, str]:
    """Each parameter's representative under the action's ``(= ?a ?b)`` constraints: a
    constant when one is tied in (the class must name it), else one of the parameters."""
    root: dict[str, str] = {}

    def find(x: str) -> str:
        while root.get(x, x) != x:
            x = root[x]
        return x

    for a, b in action.equal:
        ra, rb = find(a), find(b)
        if ra != rb:
            if ra.startswith("?"):
                root[ra] = rb
            else:
                root[rb] = ra
    return {n: find(n) for n in action.parameter_names}


def fixed_atoms(action: Action, gamma: set[LiftedAtom]) -> list[Fixed]:
    """Precondition atoms the engine does not assess (constants, repeated parameters):
    probes must still satisfy them, as the known model states them."""
    out: list[Fixed] = []
    adds = set().union(*(o.add for o in action.outcomes))
    dels = set().union(*(o.delete for o in action.outcomes))
    for atoms, value in ((action.pre_pos, True), (action.pre_neg, False)):
        for atom in sorted(atoms):
            if atom in gamma:
                continue
            after = True if atom in adds else False if atom in dels else None
            out.append((atom, value, after))
    return out


def tied_atoms(action: Action, atoms: Sequence[LiftedAtom]) -> dict[LiftedAtom, LiftedAtom]:
    """Atoms that equality constraints make ground to the same atom as an earlier one."""
    roots = equality_roots(action)
    first: dict[tuple[str, ...], LiftedAtom] = {}
    tied = {}
    for atom in atoms:
        form = (atom.predicate, *(roots.get(a, a) for a in atom.args))
        if form in first:
            tied[atom] = first[form]
        else:
            first[form] = atom
    return tied
