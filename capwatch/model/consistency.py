"""Transition consistency (papers/dissertation.txt Def. 35) and what an inconsistency says.

(s, a, s') is consistent with M iff s ⊭ pre(a) and s' = s, or s ⊨ pre(a) and
s' = (s \\ del_i) ∪ add_i for some outcome i with p_i > 0.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom, LiftedAtom, Outcome
from capwatch.model.grounding import GroundOperator, StateMask
from capwatch.model.pal import (
    LEGAL_PA_VALUES,
    Mode,
    PaTuple,
    PaValue,
    Presence,
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


_APPLIED = Verdict.APPLIED
_NOT_APPLICABLE = (Verdict.NOT_APPLICABLE, 0)
_INCONSISTENT = (Verdict.INCONSISTENT, 0)
"""Module constants: reading a member off an enum class costs ~0.15 µs on Python 3.11,
more than the bit operations of a check."""


def check_declared(op: GroundOperator, state: StateMask, next_state: StateMask,
                   executed: bool | None) -> tuple[Verdict, int]:
    """:func:`check` with the producer's word on whether the agent executed the action
    (the wire's ``executed``; None: not said). An unchanged state is read as a refusal where
    the model says the action does not apply, and as an execution that changed nothing
    where it applies; a producer that said otherwise contradicts the model: an action run
    although a precondition is false (a precondition lost, whose effects held already),
    or refused although every precondition held (one gained).

    A changed state said not executed is inconsistent whatever the model says: a refused
    action changes nothing (PDDL, and the query protocol's "the start state" after a
    refused first step), so the agent or its producer contradicts itself, which no model
    version can explain. Before session 18 a change the model explained was counted
    applied, silently; now it is evidence, and its assessment fails closed with the
    transition named (``replay``)."""
    result = check(op, state, next_state)
    if executed is None or result[0] is Verdict.INCONSISTENT:
        return result
    if state != next_state:
        return result if executed else _INCONSISTENT
    if (result[0] is Verdict.APPLIED) != executed:
        return _INCONSISTENT
    return result


def check(op: GroundOperator, state: StateMask, next_state: StateMask) -> tuple[Verdict, int]:
    """The hot path: verdict and a bitmask of the outcomes that explain the transition."""
    pre = op.pre_pos
    if (state & pre) != pre or state & op.pre_neg or not op.admitted:
        return _NOT_APPLICABLE if next_state == state else _INCONSISTENT
    matched = 0
    bit = 1
    for keep, add in op.effects:
        if (state & keep) | add == next_state:
            matched |= bit
        bit <<= 1
    return (_APPLIED, matched) if matched else _INCONSISTENT


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
    entangled: frozenset[GroundAtom] = frozenset()
    """Ground atoms named by several atoms of the action under this grounding (repeated
    objects): their evidence constrains those pa-tuples only jointly."""
    violated_constraints: tuple[str, ...] = ()
    """Equality constraints of the action that these objects break, e.g.
    ``(not (= ?a ?b))``: static, so no pa-tuple change can explain an execution."""


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


def _eff_in(outcome: Outcome, atom: LiftedAtom) -> Mode:
    return Mode.POS if atom in outcome.add else Mode.NEG if atom in outcome.delete else Mode.ABSENT


def joint_explains(values: Iterable[PaValue], presence: Presence) -> bool:
    """PDDL semantics for one ground atom that several lifted atoms of an executed action
    name (repeated objects): every precondition on it held, and afterwards it is true if
    any effect adds it, else false if any deletes it, else unchanged (delete, then add)."""
    before, after = presence
    effs = []
    for pre, eff in values:
        if (pre is Mode.POS and not before) or (pre is Mode.NEG and before):
            return False
        effs.append(eff)
    result = True if Mode.POS in effs else False if Mode.NEG in effs else before
    return result == after


MAX_ENTANGLED = 4
"""Pa-tuples sharing one ground atom whose joint values are enumerated (7^n); more than
this says nothing about them rather than spend exponential time."""


def _entangled_possible(action: Action, atom: LiftedAtom, free: Sequence[LiftedAtom],
                        fixed: Sequence[LiftedAtom], presence: Presence) -> frozenset[PaValue]:
    """Values of ``atom`` for which some values of the other free pa-tuples on the same
    ground atom (and the fixed atoms as modelled) explain the transition in some outcome."""
    others = sum(1 for a in free if a != atom)
    if others + 1 > MAX_ENTANGLED:
        return frozenset(LEGAL_PA_VALUES)
    per_outcome = [[(pre_mode(action, f), _eff_in(o, f)) for f in fixed]
                   for o in action.outcomes]
    return entangled_values(per_outcome, others, presence)


def entangled_values(fixed: Sequence[Sequence[PaValue]], others: int, presence: Presence
                     ) -> frozenset[PaValue]:
    """The values of one pa-tuple on a ground atom for which some values of ``others``
    free pa-tuples on the same atom, with the ``fixed`` values of each outcome, explain
    the transition (:func:`joint_explains`).

    The free partners need not be enumerated (7^n combinations per value, on every
    inconsistent transition): each may take ⟨∅,+⟩, ⟨∅,−⟩ or ⟨∅,∅⟩ whatever the state, so
    together they can make the atom true, or leave it to the rest, or make it false
    unless the rest adds it.
    """
    before, after = presence
    possible = set()
    for v in LEGAL_PA_VALUES:
        for values in fixed:
            joint = [v, *values]
            if not others:
                if joint_explains(joint, presence):
                    possible.add(v)
                    break
                continue
            if any((pre is Mode.POS and not before) or (pre is Mode.NEG and before)
                   for pre, _ in joint):
                continue
            if after or all(eff is not Mode.POS for _, eff in joint):
                possible.add(v)
                break
    return frozenset(possible)


def shared_ground_atoms(domain: Domain, ground_action: GroundAction
                        ) -> dict[GroundAtom, tuple[LiftedAtom, ...]]:
    """Ground atoms that several atoms of the action name under this grounding (repeated
    objects, or a parameter bound to a constant the schema also names), with those atoms:
    pal-tuples (Γ) and atoms outside Γ alike. Empty for a grounding with distinct objects
    and no constants. Evidence on these atoms constrains their modes only jointly
    (:func:`joint_explains`)."""
    action = domain.action(ground_action[0])
    binding = dict(zip(action.parameter_names, ground_action[1:], strict=True))
    groups: dict[GroundAtom, set[LiftedAtom]] = {}
    for atom in (*lifted_instantiations(domain, action), *action.all_atoms()):
        groups.setdefault(atom.ground(binding), set()).add(atom)
    return {g: tuple(sorted(atoms)) for g, atoms in groups.items() if len(atoms) > 1}


@dataclass(frozen=True, slots=True)
class _ActionFacts:
    """What :func:`explain` needs of an action whatever the grounding: worked out once per
    model and action (for a wide action, P* holds hundreds of atoms, and working it out
    again on every inconsistent transition cost up to milliseconds each)."""

    action: Action
    gamma: tuple[tuple[LiftedAtom, PaTuple, PaValue, frozenset[PaValue]], ...]
    """Per atom of P*, in its order: the atom, its pa-tuple, its current value and the
    values its outcomes give it."""
    fixed: tuple[LiftedAtom, ...]
    """The action's atoms outside P* (constants, repeated parameters)."""
    equal: tuple[tuple[str, str], ...]
    distinct: tuple[tuple[str, str], ...]
    groundings: dict[GroundAction, _Grounding]
    """Its groundings met so far (:func:`_grounding`), up to :data:`_MAX_GROUNDINGS`."""
    shapes: tuple[tuple[_Shape, ...], tuple[_Shape, ...], tuple[_Shape, ...],
                  tuple[_Shape, ...]]
    """The predicate and arguments of the atoms of ``gamma``, ``fixed`` and the action's
    positive and negative preconditions, in their orders (:func:`_shapes`), grounded here
    (compiled) instead of by ``LiftedAtom.ground``: a Python call per atom from the
    compiled loop, with its generator, was most of a new grounding's cost."""


_Shape = tuple[str, tuple[str, ...]]
"""A lifted atom's predicate and arguments (parameters or constants)."""


def _shapes(atoms: Iterable[LiftedAtom]) -> tuple[_Shape, ...]:
    return tuple((atom.predicate, tuple(atom.args)) for atom in atoms)


def _ground(shape: _Shape, binding: dict[str, str]) -> GroundAtom:
    """``LiftedAtom.ground`` of the atom of this shape: its arguments bound, constants
    kept."""
    out = [shape[0]]
    for arg in shape[1]:
        out.append(binding.get(arg, arg))
    return tuple(out)


_GroundAtomFacts = tuple[LiftedAtom, PaTuple, PaValue, frozenset[PaValue], GroundAtom,
                         tuple[LiftedAtom, ...] | None, tuple[LiftedAtom, ...]]
"""An atom of P*, its pa-tuple, current value, values its outcomes give it, the ground
atom it names and, if that ground atom is entangled, the atoms of P* and outside it that
name it too (else None, ())."""


@dataclass(frozen=True, slots=True)
class _Grounding:
    """What :func:`explain` needs of one grounding of an action whatever the states:
    worked out once per grounding. A drifted agent awaiting its assessment makes the
    same inconsistent steps at every record, and grounding P* again was half of each
    explanation."""

    violated: tuple[str, ...]
    pre_pos: tuple[GroundAtom, ...]
    pre_neg: tuple[GroundAtom, ...]
    atoms: tuple[_GroundAtomFacts, ...]
    named: frozenset[GroundAtom]
    """The ground atoms P* names."""
    entangled: frozenset[GroundAtom]
    possible: dict[tuple[int, Presence], frozenset[PaValue]]
    """(index in ``atoms``, presence) → the values possible for an entangled atom
    (:func:`_entangled_possible`, a function of those alone), as met."""


_MAX_GROUNDINGS = 4096


def _grounding(facts: _ActionFacts, ground_action: GroundAction) -> _Grounding:
    held = facts.groundings.get(ground_action)
    if held is not None:
        return held
    action = facts.action
    binding = dict(zip(action.parameter_names, ground_action[1:], strict=True))
    violated = tuple(f"(= {a} {b})" for a, b in facts.equal
                     if binding.get(a, a) != binding.get(b, b)) + tuple(
        f"(not (= {a} {b}))" for a, b in facts.distinct
        if binding.get(a, a) == binding.get(b, b))
    gamma_shapes, fixed_shapes, pos_shapes, neg_shapes = facts.shapes
    grounded = [(atom, pa, current, outcomes, _ground(shape, binding))
                for (atom, pa, current, outcomes), shape
                in zip(facts.gamma, gamma_shapes, strict=True)]
    by_ground: dict[GroundAtom, list[LiftedAtom]] = {}
    for atom, _, _, _, g in grounded:
        by_ground.setdefault(g, []).append(atom)
    fixed_by_ground: dict[GroundAtom, list[LiftedAtom]] = {}
    for atom, shape in zip(facts.fixed, fixed_shapes, strict=True):
        fixed_by_ground.setdefault(_ground(shape, binding), []).append(atom)
    entangled = frozenset(g for g, atoms in by_ground.items()
                          if len(atoms) + len(fixed_by_ground.get(g, ())) > 1)
    held = _Grounding(
        violated, tuple([_ground(shape, binding) for shape in pos_shapes]),
        tuple([_ground(shape, binding) for shape in neg_shapes]),
        tuple((atom, pa, current, outcomes, g,
               tuple(by_ground[g]) if g in entangled else None,
               tuple(fixed_by_ground.get(g, ())) if g in entangled else ())
              for atom, pa, current, outcomes, g in grounded),
        frozenset(by_ground), entangled, {})
    if len(facts.groundings) >= _MAX_GROUNDINGS:
        facts.groundings.clear()
    facts.groundings[ground_action] = held
    return held


_FACTS: dict[int, tuple[Domain, dict[str, _ActionFacts]]] = {}
"""id(domain) → (the domain, its actions' facts); the domain is held so that its id
cannot name another one. Bounded by :data:`_MAX_DOMAINS` (model versions come and go)."""
_MAX_DOMAINS = 256
_PRESENCES: dict[Presence, frozenset[PaValue]] = {
    (b, a): pa_values_consistent_with((b, a)) for b in (False, True) for a in (False, True)}


def _facts(domain: Domain, name: str) -> _ActionFacts:
    held = _FACTS.get(id(domain))
    if held is None or held[0] is not domain:
        if len(_FACTS) >= _MAX_DOMAINS:
            _FACTS.clear()
        held = _FACTS[id(domain)] = (domain, {})
    facts = held[1].get(name)
    if facts is None:
        action = domain.action(name)
        gamma = list(lifted_instantiations(domain, action))
        fixed = tuple(action.all_atoms() - set(gamma))
        facts = held[1][name] = _ActionFacts(
            action, tuple((atom, pa := PaTuple(action.name, atom),
                   (pre_mode(action, atom), eff_mode(action, atom)),
                   frozenset(_outcome_values(action, pa))) for atom in gamma),
            fixed, tuple(sorted(action.equal)), tuple(sorted(action.distinct)), {},
            (_shapes(gamma), _shapes(fixed), _shapes(action.pre_pos),
             _shapes(action.pre_neg)))
    return facts


def explain(domain: Domain, ground_action: GroundAction, state: frozenset[GroundAtom],
            next_state: frozenset[GroundAtom], declared: bool | None = None) -> Inconsistency:
    """Apply Table 2 to every pa-tuple of the action (slow path, for inconsistencies only).

    Where repeated objects make several atoms of the action name one ground atom, Table 2
    is applied to them jointly under PDDL semantics (:func:`joint_explains`): a pa-tuple is
    contradicted only if no values of its partners explain the transition, and the ground
    atom is listed in ``entangled``.
    """
    facts = _facts(domain, ground_action[0])
    action = facts.action
    grounding = _grounding(facts, ground_action)
    violated = grounding.violated
    applicable = not violated and all(g in state for g in grounding.pre_pos) and (
        not any(g in state for g in grounding.pre_neg))
    changed = state ^ next_state
    # ``declared``: the producer's word for an unchanged state (check_declared).
    executed: bool | None = True if changed else (
        declared if declared is not None else (None if applicable else False))
    entangled = grounding.entangled
    known = grounding.possible
    contradicted: list[PaContradiction] = []
    candidates: list[PaContradiction] = []
    for i, (atom, pa, current, outcomes, g, free, fixed) in enumerate(grounding.atoms):
        presence = (g in state, g in next_state)
        if free is not None:
            possible = known.get((i, presence))
            if possible is None:
                possible = known[i, presence] = _entangled_possible(
                    action, atom, free, fixed, presence)
            ruled_out = current not in possible
        else:
            possible = _PRESENCES[presence]
            ruled_out = not (outcomes & possible)
        if executed is not False and ruled_out:
            contradicted.append(PaContradiction(pa, g, current, possible))
        if (executed is None or (executed is False and applicable)) \
                and current[0] is Mode.ABSENT:
            blocking = Mode.NEG if g in state else Mode.POS
            allowed = frozenset(v for v in possible if v[0] is blocking) or frozenset(
                {(blocking, Mode.ABSENT)})
            candidates.append(PaContradiction(pa, g, current, allowed))
    return Inconsistency(
        action=ground_action,
        executed=executed,
        contradicted=tuple(contradicted),
        missing_precondition_candidates=tuple(candidates),
        # difference(), not "-": frozenset - dict_keys is a set (dict_keys.__rsub__), which
        # mypyc, trusting the declared frozenset, refuses at run time.
        unexplained_atoms=frozenset(changed).difference(grounding.named),
        entangled=entangled,
        violated_constraints=violated,
    )
