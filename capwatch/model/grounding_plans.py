"""A lifted action's atoms bound to a ground action's objects, compiled.

Grounding an action met for the first time took ``LiftedAtom.ground`` per atom (a Python
call with its generator), the binding's dict, the parameters' names and the domain's
action map built again at each call: ~91,000 instructions a new ground action, 30% of
the first pass over an outside producer's fleet, which grounds about one new action a
message (callgrind, session 22). Here each action's atoms are worked out once as
:data:`Shape`\\ s (the predicate, and per argument where its object comes from), and a
ground action's atoms are made from them in one compiled loop: the same tuples, in the
same order, as ``LiftedAtom.ground`` made them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from capwatch.model.domain import Action, GroundAction, GroundAtom, LiftedAtom

Shape = tuple[str, tuple[int, ...], tuple[str, ...]]
"""A lifted atom's predicate; per argument, the position in the ground action of the
object its parameter names (1 for the first parameter), or 0 for a constant; and per
argument the constant (``""`` where a parameter)."""

GroundAtoms = tuple[GroundAtom, ...]
Plan = tuple[Action, int, tuple[Shape, ...], tuple[Shape, ...],
             tuple[tuple[tuple[Shape, ...], tuple[Shape, ...]], ...], bool]
"""An action, its arity, the shapes of its positive and negative preconditions and of each
outcome's (delete, add) atoms, each in its frozenset's iteration order (the order
grounding always took), and whether it has equality constraints."""
Grounded = tuple[Action, tuple[str, ...], GroundAtoms, GroundAtoms,
                 tuple[tuple[GroundAtoms, GroundAtoms], ...], bool]
"""As ``grounding.Grounded``."""

_PLANS: Final[dict[int, tuple[Action, Plan]]] = {}
"""id(action) → (the action, its plan); the action is held so that its id cannot name
another one. Bounded by :data:`MAX_PLANS` (model versions come and go)."""
MAX_PLANS: Final = 4_096


def _shapes(atoms: Iterable[LiftedAtom], positions: dict[str, int]) -> tuple[Shape, ...]:
    out = []
    for atom in atoms:
        where = []
        constants = []
        for arg in atom.args:
            at = positions.get(arg, 0)
            where.append(at)
            constants.append("" if at else arg)
        out.append((atom.predicate, tuple(where), tuple(constants)))
    return tuple(out)


def plan(action: Action) -> Plan:
    """The action's :data:`Plan`, worked out once (kept while the action is in use)."""
    held = _PLANS.get(id(action))
    if held is not None and held[0] is action:
        return held[1]
    # A later parameter of one name would win in a dict of the binding; names are unique
    # (Action checks), so the first and the last are one.
    positions = {p.name: i + 1 for i, p in enumerate(action.parameters)}
    made: Plan = (
        action, len(action.parameters), _shapes(action.pre_pos, positions),
        _shapes(action.pre_neg, positions),
        tuple([(_shapes(o.delete, positions), _shapes(o.add, positions))
               for o in action.outcomes]),
        action.has_static_constraints)
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[id(action)] = (action, made)
    return made


def _atoms(shapes: tuple[Shape, ...], ground_action: GroundAction) -> GroundAtoms:
    out = []
    for predicate, where, constants in shapes:
        atom = [predicate]
        for i, at in enumerate(where):
            atom.append(ground_action[at] if at else constants[i])
        out.append(tuple(atom))
    return tuple(out)


def ground(made: Plan, ground_action: GroundAction) -> Grounded:
    """The atoms of ``ground_action`` (of the plan's action, with its arity: the caller
    checked), as ``grounding.SharedGrounding.ground`` gives them."""
    action = made[0]
    args = tuple(ground_action[1:])
    admitted = True
    if made[5]:
        admitted = action.admits(args)
    return (action, args, _atoms(made[2], ground_action), _atoms(made[3], ground_action),
            tuple([(_atoms(d, ground_action), _atoms(a, ground_action)) for d, a in made[4]]),
            admitted)
