"""Outcomes of a probabilistic action, learnt from the executed steps each one explains.

A step of a probabilistic action ran *one* of its outcomes, so what it shows holds for that
outcome, not for the action: a step in which the no-effect outcome ran (a gripper that
slipped) leaves every atom as it was, and read with Table 2 as if the action were
deterministic it says the action changes nothing, which the next successful step then
contradicts. Nor can an unchanged atom be ignored: then an effect the drift removed from
an outcome is never noticed. So the atoms of one step are read jointly:

* the values before say which precondition literals cannot hold, whatever outcome ran;
* the step is attributed to the outcome that explains it, and its values after narrow
  that outcome's effects only. Outcomes start as the known model's (each with its known
  effects as hypothesis and nothing yet ruled out); a step goes to the outcome whose
  hypothesis it contradicts on the fewest atoms among those its evidence still allows.
  A step no outcome can explain any more is an outcome of its own (one the drift added);
  one two outcomes explain equally well teaches nothing about effects;
* an action's summary effect on an atom (the pa-value's effect mode: ``+`` when some
  outcome adds it, ``-`` when some deletes it and none adds it, as
  :func:`capwatch.model.pal.eff_mode`) is then what the outcomes' possible effects allow
  together. An outcome no step has shown keeps its known effects: nothing was seen of it
  (:meth:`OutcomeSpace.live` says when a likely one that stopped showing gives way);
* the atoms a step changed otherwise than the outcome it went to expected are hard
  evidence of drift (:attr:`OutcomeSpace.contradicted`), as Table 2's contradictions are
  for a deterministic action. aia has no known outcomes: its outcomes come from the steps;
* an effect of an outcome whose steps all had the atom at the value that hides it is
  open (:meth:`OutcomeSpace.open_effects`): the engine asks for it and fails closed if
  it cannot settle it; a step that contradicts a known outcome's known effect there is
  an outcome of its own, not that outcome rewritten in place (it may be either).

Pure bookkeeping over bit masks of effect modes (their arithmetic in
:mod:`capwatch.assess.effect_masks`); :class:`~capwatch.assess.versionspace.VersionSpace`
holds one :class:`OutcomeSpace` per probabilistic action. ~570 lines, one class: the
attribution of steps, the open effects, the retirement and the doubts all read and update
the same records, so splitting them would pass the records' internals between modules.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from capwatch.assess.effect_masks import (
    ABSENT,
    ANY,
    NEG,
    POS,
    EffectMask,
    posts,
    revealing,
    signature,
    summary_effects,
    under,
)
from capwatch.assess.homogeneity import heterogeneous
from capwatch.assess.mixing import apart
from capwatch.assess.outcome_shares import per_answer, rare_doubts
from capwatch.model.domain import Action, LiftedAtom, Outcome
from capwatch.model.pal import Mode, PaTuple

OUTCOME_SAFETY = 3.0
"""-ln of the accepted chance that an outcome does not show in the steps although it is
there, where missing it costs queries, not a wrong model (the engine's repeats; aia's
:meth:`OutcomeSpace.unseen`)."""
OUTCOME_ERROR = 1e-3
"""The default accepted chance that a known outcome is retired (:meth:`OutcomeSpace.live`)
although the agent still has it: a retired outcome leaves the published model."""

def share_floor(k: int, n: int, error: float) -> float:
    """A lower bound on the probability of an outcome seen in k of n steps, wrong but for
    a chance ``error``: the p below k/n at which the Chernoff bound exp(-n KL(k/n || p))
    on seeing k or more reaches ``error`` (0 when k is 0)."""
    if k <= 0 or n <= 0:
        return 0.0
    q = min(k / n, 1.0 - 1e-12)
    target = -math.log(error) / n

    def kl(p: float) -> float:
        return q * math.log(q / p) + (1.0 - q) * math.log((1.0 - q) / (1.0 - p))

    lo, hi = 1e-12, q
    if kl(lo) <= target:
        return 0.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if kl(mid) > target:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(slots=True)
class OutcomeRecord:
    """One outcome: the effects still possible per atom and the steps it explained."""

    effects: dict[PaTuple, EffectMask]
    known: dict[PaTuple, EffectMask]
    """The hypothesis: the known model's effects, or for an outcome the steps added, the
    effects of the outcome it was nearest where its first step allows them."""
    origin: int | None
    """Index of the known outcome it stands for; None for one the steps added."""
    steps: int = 0
    base: int | None = None
    """The known outcome whose effects outside Γ it keeps: its origin, or for one the
    steps added, that of the outcome it was nearest."""
    sigs: list[dict[PaTuple, EffectMask]] = field(default_factory=list)
    """What each of its steps showed (:func:`signature` per atom)."""
    answers: list[int | None] = field(default_factory=list)
    """Per step (as :attr:`sigs`), the query whose answer it was; None for an observed
    step, which may predate the drift (:meth:`OutcomeSpace.witnesses`)."""

    def hypothesis(self, pa: PaTuple) -> EffectMask:
        known = self.known.get(pa, 0) & self.effects[pa]
        return known if known else self.effects[pa]

    def possible(self, pa: PaTuple) -> EffectMask:
        """What the outcome may do to the atom: what its steps allow, or its known effect
        when no step has shown it."""
        return self.effects[pa] if self.steps else self.known[pa]


@dataclass(slots=True)
class OutcomeSpace:
    """The outcomes of one probabilistic action (see the module docstring)."""

    action: Action
    pas: tuple[PaTuple, ...]
    records: list[OutcomeRecord] = field(default_factory=list)
    ambiguous: int = 0
    """Steps two outcomes explained equally well (no effect learnt from them)."""
    from_known: bool = True
    """Whether the known model's outcomes are the hypothesis (not for aia)."""
    contradicted: set[PaTuple] = field(default_factory=set)
    """Atoms on which a step contradicted the effect expected of the outcome it went to
    (or was nearest): hard evidence of drift, as Table 2's for a deterministic action."""
    error: float = OUTCOME_ERROR
    """The accepted chance of retiring a known outcome the agent still has (:meth:`live`)."""
    stamp: int = 0
    """Bumped by every step: :meth:`witnesses` is cached on it."""
    _witnessed: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    shown: dict[tuple[PaTuple, bool], int] = field(default_factory=dict)
    """Per atom and value before, the executed steps (any outcome) that ran with the atom
    at that value and showed it after."""
    befores: list[tuple[dict[PaTuple, bool], dict[PaTuple, EffectMask],
                        OutcomeRecord | None]] = field(default_factory=list)
    """Per executed step, the atoms seen before and after with their values before, what
    it showed (:func:`signature`), and the outcome it went to (None: two explained it
    alike)."""
    shape: int = 0
    """Bumped whenever an outcome is added or what one may do changes: what
    :meth:`distinct_steps` counts depends on it, not on every step."""
    _distinct: dict[tuple[int, PaTuple, bool], tuple[int, int, int]] = field(
        default_factory=dict)
    _went: OutcomeRecord | None = None
    answered: list[int | None] = field(default_factory=list)
    """Per executed step (as :attr:`befores`), the query whose answer it was (None: an
    observed step)."""
    min_share: float = 0.0
    """The least probability an added outcome must be shown to have (:meth:`doubts`), and
    the share below which a known outcome no step showed must be shown to be before it is
    taken to be gone (:meth:`retired`)."""
    independent: bool = False
    """The operator's word that the agent draws each step's outcome independently and
    never switches between models per answer (``assess(independent_draws=True)``):
    :meth:`unmixable` then raises no doubt. Nothing the answers show checks it."""
    _rare: tuple[tuple[int, int, float], list[str]] = ((-1, -1, 0.0), [])
    counted: dict[tuple[int, ...], tuple[int, list[int], int]] = field(default_factory=dict)
    """outcome_shares.counts, counted on from the last call while no outcome changed."""
    _per_answer: tuple[int, dict[int, int], int] = (-1, {}, 0)
    """Cached on :attr:`stamp`: per record (by id) its asked steps, and all asked steps
    that went to one outcome (:meth:`absence_steps`)."""
    tabled: tuple[tuple[int, ...], tuple[int, dict[int, list[int]]]] = ((), (0, {}))
    """outcome_shares.per_answer, counted on from the last call while no outcome changed."""
    _mixed: tuple[int, list[str]] = (-1, [])
    """:meth:`mixed_answers`, cached on :attr:`stamp`."""

    @classmethod
    def of(cls, action: Action, pas: Sequence[PaTuple], *, known: bool = True
           ) -> OutcomeSpace:
        """From the known action; ``known=False`` (AIA) starts with no outcome at all."""
        space = cls(action, tuple(pas), from_known=known)
        if known:
            for i, o in enumerate(action.outcomes):
                hyp = {pa: POS if pa.atom in o.add else NEG if pa.atom in o.delete
                       else ABSENT for pa in space.pas}
                space.records.append(OutcomeRecord({pa: ANY for pa in space.pas}, hyp, i,
                                                   base=i))
        return space

    def executed(self, seen: Mapping[PaTuple, tuple[bool | None, bool | None]],
                 answer: int | None = None) -> bool:
        """Attribute one executed step; True when what the outcomes may do changed.
        ``answer``: the query whose answer it was (None: an observed step)."""
        self.stamp += 1
        ran: dict[PaTuple, bool] = {}
        for pa in self.pas:
            before, after = seen.get(pa, (None, None))
            if before is not None and after is not None:
                self.shown[(pa, before)] = self.shown.get((pa, before), 0) + 1
                ran[pa] = before
        self._went = None
        changed = self._attribute(seen, answer)
        self.befores.append((ran, {pa: signature(*seen.get(pa, (None, None)))
                                   for pa in self.pas}, self._went))
        self.answered.append(answer)
        if changed:
            self.shape += 1
        if self._settle():
            self.stamp += 1
            self.shape += 1
            changed = True
        return changed

    def needed(self, r: OutcomeRecord) -> int:
        """Steps among which one of the outcome would be at most a chance :attr:`error`
        to be missing: at its known probability, or for an outcome the steps added (no
        known probability), at a lower bound of its share of the steps that holds but
        for a chance :attr:`error` (:func:`share_floor`)."""
        if r.origin is not None:
            p = self.action.outcomes[r.origin].probability
        else:
            # Its share of the steps that went to one outcome: a step two outcomes
            # explain alike (its state made them look the same) was any of them.
            p = share_floor(r.steps, sum(1 for _, _, w in self.befores if w is not None),
                            self.error)
            if p <= 0.0:
                return 1 << 30
        return math.floor(-math.log(self.error) / -math.log1p(-min(p, 1.0 - 1e-12))) + 1

    def distinct_steps(self, r: OutcomeRecord, at: tuple[PaTuple, bool]) -> int:
        """The steps that ran with the atom of ``at = (pa, v)`` at v and that the outcome
        cannot have been, had it had the effect on it that shows at v (a delete at true,
        an add at false): each contradicts that form of it (with any of its still
        possible effects elsewhere). 0 once any step at v could have been that form: it
        may have shown. Steps that went to an outcome the steps added are not counted
        for a known outcome: they may be draws the drift took from it (the assumption
        of :meth:`retired`). Counted on from the last call while no outcome changed."""
        key = (id(r), at[0], at[1])
        hit = self._distinct.get(key)
        start, n = (hit[1], hit[2]) if hit is not None and hit[0] == self.shape else (0, 0)
        if start < len(self.befores) and n >= 0:
            form = dict(r.effects)
            form[at[0]] &= NEG if at[1] else POS
            for before, sig, went in self.befores[start:]:
                if before.get(at[0]) != at[1]:
                    continue
                if all(form[pa] & m for pa, m in sig.items()):
                    n = -1
                    break
                if r.origin is None or went is None or went.origin is not None:
                    n += 1
        self._distinct[key] = (self.shape, len(self.befores), n)
        return max(n, 0)

    def settling(self, r: OutcomeRecord, pa: PaTuple) -> int:
        """How far an open effect is on its way to being settled by absence
        (:meth:`_settle`): the steps that count, up to as many as settle it; for an
        added outcome up to four times as many as would at the least likely known
        outcome's probability (its own floor may need far more: asking again is
        bounded)."""
        need = self.needed(r)
        if r.origin is None:
            p = min(o.probability for o in self.action.outcomes)
            need = min(need, 4 * (math.floor(-math.log(self.error) /
                                             -math.log1p(-min(p, 1.0 - 1e-12))) + 1))
        return max((min(self.distinct_steps(r, (pa, v)), need)
                    for v in revealing(r.effects[pa])), default=0)

    def _settle(self) -> bool:
        """Settle open effects of the outcomes the steps showed by absence: the effect
        that would have shown at the atom's value v (a delete with it true, an add with it
        false) is ruled out once so many steps ran with the atom at v, none of which the
        outcome with that effect can have been (:meth:`distinct_steps`), that it would
        have been among them but for a chance of :attr:`error` at its known probability
        (the bound and its assumption are :meth:`retired`'s; an added outcome's is the
        least likely known one's). Without this, an effect whose revealing step looks
        like another outcome's could never be settled (drop's slip that may delete
        ``at``, run with ``at`` true, leaves it true as the likely outcome that adds it
        does: no step of its own tells it apart)."""
        if not self.from_known:
            return False
        changed = False
        for r in self.live():
            if not r.steps or not self.witnesses(r):
                continue
            need = self.needed(r)
            for pa in self.pas:
                m = r.effects[pa]
                for v in revealing(m):
                    if self.shown.get((pa, v), 0) >= need and \
                            self.distinct_steps(r, (pa, v)) >= need:
                        m &= ~(NEG if v else POS)
                if m and m != r.effects[pa]:
                    r.effects[pa] = m
                    changed = True
        return changed

    def _attribute(self, seen: Mapping[PaTuple, tuple[bool | None, bool | None]],
                   answer: int | None) -> bool:
        sig = {pa: signature(*seen.get(pa, (None, None))) for pa in self.pas}
        best: list[OutcomeRecord] = []
        cost = len(self.pas) + 1
        for r in self.records:
            c = sum(1 for pa, s in sig.items() if not r.hypothesis(pa) & s)
            if c < cost:
                best, cost = [r], c
            elif c == cost:
                best.append(r)
        consistent = [r for r in best if all(r.effects[pa] & s for pa, s in sig.items())]
        if best and cost:
            self.contradicted.update(pa for pa, s in sig.items()
                                     if not best[0].hypothesis(pa) & s)
        if cost == 0 and len(best) > 1:
            self.ambiguous += 1
            return False
        known = bool(best) and cost > 0 and best[0].origin is not None
        if len(best) > 1 or not consistent or known:
            # Nearest to an outcome its steps already rule out (a variant of it), or to
            # several equally: an outcome of its own. Changing whichever outcome still
            # allows it would lose one the steps showed or the known model states. Nor
            # is a known outcome changed to fit a step that contradicts its known
            # effects, whether no step showed it yet or its steps left those atoms open
            # (at the value that hides the difference): it may be that outcome changed
            # or a new one beside it. The new one explains the old steps too, so they no
            # longer witness the known one (:meth:`witnesses`): it is undecided until a
            # step only it explains shows it (both stay) or it retires (changed).
            # What the step leaves open, it is taken to do as the outcome it is nearest.
            near = best[0] if best else None
            hyp = {} if near is None else {
                pa: h for pa in self.pas
                if (h := near.hypothesis(pa) & sig[pa]) and h & (h - 1) == 0}
            self._went = OutcomeRecord(dict(sig), hyp, None, 1,
                                       None if near is None else near.base, [sig], [answer])
            self.records.append(self._went)
            return True
        (r,) = best
        self._went = r
        changed = r.steps == 0 and bool(r.known)
        r.steps += 1
        r.sigs.append(sig)
        r.answers.append(answer)
        for pa, s in sig.items():
            if r.effects[pa] & s != r.effects[pa]:
                r.effects[pa] &= s
                changed = True
        return changed

    def witnesses(self, r: OutcomeRecord) -> int:
        """The steps that show the outcome: those it went to, in answers to queries, that
        no outcome the steps added explains as well. A step in which the drift's change
        did not show (an atom added that was already true, deleted that was false) goes
        to the known outcome it matches, but may have been the added one: it shows
        neither. An observed step shows nothing either: the monitor's observations may
        predate the drift (the first inconsistency dates the first step that showed it,
        not the drift; an outcome that vanished leaves no inconsistency at all), so an
        outcome seen only there may be gone. Observed steps still narrow the outcome's
        effects and add outcomes (a prior the queries confirm or retire)."""
        return len(self.witness_answers(r))

    def witness_answers(self, r: OutcomeRecord) -> list[int]:
        """The answers of the steps that show ``r`` (:meth:`witnesses`), one per step."""
        hit = self._witnessed.get(id(r))
        if hit is not None and hit[0] == self.stamp:
            return hit[1]
        added = [x for x in self.records if x.origin is None]
        if not added or r.origin is None:
            out = [a for a in r.answers if a is not None]
        else:
            out = [a for sig, a in zip(r.sigs, r.answers, strict=True) if a is not None
                   and not any(all(x.effects[pa] & m for pa, m in sig.items())
                               for x in added)]
        self._witnessed[id(r)] = (self.stamp, out)
        return out

    def together(self) -> bool:
        """Whether some answer ran two steps of the action: its outcomes can then be seen
        side by side (a step whose effect on a 0-ary atom is chance cannot be followed by
        another that touches it, so some actions run once an answer)."""
        seen: set[int] = set()
        for r in self.records:
            for a in r.answers:
                if a is not None:
                    if a in seen:
                        return True
                    seen.add(a)
        return False

    def unrepeated(self) -> list[OutcomeRecord]:
        """The live added outcomes the answers did not show again (:meth:`doubts`)."""
        together = self.together()
        out = []
        for r in self.live():
            if r.origin is None:
                answers = self.witness_answers(r)
                if (len(set(answers)) == len(answers)) if together else len(answers) < 2:
                    out.append(r)
        return out

    def unmixable(self) -> list[OutcomeRecord]:
        """The known outcomes kept beside added ones (the answers showed them) where no
        answer ran the action twice (:meth:`together`) and the steps added more outcomes
        than they retired: whether the added ones are the kept ones' new forms or stand
        beside them, as independent draws within one answer would show, was never seen,
        so an agent switching between two models per answer cannot be told from one with
        both (:mod:`capwatch.assess.mixing`). Empty when an answer ran it twice, or when
        every added outcome stands for a retired one (the drift changed outcomes, and the
        model has no more than the known one had: a switcher's old answers would have
        kept the old forms)."""
        if self.independent:
            return []
        live = self.live()
        added = sum(1 for r in live if r.origin is None)
        if not added or self.together():
            return []
        retired = sum(1 for r in self.records if r.origin is not None) - sum(
            1 for r in live if r.origin is not None)
        if added <= retired:
            return []
        return [r for r in live if r.origin is not None and self.witness_answers(r)]

    def doubts(self) -> list[str]:
        """Why the answers do not yet show the added outcomes to be the agent's own
        (empty when they do). An agent draws the outcome of each step independently, so
        an outcome it has shows again, and beside the others, within one answer that runs
        the action often enough. A wrong answer (a noisy agent) shows its outcome in one
        step of one answer; an agent that answers some queries one way and others another
        (alternating between two models) shows each form in its own answers, never mixed.
        Either would be published as a mixed model that allows every answer (replay and
        asking again cannot refuse it). So until an added outcome shows twice in one
        answer, and every known outcome kept beside the added ones (one the answers
        showed) shows in one answer with one of them, the outcomes are not decided.
        Where no answer runs the action twice (:meth:`together`), an added outcome must
        show in two answers, and a known one kept beside it is a doubt that no answer
        can lift (:meth:`unmixable`): the action fails closed."""
        live = self.live()
        added = [r for r in live if r.origin is None]
        if not added:
            return []
        out = [f"added outcome {added.index(r) + 1} did not show again "
               f"({len(self.witness_answers(r))} asked steps): a wrong answer shows once"
               for r in self.unrepeated()]
        if self.together():
            mixed = {a for r in added for a in self.witness_answers(r)}
            kept = {i: set(self.witness_answers(r)) for i, r in enumerate(live)
                    if r.origin is not None}
            for i in apart(kept, mixed):
                r = live[i]
                assert r.origin is not None
                out.append(
                    f"known outcome {r.origin + 1} never showed in an answer beside an added "
                    f"one: answers that alternate between two behaviours show each in its "
                    f"own answers")
        for r in self.unmixable():
            assert r.origin is not None
            out.append(
                f"known outcome {r.origin + 1} and the added ones showed in separate answers "
                f"only, and no answer ran the action twice: an agent switching between the "
                f"old and the new model per answer gives such answers too, so a model with "
                f"both is not published")
        if not out:
            # Shown again and beside the others, an added outcome may still be a wrong
            # answer the agent gives now and then (outcome_shares.rare_doubts).
            key = (self.stamp, len(self.befores), self.min_share)
            if self._rare[0] != key:
                self._rare = (key, rare_doubts(self, self.min_share))
            out = list(self._rare[1])
        return out

    def known_steps(self) -> int:
        """Steps that showed a known outcome (:meth:`witnesses`): the draws a known
        outcome no step showed could have been among (a step an added outcome explains,
        or two outcomes explain equally, may be the drift's doing or that outcome: it is
        not counted)."""
        return sum(self.witnesses(r) for r in self.records if r.origin is not None)

    def retired(self, r: OutcomeRecord) -> bool:
        """Whether a known outcome no step showed is taken to be gone: none of the n steps
        that count against it (:meth:`absence_steps`) was it, which has a chance
        (1 - p)^n below :attr:`error` were its share still p (:meth:`retire_share`).

        Absence at the known share is not absence: a drift that made the outcome rarer
        (0.10 -> 0.01) leaves it, and the steps bound its share only by
        1 - error^(1/n) (0.048 at 139 steps: the fuzzer's explodingblocks stack was
        published without its 0.01 outcome, retired after 66 steps at 0.1). So with a
        minimum outcome probability (:attr:`min_share`, the least share the settings tell
        from none: an added outcome must be shown above it to be published) p is the
        smaller of the two, ~690 steps at 0.01, and the steps are every asked step that
        was another outcome: the bound is then on its own share, whatever the drift did
        to the others'. Until then it stays live and unconfirmed: asked again, or failed
        closed. With ``min_share`` 0 (every share counts) p is its known probability
        among the known outcomes' steps, session 14's rule, which holds only while the
        drift left the known outcomes' shares among themselves as they were.

        No added outcome is needed: a drift that removed an outcome adds none, and kept,
        the outcome would be published with effects the agent no longer has (rev11a's
        fuzzing). Only steps that showed it (:meth:`witnesses`) keep it. Whether the
        answers it is kept or retired on are one distribution's draws is
        :meth:`mixed_answers`'s question."""
        if r.origin is None or self.witnesses(r):
            return False
        return self.absence_steps(r) * -math.log1p(-self.retire_share(r)) > \
            -math.log(self.error)

    def retire_share(self, r: OutcomeRecord) -> float:
        """The share at which the steps must have shown a known outcome for its absence
        to retire it (:meth:`retired`): its known probability, or with a minimum outcome
        probability (:attr:`min_share`) the smaller of the two."""
        assert r.origin is not None
        p = self.action.outcomes[r.origin].probability
        if self.min_share > 0.0:
            p = min(p, self.min_share)
        return min(p, 1.0 - 1e-12)

    def absence_steps(self, r: OutcomeRecord) -> int:
        """The steps that count against a known outcome no step showed (:meth:`retired`).
        Without a minimum outcome probability, the steps of the known outcomes
        (:meth:`known_steps`), where it would have had its known share. With one, the
        bound is on its own share, whatever the drift did to the others': every asked
        step that went to another outcome, added ones too (an outcome the known one's
        effects cannot explain is a draw that was not it), but not one two outcomes
        explained alike (it may have been it) nor an observed one (it may predate the
        drift, and the monitor chose it)."""
        if self.min_share <= 0.0:
            return self.known_steps()
        if self._per_answer[0] != self.stamp:
            mine = {id(x): sum(1 for a in x.answers if a is not None) for x in self.records}
            self._per_answer = (self.stamp, mine, sum(mine.values()))
        _, mine, total = self._per_answer
        return total - mine.get(id(r), 0)

    def mixed_answers(self) -> list[str]:
        """Why the answers do not look like draws of one distribution (empty when they
        do): per answer, how many of its asked steps went to each outcome; an outcome
        whose counts differ across the answers more than one distribution allows, but
        for a chance :attr:`error` (:func:`capwatch.assess.homogeneity.heterogeneous`),
        shows an agent answering some queries as one model and others as another (the
        old model's outcome shows in its answers only), or one that changed during the
        assessment. An outcome kept or retired on such answers would be a guess about
        which of them is the agent now: the action fails closed. Only the asked steps
        whose state tells every two live outcomes apart count
        (:func:`capwatch.assess.outcome_shares.per_answer`): which outcome a step went to
        when it was read depends on the outcomes known then and on how its state hid
        their differences, which differs from answer to answer for an honest agent too. Not
        for aia (no known outcomes to compare) nor when the operator declared the draws
        independent (:attr:`independent`)."""
        if self._mixed[0] != self.stamp:
            self._test_answers()
        return self._mixed[1]

    def _test_answers(self) -> None:
        out: list[str] = []
        if self.from_known and not self.independent:
            live = self.live()
            table = per_answer(self, live)
            for j, p in heterogeneous(table, self.error):
                r = live[j]
                name = f"known outcome {r.origin + 1}" if r.origin is not None else \
                    f"added outcome {[x for x in live if x.origin is None].index(r) + 1}"
                shown = sum(1 for row in table if row[j])
                out.append(
                    f"{name} showed in {shown} of {len(table)} answers, in shares that one "
                    f"distribution gives with a chance of {p:.2g} at most: an agent "
                    f"answering as two models (or one that changed while asked) gives such "
                    f"answers, so neither keeping nor retiring an outcome on them is "
                    f"published")
        self._mixed = (self.stamp, out)

    def steps_to_retire(self) -> int:
        """More steps of the known outcomes after which every live known outcome no step
        showed would retire (0 when none is left)."""
        need = 0
        for r in self.live():
            if r.origin is None or self.witnesses(r):
                continue
            p = self.retire_share(r)
            need = max(need, math.floor(-math.log(self.error) / -math.log1p(-p)) + 1 -
                       self.absence_steps(r))
        return need

    def live(self) -> list[OutcomeRecord]:
        """The outcomes the action is taken to have now.

        A known outcome no step showed stays, unless it is :meth:`retired`: gone, or, when
        the steps showed an outcome the known model lacks, that one changed by the drift.
        (Which of the two it is cannot be told from the new outcome's steps; the other
        known outcomes' steps can.)"""
        return [r for r in self.records if not self.retired(r)]

    def undecided(self) -> bool:
        """Whether the steps added more outcomes than they retired known ones (see
        :meth:`live`) while a known outcome they never showed is still live: an added
        outcome may then be that one changed by the drift, or a new one beside it, and the
        steps cannot tell which. A model stating both would be published with an outcome
        the agent may no longer have (it allows every answer, so replaying the evidence
        or asking again cannot refuse it): the engine asks the action again until the
        unseen outcome shows or retires, and fails closed if neither happens. An added
        outcome that stands for a retired one leaves the unseen ones as they would be
        without a drift: kept, nothing having been seen of them."""
        live = self.live()
        added = sum(1 for r in live if r.origin is None)
        retired = sum(1 for r in self.records if r.origin is not None) - sum(
            1 for r in live if r.origin is not None)
        return added > retired and any(r.origin is not None and not self.witnesses(r)
                                       for r in live)

    def unconfirmed(self) -> bool:
        """Whether the action ran while a live known outcome no step showed: undecided as
        well (:meth:`undecided`), or only unconfirmed, its known effects a guess. The drift
        may have changed it (its new form shows only when it runs) or removed it (it
        retires once it would have shown): until one happens a model stating it claims
        effects nothing has confirmed, so the engine asks the action again. So too while
        the answers leave an added outcome in doubt (:meth:`doubts`)."""
        return self.from_known and any(r.steps for r in self.records) and \
            bool(self.unseen_known() or self.doubts() or self.mixed_answers())

    def unseen_known(self) -> list[OutcomeRecord]:
        """The live known outcomes no step has shown."""
        return [r for r in self.live() if r.origin is not None and not self.witnesses(r)]

    def open_effects(self, pres: Callable[[PaTuple], Iterable[Mode]]
                     ) -> list[tuple[OutcomeRecord, PaTuple]]:
        """The effects of live outcomes the steps showed that their steps left open: every
        step of the outcome had the atom at the value that hides the difference (deleted
        while false, added while true), so more than one effect is still possible under
        some precondition mode ``pres`` still allows. Published, such an effect would be a
        guess (the known one, or none) while another outcome may decide the pa-tuple's
        mode, so nothing else asks for it: the engine asks the action again with the atom
        at its :func:`revealing` value, and fails closed if that cannot settle it. An
        outcome no step showed is not listed: its effects are all open, which
        :meth:`unconfirmed` covers. Not for aia (no known outcomes: :meth:`unseen`)."""
        if not self.from_known:
            return []
        out = []
        for r in self.live():
            if not r.steps:
                continue
            for pa in self.pas:
                m = r.effects[pa]
                if m & (m - 1) and any((u := under(p, m)) & (u - 1) for p in pres(pa)):
                    out.append((r, pa))
        return out

    def unseen(self) -> bool:
        """Whether an outcome no step has shown may still exist. With the known outcomes
        those are its records; without them (aia), until the action ran so often that one
        as likely as its least likely known outcome would have shown but for e^-OUTCOME_
        SAFETY."""
        if self.from_known:
            return False
        p = min(o.probability for o in self.action.outcomes)
        n = sum(r.steps for r in self.records) + self.ambiguous
        return n * -math.log1p(-min(p, 1.0 - 1e-12)) <= OUTCOME_SAFETY

    def effects(self, pa: PaTuple, pre: Mode) -> frozenset[Mode]:
        """The summary effect modes still possible for the atom, given its precondition."""
        masks = [under(pre, r.possible(pa)) for r in self.live()]
        if self.unseen():
            masks.append(under(pre, ANY))
        return summary_effects(masks)

    def after(self, pa: PaTuple, before: bool) -> bool | None:
        """The atom's value after a step that ran with it at ``before``, if every outcome
        agrees (None otherwise: which outcome runs is chance). Without the known outcomes
        (aia) always None: an outcome no step has shown yet may do anything. Retired
        outcomes count too: retiring is a bet at :attr:`error` about the published model,
        while a value read through this prediction is evidence about other actions that
        stays when the outcome shows after all (rev11a: probabilistic_elevators' gate move
        whose likely outcome retired after five slips in a row taught collect a wrong
        precondition, as the slip's underground was taken to hold before collect)."""
        if not self.from_known:
            return None
        seen: set[bool] = set()
        for r in self.records:
            seen |= posts(r.possible(pa), before)
        return seen.pop() if len(seen) == 1 else None

    def outcomes(self, pre: Mapping[LiftedAtom, Mode]) -> tuple[Outcome, ...]:
        """The outcomes as a model states them, with the precondition ``pre`` (Γ atoms).

        An effect the evidence leaves open takes the known one when still possible, else
        none when possible (nothing seen says it changes), else what is left. Atoms outside
        Γ keep the known outcome's effects. Probabilities: the known ones while every
        outcome is a known one; once the steps added one, each outcome's share of the
        steps, one added to every count so that a known outcome the steps never showed
        keeps a small share instead of vanishing."""
        gamma = {pa.atom for pa in self.pas}
        added = any(r.origin is None for r in self.records)
        live = self.live()
        total = sum(r.steps + 1 for r in live)
        kept = sum(self.action.outcomes[r.origin].probability
                   for r in live if r.origin is not None)
        out = []
        for r in live:
            base = self.action.outcomes[r.base] if r.base is not None else Outcome()
            add = {a for a in base.add if a not in gamma}
            delete = {a for a in base.delete if a not in gamma}
            for pa in self.pas:
                m = under(pre.get(pa.atom, Mode.ABSENT), r.possible(pa))
                known = under(pre.get(pa.atom, Mode.ABSENT), r.known.get(pa, 0)) & m
                bit = known or (ABSENT if m & ABSENT else m & -m)
                if bit == POS:
                    add.add(pa.atom)
                elif bit == NEG:
                    delete.add(pa.atom)
            p = (r.steps + 1) / total if added else (
                base.probability if len(live) == len(self.records) else base.probability / kept)
            out.append(Outcome(frozenset(add), frozenset(delete), p))
        return tuple(out)


__all__ = ["OUTCOME_ERROR", "OUTCOME_SAFETY", "OutcomeRecord", "OutcomeSpace", "share_floor"]
