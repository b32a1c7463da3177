"""The set of pa-values still possible for every pa-tuple, narrowed by evidence.

Instead of the papers' pal-by-pal lattice of abstract models, the engine keeps, for
each pa-tuple ⟨p, a⟩, the subset of its 7 legal values ⟨m_pre, m_eff⟩ that every
observation and query answer so far allows. Two kinds of evidence narrow it:

* an executed step, where the grounded atom was seen before and after: Table 2
  (papers/daaisy.md) keeps only the values consistent with that presence pattern;
* a failed step: *some* precondition literal was violated. That is a clause over the
  action's pa-tuples; when only one of its literals is still possible, the clause fixes
  that pa-tuple's precondition mode (unit propagation).

Because pa-tuples of one action are independent given the state, the intersection is
exact: a value is removed only when some evidence contradicts it. A set that becomes
empty means the agent is not a deterministic STRIPS agent over this vocabulary (or the
evidence is corrupt); the offending evidence is then rejected and reported, never
silently absorbed.

The exception is an action the known model makes probabilistic: a step of it ran one
outcome, so its values after say nothing about the others. Its steps are read per outcome
(:mod:`capwatch.assess.outcomes`), and its pa-tuples' effect modes are set from what the
outcomes allow together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from capwatch.assess.outcomes import OutcomeRecord, OutcomeSpace
from capwatch.model.pal import (
    LEGAL_PA_VALUES,
    AbstractModel,
    Location,
    Mode,
    PaTuple,
    PaValue,
    pa_values_consistent_with,
)

ValueMask = int
"""Bit i set: LEGAL_PA_VALUES[i] is still possible."""

ALL_VALUES: ValueMask = (1 << len(LEGAL_PA_VALUES)) - 1
_INDEX = {v: i for i, v in enumerate(LEGAL_PA_VALUES)}


def mask_of(values: Iterable[PaValue]) -> ValueMask:
    """Illegal values (⟨+,+⟩, ⟨−,−⟩, which a hand-written model may contain) map to no bit."""
    m = 0
    for v in values:
        i = _INDEX.get(v)
        if i is not None:
            m |= 1 << i
    return m


def values_of(mask: ValueMask) -> list[PaValue]:
    return [v for i, v in enumerate(LEGAL_PA_VALUES) if mask >> i & 1]


def _mask_where(pred: object) -> ValueMask:
    return mask_of(v for v in LEGAL_PA_VALUES if pred(v))  # type: ignore[operator]


TABLE2: dict[tuple[bool, bool], ValueMask] = {
    (b, a): mask_of(pa_values_consistent_with((b, a)))
    for b in (True, False) for a in (True, False)
}
PRE_POS: ValueMask = _mask_where(lambda v: v[0] is Mode.POS)
PRE_NEG: ValueMask = _mask_where(lambda v: v[0] is Mode.NEG)
PRE_ABSENT: ValueMask = _mask_where(lambda v: v[0] is Mode.ABSENT)


def violating(value: bool | None) -> ValueMask:
    """Values whose precondition literal is violated when the atom has this truth value."""
    if value is None:
        return PRE_POS | PRE_NEG
    return PRE_NEG if value else PRE_POS


def predicted_post(v: PaValue, before: bool) -> bool:
    """The atom's value after an executed step, under pa-value v."""
    if v[1] is Mode.POS:
        return True
    if v[1] is Mode.NEG:
        return False
    return before


def is_single(mask: ValueMask) -> bool:
    return mask != 0 and mask & (mask - 1) == 0


def modes_of(mask: ValueMask) -> PaValue:
    """⟨m_pre, m_eff⟩ where each mode is fixed by the mask, ``?`` where it is not."""
    vals = values_of(mask)
    pres = {v[0] for v in vals}
    effs = {v[1] for v in vals}
    return (pres.pop() if len(pres) == 1 else Mode.UNKNOWN,
            effs.pop() if len(effs) == 1 else Mode.UNKNOWN)


@dataclass(slots=True)
class Clause:
    """A failed step: at least one of these precondition literals is in the true model."""

    action: str
    literals: tuple[tuple[PaTuple, bool | None], ...]
    """(pa-tuple, truth value of its grounded atom when the step failed; None if unseen)."""
    evidence: str
    closed: bool = False


@dataclass(frozen=True, slots=True)
class Conflict:
    pa: PaTuple | None
    evidence: str
    reason: str


@dataclass(slots=True)
class VersionSpace:
    """Possible pa-values per pa-tuple, with the evidence that removed the others."""

    masks: dict[PaTuple, ValueMask]
    evidence: dict[PaTuple, list[str]] = field(default_factory=dict)
    clauses: list[Clause] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    executed_actions: set[str] = field(default_factory=set)
    """Actions seen executing at least once: only then does every atom have a safe value."""
    version: dict[str, int] = field(default_factory=dict)
    """Per action, bumped whenever its evidence changes: probe designs are cached on it."""
    outcomes: dict[str, OutcomeSpace] = field(default_factory=dict)
    """Probabilistic actions: their steps are read per outcome (:mod:`capwatch.assess.
    outcomes`), and their pa-tuples' effect modes follow from what the outcomes allow."""

    def touch(self, action: str) -> None:
        self.version[action] = self.version.get(action, 0) + 1

    @classmethod
    def open(cls, model: AbstractModel) -> VersionSpace:
        return cls({pa: ALL_VALUES for pa in model.pa_tuples()})

    def mask(self, pa: PaTuple) -> ValueMask:
        return self.masks[pa]

    def resolved(self, pa: PaTuple) -> bool:
        return is_single(self.masks[pa])

    def restrict(self, pa: PaTuple, allowed: ValueMask, evidence: str) -> bool:
        """Intersect; an empty result is a conflict and leaves the set unchanged."""
        old = self.masks[pa]
        new = old & allowed
        if new == old:
            return False
        if new == 0:
            self.conflicts.append(Conflict(pa, evidence, "no legal value is consistent with "
                                                         "this and the earlier evidence"))
            return False
        self.masks[pa] = new
        self.evidence.setdefault(pa, []).append(evidence)
        self.touch(pa.action)
        return True

    def executed(self, action: str, seen: Mapping[PaTuple, tuple[bool | None, bool | None]],
                 evidence: str, answer: int | None = None) -> None:
        """An executed step: per pa-tuple, the atom's value before and after (None: unseen).
        ``answer``: the query whose answer showed it (None: an observed step)."""
        if action not in self.executed_actions:
            self.touch(action)
        self.executed_actions.add(action)
        space = self.outcomes.get(action)
        if space is not None:
            self._executed_outcome(space, seen, evidence, answer)
            return
        for pa, (before, after) in seen.items():
            if before is None:
                continue
            allowed = ~violating(before) & ALL_VALUES if after is None else TABLE2[(before,
                                                                                  after)]
            self.restrict(pa, allowed, evidence)
        self.propagate()

    def _executed_outcome(self, space: OutcomeSpace,
                          seen: Mapping[PaTuple, tuple[bool | None, bool | None]],
                          evidence: str, answer: int | None) -> None:
        """A step of a probabilistic action: the values before narrow the preconditions
        as for any action; the values after narrow only the outcome that ran, and each
        pa-tuple's effect mode is then whatever the outcomes allow together. That can
        widen it again when the step shows an outcome not seen before, so the masks are
        set, not intersected (the preconditions stay as narrowed)."""
        for pa, (before, _) in seen.items():
            if before is not None:
                self.restrict(pa, ~violating(before) & ALL_VALUES, evidence)
        space.executed(seen, answer)
        # After every step, not only one that narrowed an outcome: the count of steps
        # alone can retire a known outcome that stopped showing (OutcomeSpace.live).
        for pa in space.pas:
            old = self.masks[pa]
            pres = {v[0] for v in values_of(old)}
            new = mask_of(v for v in LEGAL_PA_VALUES
                          if v[0] in pres and v[1] in space.effects(pa, v[0]))
            if new != old and new:
                self.masks[pa] = new
                self.evidence.setdefault(pa, []).append(evidence)
                self.touch(pa.action)
        self.propagate()

    def after(self, pa: PaTuple, before: bool) -> bool | None:
        """The atom's value after a step that ran with it at ``before``, when every value
        still possible (and, for a probabilistic action, every outcome) agrees."""
        posts = {predicted_post(v, before)
                 for v in values_of(self.masks[pa] & ~violating(before))}
        if len(posts) != 1:
            return None
        post = posts.pop()
        space = self.outcomes.get(pa.action)
        if space is not None and space.after(pa, before) != post:
            return None
        return post

    def open_effects(self, action: str) -> list[tuple[OutcomeRecord, PaTuple]]:
        """Effects of a probabilistic action's outcomes that its steps left open
        (:meth:`OutcomeSpace.open_effects`), under the precondition modes still possible."""
        space = self.outcomes.get(action)
        if space is None:
            return []
        return space.open_effects(lambda pa: {v[0] for v in values_of(self.masks[pa])})

    def failed(self, action: str, seen: Mapping[PaTuple, bool | None], evidence: str) -> None:
        literals = tuple(seen.items())
        if any(c.action == action and c.literals == literals for c in self.clauses):
            return  # the same failure again teaches nothing
        self.clauses.append(Clause(action, literals, evidence))
        self.touch(action)
        self.propagate()

    def live_literals(self, clause: Clause) -> list[tuple[PaTuple, bool | None]]:
        return [(pa, v) for pa, v in clause.literals if self.masks[pa] & violating(v)]

    def propagate(self) -> None:
        changed = True
        while changed:
            changed = False
            for clause in self.clauses:
                if clause.closed:
                    continue
                live = self.live_literals(clause)
                if not live:
                    clause.closed = True
                    self.conflicts.append(Conflict(None, clause.evidence,
                                                   "the step failed although no precondition "
                                                   "literal can explain it"))
                elif len(live) == 1:
                    pa, v = live[0]
                    clause.closed = True
                    changed |= self.restrict(pa, violating(v), clause.evidence)
                elif any(self.masks[pa] & ~violating(v) == 0 for pa, v in live):
                    # One literal is already known to be a real precondition: the clause
                    # is satisfied and can teach nothing more.
                    clause.closed = True

    def open_clauses(self, action: str) -> list[Clause]:
        return [c for c in self.clauses if not c.closed and c.action == action]

    def modes(self, pa: PaTuple) -> PaValue:
        return modes_of(self.masks[pa])

    def location_resolved(self, pa: PaTuple, location: Location) -> bool:
        m = self.modes(pa)
        return (m[0] if location is Location.PRE else m[1]) is not Mode.UNKNOWN
