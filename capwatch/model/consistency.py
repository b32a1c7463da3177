"""Transition consistency (papers/dissertation.txt Def. 35) and what an inconsistency says.

(s, a, s') is consistent with M iff s ⊭ pre(a) and s' = s, or s ⊨ pre(a) and
s' = (s \\ del_i) ∪ add_i for some outcome i with p_i > 0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom
from capwatch.model.grounding import GroundOperator, StateMask
from capwatch.model.pal import (
    Mode,
    PaTuple,
    PaValue,
    eff_mode,
    lifted_instantiations,
    pa_values_consistent_with,
    pre_mode,
)


class Verdict(enum.IntEnum):
    APPLIED = 0
    """Precondition held and the next state is one of the outcomes."""
    NOT_APPLICABLE = 1
    """Precondition failed and nothing changed, as the model predicts."""
    INCONSISTENT = 2


def check(op: GroundOperator, state: StateMask, next_state: StateMask) -> tuple[Verdict, int]:
    """The hot path: verdict and a bitmask of the outcomes that explain the transition."""
    if (state & op.pre_pos) != op.pre_pos or state & op.pre_neg:
        return (Verdict.NOT_APPLICABLE, 0) if next_state == state else (Verdict.INCONSISTENT, 0)
    matched = 0
    bit = 1
    for keep, add in op.effects:
        if (state & keep) | add == next_state:
            matched |= bit
        bit <<= 1
    return (Verdict.APPLIED, matched) if matched else (Verdict.INCONSISTENT, 0)


@dataclass(frozen=True, slots=True)
class PaContradiction:
    pa: PaTuple
    ground_atom: GroundAtom
    current: PaValue
    possible: frozenset[PaValue]
    """Values still consistent with this one transition (Table 2)."""


@dataclass(frozen=True, slots=True)
class Inconsistency:
    """Why a transition contradicts the model, in pa-tuples.

    ``executed`` is None when the observation cannot tell whether the agent executed the
    action (precondition held, nothing changed): either a precondition was added, or
    the effects now change nothing here.
    """

    action: GroundAction
    executed: bool | None
    contradicted: tuple[PaContradiction, ...]
    """Pa-tuples whose current value this transition rules out if the action executed."""
    missing_precondition_candidates: tuple[PaContradiction, ...]
    """If the agent refused to act: pa-tuples whose precondition could now block it."""
    unexplained_atoms: frozenset[GroundAtom]
    """Changed atoms that no pal-tuple of the action can mention (outside its arguments)."""


def _outcome_values(action: Action, pa: PaTuple) -> set[PaValue]:
    pre = pre_mode(action, pa.atom)
    values = set()
    for o in action.outcomes:
        if pa.atom in o.add:
            values.add((pre, Mode.POS))
        elif pa.atom in o.delete:
            values.add((pre, Mode.NEG))
        else:
            values.add((pre, Mode.ABSENT))
    return values


def explain(domain: Domain, ground_action: GroundAction, state: frozenset[GroundAtom],
            next_state: frozenset[GroundAtom]) -> Inconsistency:
    """Apply Table 2 to every pa-tuple of the action (slow path, for inconsistencies only)."""
    action = domain.action(ground_action[0])
    binding = dict(zip(action.parameter_names, ground_action[1:], strict=True))
    applicable = all(a.ground(binding) in state for a in action.pre_pos) and not any(
        a.ground(binding) in state for a in action.pre_neg
    )
    changed = state ^ next_state
    executed: bool | None = True if changed else (None if applicable else False)
    contradicted: list[PaContradiction] = []
    candidates: list[PaContradiction] = []
    mentioned: set[GroundAtom] = set()
    for atom in lifted_instantiations(domain, action):
        pa = PaTuple(action.name, atom)
        g = atom.ground(binding)
        mentioned.add(g)
        presence = (g in state, g in next_state)
        possible = pa_values_consistent_with(presence)
        values = _outcome_values(action, pa)
        current = (pre_mode(action, atom), eff_mode(action, atom))
        if executed is not False and not (values & possible):
            contradicted.append(PaContradiction(pa, g, current, possible))
        if executed is None and current[0] is Mode.ABSENT:
            blocking = Mode.NEG if g in state else Mode.POS
            allowed = frozenset(v for v in possible if v[0] is blocking) or frozenset(
                {(blocking, Mode.ABSENT)})
            candidates.append(PaContradiction(pa, g, current, allowed))
    return Inconsistency(
        action=ground_action,
        executed=executed,
        contradicted=tuple(contradicted),
        missing_precondition_candidates=tuple(candidates),
        unexplained_atoms=frozenset(changed - mentioned),
    )
