"""Probes (one designed action step) packed into plan-outcome queries, and reading answers.

A probe asks one action to run in a designed assignment of truth values to the action's
own atoms (its Γ instantiations), on freshly named objects. With distinct fresh objects
the atoms of one step are independent of every other step's atoms, so several probes can
share one query ⟨s_I, π⟩: π runs the probes one after another, each on its own objects,
and the answer ⟨n_F, s_F⟩ shows each executed step's before/after values and which step
failed. Steps that share a ground atom (0-ary predicates such as ``handempty``) are never
packed together, because the later step would see the earlier one's effect.

Kinds of probe, by what the engine expects:
  safe     – must execute if the evidence so far is sound;
  risky    – expected to execute under the hypothesis, may fail (tests several atoms);
  fail     – expected to fail: confirms one precondition literal;
  split    – halves an open failure clause (adaptive group testing);
  explore  – looking for any state where a never-seen action executes.
At most one step that is not ``safe``/``risky`` is packed, and it goes last, because a
failure ends the plan and the steps after it would be wasted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from capwatch.assess.agent import QueryResult
from capwatch.model.domain import Action, GroundAction, GroundAtom, LiftedAtom
from capwatch.model.pal import PaTuple

SAFE, RISKY, FAIL, SPLIT, EXPLORE = "safe", "risky", "fail", "split", "explore"
_FINAL_PRIORITY = {SPLIT: 0, FAIL: 1, EXPLORE: 2}


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


def pack(safe: Sequence[Probe], risky: Sequence[Probe], final: Sequence[Probe],
         actions: Mapping[str, Action], objects: ObjectFactory) -> Query | None:
    """One query: safe steps, then risky ones, then at most one expected failure.

    Probes whose ground atoms overlap an already packed step are left for a later query.
    """
    used: set[GroundAtom] = set()
    steps: list[Step] = []
    state: set[GroundAtom] = set()

    def add(probe: Probe) -> bool:
        step = ground_probe(probe, actions[probe.action], objects)
        ground = set(step.atoms.values())
        if ground & used:
            return False
        used.update(ground)
        steps.append(step)
        state.update(step.atoms[PaTuple(probe.action, a)] for a, v in probe.assignment.items()
                     if v)
        return True

    ordered_final = sorted(final, key=lambda p: _FINAL_PRIORITY[p.kind])
    last: Step | None = None
    for probe in ordered_final:
        if add(probe):
            last = steps.pop()
            break
    for probe in safe:
        add(probe)
    for probe in sorted(risky, key=lambda p: p.risky):
        add(probe)
    if last is not None:
        steps.append(last)
    if not steps:
        return None
    return Query(frozenset(state), steps)


Seen = dict[PaTuple, tuple[bool | None, bool | None]]


def read_answer(query: Query, answer: QueryResult
                ) -> tuple[list[tuple[Step, Seen]], tuple[Step, dict[PaTuple, bool | None]] | None]:
    """Executed steps with each atom's value before/after, and the failed step if any.

    A value is reported only when no other executed step could have changed the atom in
    between; otherwise it is None (unseen) and the engine draws no conclusion from it.
    """
    n = min(answer.executed, len(query.steps))
    executed = query.steps[:n]
    touched: list[set[GroundAtom]] = [set(s.atoms.values()) for s in executed]
    result: list[tuple[Step, Seen]] = []
    for i, step in enumerate(executed):
        earlier: set[GroundAtom] = set().union(*touched[:i]) if i else set()
        later: set[GroundAtom] = set().union(*touched[i + 1:]) if i + 1 < n else set()
        counts: dict[GroundAtom, int] = {}
        for g in step.atoms.values():
            counts[g] = counts.get(g, 0) + 1
        seen: Seen = {}
        for pa, g in step.atoms.items():
            if counts[g] > 1:
                seen[pa] = (None, None)
                continue
            before = None if g in earlier else g in query.state
            after = None if g in later else g in answer.state
            seen[pa] = (before, after)
        result.append((step, seen))
    failed = None
    if n < len(query.steps):
        step = query.steps[n]
        earlier = set().union(*touched) if touched else set()
        failed = (step, {pa: (None if g in earlier else g in query.state)
                         for pa, g in step.atoms.items()})
    return result, failed
