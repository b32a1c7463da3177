"""What the engine knows and what it must resolve: evidence, targets, trust in the model.

:class:`Evidence` holds the version space, the targets (DAAISy's Γδ, kept current as
evidence arrives) and the probe designer, reads observations into the version space, and
weighs the known model against the evidence (docs/assessment.md). The query loop
(:mod:`capwatch.assess.engine`) builds on it.
"""

from __future__ import annotations

from collections.abc import Iterable

from capwatch.assess.atoms import fixed_atoms, tied_atoms
from capwatch.assess.design import Designer
from capwatch.assess.entangled import update_entangled
from capwatch.assess.observations import Transition
from capwatch.assess.outcomes import OutcomeSpace
from capwatch.assess.probes import Probe
from capwatch.assess.result import Method, QueryLog
from capwatch.assess.versionspace import VersionSpace, mask_of, violating
from capwatch.model.domain import Action, Domain, GroundAtom, LiftedAtom
from capwatch.model.pal import (
    AbstractModel,
    Mode,
    PalTuple,
    PaTuple,
    PaValue,
    lifted_instantiations,
    pre_mode,
)


class Evidence:
    """The engine's knowledge: Γ per action, the version space, targets and flags."""

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
        # aia keeps only the vocabulary, so its outcomes come from the steps alone.
        self.vs.outcomes = {a.name: OutcomeSpace.of(a, self.pas[a.name],
                                                    known=method is not Method.AIA)
                            for a in known.actions if len(a.outcomes) > 1}
        self.fixed = {a.name: fixed_atoms(a, set(self.atoms[a.name])) for a in known.actions}
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
        self.sampled_out: set[str] = set()
        """Probabilistic actions with a probe dropped: asked again, it taught nothing."""
        self.resample_steps: dict[str, list[Probe]] = {}
        """Per undecided probabilistic action, the steps that ask it again."""
        self.resample_runs: dict[str, int] = {}
        """Per action, how many of those steps ran."""
        self.resample_idle: dict[str, int] = {}
        self.resample_offers: dict[str, int] = {}
        """Per action, the queries its resample steps were sent in."""
        self.offering: set[str] = set()
        """The actions asked again in the query being built."""
        self.resample_given_up: set[str] = set()
        self.refused_actions: set[str] = set()
        """Actions a step of which some answer refused (the engine's final check)."""
        self.mix_tried: set[str] = set()
        """Actions asked again alone while a known outcome was kept beside an added one
        and no answer had run them twice (:meth:`OutcomeSpace.unmixable`)."""
        self.two_draws: dict[str, tuple[object, list[Probe]]] = {}
        """Per action asked again in two-draw queries, what the steps were built for and
        the steps (resampled ones and the restoring ones between them)."""
        self.settle_best: dict[str, int] = {}
        """Per action, the most steps that counted toward settling its open effects."""
        self.tired: dict[Probe, int] = {}
        """Probes of probabilistic actions asked since the evidence last changed."""
        self.final_ran = 0
        self.final_failed = 0
        self.known_view: dict[PaTuple, PaValue] = {} if method is Method.AIA else \
            self.init_value
        self.tied = {a.name: tied_atoms(a, self.atoms[a.name]) for a in known.actions
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
            where = f"observed {show(t.action)} at {t.source or 'a transition'}"
            executed = t.did_execute
            if executed is True:
                # An atom two lifted atoms ground to (repeated objects) was seen before the
                # step, which constrains both preconditions; its value after is the joint
                # work of both effects, so it says nothing about either one.
                seen = {pa: (g in t.state, g in t.next_state if counts[g] == 1 else None)
                        for pa, g in ground.items()}
                self.vs.executed(action.name, seen, where)
                if len(set(ground.values())) < len(ground) or any(
                        c > 1 for c in counts.values()):
                    self._entangled(action, binding, ground, t, where)
                outside = (t.state ^ t.next_state) - set(ground.values())
                if outside:
                    self.notes.append(f"{where}: changed atoms no pal-tuple of the action can "
                                      f"mention: {sorted(outside)}")
            elif executed is False:
                present = {pa: g in t.state for pa, g in ground.items()}
                if len(set(t.action[1:])) == len(t.action) - 1:
                    self.vs.failed(action.name, present, where + " (refused)")
                # else: a step naming one object twice may be refused by an inequality
                # (not (= ?a ?b)), which no literal states; as a clause, a literal that
                # falls on a required atom's ground atom there ((not (p ?b)) beside (p ?a))
                # was decided by propagation alone, never asked on distinct objects, and
                # published (rev13b's parking distinct 1). The pa-tuples it may blame are
                # still flagged, so probes on distinct objects decide them; the refusal
                # stays for the replay, which fails closed if no model explains it.
                self._flag_refusal(present, where)
        self._refresh_targets()

    def _flag_refusal(self, present: dict[PaTuple, bool], where: str) -> None:
        """A refusal the known model says cannot happen (every precondition it states held)
        rules out no single known value: any of the preconditions that could have blocked
        the step may be the new one. They are the pa-tuples in doubt, so daaisy resolves
        them (it asked nothing and its model contradicted the refusal)."""
        if any(mask_of([self.init_value[pa]]) & violating(v)
               for pa, v in present.items() if pa in self.init_value):
            return
        for pa, v in present.items():
            if self.vs.masks[pa] & violating(v):
                self._flag(pa, f"{where} (refused although the known model says it applies): "
                               f"it may be the precondition that blocked it")

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
        for space in self.vs.outcomes.values():
            for pa in sorted(space.contradicted - self.targets):
                self._flag(pa, f"a step of {pa.action} showed an outcome the known model "
                               f"does not have: it changed {pa.atom} otherwise")
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

    def check_known_model(self) -> None:
        """Weigh the known model against the evidence, for :class:`Designer`.

        A pa-tuple counts against it when the evidence rules its known value out, for it
        when the evidence leaves only that value. More against than for drops it as
        hypothesis altogether: it then predicts worse than AIA's prior and would only
        misorder probes (verify must never cost more than aia)."""
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
        if wrong > right and self.method is Method.VERIFY:
            self.design.from_scratch = True
            self.notes.append(f"the evidence refuted the known value of {wrong} pa-tuples and "
                              f"confirmed {right}: probes no longer follow the known model")



def show(ga: tuple[str, ...] | list[str]) -> str:
    return f"({' '.join(ga)})"
