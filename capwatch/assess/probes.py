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


Fixed = tuple[LiftedAtom, bool, bool | None]
"""A precondition atom outside Γ (it mentions a constant or repeats a parameter): the value
the step needs, and its value after the step (None: unchanged). Taken from the known
model, which is the only source for atoms the engine does not assess."""


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

AfterOf = Callable[[PaTuple, bool | None], bool | None]
"""The atom's value after a step that ran with it at ``before``, when every value still
possible for the pa-tuple predicts the same one; None otherwise. Finer than the effect
mode: with the atom true before, ⟨+,∅⟩, ⟨∅,+⟩ and ⟨∅,∅⟩ all leave it true."""


def _from_effect(effect: EffectOf) -> AfterOf:
    return lambda pa, before: _after(effect(pa), before)


def _after(effect: Mode, before: bool | None) -> bool | None:
    if effect is Mode.POS:
        return True
    if effect is Mode.NEG:
        return False
    if effect is Mode.ABSENT:
        return before
    return None


def _variables(atom: LiftedAtom) -> bool:
    return any(a.startswith("?") for a in atom.args)


def pack(safe: Sequence[Probe], risky: Sequence[Probe], final: Sequence[Probe],
         actions: Mapping[str, Action], objects: ObjectFactory,
         effect: EffectOf = lambda pa: Mode.UNKNOWN,
         fixed: Mapping[str, Sequence[Fixed]] | None = None,
         after: AfterOf | None = None) -> Query | None:
    """One query: safe steps, then risky ones, then the expected failures.

    Fresh objects keep steps apart, except for atoms without variables (0-ary
    predicates such as ``handempty``, atoms over constants), which every step sees.
    Such a shared atom is chained only while every earlier step's effect on it is
    known, so its value at each step is predictable and equals what that step's probe
    asks for. A probe that does not fit yet is retried after the next steps changed the
    shared atoms, and otherwise waits for a later query. A probe whose effect on a shared
    atom cannot be predicted goes after the others of its kind: nothing touching that
    atom can follow it.
    """
    value: dict[GroundAtom, bool | None] = {}
    steps: list[Step] = []
    state: set[GroundAtom] = set()
    fixed = fixed or {}
    after_of = after if after is not None else _from_effect(effect)

    def fits(probe: Probe) -> bool:
        for atom, v in probe.assignment.items():
            if not _variables(atom):
                g = atom.ground({})
                if g in value and value[g] != v:
                    return False
        for atom, v, _ in fixed.get(probe.action, ()):
            if not _variables(atom):
                g = atom.ground({})
                if g in value and value[g] != v:
                    return False
        return True

    def add(probe: Probe) -> bool:
        if not fits(probe):
            return False
        action = actions[probe.action]
        step = ground_probe(probe, action, objects)
        steps.append(step)
        for pa, g in step.atoms.items():
            v = probe.assignment[pa.atom]
            shared = not _variables(pa.atom)
            if v and (not shared or g not in value):
                state.add(g)
            if shared:
                value[g] = after_of(pa, v)
        binding = dict(zip(action.parameter_names, step.ground_action[1:], strict=True))
        for atom, v, after in fixed.get(probe.action, ()):
            g = atom.ground(binding)
            shared = not _variables(atom)
            if v and (not shared or g not in value):
                state.add(g)
            if shared:
                value[g] = v if after is None else after
        return True

    def opaque(probe: Probe) -> bool:
        return any(not _variables(atom) and after_of(PaTuple(probe.action, atom), v) is None
                   for atom, v in probe.assignment.items())

    def place(probes: Sequence[Probe]) -> list[Probe]:
        pending = list(probes)
        while pending:
            rest = [p for p in pending if not add(p)]
            if len(rest) == len(pending):
                break
            pending = rest
        return pending

    shared = [p for p in (*safe, *risky) if any(not _variables(a) for a in p.assignment)]
    dark = [p for p in shared if opaque(p)] if shared else []
    if dark:
        safe = [p for p in safe if not any(p is d for d in dark)]
        risky = [p for p in risky if not any(p is d for d in dark)]
    place(safe)
    place(sorted(risky, key=lambda p: p.risky))
    place(dark)
    # Expected failures go last, as many as fit: the agent stops at the first real
    # failure, and every probe before it that ran was a wrong guess now settled, so a
    # query costs one failure however many guesses it clears.
    place(sorted(final, key=lambda p: _FINAL_PRIORITY[p.kind]))
    if not steps:
        return None
    return Query(frozenset(state), steps)


Seen = dict[PaTuple, tuple[bool | None, bool | None]]


def read_answer(query: Query, answer: QueryResult, effect: EffectOf = lambda pa: Mode.UNKNOWN,
                after: AfterOf | None = None
                ) -> tuple[list[tuple[Step, Seen]], tuple[Step, dict[PaTuple, bool | None]] | None]:
    """Executed steps with each atom's value before/after, and the failed step if any.

    An atom's value before a step is known when every earlier step's effect on it is
    known; its value after a step is read from s_F when no later executed step touches
    it. Otherwise it is None (unseen) and the engine draws no conclusion from it.
    """
    after_of = after if after is not None else _from_effect(effect)
    n = min(answer.executed, len(query.steps))
    last_touch: dict[GroundAtom, int] = {}
    for i, step in enumerate(query.steps[:n]):
        for g in step.atoms.values():
            last_touch[g] = i
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
            post = None if last_touch[g] > i else g in answer.state
            seen[pa] = (before(g), post)
        for pa, g in step.atoms.items():
            b, a = seen[pa]
            current[g] = a if a is not None else after_of(pa, b)
        result.append((step, seen))
    failed = None
    if n < len(query.steps):
        step = query.steps[n]
        failed = (step, {pa: before(g) for pa, g in step.atoms.items()})
    return result, failed
