"""Immutable, typed symbolic models: predicates, lifted actions with outcomes, domains, problems.

A lifted atom names its arguments by the action's parameter names (``?x``) or by
constants; a ground atom is a plain tuple ``(predicate, obj, ...)`` because that is
what a JSON decoder hands over and tuples hash fast.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from capwatch.model.errors import ModelError

GroundAtom = tuple[str, ...]
"""``("on", "a", "b")``: predicate name followed by object names."""

GroundAction = tuple[str, ...]
"""``("stack", "a", "b")``: action name followed by object names."""

ROOT_TYPE = "object"
PROBABILITY_TOLERANCE = 1e-6
NUMBER_TYPE = "number"


def either_type(members: Iterable[str]) -> str:
    """The canonical name of PDDL's union type ``(either a b)``: members sorted, no repeats.

    A union is kept as one type name so that a parameter still has exactly one type
    everywhere (pal-tuples, JSON, the writer); :class:`TypeHierarchy` understands it.
    """
    names = sorted(set(members))
    return names[0] if len(names) == 1 else f"(either {' '.join(names)})"


def type_members(t: str) -> tuple[str, ...]:
    """``(either a b)`` -> ``("a", "b")``; a plain type is its own only member."""
    if t.startswith("(either ") and t.endswith(")"):
        return tuple(t[len("(either "):-1].split())
    return (t,)


@dataclass(frozen=True, slots=True, order=True)
class Parameter:
    name: str
    type: str = ROOT_TYPE


@dataclass(frozen=True, slots=True, order=True)
class Predicate:
    name: str
    parameters: tuple[Parameter, ...] = ()

    @property
    def arity(self) -> int:
        return len(self.parameters)


@dataclass(frozen=True, slots=True, order=True)
class LiftedAtom:
    """A predicate applied to action parameters (``?x``) or constants."""

    predicate: str
    args: tuple[str, ...] = ()

    def ground(self, binding: Mapping[str, str]) -> GroundAtom:
        return (self.predicate, *(binding.get(a, a) for a in self.args))

    def __str__(self) -> str:
        return f"({' '.join((self.predicate, *self.args))})"


@dataclass(frozen=True, slots=True, order=True)
class Function:
    """A declared numeric function such as ``(road-length ?a ?b - location) - number``.

    Functions carry action costs only: metadata that is read, kept and written back,
    never part of a state, a pal-tuple or a consistency check.
    """

    name: str
    parameters: tuple[Parameter, ...] = ()
    type: str = NUMBER_TYPE


NumericValue = float | LiftedAtom
"""A number or a function term such as ``(road-length ?from ?to)``."""


@dataclass(frozen=True, slots=True)
class NumericEffect:
    """``(increase (total-cost) 1)``: an action-cost effect, kept as metadata."""

    target: LiftedAtom
    value: NumericValue
    operation: str = "increase"

    def sort_key(self) -> tuple[LiftedAtom, str, str]:
        return (self.target, self.operation, str(self.value))


@dataclass(frozen=True, slots=True)
class Outcome:
    """One effect branch: what becomes true, what becomes false, and how likely."""

    add: frozenset[LiftedAtom] = frozenset()
    delete: frozenset[LiftedAtom] = frozenset()
    probability: float = 1.0

    def sort_key(self) -> tuple[float, tuple[LiftedAtom, ...], tuple[LiftedAtom, ...]]:
        return (-self.probability, tuple(sorted(self.add)), tuple(sorted(self.delete)))

    @property
    def is_noop(self) -> bool:
        return not self.add and not self.delete


def normalise_outcomes(outcomes: Iterable[Outcome]) -> tuple[Outcome, ...]:
    """Merge outcomes with identical effects and order them canonically.

    Two branches with the same add and delete sets are indistinguishable to an
    observer, so keeping them apart would only make equality depend on file layout.
    """
    merged: dict[tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]], float] = {}
    for o in outcomes:
        key = (o.add, o.delete)
        merged[key] = merged.get(key, 0.0) + o.probability
    result = [Outcome(add, delete, round(p, 12)) for (add, delete), p in merged.items() if p > 0]
    result.sort(key=Outcome.sort_key)
    return tuple(result)


@dataclass(frozen=True, slots=True)
class Action:
    """A lifted action: typed parameters, a conjunctive precondition, and outcomes."""

    name: str
    parameters: tuple[Parameter, ...]
    pre_pos: frozenset[LiftedAtom] = frozenset()
    pre_neg: frozenset[LiftedAtom] = frozenset()
    outcomes: tuple[Outcome, ...] = (Outcome(),)
    equal: frozenset[tuple[str, str]] = frozenset()
    """Static constraints ``(= ?a ?b)``: pairs of parameters or constants that must name the
    same object. Not learned and not pal-tuples; a grounding that breaks one can never apply."""
    distinct: frozenset[tuple[str, str]] = frozenset()
    """Static constraints ``(not (= ?a ?b))``: pairs that must name different objects."""
    numeric: tuple[NumericEffect, ...] = ()
    """Action-cost effects, metadata only."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcomes", normalise_outcomes(self.outcomes))
        object.__setattr__(self, "equal", frozenset(_pair(*p) for p in self.equal))
        object.__setattr__(self, "distinct", frozenset(_pair(*p) for p in self.distinct))
        object.__setattr__(self, "numeric",
                           tuple(sorted(self.numeric, key=NumericEffect.sort_key)))
        total = sum(o.probability for o in self.outcomes)
        if not self.outcomes or abs(total - 1.0) > PROBABILITY_TOLERANCE:
            raise ModelError(f"action {self.name}: outcome probabilities sum to {total}, not 1")
        names = [p.name for p in self.parameters]
        if len(set(names)) != len(names):
            raise ModelError(f"action {self.name}: repeated parameter name")

    @property
    def arity(self) -> int:
        return len(self.parameters)

    @property
    def is_deterministic(self) -> bool:
        return len(self.outcomes) == 1

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def header(self) -> str:
        return f"{self.name}({' '.join(self.parameter_names)})"

    @property
    def has_static_constraints(self) -> bool:
        return bool(self.equal or self.distinct)

    def admits(self, args: Sequence[str]) -> bool:
        """Whether the objects ``args`` (in parameter order) satisfy the action's equality
        and inequality constraints; a grounding that does not can never be applicable."""
        if not self.equal and not self.distinct:
            return True
        return self.admits_binding(dict(zip(self.parameter_names, args, strict=True)))

    def admits_binding(self, binding: Mapping[str, str]) -> bool:
        """:meth:`admits` for a parameter binding; names not bound are constants."""
        return all(binding.get(a, a) == binding.get(b, b) for a, b in self.equal) and all(
            binding.get(a, a) != binding.get(b, b) for a, b in self.distinct)

    def all_atoms(self) -> frozenset[LiftedAtom]:
        atoms: set[LiftedAtom] = set(self.pre_pos | self.pre_neg)
        for o in self.outcomes:
            atoms |= o.add | o.delete
        return frozenset(atoms)

    def replace(self, **changes: Any) -> Action:
        return dataclasses.replace(self, **changes)


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True, slots=True)
class TypeHierarchy:
    """Declared types and their parents; every type descends from ``object``."""

    parents: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "parents", MappingProxyType(dict(self.parents)))

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.parents.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TypeHierarchy) and dict(self.parents) == dict(other.parents)

    @property
    def names(self) -> frozenset[str]:
        return frozenset({ROOT_TYPE, *self.parents, *self.parents.values()})

    def ancestors(self, t: str) -> tuple[str, ...]:
        """``t`` and its ancestors up to ``object``; for a union, the union and the
        ancestors its members share."""
        members = type_members(t)
        if len(members) > 1:
            common = [a for a in self.ancestors(members[0])
                      if all(a in self.ancestors(m) for m in members[1:])]
            return (t, *common)
        chain = [t]
        seen = {t}
        while chain[-1] in self.parents:
            parent = self.parents[chain[-1]]
            if parent in seen:
                raise ModelError(f"type hierarchy has a cycle through {parent!r}")
            seen.add(parent)
            chain.append(parent)
        if chain[-1] != ROOT_TYPE:
            chain.append(ROOT_TYPE)
        return tuple(chain)

    def is_subtype(self, t: str, of: str) -> bool:
        """Every object of type ``t`` is of type ``of`` (both may be unions)."""
        if of in (ROOT_TYPE, t):
            return True
        targets = type_members(of)
        return all(any(x in self.ancestors(m) for x in targets) for m in type_members(t))


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    predicates: tuple[Predicate, ...]
    actions: tuple[Action, ...]
    types: TypeHierarchy = field(default_factory=TypeHierarchy)
    constants: tuple[Parameter, ...] = ()
    requirements: tuple[str, ...] = field(default=(), compare=False)
    functions: tuple[Function, ...] = ()
    """Declared numeric functions (action costs): metadata, see :class:`Function`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "predicates", tuple(sorted(self.predicates)))
        object.__setattr__(self, "functions", tuple(sorted(self.functions)))
        object.__setattr__(self, "actions", tuple(sorted(self.actions, key=lambda a: a.name)))
        object.__setattr__(self, "constants", tuple(sorted(self.constants)))
        seen: set[str] = set()
        for a in self.actions:
            if a.name in seen:
                raise ModelError(f"domain {self.name}: action {a.name} defined twice")
            seen.add(a.name)

    @property
    def predicate_map(self) -> dict[str, Predicate]:
        return {p.name: p for p in self.predicates}

    @property
    def action_map(self) -> dict[str, Action]:
        return {a.name: a for a in self.actions}

    def action(self, name: str) -> Action:
        for a in self.actions:
            if a.name == name:
                return a
        raise KeyError(name)

    @property
    def is_probabilistic(self) -> bool:
        return any(not a.is_deterministic for a in self.actions)

    def union_types(self) -> frozenset[str]:
        """The ``(either ...)`` types used by predicates, actions or constants."""
        params = [*self.constants, *(p for x in self.predicates for p in x.parameters),
                  *(p for a in self.actions for p in a.parameters),
                  *(p for f in self.functions for p in f.parameters)]
        return frozenset(p.type for p in params if len(type_members(p.type)) > 1)

    def replace_action(self, action: Action) -> Domain:
        actions = tuple(action if a.name == action.name else a for a in self.actions)
        return self.replace(actions=actions)

    def replace(self, **changes: Any) -> Domain:
        return dataclasses.replace(self, **changes)

    def without_action_literals(self) -> Domain:
        """Drop pddlgym-style action literals such as ``(move-car ?from ?to)``.

        pddlgym puts a predicate named like the action into its precondition to mark
        which action was chosen; no real agent reports such atoms in its state, so a
        monitor that kept them would see every transition as inconsistent.
        """
        action_names = {a.name for a in self.actions}
        actions = []
        for a in self.actions:
            lit = LiftedAtom(a.name, a.parameter_names)
            actions.append(a.replace(pre_pos=a.pre_pos - {lit}))
        used = {atom.predicate for a in actions for atom in a.all_atoms()}
        predicates = tuple(
            p for p in self.predicates if p.name not in action_names or p.name in used
        )
        return self.replace(actions=tuple(actions), predicates=predicates)


@dataclass(frozen=True, slots=True)
class Problem:
    name: str
    domain_name: str
    objects: tuple[Parameter, ...]
    init: frozenset[GroundAtom]
    goal_pos: frozenset[GroundAtom] = frozenset()
    goal_neg: frozenset[GroundAtom] = frozenset()
    numeric_init: tuple[tuple[GroundAtom, float], ...] = ()
    """``(= (road-length a b) 3)`` facts: action-cost metadata, not part of any state."""
    metric: str = ""
    """The ``:metric`` as written, e.g. ``minimize (total-cost)``; empty if none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "objects", tuple(sorted(self.objects)))
        object.__setattr__(self, "numeric_init", tuple(sorted(self.numeric_init)))

    def objects_by_type(self, domain: Domain) -> dict[str, tuple[str, ...]]:
        """Objects (and domain constants) grouped under every type they belong to, and
        under every union type ``(either ...)`` the domain uses."""
        result: dict[str, list[str]] = {}
        for obj in (*domain.constants, *self.objects):
            for t in domain.types.ancestors(obj.type):
                result.setdefault(t, []).append(obj.name)
        for union in domain.union_types():
            members = set(type_members(union))
            result[union] = [n for m in members for n in result.get(m, [])]
        return {t: tuple(sorted(set(v))) for t, v in result.items()}


def check_probability(p: float, where: str) -> float:
    if not math.isfinite(p) or p < 0 or p > 1 + PROBABILITY_TOLERANCE:
        raise ModelError(f"{where}: probability {p} is not in [0, 1]")
    return p
