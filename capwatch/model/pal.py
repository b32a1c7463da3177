"""Pal-tuples, modes, abstract models and model distance (papers/daaisy.md §2.1).

Γ holds, for every action, every lifted instantiation of every predicate over the
action's parameters with types respected and **no parameter repeated** inside one
atom, at both locations (pre, eff). That reading reproduces the paper's #Pals
(gripper 20, miconic 36, blocksworld 52); allowing repeats would give 24/40/68.
Atoms that mention constants or repeat a parameter stay in the model but lie outside Γ.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from capwatch.model.domain import Action, Domain, LiftedAtom, Outcome
from capwatch.model.errors import ModelError


class Mode(enum.Enum):
    POS = "+"
    NEG = "-"
    ABSENT = "0"
    UNKNOWN = "?"

    def __str__(self) -> str:
        return "∅" if self is Mode.ABSENT else self.value


class Location(enum.Enum):
    PRE = "pre"
    EFF = "eff"

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Location):
            return NotImplemented
        return self.value > other.value  # "pre" sorts before "eff"


@dataclass(frozen=True, slots=True, order=True)
class PalTuple:
    action: str
    atom: LiftedAtom
    location: Location

    def __str__(self) -> str:
        return f"⟨{self.atom}, {self.action}, {self.location.value}⟩"

    @property
    def pa(self) -> PaTuple:
        return PaTuple(self.action, self.atom)


@dataclass(frozen=True, slots=True, order=True)
class PaTuple:
    action: str
    atom: LiftedAtom

    def pal(self, location: Location) -> PalTuple:
        return PalTuple(self.action, self.atom, location)


PaValue = tuple[Mode, Mode]
"""⟨m_pre, m_eff⟩."""

CONCRETE_MODES = (Mode.POS, Mode.NEG, Mode.ABSENT)
LEGAL_PA_VALUES: tuple[PaValue, ...] = tuple(
    (pre, eff) for pre in CONCRETE_MODES for eff in CONCRETE_MODES
    if not (pre is eff and pre is not Mode.ABSENT)
)
"""The 7 legal values: ⟨+,+⟩ and ⟨−,−⟩ are excluded (an effect that restates a precondition)."""

Presence = tuple[bool, bool]
"""Whether the grounded atom is true before and after an executed transition."""

# Table 2 of the DAAISy paper: which pa-values an executed triplet allows.
_TABLE2: dict[PaValue, frozenset[Presence]] = {
    (Mode.POS, Mode.NEG): frozenset({(True, False)}),
    (Mode.POS, Mode.ABSENT): frozenset({(True, True)}),
    (Mode.NEG, Mode.POS): frozenset({(False, True)}),
    (Mode.NEG, Mode.ABSENT): frozenset({(False, False)}),
    (Mode.ABSENT, Mode.POS): frozenset({(True, True), (False, True)}),
    (Mode.ABSENT, Mode.NEG): frozenset({(True, False), (False, False)}),
    (Mode.ABSENT, Mode.ABSENT): frozenset({(True, True), (False, False)}),
}


def pa_values_consistent_with(presence: Presence) -> frozenset[PaValue]:
    """Pa-values that an executed transition with this presence pattern allows (Table 2)."""
    return frozenset(v for v, ok in _TABLE2.items() if presence in ok)


def lifted_instantiations(domain: Domain, action: Action) -> Iterator[LiftedAtom]:
    """P* for one action: predicates over distinct, type-compatible action parameters.

    Backtracking over the type-compatible parameters of each argument position, so the
    work is proportional to the atoms produced (``itertools.permutations`` would visit
    every ordered choice of parameters, astronomically many for a wide action). Order is
    the same: lexicographic in parameter positions.
    """
    params = action.parameters
    is_subtype = domain.types.is_subtype
    for pred in domain.predicates:
        choices = [[i for i, p in enumerate(params) if is_subtype(p.type, q.type)]
                   for q in pred.parameters]
        if any(not c for c in choices):
            continue
        chosen: list[int] = []
        stack = [iter(choices[0])] if choices else []
        if not choices:
            yield LiftedAtom(pred.name, ())
            continue
        while stack:
            i = next(stack[-1], None)
            if i is None:
                stack.pop()
                if chosen:
                    chosen.pop()
                continue
            if i in chosen:
                continue
            if len(chosen) + 1 == len(choices):
                yield LiftedAtom(pred.name, tuple(params[j].name for j in (*chosen, i)))
                continue
            chosen.append(i)
            stack.append(iter(choices[len(chosen)]))


class TooManyPalTuples(ModelError):
    """A domain whose Γ is larger than capwatch is willing to hold."""


DEFAULT_MAX_PAL_TUPLES = 200_000
"""Far above the largest real domains (freecell 2,668; a household domain 6,116), far
below what would exhaust memory or hang: an action with 40 untyped parameters and a
5-ary predicate alone would have 2 * 40*39*38*37*36 = 158 million."""


def count_pal_tuples(domain: Domain, limit: int = DEFAULT_MAX_PAL_TUPLES) -> int:
    """|Γ|, or :class:`TooManyPalTuples` naming the action at which it passes ``limit``."""
    total = 0
    for action in domain.actions:
        for _ in lifted_instantiations(domain, action):
            total += 2
            if total > limit:
                raise TooManyPalTuples(
                    f"action {action.name} ({action.arity} parameters) takes the model past "
                    f"{limit} pal-tuples; capwatch refuses models this large")
    return total


def pal_tuples(domain: Domain) -> tuple[PalTuple, ...]:
    return tuple(
        PalTuple(a.name, atom, loc)
        for a in domain.actions
        for atom in lifted_instantiations(domain, a)
        for loc in (Location.PRE, Location.EFF)
    )


def stated_modes(domain: Domain) -> dict[PalTuple, Mode]:
    """The pal-tuples of Γ whose mode is not ∅, from the atoms the actions state: what
    :meth:`AbstractModel.from_domain` gives less its ∅ entries, so that ``mode_changes``
    of two such maps equals that of the full ones (which reads a missing pal-tuple as ∅).
    Costs the atoms an action names, not |Γ|: enumerating Γ was most of comparing one
    model with another (the drift gauges' first read: ~3 ms a model of its own, cProfile;
    docs/performance.md, "The drift gauges' store read")."""
    preds = {p.name: p for p in domain.predicates}
    is_subtype = domain.types.is_subtype
    out: dict[PalTuple, Mode] = {}
    for action in domain.actions:
        types = {p.name: p.type for p in action.parameters}
        stated = set(action.pre_pos) | set(action.pre_neg)
        for o in action.outcomes:
            stated |= o.add | o.delete
        for atom in stated:
            # In Γ (lifted_instantiations): a predicate of the domain over distinct action
            # parameters (no constants), each of a type the predicate takes.
            pred = preds.get(atom.predicate)
            if pred is None or len(pred.parameters) != len(atom.args) \
                    or len(set(atom.args)) != len(atom.args) \
                    or not all(a in types and is_subtype(types[a], q.type)
                               for a, q in zip(atom.args, pred.parameters, strict=True)):
                continue
            pre = pre_mode(action, atom)
            if pre is not Mode.ABSENT:
                out[PalTuple(action.name, atom, Location.PRE)] = pre
            eff = eff_mode(action, atom)
            if eff is not Mode.ABSENT:
                out[PalTuple(action.name, atom, Location.EFF)] = eff
    return out


def pre_mode(action: Action, atom: LiftedAtom) -> Mode:
    if atom in action.pre_pos:
        return Mode.POS
    if atom in action.pre_neg:
        return Mode.NEG
    return Mode.ABSENT


def eff_mode(action: Action, atom: LiftedAtom) -> Mode:
    """Add wins over delete, as in PDDL's delete-then-add semantics; for a probabilistic
    action the mode summarises all branches (an atom added by some branch is ``+``)."""
    if any(atom in o.add for o in action.outcomes):
        return Mode.POS
    if any(atom in o.delete for o in action.outcomes):
        return Mode.NEG
    return Mode.ABSENT


def _place(atom: LiftedAtom, mode: Mode, pos: frozenset[LiftedAtom],
           neg: frozenset[LiftedAtom]) -> tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]]:
    """``pos`` and ``neg`` with ``atom`` only in the one ``mode`` names (in neither for ∅, ?)."""
    pos, neg = pos - {atom}, neg - {atom}
    if mode is Mode.POS:
        pos |= {atom}
    elif mode is Mode.NEG:
        neg |= {atom}
    return pos, neg


def _set_pre(action: Action, atom: LiftedAtom, mode: Mode) -> Action:
    pos, neg = _place(atom, mode, action.pre_pos, action.pre_neg)
    return action.replace(pre_pos=pos, pre_neg=neg)


def _set_eff(action: Action, atom: LiftedAtom, mode: Mode) -> Action:
    outcomes = tuple(Outcome(*_place(atom, mode, o.add, o.delete), o.probability)
                     for o in action.outcomes)
    return action.replace(outcomes=outcomes)


@dataclass(frozen=True)
class AbstractModel:
    """A mode for every pal-tuple of a domain's Γ, possibly ``?`` (unknown).

    ``base`` supplies what Γ cannot express (action headers, predicates, atoms with
    constants, outcome probabilities) when turning the model back into a domain.
    """

    base: Domain
    modes: Mapping[PalTuple, Mode]

    def __post_init__(self) -> None:
        object.__setattr__(self, "modes", MappingProxyType(dict(self.modes)))

    def __hash__(self) -> int:
        return hash(frozenset(self.modes.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AbstractModel) and dict(self.modes) == dict(other.modes)

    @classmethod
    def from_domain(cls, domain: Domain) -> AbstractModel:
        actions = domain.action_map
        modes: dict[PalTuple, Mode] = {}
        for pal in pal_tuples(domain):
            act = actions[pal.action]
            modes[pal] = (pre_mode if pal.location is Location.PRE else eff_mode)(act, pal.atom)
        return cls(domain, modes)

    @property
    def pals(self) -> tuple[PalTuple, ...]:
        return tuple(self.modes)

    def mode(self, pal: PalTuple) -> Mode:
        return self.modes[pal]

    def pa_value(self, pa: PaTuple) -> PaValue:
        return (self.modes[pa.pal(Location.PRE)], self.modes[pa.pal(Location.EFF)])

    def pa_tuples(self) -> tuple[PaTuple, ...]:
        return tuple(p.pa for p in self.modes if p.location is Location.PRE)

    def unknown(self) -> frozenset[PalTuple]:
        return frozenset(p for p, m in self.modes.items() if m is Mode.UNKNOWN)

    @property
    def is_concrete(self) -> bool:
        return not self.unknown()

    def illegal_pa_tuples(self) -> list[PaTuple]:
        return [pa for pa in self.pa_tuples() if self.pa_value(pa) in
                ((Mode.POS, Mode.POS), (Mode.NEG, Mode.NEG))]

    def with_modes(self, changes: Mapping[PalTuple, Mode] | Iterable[tuple[PalTuple, Mode]]
                   ) -> AbstractModel:
        new = dict(self.modes)
        items = changes.items() if isinstance(changes, Mapping) else changes
        for pal, mode in items:
            if pal not in new:
                raise KeyError(f"{pal} is not a pal-tuple of domain {self.base.name}")
            new[pal] = mode
        return AbstractModel(self.base, new)

    def abstract(self, pals: Iterable[PalTuple]) -> AbstractModel:
        return self.with_modes((p, Mode.UNKNOWN) for p in pals)

    def to_domain(self) -> Domain:
        """The concrete domain; pal-tuples whose mode equals the base's keep the base's
        exact structure, so probabilistic branches survive a partial update."""
        if not self.is_concrete:
            raise ValueError("an abstract model with unknown modes has no single domain")
        base_modes = AbstractModel.from_domain(self.base).modes
        actions = {a.name: a for a in self.base.actions}
        for pal, mode in self.modes.items():
            if base_modes[pal] is mode:
                continue
            act = actions[pal.action]
            if pal.location is Location.PRE:
                actions[pal.action] = _set_pre(act, pal.atom, mode)
            else:
                actions[pal.action] = _set_eff(act, pal.atom, mode)
        return self.base.replace(actions=tuple(actions.values()))

    def diff(self, other: AbstractModel) -> list[tuple[PalTuple, Mode, Mode]]:
        """Pal-tuples whose modes differ, with (mine, theirs); Γ must be the same."""
        if self.modes.keys() != other.modes.keys():
            raise ValueError("models over different pal-tuple sets cannot be compared")
        return sorted(((p, m, other.modes[p]) for p, m in self.modes.items()
                       if other.modes[p] is not m), key=lambda c: c[0])

    def delta(self, other: AbstractModel) -> int:
        return len(self.diff(other))

    def accuracy(self, truth: AbstractModel) -> float:
        return 1.0 - self.delta(truth) / len(self.modes) if self.modes else 1.0


def delta(a: Domain, b: Domain) -> int:
    """Δ(M1, M2): how many pal-tuples have different modes."""
    return AbstractModel.from_domain(a).delta(AbstractModel.from_domain(b))


def describe_change(pal: PalTuple, old: Mode, new: Mode, action: Action) -> str:
    """One phrase in the model's vocabulary, e.g. ``now requires (battery_full ?r)``."""
    lit = str(pal.atom)
    neg = f"(not {lit})"
    if pal.location is Location.PRE:
        words = {Mode.POS: f"requires {lit}", Mode.NEG: f"requires {neg}"}
        if new is Mode.ABSENT:
            return f"no longer {words.get(old, 'constrains ' + lit)}"
        if old is Mode.ABSENT:
            return f"now {words[new]}"
        return f"now {words[new]} instead of {words.get(old, '?')}"
    words = {Mode.POS: f"makes {lit} true", Mode.NEG: f"makes {lit} false"}
    if new is Mode.ABSENT:
        return f"no longer {words.get(old, 'changes ' + lit)}"
    if old is Mode.ABSENT:
        return f"now {words[new]}"
    return f"now {words[new]} instead of {words.get(old, '?')}"


def summarise_changes(changes: Iterable[tuple[PalTuple, Mode, Mode]], domain: Domain) -> list[str]:
    """One line per action: ``pick(?o ?r ?g) now requires (free ?g); no longer ...``."""
    by_action: dict[str, list[str]] = {}
    actions = domain.action_map
    # Preconditions first: "now requires ..." is what an operator reads first.
    for pal, old, new in sorted(changes, key=lambda c: (c[0].action,
                                                        c[0].location is not Location.PRE, c[0])):
        by_action.setdefault(pal.action, []).append(describe_change(pal, old, new,
                                                                    actions[pal.action]))
    return [f"{actions[name].header()} {'; '.join(parts)}" for name, parts in by_action.items()]
