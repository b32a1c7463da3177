"""Differential assessment (DAAISy), verification and learning from scratch (AIA).

Entry point: :func:`assess`. The engine is pure: it sees the agent only through
:class:`~capwatch.assess.agent.AgentQuery`, plans only through a planner object, and reads
no clock. Three methods share one loop over a :class:`VersionSpace`:

``daaisy``  resolve only the pa-tuples the observations show to be affected (Table 2:
            the known value is no longer possible; optimal sub-traces that the known
            model could have shortened; hints from the monitor); every other pa-tuple
            keeps its known value unless the evidence fixes it (papers/daaisy.md Alg. 1).
``verify``  confirm every pa-tuple with probing queries, taking the known model as the
            hypothesis; once the answers show the known model to be mostly wrong, it
            is dropped and the hypotheses are AIA's.
``aia``     ignore the known model (keep only its vocabulary) and learn every pa-tuple.

Each round designs probes (:mod:`capwatch.assess.design`), packs them into one
plan-outcome query, asks the agent, and narrows the version space with the answer. The
loop ends when every target is resolved, the budget is spent, or no probe can teach
anything more; what is left open is reported with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence

from capwatch.assess.agent import AgentQuery, QueryResult
from capwatch.assess.design import AFTER, COUNT, Designer
from capwatch.assess.entangled import update_entangled
from capwatch.assess.observations import (
    Observation,
    Transition,
    infer_object_types,
    optimal_traces,
    transitions_of,
)
from capwatch.assess.planner import Planner
from capwatch.assess.probes import (
    EXPLORE,
    FAIL,
    Fixed,
    ObjectFactory,
    Probe,
    Query,
    StepMaker,
    pack,
    read_answer,
)
from capwatch.assess.result import AssessmentResult, Method, PalChange, QueryLog
from capwatch.assess.shortcuts import find_shortcuts
from capwatch.assess.versionspace import (
    ALL_VALUES,
    VersionSpace,
    is_single,
    mask_of,
    values_of,
)
from capwatch.model.domain import Action, Domain, GroundAtom, LiftedAtom
from capwatch.model.pal import (
    AbstractModel,
    Location,
    Mode,
    PalTuple,
    PaTuple,
    PaValue,
    lifted_instantiations,
    pre_mode,
)

AUTO_SWITCH = 0.5
DEFAULT_BUDGET = 200
WINDOW_SAFETY = 8.0
"""-ln of the accepted chance that a query's window of expected failures all run."""
MIN_WINDOW = 256
"""Expected failures always sent together; only larger models see a window at all."""
_FINAL_ORDER = {EXPLORE: 0, FAIL: 1}


def assess(known: Domain, observations: Sequence[Observation], agent: AgentQuery, *,
           method: Method | str = Method.DAAISY,
           affected: Collection[PalTuple] = (),
           budget: int = DEFAULT_BUDGET,
           planner: Planner | None = None,
           objects: Mapping[str, Sequence[str]] | None = None,
           detect_reduced: bool = True,
           minimal_change: bool = False,
           max_search_states: int = 20_000) -> AssessmentResult:
    """Assess how ``agent`` now behaves, relative to the ``known`` model.

    ``observations`` are the agent's recent transitions or traces (optimal ones enable
    reduced-functionality detection). ``affected`` adds pal-tuples the caller suspects
    (e.g. from the monitor). ``budget`` caps the number of queries. ``objects`` (type →
    names) grounds the known model for the optimal-plan comparison; inferred from the
    observations when omitted. ``minimal_change`` (daaisy only) settles a pa-tuple whose
    known value the observations rule out by changing just the location they pin down,
    without a query: fewer queries, lower accuracy (docs/assessment.md).
    """
    requested = Method(method) if isinstance(method, str) else method
    m = Method.DAAISY if requested is Method.AUTO else requested
    engine = _Engine(known, m, budget, minimal_change)
    engine.observe(transitions_of(observations))
    notes: list[str] = []
    if m is Method.DAAISY:
        # verify and aia target every pa-tuple anyway: flags could not add one, so the
        # optimal-plan comparison (the costly part) is only run where it can matter.
        engine.flag(affected, "named by the caller")
        if detect_reduced:
            traces = optimal_traces(observations)
            if traces:
                objs = objects if objects is not None else infer_object_types(
                    known, (s for t in traces for s in t.states),
                    (a for t in traces for a in t.actions))
                report = find_shortcuts(known, traces, objs, planner=planner,
                                        max_states=max_search_states)
                notes.extend(report.notes)
                for shortcut in report.shortcuts:
                    engine.flag_action(shortcut.suspect[0], shortcut.describe())
    if requested is Method.AUTO and len(engine.flagged) > AUTO_SWITCH * len(engine.init_value):
        # Most of the model is in doubt: confirming everything costs little more than
        # resolving the flagged part, and leaves no stale pa-tuple behind.
        notes.append(f"{len(engine.flagged)} of {len(engine.init_value)} pa-tuples flagged: "
                     f"verifying the whole model")
        engine.method = Method.VERIFY
        engine.targets = set(engine.init_value)
    engine._check_known_model()
    engine.run(agent)
    return engine.result(notes)


def _fixed_atoms(action: Action, gamma: set[LiftedAtom]) -> list[Fixed]:
    """Precondition atoms the engine does not assess (constants, repeated parameters):
    probes must still satisfy them, as the known model states them."""
    out: list[Fixed] = []
    adds = set().union(*(o.add for o in action.outcomes))
    dels = set().union(*(o.delete for o in action.outcomes))
    for atoms, value in ((action.pre_pos, True), (action.pre_neg, False)):
        for atom in sorted(atoms):
            if atom in gamma:
                continue
            after = True if atom in adds else False if atom in dels else None
            out.append((atom, value, after))
    return out


def _tied_atoms(action: Action, atoms: Sequence[LiftedAtom]) -> dict[LiftedAtom, LiftedAtom]:
    """Atoms that equality constraints make ground to the same atom as an earlier one."""
    root = {n: n for n in action.parameter_names}

    def find(x: str) -> str:
        while root.get(x, x) != x:
            x = root[x]
        return x

    for a, b in action.equal:
        ra, rb = find(a), find(b)
        if ra != rb:
            if ra.startswith("?"):
                root[ra] = rb
            else:
                root[rb] = ra
    first: dict[tuple[str, ...], LiftedAtom] = {}
    tied = {}
    for atom in atoms:
        form = (atom.predicate, *(find(a) for a in atom.args))
        if form in first:
            tied[atom] = first[form]
        else:
            first[form] = atom
    return tied


class _Engine:
    def __init__(self, known: Domain, method: Method, budget: int,
                 minimal_change: bool = False) -> None:
        self.known = known
        self.minimal_change = minimal_change
        self.method = method
        self.budget = budget
        self.initial = AbstractModel.from_domain(known)
        self.vs = VersionSpace.open(self.initial)
        self.actions = known.action_map
        gamma = {p.pa for p in self.initial.pals}
        self.atoms: dict[str, list[LiftedAtom]] = {
            a.name: [atom for atom in lifted_instantiations(known, a)
                     if PaTuple(a.name, atom) in gamma]
            for a in known.actions}
        self.pas: dict[str, list[PaTuple]] = {
            name: [PaTuple(name, atom) for atom in atoms] for name, atoms in self.atoms.items()}
        self.fixed = {a.name: _fixed_atoms(a, set(self.atoms[a.name])) for a in known.actions}
        self.outside = {a.name: sorted(a.all_atoms() - set(self.atoms[a.name]))
                        for a in known.actions}
        self.init_value: dict[PaTuple, PaValue] = {
            pa: self.initial.pa_value(pa) for pa in self.initial.pa_tuples()}
        self.targets: set[PaTuple] = set()
        self.adopted: dict[PaTuple, PaValue] = {}
        self.flagged: set[PaTuple] = set()
        self.flag_reasons: dict[PaTuple, list[str]] = {}
        self.queries: list[QueryLog] = []
        self.notes: list[str] = []
        self.taken: set[str] = set()
        self.pool: list[Transition] = []
        self.budget_exhausted = False
        self.stalled = False
        self.final_ran = 0
        self.final_failed = 0
        self.known_view: dict[PaTuple, PaValue] = {} if method is Method.AIA else \
            self.init_value
        self.tied = {a.name: _tied_atoms(a, self.atoms[a.name]) for a in known.actions
                     if a.equal}
        self.design = Designer(self.vs, self.pas, self.actions, self.known_view, self.pool,
                               tied=self.tied)
        if method is not Method.DAAISY:
            self.targets = set(self.init_value)

    # ------------------------------------------------------------------ evidence

    def observe(self, transitions: Iterable[Transition]) -> None:
        for t in transitions:
            self.pool.append(t)
            for atom in t.state | t.next_state:
                self.taken.update(atom[1:])
            self.taken.update(t.action[1:])
            action = self.actions.get(t.action[0])
            if action is None or action.arity != len(t.action) - 1:
                self.notes.append(f"{t.source or 'observation'}: action {t.action!r} is not "
                                  f"in the known model; ignored")
                continue
            binding = dict(zip(action.parameter_names, t.action[1:], strict=True))
            ground = {pa: pa.atom.ground(binding) for pa in self.pas[action.name]}
            counts: dict[GroundAtom, int] = {}
            for g in ground.values():
                counts[g] = counts.get(g, 0) + 1
            for other in self.outside[action.name]:
                # An atom outside Γ (a constant, a repeated parameter) on the same ground
                # atom: its known effect mixes with the pa-tuple's in the value after.
                shared = other.ground(binding)
                if shared in counts:
                    counts[shared] += 1
            where = f"observed {_show(t.action)} at {t.source or 'a transition'}"
            executed = t.did_execute
            if executed is True:
                # An atom two lifted atoms ground to (repeated objects) was seen before the
                # step, which constrains both preconditions; its value after is the joint
                # work of both effects, so it says nothing about either one.
                seen = {pa: (g in t.state, g in t.next_state if counts[g] == 1 else None)
                        for pa, g in ground.items()}
                self.vs.executed(action.name, seen, where)
                if len(counts) < len(ground) or any(c > 1 for c in counts.values()):
                    self._entangled(action, binding, ground, t, where)
                outside = (t.state ^ t.next_state) - set(ground.values())
                if outside:
                    self.notes.append(f"{where}: changed atoms no pal-tuple of the action can "
                                      f"mention: {sorted(outside)}")
            elif executed is False:
                self.vs.failed(action.name, {pa: g in t.state for pa, g in ground.items()},
                               where + " (refused)")
        self._refresh_targets()

    def _entangled(self, action: Action, binding: dict[str, str],
                   ground: dict[PaTuple, GroundAtom], t: Transition, where: str) -> None:
        """Issue 11 hook: ground atoms several atoms of the step name are judged jointly
        under PDDL semantics (:mod:`capwatch.assess.entangled`)."""
        if len(action.outcomes) != 1:
            return  # which outcome ran is unknown: the joint effect is not determined
        (outcome,) = action.outcomes
        fixed: dict[GroundAtom, list[PaValue]] = {}
        for other in self.outside[action.name]:
            eff = Mode.POS if other in outcome.add else Mode.NEG \
                if other in outcome.delete else Mode.ABSENT
            fixed.setdefault(other.ground(binding), []).append(
                (pre_mode(action, other), eff))
        doubted = update_entangled(self.vs, ground, fixed, t.state, t.next_state,
                                   self.known_view, where)
        for pa in doubted:
            self._flag(pa, f"{where}: the known values on one ground atom (repeated objects) "
                           f"jointly contradict it")
        self.vs.propagate()

    def flag(self, pals: Iterable[PalTuple], reason: str) -> None:
        for pal in pals:
            self._flag(pal.pa, reason)

    def flag_action(self, action: str, reason: str) -> None:
        """Reduced functionality: every pa-tuple of the action not yet pinned down."""
        for pa in self.pas.get(action, ()):
            if not self.vs.resolved(pa):
                self._flag(pa, reason)

    def _flag(self, pa: PaTuple, reason: str) -> None:
        if pa not in self.init_value:
            return
        self.flagged.add(pa)
        if pa not in self.targets:
            self.targets.add(pa)
            self.vs.touch(pa.action)
        self.flag_reasons.setdefault(pa, []).append(reason)

    def _refresh_targets(self) -> None:
        """Known values the evidence rules out become targets (DAAISy's Γδ, kept current)."""
        if self.method is Method.AIA:
            return
        for pa, value in self.init_value.items():
            if pa in self.targets or self.vs.masks[pa] & mask_of([value]):
                continue
            if self.minimal_change:
                fixed = self._minimal_change(pa, value)
                if fixed is not None:
                    self.adopted[pa] = fixed
                    self.flagged.add(pa)
                    self.flag_reasons.setdefault(pa, []).append(
                        "the known value contradicts the evidence (Table 2); the one "
                        "location the evidence fixes was changed, the other kept")
                    continue
            self._flag(pa, "the known value contradicts the evidence (Table 2)")

    def _minimal_change(self, pa: PaTuple, known: PaValue) -> PaValue | None:
        """The value that changes only the location the evidence pins down, if legal and
        still possible; None when the evidence leaves more than that open."""
        mask = self.vs.masks[pa]
        pre, eff = self.vs.modes(pa)
        candidates: list[PaValue] = []
        if pre is not Mode.UNKNOWN:
            candidates.append((pre, known[1]))
        if eff is not Mode.UNKNOWN:
            candidates.append((known[0], eff))
        for v in candidates:
            if mask & mask_of([v]):
                return v
        return None

    def _check_known_model(self) -> None:
        """Weigh the known model against the evidence, for :class:`Designer`.

        A pa-tuple counts against it when the evidence rules its known value out, for it
        when the evidence leaves only that value. Any count against it makes exploration
        start as AIA's would; more against than for drops it as hypothesis altogether:
        it then predicts worse than AIA's prior and would only misorder probes (verify
        must never cost more than aia)."""
        if self.design.from_scratch or self.method is Method.AIA:
            return
        right = wrong = 0
        masks = self.vs.masks
        for pa, known in self.init_value.items():
            bit = mask_of([known])
            mask = masks[pa]
            if not mask & bit:
                wrong += 1
            elif mask == bit:
                right += 1
        self.design.doubted = wrong > 0
        if wrong > right and self.method is Method.VERIFY:
            self.design.from_scratch = True
            self.notes.append(f"the evidence refuted the known value of {wrong} pa-tuples and "
                              f"confirmed {right}: probes no longer follow the known model")

    # ------------------------------------------------------------------ loop

    def run(self, agent: AgentQuery) -> None:
        objects = ObjectFactory(self.taken)
        maker = StepMaker(self.actions, objects, self.fixed)
        while True:
            safe: list[Probe] = []
            risky: list[Probe] = []
            final: list[Probe] = []
            riders = self.method is Method.DAAISY
            rider_risky: list[Probe] = []
            rider_final: list[Probe] = []
            for action in sorted(self.atoms):
                s, r, f = self.design.probes(action, self.targets)
                if riders and (s or r or f):
                    # A query goes out for the targets anyway: let it also test what the
                    # observations never challenged, at no extra query.
                    s, more_r, more_f = self.design.probes(action, None)
                    rider_risky.extend(p for p in more_r if p not in r)
                    rider_final.extend(p for p in more_f if p not in f)
                safe.extend(s)
                risky.extend(r)
                final.extend(f)
            if not (safe or risky or final):
                break
            # Riders expected to run ride along; riders expected to fail only when the
            # targets have no failure of their own to ask (each query ends at one).
            risky.extend(rider_risky)
            if not final:
                final = rider_final
            if len(self.queries) >= self.budget:
                self.budget_exhausted = True
                break
            final = self._window(final)
            maker.retain([*safe, *risky, *final])
            query = pack(safe, risky, final, self.actions, objects, after=self._after,
                         steps=maker)
            if query is None:
                self.stalled = True
                break
            answers = agent.query(query.state, query.plan, 1)
            if not answers:
                self.notes.append("the agent returned no answer; stopped")
                self.stalled = True
                break
            before = (sum(self.vs.version.values()), len(self.vs.clauses))
            self._absorb(query, answers[0])
            if (sum(self.vs.version.values()), len(self.vs.clauses)) == before:
                # The same probes would be designed and asked again: stop instead.
                self.notes.append(f"query {len(self.queries)} narrowed nothing; stopped")
                self.stalled = True
                break
            self._refresh_targets()
            self._check_known_model()

    def _window(self, final: list[Probe]) -> list[Probe]:
        """The expected failures worth sending in one query.

        A query ends at its first real failure, so steps far past the expected position
        of that failure are packed, sent and answered for nothing. From the observed
        rate p of expected failures that did fail (Laplace estimate), the window holds
        WINDOW_SAFETY / p of them: the chance that all of them run, which would cost a
        query, is about e^-WINDOW_SAFETY. Never fewer than MIN_WINDOW, so small models
        are never cut."""
        if len(final) <= MIN_WINDOW:
            return final
        rate = (self.final_failed + 1) / (self.final_ran + 2)
        width = max(MIN_WINDOW, math.ceil(WINDOW_SAFETY / rate))
        if len(final) <= width:
            return final
        ordered = sorted(final, key=lambda p: _FINAL_ORDER[p.kind])
        return ordered[:width]

    def _after(self, pa: PaTuple, before: bool | None) -> bool | None:
        return None if before is None else AFTER[self.vs.masks[pa]][before]

    def _absorb(self, query: Query, answer: QueryResult) -> None:
        number = len(self.queries) + 1
        self.queries.append(QueryLog(number, query.state, tuple(query.plan), answer.executed,
                                     answer.state, tuple(s.probe.purpose for s in query.steps)))
        executed, failed = read_answer(query, answer, after=self._after)
        self.final_ran += sum(1 for step, _ in executed if step.probe.kind in _FINAL_ORDER)
        if failed is not None and failed[0].probe.kind in _FINAL_ORDER:
            self.final_ran += 1
            self.final_failed += 1
        for i, (step, seen) in enumerate(executed):
            self.vs.executed(step.probe.action, seen,
                             f"query {number} step {i + 1}: {_show(step.ground_action)} ran")
        if failed is not None:
            step, values = failed
            self.vs.failed(step.probe.action, values,
                           f"query {number} step {len(executed) + 1}: "
                           f"{_show(step.ground_action)} refused")

    # ------------------------------------------------------------------ result

    def _open_reason(self, pa: PaTuple) -> str:
        rep = self.tied.get(pa.action, {}).get(pa.atom)
        if rep is None and pa.atom in self.tied.get(pa.action, {}).values():
            rep = next(a for a, r in self.tied[pa.action].items() if r == pa.atom)
        if rep is not None:
            return (f"{pa.atom} and {rep} are always the same ground atom (equality "
                    f"constraint of {pa.action}): no query can tell them apart")
        if self.budget_exhausted:
            return f"the query budget ({self.budget}) was spent first"
        if pa.action in self.design.gave_up:
            return (f"no state was found in which {pa.action} executes "
                    f"({len(self.design.explored.get(pa.action, ()))} tried)")
        if self.stalled:
            return "the agent's answers stopped narrowing it down"
        return "no probe could tell the remaining values apart"

    def result(self, notes: Sequence[str]) -> AssessmentResult:
        modes: dict[PalTuple, Mode] = {}
        reasons: dict[PalTuple, str] = {}
        for pal in self.initial.pals:
            pa = pal.pa
            mask = self.vs.masks[pa]
            known = self.init_value[pa]
            idx = 0 if pal.location is Location.PRE else 1
            if is_single(mask):
                modes[pal] = values_of(mask)[0][idx]
            elif pa in self.targets:
                modes[pal] = self.vs.modes(pa)[idx]
            elif mask & mask_of([known]):
                modes[pal] = known[idx]
            elif pa in self.adopted and mask & mask_of([self.adopted[pa]]):
                modes[pal] = self.adopted[pa][idx]
            else:
                modes[pal] = Mode.UNKNOWN
            if modes[pal] is Mode.UNKNOWN:
                reasons[pal] = self._open_reason(pa)
        model = self.initial.with_modes(modes)
        changes = []
        for pal, old, new in self.initial.diff(model):
            ev = list(self.flag_reasons.get(pal.pa, [])) + list(self.vs.evidence.get(pal.pa, []))
            changes.append(PalChange(pal, old, new, tuple(dict.fromkeys(ev))))
        for action in sorted(self.design.gave_up):
            if any(pa in self.targets and COUNT[self.vs.masks[pa]] > 1
                   for pa in self.pas[action]):
                self.notes.append(f"no state was found in which {action} executes; its "
                                  f"pal-tuples stay unresolved")
        if self.budget_exhausted and reasons:
            self.notes.append(f"query budget ({self.budget}) spent with {len(reasons)} "
                              f"pal-tuples open")
        flagged_pals = frozenset(p for p in self.initial.pals if p.pa in self.flagged)
        # Issue 11: which modes the evidence pinned (the rest carried over or open).
        confirmed = frozenset(p for p in self.initial.pals
                              if self.vs.location_resolved(p.pa, p.location))
        return AssessmentResult(self.method, self.initial, model, tuple(changes), flagged_pals,
                                tuple(self.queries), tuple(self.vs.conflicts),
                                tuple([*notes, *self.notes]), self.budget_exhausted, reasons,
                                confirmed)


def _show(ga: Sequence[str]) -> str:
    return f"({' '.join(ga)})"


__all__ = ["ALL_VALUES", "AssessmentResult", "Method", "PalChange", "QueryLog", "assess"]
