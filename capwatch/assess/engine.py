"""Differential assessment (DAAISy), verification and learning from scratch (AIA).

Entry point: :func:`assess`. The engine is pure: it sees the agent only through
:class:`~capwatch.assess.agent.AgentQuery`, plans only through a planner object, and reads
no clock. Three methods share one loop over a :class:`VersionSpace`:

``daaisy``  resolve only the pa-tuples the observations show to be affected (Table 2:
            the known value is no longer possible; optimal sub-traces that the known
            model could have shortened; hints from the monitor); every other pa-tuple
            keeps its known value unless the evidence fixes it (papers/daaisy.md Alg. 1).
``verify``  as ``daaisy``, then confirm every remaining pa-tuple with probing queries,
            taking the known model as the hypothesis: one query confirms many at once.
``aia``     ignore the known model (keep only its vocabulary) and learn every pa-tuple.

Each round designs probes from the current hypothesis (docs/assessment.md), packs them
into one plan-outcome query, asks the agent, and narrows the version space with the
answer. The loop ends when every target is resolved, the budget is spent, or no probe
can teach anything more.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from capwatch.assess.agent import AgentQuery, QueryResult
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
    RISKY,
    SAFE,
    SPLIT,
    ObjectFactory,
    Probe,
    Query,
    pack,
    read_answer,
)
from capwatch.assess.shortcuts import find_shortcuts
from capwatch.assess.versionspace import (
    ALL_VALUES,
    PRE_ABSENT,
    Conflict,
    ValueMask,
    VersionSpace,
    is_single,
    mask_of,
    predicted_post,
    values_of,
    violating,
)
from capwatch.model.domain import Domain, GroundAction, GroundAtom, LiftedAtom
from capwatch.model.pal import (
    AbstractModel,
    Location,
    Mode,
    PalTuple,
    PaTuple,
    PaValue,
    lifted_instantiations,
    summarise_changes,
)


class Method(enum.Enum):
    DAAISY = "daaisy"
    VERIFY = "verify"
    AIA = "aia"
    AUTO = "auto"
    """daaisy, switching to verify when over half of the pa-tuples are flagged."""


AUTO_SWITCH = 0.5


@dataclass(frozen=True, slots=True)
class QueryLog:
    number: int
    state: frozenset[GroundAtom]
    plan: tuple[GroundAction, ...]
    executed: int
    final_state: frozenset[GroundAtom]
    purposes: tuple[str, ...]
    """Why each step was asked, in plan order."""


@dataclass(frozen=True, slots=True)
class PalChange:
    pal: PalTuple
    old: Mode
    new: Mode
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class AssessmentResult:
    method: Method
    initial: AbstractModel
    model: AbstractModel
    """The assessed model: ``?`` where the engine could not decide (budget, no probe)."""
    changes: tuple[PalChange, ...]
    """Pal-tuples whose mode differs from the known model, with the evidence for each."""
    affected: frozenset[PalTuple]
    """Pal-tuples the observations flagged as possibly changed (before any query)."""
    queries: tuple[QueryLog, ...]
    conflicts: tuple[Conflict, ...]
    notes: tuple[str, ...]
    budget_exhausted: bool

    @property
    def query_count(self) -> int:
        return len(self.queries)

    @property
    def unresolved(self) -> frozenset[PalTuple]:
        return self.model.unknown()

    def best_guess(self) -> AbstractModel:
        """Concrete: unresolved pal-tuples keep the known model's mode."""
        return self.model.with_modes(
            (p, self.initial.mode(p)) for p in self.model.unknown())

    def domain(self) -> Domain:
        return self.best_guess().to_domain()

    def summary(self) -> list[str]:
        return summarise_changes(((c.pal, c.old, c.new) for c in self.changes
                                  if c.new is not Mode.UNKNOWN), self.initial.base)


DEFAULT_BUDGET = 200


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
    if m is not Method.AIA:
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
    engine.run(agent)
    return engine.result(notes)


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
        self.explored: dict[str, list[dict[LiftedAtom, bool]]] = {}
        self.budget_exhausted = False
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
            ground = {PaTuple(action.name, a): a.ground(binding) for a in self.atoms[action.name]}
            counts: dict[GroundAtom, int] = {}
            for g in ground.values():
                counts[g] = counts.get(g, 0) + 1
            where = f"observed {_show(t.action)} at {t.source or 'a transition'}"
            executed = t.did_execute
            if executed is True:
                seen = {pa: ((g in t.state, g in t.next_state) if counts[g] == 1 else (None, None))
                        for pa, g in ground.items()}
                self.vs.executed(action.name, seen, where)
                outside = (t.state ^ t.next_state) - set(ground.values())
                if outside:
                    self.notes.append(f"{where}: changed atoms no pal-tuple of the action can "
                                      f"mention: {sorted(outside)}")
            elif executed is False:
                self.vs.failed(action.name, {pa: (g in t.state if counts[g] == 1 else None)
                                             for pa, g in ground.items()}, where + " (refused)")
        self._refresh_targets()

    def flag(self, pals: Iterable[PalTuple], reason: str) -> None:
        for pal in pals:
            self._flag(pal.pa, reason)

    def flag_action(self, action: str, reason: str) -> None:
        """Reduced functionality: every pa-tuple of the action not yet pinned down."""
        for atom in self.atoms.get(action, ()):
            pa = PaTuple(action, atom)
            if not self.vs.resolved(pa):
                self._flag(pa, reason)

    def _flag(self, pa: PaTuple, reason: str) -> None:
        if pa not in self.init_value:
            return
        self.flagged.add(pa)
        self.targets.add(pa)
        self.flag_reasons.setdefault(pa, []).append(reason)

    def _refresh_targets(self) -> None:
        """Known values the evidence rules out become targets (DAAISy's Γδ, kept current)."""
        if self.method is Method.AIA:
            return
        for pa, value in self.init_value.items():
            if pa in self.targets or self.vs.mask(pa) & mask_of([value]):
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
        mask = self.vs.mask(pa)
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

    # ------------------------------------------------------------------ hypothesis

    def hypothesis(self, pa: PaTuple) -> PaValue:
        mask = self.vs.mask(pa)
        values = values_of(mask)
        if len(values) == 1:
            return values[0]
        if self.method is not Method.AIA:
            init = self.adopted.get(pa, self.init_value[pa])
            if mask & mask_of([init]):
                return init
            # The known value is gone: take the closest surviving value, preferring a
            # precondition (an atom always seen with one value is likely required).
            return min(values, key=lambda v: (v[0] is Mode.ABSENT,
                                              (v[0] is not init[0]) + (v[1] is not init[1])))
        return min(values, key=lambda v: v[0] is Mode.ABSENT)

    def _satisfying(self, pa: PaTuple) -> tuple[bool, ...]:
        pre = self.hypothesis(pa)[0]
        if pre is Mode.POS:
            return (True,)
        if pre is Mode.NEG:
            return (False,)
        return (False, True)

    def _safe(self, pa: PaTuple) -> tuple[bool, ...]:
        mask = self.vs.mask(pa)
        return tuple(v for v in (False, True) if not mask & violating(v))

    @staticmethod
    def _split_score(mask: ValueMask, value: bool) -> int:
        """Worst-case number of values left after executing with the atom at ``value``."""
        cells: dict[object, int] = {}
        for v in values_of(mask):
            outcome: object = "fail" if mask_of([v]) & violating(value) else \
                predicted_post(v, value)
            cells[outcome] = cells.get(outcome, 0) + 1
        return max(cells.values())

    # ------------------------------------------------------------------ probes

    def _base(self, action: str) -> dict[LiftedAtom, bool]:
        """Every atom at a value that cannot violate a precondition, informative if possible."""
        assignment: dict[LiftedAtom, bool] = {}
        for atom in self.atoms[action]:
            pa = PaTuple(action, atom)
            safe = self._safe(pa)
            choices = [v for v in self._satisfying(pa) if v in safe] or list(safe) or list(
                self._satisfying(pa))
            mask = self.vs.mask(pa)
            assignment[atom] = min(choices, key=lambda v: (self._split_score(mask, v), v))
        return assignment

    def probes(self, action: str, only: Collection[PaTuple] | None
               ) -> tuple[Probe | None, list[Probe]]:
        """(a success probe, uncertain probes) for the action's unresolved pa-tuples that
        are in ``only`` (all of them when None)."""
        todo = [pa for pa in (PaTuple(action, a) for a in self.atoms[action])
                if (only is None or pa in only) and not self.vs.resolved(pa)]
        if not todo:
            return None, []
        if action not in self.vs.executed_actions:
            probe = self._explore(action)
            return None, [probe] if probe else []
        base = self._base(action)
        uncertain: list[Probe] = []
        clauses = [[(pa, v) for pa, v in self.vs.live_literals(c) if v is not None]
                   for c in self.vs.open_clauses(action)]
        # The smallest clause first: after a failed split it is the half just tested.
        open_ = sorted((c for c in clauses if len(c) >= 2), key=len)
        if open_:
            live = open_[0]
            half = live[: len(live) // 2]
            assignment = dict(base)
            for pa, v in half:
                assignment[pa.atom] = v
            uncertain.append(Probe(action, assignment, SPLIT,
                                   "which of " + ", ".join(str(pa.atom) for pa, _ in live)
                                   + f" blocked {action}?", risky=len(half)))
        success = dict(base)
        risky: list[PaTuple] = []
        informative = False
        # While a failure clause is being split, risky atoms would only fail again for
        # the same unknown reason and waste the rest of the plan.
        splitting = any(p.kind == SPLIT for p in uncertain)
        for pa in todo:
            mask = self.vs.mask(pa)
            hyp = self.hypothesis(pa)
            if hyp[0] is not Mode.ABSENT and mask & PRE_ABSENT:
                violate = hyp[0] is Mode.NEG
                assignment = dict(base)
                assignment[pa.atom] = violate
                uncertain.append(Probe(action, assignment, FAIL,
                                       f"does {action} require "
                                       f"{'' if hyp[0] is Mode.POS else 'not '}{pa.atom}?"))
                continue
            choices = self._satisfying(pa)
            if splitting:
                choices = tuple(v for v in choices if not mask & violating(v)) or choices[:0]
                if not choices:
                    continue
            best = min(choices, key=lambda v: (self._split_score(mask, v),
                                               bool(mask & violating(v)), v))
            if self._split_score(mask, best) < len(values_of(mask)):
                informative = True
                success[pa.atom] = best
                if mask & violating(best):
                    risky.append(pa)
        probe = None
        if informative:
            kind = RISKY if risky else SAFE
            what = ", ".join(str(pa.atom) for pa in risky) if risky else "effects"
            probe = Probe(action, success, kind, f"{action}: does it run with {what} "
                          f"as chosen, and what changes?", risky=len(risky))
        return probe, uncertain

    def _explore(self, action: str) -> Probe | None:
        """A state to try a never-executed action in: hypothesis first, then trace states."""
        tried = self.explored.setdefault(action, [])
        atoms = self.atoms[action]
        if len(tried) > 2 * len(atoms) + 2:
            return None
        candidates: list[dict[LiftedAtom, bool]] = []
        hyp = {a: self._satisfying(PaTuple(action, a))[-1] for a in atoms}
        candidates.append(hyp)
        act = self.actions[action]
        for t in self.pool:
            if t.action[0] == action:
                continue
            objs = sorted({o for atom in t.state for o in atom[1:]})
            if len(objs) < act.arity:
                continue
            for args in _distinct_tuples(objs, act.arity, limit=8):
                binding = dict(zip(act.parameter_names, args, strict=True))
                candidates.append({a: a.ground(binding) in t.state for a in atoms})
        for done in tried:
            for atom in atoms:
                flipped = dict(done)
                flipped[atom] = not flipped[atom]
                candidates.append(flipped)
        for cand in candidates:
            if cand in tried or self._surely_fails(action, cand):
                continue
            tried.append(cand)
            return Probe(action, cand, EXPLORE, f"is there a state where {action} runs?")
        return None

    def _surely_fails(self, action: str, assignment: Mapping[LiftedAtom, bool]) -> bool:
        for clause in self.vs.clauses:
            if clause.action != action:
                continue
            live = self.vs.live_literals(clause)
            if live and all(v is not None and assignment[pa.atom] == v for pa, v in live):
                return True
        return False

    # ------------------------------------------------------------------ loop

    def run(self, agent: AgentQuery) -> None:
        objects = ObjectFactory(self.taken)
        while True:
            safe: list[Probe] = []
            risky: list[Probe] = []
            final: list[Probe] = []
            riders = self.method is Method.DAAISY
            rider_final: list[Probe] = []
            for action in sorted(self.atoms):
                success, uncertain = self.probes(action, self.targets)
                if riders and (success is not None or uncertain):
                    # A query goes out for the targets anyway: let it also test what the
                    # observations never challenged, at no extra query.
                    success, more = self.probes(action, None)
                    rider_final.extend(more)
                if success is not None:
                    (risky if success.kind == RISKY else safe).append(success)
                final.extend(uncertain)
            if not (safe or risky or final):
                break
            final = final or rider_final
            if len(self.queries) >= self.budget:
                self.budget_exhausted = True
                break
            query = pack(safe, risky, final, self.actions, objects, self._effect)
            if query is None:
                break
            answers = agent.query(query.state, query.plan, 1)
            if not answers:
                self.notes.append("the agent returned no answer; stopped")
                break
            self._absorb(query, answers[0])
            self._refresh_targets()

    def _effect(self, pa: PaTuple) -> Mode:
        return self.vs.modes(pa)[1]

    def _absorb(self, query: Query, answer: QueryResult) -> None:
        number = len(self.queries) + 1
        self.queries.append(QueryLog(number, query.state, tuple(query.plan), answer.executed,
                                     answer.state, tuple(s.probe.purpose for s in query.steps)))
        executed, failed = read_answer(query, answer, self._effect)
        for i, (step, seen) in enumerate(executed):
            self.vs.executed(step.probe.action, seen,
                             f"query {number} step {i + 1}: {_show(step.ground_action)} ran")
        if failed is not None:
            step, values = failed
            self.vs.failed(step.probe.action, values,
                           f"query {number} step {len(executed) + 1}: "
                           f"{_show(step.ground_action)} refused")

    # ------------------------------------------------------------------ result

    def result(self, notes: Sequence[str]) -> AssessmentResult:
        modes: dict[PalTuple, Mode] = {}
        for pal in self.initial.pals:
            pa = pal.pa
            mask = self.vs.mask(pa)
            known = self.init_value[pa]
            idx = 0 if pal.location is Location.PRE else 1
            if is_single(mask):
                modes[pal] = values_of(mask)[0][idx]
            elif pa in self.targets:
                fixed = self.vs.modes(pa)[idx]
                modes[pal] = fixed
            elif mask & mask_of([known]):
                modes[pal] = known[idx]
            elif pa in self.adopted and mask & mask_of([self.adopted[pa]]):
                modes[pal] = self.adopted[pa][idx]
            else:
                modes[pal] = Mode.UNKNOWN
        model = self.initial.with_modes(modes)
        changes = []
        for pal, old, new in self.initial.diff(model):
            ev = list(self.flag_reasons.get(pal.pa, [])) + list(self.vs.evidence.get(pal.pa, []))
            changes.append(PalChange(pal, old, new, tuple(dict.fromkeys(ev))))
        for action in sorted(self.atoms):
            if action not in self.vs.executed_actions and any(
                    PaTuple(action, a) in self.targets for a in self.atoms[action]):
                self.notes.append(f"no state was found in which {action} executes; its "
                                  f"pal-tuples stay unresolved")
        flagged_pals = frozenset(p for p in self.initial.pals if p.pa in self.flagged)
        return AssessmentResult(self.method, self.initial, model, tuple(changes), flagged_pals,
                                tuple(self.queries), tuple(self.vs.conflicts),
                                tuple([*notes, *self.notes]), self.budget_exhausted)


def _distinct_tuples(objs: Sequence[str], n: int, limit: int) -> list[tuple[str, ...]]:
    import itertools

    return list(itertools.islice(itertools.permutations(objs, n), limit))


def _show(ga: Sequence[str]) -> str:
    return f"({' '.join(ga)})"


__all__ = ["ALL_VALUES", "AssessmentResult", "Method", "PalChange", "QueryLog", "assess"]
