"""Probes (one designed action step) packed into plan-outcome queries, and reading answers.

A probe asks one action to run in a designed assignment of truth values to the action's
own atoms (its Γ instantiations), on freshly named objects. With distinct fresh objects
the atoms of one step are independent of every other step's atoms, so several probes can
share one query ⟨s_I, π⟩: π runs the probes one after another, each on its own objects,
and the answer ⟨n_F, s_F⟩ shows each executed step's before/after values and which step
failed. Ground atoms without a fresh object (0-ary predicates such as ``handempty``,
atoms over constants) are shared by every step; steps touching one are packed together
only while the earlier steps' effects on it are predictable.

Kinds of probe, by what the engine expects:
  safe     – must execute if the evidence so far is sound;
  risky    – expected to execute under the hypothesis, may fail (one atom in doubt);
  fail     – expected to fail: confirms one precondition literal;
  explore  – looking for any state where the action executes at all;
  resample – safe, asked again and again to see which outcomes the action still has;
  restore  – a step of a deterministic action that sets a shared atom a resampled step's
             chance effect left unknown back to the value the next one needs (a two-draw
             query, docs/assessment.md).
Steps expected to fail go last: a failure ends the plan, so each query settles every
guess before its first real failure, plus that failure.

A probe is grounded once (:class:`StepMaker`) and keeps its objects for as long as the
engine keeps asking it: queries are independent episodes, so a step re-sent in a later
query may reuse its names, and the engine does not pay for grounding it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from capwatch.assess.agent import QueryResult
from capwatch.assess.atoms import Fixed, equality_roots
from capwatch.model.domain import Action, GroundAction, GroundAtom, LiftedAtom, type_members
from capwatch.model.pal import Mode, PaTuple

SAFE, RISKY, FAIL, EXPLORE = "safe", "risky", "fail", "explore"
RESAMPLE = "resample"
"""A safe step of an undecided probabilistic action, asked again to see its outcomes."""
RESTORE = "restore"
"""A safe step whose effect sets a shared atom whatever its value before (see ``free``)."""
_FINAL_PRIORITY = {EXPLORE: 0, FAIL: 1}


@dataclass(frozen=True, slots=True, eq=False)
class Probe:
    action: str
    assignment: Mapping[LiftedAtom, bool]
    """Truth value of every Γ atom of the action in the designed state."""
    kind: str
    purpose: str
    risky: int = 0
    """How many atoms are set to a value that might violate a precondition."""
    free: frozenset[LiftedAtom] = frozenset()
    """Shared atoms whose value before does not matter (both values are safe): the step
    may follow one that left them unknown or changed, so that an answer can run a
    probabilistic action twice (:func:`pack`); a ``restore`` step goes only there."""


Shared = tuple[GroundAtom, bool | None, PaTuple | None, bool | None]
"""A ground atom other steps may touch too: (atom, value the step needs or None for a
free one (:attr:`Probe.free`), its pa-tuple or None for a fixed atom, a fixed atom's
value after the step or None if unchanged)."""


@dataclass(frozen=True, slots=True, eq=False)
class Step:
    """A probe grounded on objects: what the engine needs to read the answer back."""

    probe: Probe
    ground_action: GroundAction
    atoms: tuple[tuple[PaTuple, GroundAtom], ...]
    """Each Γ atom's pa-tuple and grounding (pairs: a step is read far less often than
    built, and a dict would hash every pa-tuple)."""
    objects: tuple[tuple[str, str], ...] = ()
    """(type, name) of the fresh objects the step owns, returned when it is dropped."""
    true_atoms: tuple[GroundAtom, ...] = ()
    """The step's own (unshared) atoms the designed state makes true."""
    shared: tuple[Shared, ...] = ()


class ObjectFactory:
    """Fresh object names per type; the agent can be put in any state (G20).

    Names of dropped steps are handed out again: queries are independent episodes, so
    reuse is safe, and the set of names an agent ever sees stays about the size of one
    query instead of growing with every probe.

    A union type ``(either a b)`` names its objects by its first member (``qa3``): the
    type's own spelling has spaces and parentheses, which no object name on the wire may
    hold (``wire.Name``), so an HTTP agent rejected every query of an action with such a
    parameter. The one counter keeps the names of all types distinct."""

    def __init__(self, taken: set[str], prefix: str = "q") -> None:
        self._taken = taken
        self._prefix = prefix
        self._count = 0
        self._free: dict[str, list[str]] = {}

    def new(self, type_name: str) -> str:
        free = self._free.get(type_name)
        if free:
            return free.pop()
        while True:
            self._count += 1
            name = f"{self._prefix}{type_members(type_name)[0]}{self._count}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def release(self, objects: Iterable[tuple[str, str]]) -> None:
        for type_name, name in objects:
            self._free.setdefault(type_name, []).append(name)


def _arguments(action: Action, objects: ObjectFactory
               ) -> tuple[tuple[str, ...], dict[str, str]]:
    """One fresh object per parameter, except that parameters an equality constraint
    ``(= ?a ?b)`` ties together share one, and one tied to a constant is that constant.
    Returns the arguments and the fresh objects with their types."""
    if not action.equal:
        fresh = {objects.new(p.type): p.type for p in action.parameters}
        return tuple(fresh), fresh
    roots = equality_roots(action)
    chosen: dict[str, str] = {}
    owned: dict[str, str] = {}
    args = []
    for p in action.parameters:
        r = roots[p.name]
        if not r.startswith("?"):
            args.append(r)
            continue
        if r not in chosen:
            chosen[r] = objects.new(p.type)
            owned[chosen[r]] = p.type
        args.append(chosen[r])
    return tuple(args), owned


_Getter = Callable[[Sequence[str]], tuple[str, ...]]
_Template = tuple[tuple[LiftedAtom, PaTuple, str, _Getter, bool], ...]
_Compiled = tuple[tuple[str, ...], _Template, tuple[PaTuple, ...], bool]
"""(constants, per-atom template, the pa-tuples in order, whether any atom is shared)."""
_TEMPLATES: dict[tuple[str, tuple[LiftedAtom, ...]], _Compiled] = {}
_LAST: dict[tuple[str, str], tuple[tuple[LiftedAtom, ...], _Compiled]] = {}


def _getter(where: Sequence[int]) -> _Getter:
    if not where:
        return lambda v: ()
    if len(where) == 1:
        i = where[0]
        return lambda v: (v[i],)
    return itemgetter(*where)


def _template(action: Action, atoms: Iterable[LiftedAtom], slot: str = "gamma"
              ) -> _Compiled:
    """Per atom: its pa-tuple, predicate and a getter of its arguments out of the step's
    arguments followed by the constants the atoms mention, so grounding a step is tuple
    building, not dict lookups."""
    keys = tuple(atoms)
    last = _LAST.get((action.name, slot))
    # Designs of one action list the same atom objects in the same order: comparing
    # them is identity checks, cheaper than hashing hundreds of atoms.
    if last is not None and last[0] == keys:
        return last[1]
    key = (action.name, keys)
    hit = _TEMPLATES.get(key)
    if hit is None:
        names = list(action.parameter_names)
        constants = sorted({a for atom in key[1] for a in atom.args} - set(names))
        pos = {n: i for i, n in enumerate([*names, *constants])}
        own = {n for n, r in equality_roots(action).items() if r.startswith("?")}
        template = tuple(
            (atom, PaTuple(action.name, atom), atom.predicate,
             _getter([pos[a] for a in atom.args]), own.isdisjoint(atom.args))
            for atom in key[1])
        hit = (tuple(constants), template, tuple(t[1] for t in template),
               any(t[4] for t in template))
        if len(_TEMPLATES) > 10_000:
            _TEMPLATES.clear()
        _TEMPLATES[key] = hit
    _LAST[(action.name, slot)] = (keys, hit)
    return hit


def ground_probe(probe: Probe, action: Action, objects: ObjectFactory,
                 fixed: Sequence[Fixed] = ()) -> Step:
    args, owned = _arguments(action, objects)
    assignment = probe.assignment
    shared: list[Shared] = []
    constants, template, pas, any_shared = _template(action, assignment)
    vector = (*args, *constants)
    grounds = [(pred, *get(vector)) for _, _, pred, get, _ in template]
    atoms = tuple(zip(pas, grounds, strict=True))
    if any_shared:
        true_atoms: list[GroundAtom] = []
        for (atom, pa, _, _, is_shared), g, value in zip(template, grounds,
                                                      assignment.values(), strict=True):
            if is_shared:
                shared.append((g, None if atom in probe.free else value, pa, None))
            elif value:
                true_atoms.append(g)
    else:
        true_atoms = [g for g, value in zip(grounds, assignment.values(), strict=True)
                      if value]
    if fixed:
        constants, template, _, _ = _template(action, [atom for atom, _, _ in fixed],
                                              "fixed")
        vector = (*args, *constants)
        for (_, value, after), (_, _, pred, get, is_shared) in zip(fixed, template,
                                                                   strict=True):
            g = (pred, *get(vector))
            if is_shared:
                shared.append((g, value, None, after))
            elif value:
                true_atoms.append(g)
    return Step(probe, (action.name, *args), atoms,
                tuple((t, name) for name, t in owned.items()), tuple(true_atoms),
                tuple(shared))


class StepMaker:
    """Grounds probes once each, on fresh objects, and remembers the step."""

    def __init__(self, actions: Mapping[str, Action], objects: ObjectFactory,
                 fixed: Mapping[str, Sequence[Fixed]] | None = None) -> None:
        self.actions = actions
        self.objects = objects
        self.fixed = fixed or {}
        self._steps: dict[int, tuple[Probe, Step]] = {}

    def step(self, probe: Probe) -> Step:
        hit = self._steps.get(id(probe))
        if hit is not None and hit[0] is probe:
            return hit[1]
        step = ground_probe(probe, self.actions[probe.action], self.objects,
                            self.fixed.get(probe.action, ()))
        self._steps[id(probe)] = (probe, step)
        return step

    def retain(self, probes: Iterable[Probe]) -> None:
        """Forget the steps of probes no longer asked (keeps memory bounded)."""
        keep = {id(p) for p in probes}
        for k, (_, step) in self._steps.items():
            if k not in keep:
                self.objects.release(step.objects)
        self._steps = {k: v for k, v in self._steps.items() if k in keep}


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


def _after(effect: Mode, before: bool | None) -> bool | None:
    if effect is Mode.POS:
        return True
    if effect is Mode.NEG:
        return False
    if effect is Mode.ABSENT:
        return before
    return None


def _from_effect(effect: EffectOf) -> AfterOf:
    return lambda pa, before: _after(effect(pa), before)


def pack(safe: Sequence[Probe], risky: Sequence[Probe], final: Sequence[Probe],
         actions: Mapping[str, Action], objects: ObjectFactory,
         effect: EffectOf = lambda pa: Mode.UNKNOWN,
         fixed: Mapping[str, Sequence[Fixed]] | None = None,
         after: AfterOf | None = None, steps: StepMaker | None = None,
         max_atoms: int | None = None) -> Query | None:
    """One query: safe steps, then risky ones, then the expected failures.

    ``max_atoms`` caps the query's initial state (its first step always goes): an agent
    sets up and runs every step of a query within one timeout, and probes packed on
    fresh objects without a cap once made a query of 341 steps and 54,178 atoms (2 MB)
    that a live agent never answered in time, so the assessment failed as if the agent
    were unreachable. The probes left out are designed again for the next query.

    A shared atom is chained only while every earlier step's effect on it is
    predictable, so its value at each step equals what that step's probe asks for. A
    probe that does not fit yet is retried after the next steps changed the shared
    atoms, and otherwise waits for a later query. A probe whose effect on a shared atom
    cannot be predicted goes after the other expected successes: nothing touching that
    atom can follow it.
    """
    after_of = after if after is not None else _from_effect(effect)
    maker = steps if steps is not None else StepMaker(actions, objects, fixed)
    value: dict[GroundAtom, bool | None] = {}
    chosen: list[Step] = []
    state: set[GroundAtom] = set()

    def add(step: Step) -> bool:
        if step.probe.kind == RESTORE and not any(
                g in value and (set_to := after_of(pa, None)) is not None and
                value[g] != set_to for g, v, pa, _ in step.shared if v is None and pa):
            # A restoring step goes only where an earlier step left an atom it sets
            # otherwise (or unknown): elsewhere it would restore nothing, and every
            # restoring step would line up before the first step it is for.
            return False
        for g, v, _, _ in step.shared:
            if v is not None and g in value and value[g] != v:
                return False
        if max_atoms is not None and chosen and \
                len(state) + len(step.true_atoms) + len(step.shared) > max_atoms:
            return False
        chosen.append(step)
        state.update(step.true_atoms)
        for g, v, pa, fixed_after in step.shared:
            if v and g not in value:
                state.add(g)
            if pa is not None:
                value[g] = after_of(pa, v)
            else:
                value[g] = v if fixed_after is None else fixed_after
        return True

    def place(probes: Iterable[Probe]) -> None:
        pending = [maker.step(p) for p in probes]
        while pending:
            rest = [s for s in pending if not add(s)]
            if len(rest) == len(pending):
                return
            pending = rest

    def opaque(step: Step) -> bool:
        return any(pa is not None and after_of(pa, v) is None for _, v, pa, _ in step.shared)

    first = [*safe, *sorted(risky, key=lambda p: p.risky)]
    # Steps with a free atom can only follow a dark one: they are placed with them.
    dark = [p for p in first if p.free or opaque(maker.step(p))]
    if dark:
        first = [p for p in first if not (p.free or opaque(maker.step(p)))]
    if any(p.kind == RESTORE for p in dark):
        # A two-draw query: the steps a restoring one is for may be predictable (an
        # effect that leaves a shared atom at another value than the next one needs),
        # so they and the restoring steps are placed in one loop, alternating.
        place([*first, *dark])
    else:
        place(first)
        place(dark)
    # Expected failures go last, as many as fit: the agent stops at the first real
    # failure, and every probe before it that ran was a wrong guess now settled, so a
    # query costs one failure however many guesses it clears.
    place(sorted(final, key=lambda p: (_FINAL_PRIORITY[p.kind], p.risky)))
    if not chosen:
        return None
    return Query(frozenset(state), chosen)


Seen = dict[PaTuple, tuple[bool | None, bool | None]]


def read_answer(query: Query, answer: QueryResult, effect: EffectOf = lambda pa: Mode.UNKNOWN,
                after: AfterOf | None = None
                ) -> tuple[list[tuple[Step, Seen]], tuple[Step, dict[PaTuple, bool | None]] | None]:
    """Executed steps with each atom's value before/after, and the failed step if any.

    An atom's value before a step is known when every earlier step's effect on it is
    predictable; its value after a step is read from s_F when no later executed step
    touches it. Otherwise it is None (unseen) and the engine draws no conclusion from it.
    """
    after_of = after if after is not None else _from_effect(effect)
    n = min(answer.executed, len(query.steps))
    last_touch: dict[GroundAtom, int] = {}
    for i, step in enumerate(query.steps[:n]):
        for g, _, _, _ in step.shared:
            last_touch[g] = i
    current: dict[GroundAtom, bool | None] = {}

    def before(g: GroundAtom) -> bool | None:
        return current.get(g, g in query.state)

    result: list[tuple[Step, Seen]] = []
    for i, step in enumerate(query.steps[:n]):
        counts: dict[GroundAtom, int] = {}
        for _, g in step.atoms:
            counts[g] = counts.get(g, 0) + 1
        seen: Seen = {}
        for pa, g in step.atoms:
            b = before(g)
            if counts[g] > 1:
                # Two lifted atoms on one ground atom (equal objects): the value before
                # holds for both, the value after is their joint work.
                seen[pa] = (b, None)
                continue
            post = None if last_touch.get(g, i) > i else g in answer.state
            seen[pa] = (b, post)
        for g, _, owner, fixed_after in step.shared:
            if owner is None:
                current[g] = before(g) if fixed_after is None else fixed_after
        for pa, g in step.atoms:
            b, a = seen[pa]
            current[g] = a if a is not None else after_of(pa, b)
        result.append((step, seen))
    failed = None
    if n < len(query.steps):
        step = query.steps[n]
        failed = (step, {pa: before(g) for pa, g in step.atoms})
    return result, failed
