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
from collections.abc import Collection, Mapping, Sequence

from capwatch.assess.agent import AgentQuery, AgentRefusesQueries, QueryNotAttempted, QueryResult
from capwatch.assess.design import AFTER, COUNT, SAFE_VALUES
from capwatch.assess.effect_masks import posts
from capwatch.assess.evidence import Evidence, show
from capwatch.assess.observations import (
    Observation,
    infer_object_types,
    optimal_traces,
    transitions_of,
)
from capwatch.assess.outcome_shares import (
    MIN_OUTCOME_PROBABILITY,
    PROBABILITY_TOLERANCE,
    ShareEstimate,
    estimate,
    probability_gap,
    published,
    rare_doubts,
    rare_needed,
)
from capwatch.assess.outcomes import OUTCOME_ERROR, OUTCOME_SAFETY, OutcomeSpace
from capwatch.assess.planner import Planner
from capwatch.assess.probes import (
    EXPLORE,
    FAIL,
    RESAMPLE,
    RESTORE,
    ObjectFactory,
    Probe,
    Query,
    StepMaker,
    pack,
    read_answer,
)
from capwatch.assess.result import (
    AssessmentResult,
    Method,
    PalChange,
    QueryLog,
    RetiredOutcome,
)
from capwatch.assess.shortcuts import find_shortcuts
from capwatch.assess.versionspace import (
    ALL_VALUES,
    is_single,
    mask_of,
    values_of,
    violating,
)
from capwatch.model.domain import Domain, LiftedAtom, Outcome
from capwatch.model.pal import (
    Location,
    Mode,
    PalTuple,
    PaTuple,
)

AUTO_SWITCH = 0.5
DEFAULT_BUDGET = 200
MAX_QUERY_ATOMS = 10_000
"""The largest initial state of a query (atoms) unless the caller says otherwise."""
WINDOW_SAFETY = 8.0
"""-ln of the accepted chance that a query's window of expected failures all run."""
MIN_WINDOW = 256
"""Expected failures always sent together; only larger models see a window at all."""
RESAMPLE_STEPS = 64
"""Most steps of one undecided action sent in one query (the rest wait for the next)."""
RESAMPLE_ROUNDS = 3
"""While the answers leave an action's added outcomes in doubt (OutcomeSpace.doubts),
asking it again stops after this many times the answers that show its least likely known
outcome but for e^-OUTCOME_SAFETY (_repeats: 29 at p = 0.1), or this many times the steps
that show it but for the accepted error (66 at p = 0.1), whichever comes first: an agent drawing its
outcomes independently shows an added outcome again, and beside the known ones, within a
few answers; what is still in doubt after three times that is not its outcomes' chance."""
_FINAL_ORDER = {EXPLORE: 0, FAIL: 1}
REFUSED_QUERIES = 12
"""Queries of an assessment that ran no step, none before them either, after which the
final check's steps are asked early where a known model (verify, daaisy) or observed runs
say steps run: two refused, nothing run still, and the agent is taken to refuse queries
(:class:`AgentRefusesQueries`), as at the last final check. The count alone names no one:
an honest agent whose actions gained preconditions may refuse a dozen queries designed
from the known model and run the next (IPC barman, assess19b). One that runs nothing
gives the engine nothing to learn from but refusals, each read as a precondition (3 to 95
queries on session 19's domains, then a final check failed on "the agent changed during
the assessment")."""


def assess(known: Domain, observations: Sequence[Observation], agent: AgentQuery, *,
           method: Method | str = Method.DAAISY,
           affected: Collection[PalTuple] = (),
           budget: int = DEFAULT_BUDGET,
           planner: Planner | None = None,
           objects: Mapping[str, Sequence[str]] | None = None,
           detect_reduced: bool = True,
           minimal_change: bool = False,
           max_search_states: int = 20_000,
           outcome_error: float = OUTCOME_ERROR,
           min_outcome_probability: float = MIN_OUTCOME_PROBABILITY,
           probability_tolerance: float = PROBABILITY_TOLERANCE,
           max_query_atoms: int = MAX_QUERY_ATOMS,
           independent_draws: bool = False) -> AssessmentResult:
    """Assess how ``agent`` now behaves, relative to the ``known`` model.

    ``observations`` are the agent's recent transitions or traces (optimal ones enable
    reduced-functionality detection). ``affected`` adds pal-tuples the caller suspects
    (e.g. from the monitor). ``budget`` caps the number of queries. ``objects`` (type →
    names) grounds the known model for the optimal-plan comparison; inferred from the
    observations when omitted. ``minimal_change`` (daaisy only) settles a pa-tuple whose
    known value the observations rule out by changing just the location they pin down,
    without a query: fewer queries, lower accuracy (docs/assessment.md).
    ``outcome_error`` is the accepted chance of dropping an outcome of a probabilistic
    action that the agent still has (docs/assessment.md, "Probabilistic actions").
    ``min_outcome_probability``: an outcome the steps added is published only once its
    probability is shown to be at least this, and a known one no step showed is taken
    to be gone only once its probability is shown to be below it (0: at its known
    probability, session 14's rule); ``probability_tolerance``: re-estimated
    outcome probabilities are published only once within this of the truth for two
    outcomes at 1/2, elsewhere within the same Pearson chi-square distance, relative to
    each probability's size (but for a chance of 1%, docs/assessment.md, "Outcome
    probabilities", :func:`outcome_shares.pearson_tolerance`); otherwise the action's
    outcomes are undecided. ``max_query_atoms`` caps a query's initial state (probes
    that do not fit wait for the next query; docs/agent-query-protocol.md, "Query size").
    ``independent_draws`` is the caller's word that the agent draws every step's outcome
    independently (it does not switch between models per answer): an outcome added
    beside kept known ones on an action no answer runs twice is then published, where
    by default it fails closed (:meth:`OutcomeSpace.unmixable`; docs/assessment.md,
    "Agents declared to draw independently": a per-answer switcher is then published
    with both models' outcomes); it also turns off the test that the answers draw from
    one distribution (:meth:`OutcomeSpace.mixed_answers`).
    """
    if max_query_atoms < 1:
        raise ValueError(f"max_query_atoms must be at least 1, got {max_query_atoms!r}")
    if not 0.0 < outcome_error < 1.0:
        raise ValueError(f"outcome_error must be in (0, 1), got {outcome_error!r}")
    requested = Method(method) if isinstance(method, str) else method
    m = Method.DAAISY if requested is Method.AUTO else requested
    if not 0.0 <= min_outcome_probability < 1.0:
        raise ValueError(f"min_outcome_probability must be in [0, 1), got "
                         f"{min_outcome_probability!r}")
    if not 0.0 < probability_tolerance <= 1.0:
        raise ValueError(f"probability_tolerance must be in (0, 1], got "
                         f"{probability_tolerance!r}")
    engine = _Engine(known, m, budget, minimal_change, tolerance=probability_tolerance)
    engine.max_query_atoms = max_query_atoms
    for space in engine.vs.outcomes.values():
        space.error = outcome_error
        space.min_share = min_outcome_probability
        space.independent = independent_draws
    observed = list(transitions_of(observations))
    engine.observe(observed)
    # An agent is taken to refuse queries when it runs none (REFUSED_QUERIES) only where
    # something says steps run: a known model being assessed, or observations of it
    # running. Learning from nothing (aia, no observation), refusals are all there is.
    engine.evidence_ran = m is not Method.AIA or any(t.did_execute for t in observed)
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
    engine.check_known_model()
    engine.run(agent)
    return engine.result(notes)


def refused_every_query(result: AssessmentResult, observations: Sequence[Observation]
                        ) -> str | None:
    """Why an assessment whose model does not explain its evidence is to be named as one
    of an agent refusing queries (:class:`AgentRefusesQueries`), or None: no step of its
    REFUSED_QUERIES or more queries ran, where a known model (verify, daaisy) or the
    observations say steps run. Asked by the caller that replays the evidence, once it
    found the model unexplained: an agent refusing everything, with no observed run to
    design the checks from (the daemon's three refused samples), ends there, after the
    whole loop, where an honest agent whose first queries all refused has run the later
    ones (IPC barman, two preconditions gained: 12 refused, then learnt)."""
    if len(result.queries) < REFUSED_QUERIES or any(q.executed for q in result.queries):
        return None
    if result.method is Method.AIA and not any(
            t.did_execute for t in transitions_of(observations)):
        return None
    return _refusing(len(result.queries))


def _refusing(number: int) -> str:
    return (f"the agent ran no step of {number} queries, steps the evidence says run "
            f"among them: it refuses queries, or lost every capability its evidence "
            f"shows; no model is learnt from refusals alone")


class _Engine(Evidence):
    def __init__(self, known: Domain, method: Method, budget: int, minimal_change: bool,
                 *, tolerance: float = PROBABILITY_TOLERANCE) -> None:
        super().__init__(known, method, budget, minimal_change)
        self.tolerance = tolerance
        self.shares: dict[str, tuple[int, int, ShareEstimate]] = {}
        self.max_query_atoms: int | None = None
        self.checks = 0
        self.ran_any = False
        """Whether some answer of this assessment ran a step."""
        self.check_refused = 0
        """Final-check steps the evidence says run, refused while no step had run."""
        self.evidence_ran = False
        self.early_checked = False
        """Whether the check after REFUSED_QUERIES refused queries was asked."""
        """Whether a known model (verify, daaisy) or the observations say steps run."""

    # ------------------------------------------------------------------ probabilities

    def _shares(self, action: str) -> ShareEstimate:
        """The action's outcome probabilities from the steps that tell them apart
        (outcome_shares.estimate), recounted when a step came in."""
        space = self.vs.outcomes[action]
        hit = self.shares.get(action)
        if hit is not None and hit[:2] == (space.stamp, len(space.befores)):
            return hit[2]
        est = estimate(space)
        self.shares[action] = (space.stamp, len(space.befores), est)
        return est

    def _pals_changed(self, action: str) -> bool:
        """Whether the evidence rules out a known pal-value of the action."""
        return any(not self.vs.masks[pa] & mask_of([self.init_value[pa]])
                   for pa in self.pas[action])

    def _probability_gap(self, action: str) -> str | None:
        """Why the probabilities a version would state for the action are not shown
        (outcome_shares.probability_gap), None when they are or it never ran asked."""
        space = self.vs.outcomes[action]
        if not any(a is not None for a in space.answered):
            return None
        return probability_gap(space, self._shares(action),
                               pals_changed=self._pals_changed(action),
                               tolerance=self.tolerance)

    def _rare_only(self, space: OutcomeSpace, doubts: list[str]) -> bool:
        """Whether the only doubts are about added outcomes' shares (a matter of steps,
        not of how the answers mix)."""
        return bool(doubts) and doubts == rare_doubts(space, space.min_share)

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
            # Riders expected to run ride along; riders expected to fail only when the
            # targets have no failure of their own to ask (each query ends at one).
            risky.extend(rider_risky)
            if not final:
                final = rider_final
            if self.tired:
                safe, risky, final = (self._rested(ps) for ps in (safe, risky, final))
            resample = self._resample_probes(bool(safe or risky or final))
            safe.extend(resample)
            if not (safe or risky or final):
                break
            if len(self.queries) >= self.budget:
                self.budget_exhausted = True
                break
            final = self._window(final)
            maker.retain([*safe, *risky, *final])
            query = pack(safe, risky, final, self.actions, objects, after=self._after,
                         steps=maker, max_atoms=self.max_query_atoms)
            if query is None:
                self.stalled = True
                break
            answers = agent.query(query.state, query.plan, 1)
            if not answers:
                self.notes.append("the agent returned no answer; stopped")
                self.stalled = True
                return
            before = (sum(self.vs.version.values()), len(self.vs.clauses))
            versions = dict(self.vs.version)
            sampled = self._sampled()
            self._absorb(query, answers[0])
            if not self.ran_any and self.evidence_ran and not self.early_checked \
                    and len(self.queries) >= REFUSED_QUERIES:
                self._early_check(agent, objects, maker)
            resampling = self._resampled(query, answers[0], sampled)
            if (sum(self.vs.version.values()), len(self.vs.clauses)) == before and \
                    self._sampled() == sampled:
                # The same probes would be designed and asked again: stop instead, unless
                # a probabilistic step ran an outcome already seen: asked again, the
                # agent may run one that teaches something (QACE repeats its queries).
                if not self._tire(query, answers[0]) and not resampling:
                    self.notes.append(f"query {len(self.queries)} narrowed nothing; stopped")
                    self.stalled = True
                    break
                continue
            # A probe is designed from its own action's evidence only: one whose action
            # learnt nothing would teach as little as before, and asked again after
            # every other action's progress it would cost its repeats each time.
            now = self._sampled()
            moved = {a for a, v in self.vs.version.items() if versions.get(a) != v} | {
                a for a in set(now) | set(sampled) if now.get(a) != sampled.get(a)}
            self.tired = {p: n for p, n in self.tired.items() if p.action not in moved}
            self._refresh_targets()
            self.check_known_model()
        self._final_check(agent, objects, maker)
        if not self.ran_any and self.check_refused >= 2:
            raise AgentRefusesQueries(_refusing(len(self.queries)))

    def _early_check(self, agent: AgentQuery, objects: ObjectFactory,
                     maker: StepMaker) -> None:
        """After REFUSED_QUERIES queries that ran nothing, the final check's steps (each
        where the evidence so far says it surely runs) are asked once, and an agent that
        refuses two of them, still running nothing, is named. Refused designed queries
        alone do not tell a refusing agent from an honest one whose actions gained
        preconditions the queries left false: counting them named such an agent (IPC
        barman, two literals gained, its walk a dead end: 12 of 12 refused, named and
        given up, where the queries that follow learn the drift). A step the evidence
        says surely runs, refused, is what the final check reads as the agent having
        changed; refused twice with nothing run, the agent runs none of what its
        evidence showed. Otherwise the loop goes on."""
        self.early_checked = True
        notes = len(self.notes)
        self._final_check(agent, objects, maker)
        if not self.ran_any and self.check_refused >= 2:
            raise AgentRefusesQueries(_refusing(len(self.queries)))
        # The loop goes on: its final check says again what still holds at the end.
        del self.notes[notes:]
        self.check_refused = 0

    def _final_check(self, agent: AgentQuery, objects: ObjectFactory,
                     maker: StepMaker) -> None:
        """After every other query, each deterministic action is asked once more to run
        where the evidence says it surely does (:meth:`Designer.check`: every atom at a
        value a run showed safe, and a second step with each atom that has two such
        values at its other one), past the budget (as the daemon asks its queries again
        past it). A version describes the agent as it is at the end of the assessment,
        and the evidence for an action may all predate a change: the observations and
        the early answers come from the agent before it changed. Two ways that went
        wrong (rev13b, an agent drifting during the assessment): refused steps of a
        probe read as a precondition on the one atom it flipped, which rests on every
        other atom's value being safe still (parking, budget 8: three preconditions
        neither model has); and effects decided from the observations of an action no
        later answer ran, its probes sitting behind refused steps (grid, budget 12:
        pickup published deleting ``(at ?key ?curpos)``, which the changed agent no
        longer does; and with budget to spare, where the loop ended with nothing left
        to ask about pickup). The check's steps show each decided effect (every atom at
        each of its safe values) and each safe value: the changed agent refuses one, or
        its step contradicts the older evidence, the model does not explain the answer
        and nothing is published. A stationary agent runs them and they agree with
        what it showed before. Probabilistic actions are asked too (session 16), their
        refusals read as any other; their steps that ran are not learnt from (they would
        teach outcomes after the loop decided them, and an outcome seen once there could
        neither show again nor retire): what such a step ran is left to the replay of
        the answers, where an outcome the version lacks is unexplained. Not caught: a
        change no safe value shows (a new precondition on an atom only ever seen at the
        value it now needs), and a change after the check."""
        # The actions the version states: every one for verify and aia, daaisy's targets
        # (its untouched actions carry the known modes over, no claim).
        # Probabilistic actions too (session 16): a refusal of theirs is read as any
        # other; a step of theirs that ran is not learnt from (below), so the check
        # cannot add or settle an outcome after the loop decided them. The replay of
        # the daemon still sees its answer: an outcome the version lacks fails it.
        probes = [p for action in sorted(self.atoms)
                  if any(pa in self.targets for pa in self.pas[action])
                  for p in self.design.check(action)]
        # A bound in case a query sends none of them; the probes left shrink as they go,
        # so bounding by those stopped once the queries asked reached them (8 probes, 3 a
        # query: the last 2 never sent).
        asked, most = 0, len(probes)
        while probes and asked < most:
            maker.retain(probes)
            query = pack(probes, [], [], self.actions, objects, after=self._after,
                         steps=maker, max_atoms=self.max_query_atoms)
            if query is None or not query.steps:
                return
            try:
                answers = agent.query(query.state, query.plan, 1)
            except QueryNotAttempted as e:
                if self.queries or self.checks:
                    raise  # it attempted designed states before: no excuse now
                # An agent that can only be put in its own world's states (one map's
                # cells) never answers a designed query; a version learnt from the
                # observations alone was published so before the check existed, and
                # failing it would leave such an agent without any (the Gymnasium
                # taxi). Said in the version's notes; a changing agent refusing the same
                # way is not caught (docs/assessment.md).
                self.notes.append(
                    f"final check not made: the agent cannot attempt a designed query "
                    f"({e}); this version rests on the observations alone")
                return
            asked += 1
            if not answers:
                return
            self.checks += 1
            self._absorb(query, answers[0], outcomes=False)
            if answers[0].executed < len(query.steps):
                self.notes.append(
                    f"query {len(self.queries)}: {query.steps[answers[0].executed].probe.action}"
                    f" refused where the evidence says it surely runs: the agent changed "
                    f"during the assessment, or answers otherwise than a model would")
                if self.ran_any or not self.evidence_ran:
                    return
                self.check_refused += 1
                # Nothing ran yet: the check goes on, so that an agent refusing every
                # query is named as one (REFUSED_QUERIES, raised after the check) rather than
                # as one that changed during the assessment.
            # Steps after a refused one were not asked: they go out again.
            sent = {id(step.probe) for step in query.steps[:answers[0].executed + 1]}
            probes = [p for p in probes if id(p) not in sent]

    def _tire(self, query: Query, answer: QueryResult) -> bool:
        """Count a query that narrowed nothing against the probabilistic probes it ran;
        False when it ran none (asking again would teach nothing)."""
        ran = [step.probe for step in query.steps[:answer.executed]
               if step.probe.action in self.vs.outcomes and step.probe.kind != RESAMPLE]
        for probe in ran:
            self.tired[probe] = self.tired.get(probe, 0) + 1
            if self.tired[probe] > self._repeats(probe.action) and \
                    probe.action not in self.sampled_out:
                self.sampled_out.add(probe.action)
                self.notes.append(f"{probe.action}: a probe asked {self.tired[probe]} times "
                                  f"never ran an outcome that taught something; dropped")
        return bool(ran)

    def _sampled(self) -> dict[str, tuple[int, int, int, int]]:
        """Per action asked again, how far it is from settling: the steps that count
        against its unseen known outcomes while one is live (on the way to retiring it,
        :meth:`OutcomeSpace.absence_steps`), else minus the number of its open effects
        (settling open effects is no progress while a known outcome no step showed may
        never show: the action would stay undecided anyway). Only those asked again: one
        that cannot be (no state in which it surely runs) adds known steps through other
        probes without deciding, and kept every query from counting as narrowing
        nothing (an assessment ran to its budget). Once neither is left, the steps that
        tell its outcomes apart (toward determining its probabilities,
        outcome_shares.probability_gap); counted earlier, they kept an action that would
        stay undecided anyway from being given up (hundreds of queries for nothing)."""
        out = {}
        for name in self.offering:
            space = self.vs.outcomes[name]
            # The phase first: from unconfirmed to only open effects left is progress.
            opened = 0 if space.unconfirmed() else len(self.vs.open_effects(name))
            out[name] = (0, min((space.absence_steps(r) for r in space.unseen_known()),
                                default=space.known_steps()), 0, 0) if space.unconfirmed() else \
                (1, 0, -opened, 0) if opened else (2, 0, 0, self._shares(name).n)
        return out

    def _settling(self, action: str) -> bool:
        """Whether the steps that count toward settling the action's open effects by
        absence (:meth:`OutcomeSpace.settling`) went past their best so far: progress for
        asking again, though nothing narrowed yet (the count is not monotone: it is
        recounted when an outcome changes)."""
        space = self.vs.outcomes[action]
        if space.unconfirmed():
            return False
        now = sum(space.settling(r, pa) for r, pa in self.vs.open_effects(action))
        if now > self.settle_best.get(action, 0):
            self.settle_best[action] = now
            return True
        return False

    def _unsettled(self, action: str) -> bool:
        """Whether a probabilistic action that ran would be published with a guess about
        its outcomes: a known outcome no step showed (:meth:`OutcomeSpace.unconfirmed`),
        or an effect of one the steps showed that they left open
        (:meth:`OutcomeSpace.open_effects`). It is asked again, and fails closed
        (``undecided_outcomes``) if that cannot settle it."""
        space = self.vs.outcomes[action]
        return space.unconfirmed() or (any(r.steps for r in space.records) and (
            bool(self.vs.open_effects(action)) or self._probability_gap(action) is not None))

    def _resample_probes(self, others: bool) -> list[Probe]:
        """Steps that ask an undecided probabilistic action again (docs/assessment.md):
        in a state where it surely runs and its unseen known outcomes would show, as many
        as should retire them (at most RESAMPLE_STEPS a query), until one shows or they
        retire. An action whose resampled steps ran no known outcome (all went to added
        ones) in as many steps as would have shown one, were the known outcomes still as
        likely as the least likely of them, but for a chance of the accepted error, is
        given up: it stays undecided (every known outcome changed, or all much rarer: no
        finite number of steps tells which).

        An action in doubt that no answer ran twice is asked alone, in the same query
        every time, once nothing else is left to ask (``others``: other probes are
        pending), one such action at a time: an added outcome must show in two answers.
        A known outcome kept beside an added one is a doubt no such answer lifts
        (:meth:`OutcomeSpace.unmixable`): once the action was asked again alone with that
        doubt (as many steps as the packing lets one query run) and still no answer ran
        it twice, it is given up and fails closed."""
        probes: list[Probe] = []
        self.offering.clear()
        verbatim: list[str] = []
        for action, space in sorted(self.vs.outcomes.items()):
            if not space.records or action in self.resample_given_up or \
                    not self._unsettled(action):
                continue
            mixed = space.mixed_answers()
            if mixed:
                # More answers give a switcher more answers in which to show either
                # model: asking again cannot lift it.
                self.resample_given_up.add(action)
                self.notes.append(f"{action}: its answers do not draw from one "
                                  f"distribution: {'; '.join(mixed)}")
                continue
            doubts = space.doubts()
            if doubts and not space.together() and not self._rare_only(space, doubts) and \
                    any(a is not None for r in space.records for a in r.answers):
                if space.unmixable() and action in self.mix_tried:
                    self.resample_given_up.add(action)
                    self.notes.append(
                        f"{action}: no answer ran it twice, so whether its outcomes mix "
                        f"within one answer cannot be seen: {'; '.join(doubts)}")
                    continue
                verbatim.append(action)
                continue
            probes.extend(self._resample(action, space, alone=False))
        if not (others or probes):
            for action in verbatim:
                probes.extend(self._resample(action, self.vs.outcomes[action], alone=True))
                if probes:
                    if self.vs.outcomes[action].unmixable():
                        self.mix_tried.add(action)
                    break
        return probes

    def _resample(self, action: str, space: OutcomeSpace, *, alone: bool) -> list[Probe]:
        """The steps asking ``action`` again this round (:meth:`_resample_probes`); none
        when it is given up or no state surely runs it. ``alone``: sent as a query of its
        own, the same as last time where there was one."""
        p = min(o.probability for o in self.actions[action].outcomes)
        idle = math.ceil(math.log(space.error) / math.log1p(-p))
        if self.resample_idle.get(action, 0) >= idle:
            self.resample_given_up.add(action)
            self.notes.append(
                f"{action}: {self.resample_idle[action]} steps asking it again ran no "
                f"known outcome and settled no open effect: its outcomes stay "
                f"undecided")
            return []
        doubts = space.doubts()
        offered = self.resample_offers.get(action, 0)
        # Bounded in queries (an action asked once an answer) and in steps (one
        # asked 64 times an answer: thousands of agent steps otherwise). A doubt
        # about an added outcome's share only (outcome_shares.rare_doubts) is a
        # matter of steps, not of the answers' independence: asked while the steps
        # that would show its share above the floor fit in the budget left, and
        # given up at once when its share is not above the floor after 2 / floor steps.
        if self._rare_only(space, doubts):
            stop = rare_needed(space, space.min_share) > (self.budget - len(self.queries)) * (
                RESAMPLE_STEPS if space.together() else 1)
        else:
            stop = bool(doubts) and (
                offered >= RESAMPLE_ROUNDS * self._repeats(action) or
                self.resample_runs.get(action, 0) >= RESAMPLE_ROUNDS * idle)
        if stop:
            self.resample_given_up.add(action)
            self.notes.append(
                f"{action}: asked again in {offered} queries, its answers do not show "
                f"independent outcomes: {'; '.join(doubts)}")
            return []
        kept = self.resample_steps.get(action, [])
        # Telling the outcomes apart (their shares) comes after the open effects: a
        # state chosen for it may hide them.
        state: Mapping[LiftedAtom, bool] | None = kept[0].assignment if alone and kept \
            else self.design.resample(action, apart=not self.vs.open_effects(action) and (
                bool(doubts) or self._probability_gap(action) is not None))
        if state is None:
            return []
        self.resample_offers[action] = offered + 1
        self.offering.add(action)
        # An added outcome in doubt must show twice in one answer: a full query
        # (where answers can hold two steps of the action). An open effect shows only
        # in a step of its own outcome: as many steps as show the least likely
        # outcome with one (but for e^-OUTCOME_SAFETY); an added outcome has no known
        # probability: the least likely known one's.
        opened = [r for r, _ in self.vs.open_effects(action)]
        show = max((math.ceil(OUTCOME_SAFETY / -math.log1p(-min(
            self.actions[action].outcomes[r.origin].probability if r.origin is not None
            else p, 1.0 - 1e-12))) for r in opened), default=1)
        if self._probability_gap(action) is not None:
            show = max(show, self._shares(action).needed(self.tolerance))
        if doubts:
            show = max(show, min(rare_needed(space, space.min_share), RESAMPLE_STEPS))
        # A known outcome no step showed retires only once the steps bound its share
        # below the minimum outcome probability (OutcomeSpace.retired): hundreds of
        # steps, which an action one answer runs once cannot pay within the budget.
        two = self._two_draws(action, state) if doubts or space.unseen_known() else None
        count = RESAMPLE_STEPS if doubts and (two is not None or space.together()) else \
            min(max(space.steps_to_retire(), show, 1), RESAMPLE_STEPS)
        if two is not None:
            return self._drawn_twice(action, state, two, count)
        if not kept or kept[0].assignment != state:
            kept = []
        while len(kept) < count:
            kept.append(Probe(action, state, RESAMPLE,
                              f"{action}: do its unseen outcomes still happen?"))
        self.resample_steps[action] = kept
        return kept[:count]

    def _two_draws(self, action: str, state: Mapping[LiftedAtom, bool]
                   ) -> tuple[frozenset[LiftedAtom], tuple[str, dict[LiftedAtom, bool]] | None
                              ] | None:
        """How one answer can run the action's resampled step more than once where its
        effect on a shared atom (a 0-ary one: blocksworld's pick-up and ``handempty``,
        by chance or not) would otherwise end what may follow it (docs/assessment.md,
        "Two draws in one answer"): the atoms the step leaves unknown or changed, and,
        for those of them
        whose value the next step needs (not both safe for it), a step of another,
        deterministic action that sets them back whatever they were
        (:meth:`Designer.restorer`). None when the step leaves no shared atom unknown
        (the packing chains it already), when no restoring step exists, or when its
        steps could not be told apart: every two live outcomes must differ on an atom of
        the step's own objects, since a shared atom's value between two steps shows in no
        answer (a step two outcomes explain alike teaches nothing, and one that looks
        like a known outcome no earlier step showed would keep it). An agent drawing
        independently then mixes its outcomes within one answer; one that switches models
        per answer never does (:meth:`OutcomeSpace.doubts`)."""
        act = self.actions[action]
        if act.equal:
            return None
        own = set(act.parameter_names)
        space = self.vs.outcomes[action]
        # The shared atoms a step leaves unknown or at another value than the next one
        # needs: those end the chain.
        opaque = [pa for pa in self.pas[action] if own.isdisjoint(pa.atom.args)
                  and self._after(pa, state[pa.atom]) != state[pa.atom]]
        if not opaque:
            return None
        live = space.live()
        owned = [pa for pa in self.pas[action] if not own.isdisjoint(pa.atom.args)]
        for i, a in enumerate(live):
            for k in live[i + 1:]:
                if not any(not posts(a.possible(pa), state[pa.atom]) &
                           posts(k.possible(pa), state[pa.atom]) for pa in owned):
                    return None
        free = frozenset(pa.atom for pa in opaque)
        need = {pa.atom: state[pa.atom] for pa in opaque
                if SAFE_VALUES[self.vs.masks[pa]] != (False, True)}
        if not need:
            return free, None
        restorer = self.design.restorer(need, free, action)
        return None if restorer is None else (free, restorer)

    def _drawn_twice(self, action: str, state: Mapping[LiftedAtom, bool],
                     two: tuple[frozenset[LiftedAtom], tuple[str, dict[LiftedAtom, bool]] | None],
                     count: int) -> list[Probe]:
        """The steps of a two-draw query (:meth:`_two_draws`): the resampled step at its
        state, ``count`` - 1 more with the atoms its chance effect leaves unknown free
        where both their values are safe, and as many restoring steps, which the packing
        places between them (:func:`pack`). Kept while the same, so that their objects
        are too."""
        free, restorer = two
        key = (dict(state), free, restorer)
        hit = self.two_draws.get(action)
        if hit is not None and hit[0] == key:
            return hit[1]
        need = {} if restorer is None else {
            a: state[a] for a in free if a in restorer[1] and
            SAFE_VALUES[self.vs.masks[PaTuple(action, a)]] != (False, True)}
        purpose = f"{action}: do its outcomes mix within one answer?"
        steps = [Probe(action, state, RESAMPLE, purpose)]
        steps += [Probe(action, state, RESAMPLE, purpose, free=free - set(need))
                  for _ in range(count - 1)]
        if restorer is not None:
            name, assignment = restorer
            steps += [Probe(name, assignment, RESTORE,
                            f"{name}: sets back what {action}'s chance effect took",
                            free=frozenset(a for a in free if a in assignment))
                      for _ in range(count - 1)]
        self.two_draws[action] = (key, steps)
        return steps

    def _resampled(self, query: Query, answer: QueryResult,
                   sampled: dict[str, tuple[int, int, int, int]]) -> bool:
        """Count the executions of resampled steps, and those since the last that ran a
        known outcome; False when none ran."""
        ran: dict[str, int] = {}
        for step in query.steps[:answer.executed]:
            if step.probe.kind == RESAMPLE:
                ran[step.probe.action] = ran.get(step.probe.action, 0) + 1
        now = self._sampled()
        for action, n in ran.items():
            self.resample_runs[action] = self.resample_runs.get(action, 0) + n
            old, new = sampled.get(action), now.get(action)
            if old is None or new is None or any(
                    b > a for a, b in zip(old, new, strict=True)) or self._settling(action):
                self.resample_idle[action] = 0
            else:
                self.resample_idle[action] = self.resample_idle.get(action, 0) + n
        return bool(ran)

    def _rested(self, probes: list[Probe]) -> list[Probe]:
        """Probes not yet asked past their repeats, those asked least first: while
        probabilistic steps teach nothing, the probes that wait behind them (a step whose
        effect on a shared atom is chance cannot be followed by one that needs it) get
        their turn."""
        kept = [p for p in probes if self.tired.get(p, 0) <= self._repeats(p.action)]
        return sorted(kept, key=lambda p: self.tired.get(p, 0))

    def _repeats(self, action: str) -> int:
        """How often a probe of a probabilistic action is asked again while it teaches
        nothing: enough that an outcome as likely as the action's least likely known one
        has shown with probability 1 - e^-OUTCOME_SAFETY (0 for a deterministic action)."""
        if action not in self.vs.outcomes:
            return 0
        p = min(o.probability for o in self.actions[action].outcomes)
        return math.ceil(OUTCOME_SAFETY / -math.log1p(-p)) if p < 1.0 else 0

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
        ordered = sorted(final, key=lambda p: (_FINAL_ORDER[p.kind], p.risky))
        return ordered[:width]

    def _after(self, pa: PaTuple, before: bool | None) -> bool | None:
        if before is None:
            # Unknown before (a free atom after a chance step): known after only when
            # every value at which the step can run leaves the same one.
            afters = {self._after(pa, v) for v in (False, True)
                      if self.vs.masks[pa] & ~violating(v) & ALL_VALUES}
            return afters.pop() if len(afters) == 1 else None
        if pa.action in self.vs.outcomes:
            return self.vs.after(pa, before)
        return AFTER[self.vs.masks[pa]][before]

    def _absorb(self, query: Query, answer: QueryResult, *, outcomes: bool = True) -> None:
        """Read the answer into the evidence. ``outcomes=False`` (the final check): the
        executed steps of probabilistic actions are not attributed to outcomes."""
        number = len(self.queries) + 1
        self.queries.append(QueryLog(number, query.state, tuple(query.plan), answer.executed,
                                     answer.state, tuple(s.probe.purpose for s in query.steps)))
        if answer.executed > 0:
            self.ran_any = True
        executed, failed = read_answer(query, answer, after=self._after)
        self.final_ran += sum(1 for step, _ in executed if step.probe.kind in _FINAL_ORDER)
        if failed is not None and failed[0].probe.kind in _FINAL_ORDER:
            self.final_ran += 1
            self.final_failed += 1
        for i, (step, seen) in enumerate(executed):
            if not outcomes and step.probe.action in self.vs.outcomes:
                continue
            self.vs.executed(step.probe.action, seen,
                             f"query {number} step {i + 1}: {show(step.ground_action)} ran",
                             number)
        if failed is not None:
            step, values = failed
            self.refused_actions.add(step.probe.action)
            self.vs.failed(step.probe.action, values,
                           f"query {number} step {len(executed) + 1}: "
                           f"{show(step.ground_action)} refused")

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
        if pa.action in self.sampled_out:
            return ("queries asked again kept running outcomes of it that were seen "
                    "before: none told the remaining values apart")
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
        outcomes = {}
        retired: list[RetiredOutcome] = []
        for name, space in self.vs.outcomes.items():
            if name in self.resample_runs:
                self.notes.append(f"{name}: asked again {self.resample_runs[name]} times "
                                  f"for its outcomes")
            for r in space.records:
                if space.retired(r) and r.origin is not None:
                    p = self.actions[name].outcomes[r.origin].probability
                    n = space.absence_steps(r)
                    at = space.retire_share(r)
                    # What the steps show is a bound on its share, not its absence.
                    most = 1.0 - space.error ** (1.0 / n)
                    retired.append(RetiredOutcome(name, r.origin, p, n, most))
                    self.notes.append(
                        f"{name}: known outcome {r.origin + 1} (p = {p:g}) retired: none of "
                        f"{n} steps showed it (a chance of at most {space.error:g} were it "
                        f"still there at p = {at:g}); it may still happen with a "
                        f"probability up to {most:.3f}")
            if space.records:
                pre = {pa.atom: modes[pa.pal(Location.PRE)] for pa in space.pas}
                outcomes[name] = space.outcomes(
                    {a: m if m is not Mode.UNKNOWN else self.init_value[PaTuple(name, a)][0]
                     for a, m in pre.items()})
                est = self._shares(name)
                if any(a is not None for a in space.answered) and published(
                        space, est, pals_changed=self._pals_changed(name)):
                    # The known probabilities are no evidence after a structural change:
                    # the steps' estimate (undecided below unless within tolerance).
                    outcomes[name] = tuple(
                        Outcome(o.add, o.delete, p)
                        for o, p in zip(outcomes[name], est.probabilities, strict=True))
                    self.notes.append(
                        f"{name}: outcome probabilities re-estimated from {est.n} asked "
                        f"steps that tell them apart: " + ", ".join(
                            f"{p:.3f} [{lo:.3f}, {hi:.3f}]" for p, lo, hi in
                            zip(est.probabilities, est.low, est.high, strict=True)))
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
        undecided = {
            name: "; ".join([*space.doubts(), *space.mixed_answers()]) or (
                "a known outcome no step showed is still live: changed or added beside a "
                "new one, removed or unchanged cannot be told" if space.unconfirmed() else
                "an effect of an outcome that its steps left open could not be settled: "
                + ", ".join(sorted({str(pa.atom) for _, pa in self.vs.open_effects(name)}))
                if self.vs.open_effects(name) else
                self._probability_gap(name) or "outcomes undecided")
            for name, space in self.vs.outcomes.items()
            if space.records and self._unsettled(name)}
        flagged_pals = frozenset(p for p in self.initial.pals if p.pa in self.flagged)
        # Issue 11: which modes the evidence pinned (the rest carried over or open).
        confirmed = frozenset(p for p in self.initial.pals
                              if self.vs.location_resolved(p.pa, p.location))
        return AssessmentResult(self.method, self.initial, model, tuple(changes), flagged_pals,
                                tuple(self.queries), tuple(self.vs.conflicts),
                                tuple([*notes, *self.notes]), self.budget_exhausted, reasons,
                                confirmed, outcomes, tuple(sorted(undecided)),
                                undecided, tuple(retired), self.checks)



__all__ = ["ALL_VALUES", "AssessmentResult", "Method", "PalChange", "QueryLog", "assess"]
