"""Probes (one designed action step) packed into plan-outcome queries, and reading answers.

A probe asks one action to run in a designed assignment of truth values to the action's
own atoms (its Γ instantiations), on freshly named objects. With distinct fresh objects
the atoms of one step are independent of every other step's atoms, so several probes can
share one query ⟨s_I, π⟩: π runs the probes one after another, each on its own objects,
and the answer ⟨n_F, s_F⟩ shows each executed step's before/after values and which step
failed. Steps that share a ground atom (0-ary predicates such as ``handempty``) are packed
together only while the earlier steps' effects on it are known.

Kinds of probe, by what the engine expects:
  safe     – must execute if the evidence so far is sound;
  risky    – expected to execute under the hypothesis, may fail (tests several atoms);
  fail     – expected to fail: confirms one precondition literal;
  split    – halves an open failure clause (adaptive group testing);
  explore  – looking for any state where a never-seen action executes.
Steps expected to fail go last: a failure ends the plan, so each query settles every
guess before its first real failure, plus that failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from capwatch.assess.agent import QueryResult
from capwatch.model.domain import Action, GroundAction, GroundAtom, LiftedAtom
from capwatch.model.pal import Mode, PaTuple

SAFE, RISKY, FAIL, SPLIT, EXPLORE = "safe", "risky", "fail", "split", "explore"
_FINAL_PRIORITY = {EXPLORE: 0, FAIL: 1, SPLIT: 2}


@dataclass(frozen=True, slots=True)
class Probe:
    action: str
    assignment: Mapping[LiftedAtom, bool]
    """Truth value of every Γ atom of the action in the designed state."""
    kind: str
    purpose: str
    risky: int = 0
    """How many atoms are set to a value that might violate a precondition."""


@dataclass(frozen=True, slots=True)
class Step:
    """A probe grounded on objects: what the engine needs to read the answer back."""

    probe: Probe
    ground_action: GroundAction
    atoms: Mapping[PaTuple, GroundAtom]


class ObjectFactory:
    """Fresh object names per type; the agent can be put in any state (G20)."""

    def __init__(self, taken: set[str], prefix: str = "q") -> None:
        self._taken = taken
        self._prefix = prefix
        self._count = 0

    def new(self, type_name: str) -> str:
        while True:
            self._count += 1
            name = f"{self._prefix}{type_name}{self._count}"
            if name not in self._taken:
                self._taken.add(name)
                return name


def ground_probe(probe: Probe, action: Action, objects: ObjectFactory) -> Step:
    args = tuple(objects.new(p.type) for p in action.parameters)
    binding = dict(zip(action.parameter_names, args, strict=True))
    atoms = {PaTuple(action.name, atom): atom.ground(binding) for atom in probe.assignment}
    return Step(probe, (action.name, *args), atoms)


@dataclass(slots=True)
class Query:
    state: frozenset[GroundAtom]
    steps: list[Step] = field(default_factory=list)

    @property
    def plan(self) -> list[GroundAction]:
        return [s.ground_action for s in self.steps]


EffectOf = Callable[[PaTuple], Mode]
"""The known effect mode of a pa-tuple, ``Mode.UNKNOWN`` while it is unresolved."""


def _after(effect: Mode, before: bool | None) -> bool | None:
    if effect is Mode.POS:
        return True
    if effect is Mode.NEG:
        return False
    if effect is Mode.ABSENT:
        return before
    return None


def pack(safe: Sequence[Probe], risky: Sequence[Probe], final: Sequence[Probe],
         actions: Mapping[str, Action], objects: ObjectFactory,
         effect: EffectOf = lambda pa: Mode.UNKNOWN) -> Query | None:
    """One query: safe steps, then risky ones, then the expected failures.

    Steps may share a ground atom (a 0-ary predicate such as ``handempty``) only when
    every earlier step's effect on it is known, so its value at each step is predictable
    and equals what that step's probe asks for; other probes wait for a later query.
    """
    value: dict[GroundAtom, bool | None] = {}
    steps: list[Step] = []
    state: set[GroundAtom] = set()

    def add(probe: Probe) -> bool:
        step = ground_probe(probe, actions[probe.action], objects)
        wanted = {g: probe.assignment[pa.atom] for pa, g in step.atoms.items()}
        if any(g in value and value[g] != v for g, v in wanted.items()):
            return False
        steps.append(step)
        for pa, g in step.atoms.items():
            if g not in value and wanted[g]:
                state.add(g)
            value[g] = _after(effect(pa), wanted[g])
        return True

    for probe in safe:
        add(probe)
    for probe in sorted(risky, key=lambda p: p.risky):
        add(probe)
    # Expected failures go last, as many as fit: the agent stops at the first real
    # failure, and every probe before it that ran was a wrong guess now settled, so a
    # query costs one failure however many guesses it clears.
    for probe in sorted(final, key=lambda p: _FINAL_PRIORITY[p.kind]):
        add(probe)
    if not steps:
        return None
    return Query(frozenset(state), steps)


Seen = dict[PaTuple, tuple[bool | None, bool | None]]


def read_answer(query: Query, answer: QueryResult, effect: EffectOf = lambda pa: Mode.UNKNOWN
                ) -> tuple[list[tuple[Step, Seen]], tuple[Step, dict[PaTuple, bool | None]] | None]:
    """Executed steps with each atom's value before/after, and the failed step if any.

    An atom's value before a step is known when every earlier step's effect on it is
    known; its value after a step is read from s_F when no later executed step touches
    it. Otherwise it is None (unseen) and the engine draws no conclusion from it.
    """
    n = min(answer.executed, len(query.steps))
    later_touch: list[set[GroundAtom]] = []
    acc: set[GroundAtom] = set()
    for step in reversed(query.steps[:n]):
        later_touch.append(set(acc))
        acc |= set(step.atoms.values())
    later_touch.reverse()
    current: dict[GroundAtom, bool | None] = {}

    def before(g: GroundAtom) -> bool | None:
        return current.get(g, g in query.state)

    result: list[tuple[Step, Seen]] = []
    for i, step in enumerate(query.steps[:n]):
        counts: dict[GroundAtom, int] = {}
        for g in step.atoms.values():
            counts[g] = counts.get(g, 0) + 1
        seen: Seen = {}
        for pa, g in step.atoms.items():
            if counts[g] > 1:
                seen[pa] = (None, None)
                continue
            after = None if g in later_touch[i] else g in answer.state
            seen[pa] = (before(g), after)
        for pa, g in step.atoms.items():
            b, a = seen[pa]
            known = _after(effect(pa), b)
            current[g] = a if a is not None else known
        result.append((step, seen))
    failed = None
    if n < len(query.steps):
        step = query.steps[n]
        failed = (step, {pa: before(g) for pa, g in step.atoms.items()})
    return result, failed
