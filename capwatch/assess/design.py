"""Probe design: which single-action steps to ask next, given what is known per pa-tuple.

Two phases per action (docs/assessment.md, "Probes and queries"):

* **Finding a running state.** While some atom of the action was never seen in a
  successful run, no value of it is known to be safe. One ``explore`` probe per query
  tries a state built from the hypothesis; when it fails, the next candidate flips an
  atom of the failure clause (states that surely fail again are skipped).
* **Flipping one atom at a time.** Once every atom has a safe value, a ``safe`` probe
  runs the action with every atom at a safe value (nothing can fail, effects are read),
  a second one flips every atom whose both values are safe, and every atom whose other
  value is still in doubt gets its own probe with just that atom flipped. A failure of
  such a probe has one possible cause, so it fixes that precondition literal: each
  query ends at its first failure, and each failure is a true precondition literal the
  model had to learn anyway. That is what keeps ``verify`` from costing more than
  ``aia``: a wrong hypothesis changes the order of the steps, not how many queries fail.

All per-mask arithmetic (which values are safe, how well a value splits the remaining
values) is tabulated once for the 128 possible masks, so designing a round costs a few
dictionary lookups per pa-tuple.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from capwatch.assess.effect_masks import posts, revealing
from capwatch.assess.observations import Transition
from capwatch.assess.probes import EXPLORE, FAIL, RISKY, SAFE, Probe
from capwatch.assess.versionspace import (
    ALL_VALUES,
    VersionSpace,
    mask_of,
    predicted_post,
    values_of,
    violating,
)
from capwatch.model.domain import Action, LiftedAtom
from capwatch.model.pal import Mode, PaTuple, PaValue

_MASKS = range(ALL_VALUES + 1)


def _split(mask: int, value: bool) -> int:
    """Worst-case number of values left after running with the atom at ``value``."""
    cells: dict[object, int] = {}
    for v in values_of(mask):
        outcome: object = "fail" if mask_of([v]) & violating(value) else predicted_post(v, value)
        cells[outcome] = cells.get(outcome, 0) + 1
    return max(cells.values(), default=0)


SAFE_VALUES: tuple[tuple[bool, ...], ...] = tuple(
    tuple(v for v in (False, True) if not m & violating(v)) for m in _MASKS)
SPLIT: tuple[tuple[int, int], ...] = tuple((_split(m, False), _split(m, True)) for m in _MASKS)


def _post(mask: int, before: bool) -> bool | None:
    posts = {predicted_post(v, before) for v in values_of(mask & ~violating(before))}
    return posts.pop() if len(posts) == 1 else None


AFTER: tuple[tuple[bool | None, bool | None], ...] = tuple(
    (_post(m, False), _post(m, True)) for m in _MASKS)
"""The atom's value after a step that ran with it false / true, if every value agrees."""
COUNT: tuple[int, ...] = tuple(m.bit_count() for m in _MASKS)
FROM_SCRATCH: tuple[PaValue | None, ...] = tuple(
    min(values_of(m), key=lambda v: v[0] is Mode.ABSENT) if m else None for m in _MASKS)
"""AIA's hypothesis: an atom is taken to be required until shown otherwise (with fresh
objects, a state where every such atom holds runs any action whose precondition is
positive, the common case)."""


def satisfying(value: PaValue) -> tuple[bool, ...]:
    """Atom values the hypothesised precondition mode allows."""
    if value[0] is Mode.POS:
        return (True,)
    if value[0] is Mode.NEG:
        return (False,)
    return (False, True)


@dataclass(slots=True)
class Designer:
    """Designs the probes of one round from the version space and the hypotheses."""

    vs: VersionSpace
    pas: Mapping[str, Sequence[PaTuple]]
    """Γ's pa-tuples of every action, in a fixed order."""
    actions: Mapping[str, Action]
    known: Mapping[PaTuple, PaValue]
    """The known model's values (empty for ``aia``: no hypothesis from a model)."""
    pool: Sequence[Transition] = ()
    from_scratch: bool = False
    """Set once the known model proved mostly wrong: hypotheses then ignore it."""
    tied: Mapping[str, Mapping[LiftedAtom, LiftedAtom]] = field(default_factory=dict)
    """Per action, atoms an equality constraint makes fall on the same ground atom as an
    earlier one (their representative): a state gives them one value."""
    explored: dict[str, list[dict[LiftedAtom, bool]]] = field(default_factory=dict)
    gave_up: set[str] = field(default_factory=set)
    """Actions for which no running state was found."""
    _previous: dict[object, Probe] = field(default_factory=dict)
    _exploring: dict[str, tuple[int, Probe | None]] = field(default_factory=dict)
    """Per action, the exploration probe designed at its evidence version: asked again
    for the same evidence (daaisy designs each action twice a round, once for its targets
    and once for riders), it is the same probe, not the next candidate."""
    _cache: dict[tuple[str, bool], tuple[tuple[int, bool], tuple[list[Probe], list[Probe],
                                                                  list[Probe]]]] = \
        field(default_factory=dict)

    def probes(self, action: str, only: set[PaTuple] | frozenset[PaTuple] | None
               ) -> tuple[list[Probe], list[Probe], list[Probe]]:
        """(safe, risky, expected-failure) probes for the action's unresolved pa-tuples
        in ``only`` (all of them when None).

        Cached until the action's evidence changes (the version space's per-action
        version; the engine bumps it when targets change too), so an unchanged action
        costs nothing per round and keeps its probes, whose grounding is cached too."""
        key = (action, only is None)
        stamp = (self.vs.version.get(action, 0), self.from_scratch)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        result = self._design(action, only)
        self._cache[key] = (stamp, result)
        return result

    # ------------------------------------------------------------------ hypothesis

    def hypothesis(self, pa: PaTuple) -> PaValue:
        mask = self.vs.masks[pa]
        if not self.from_scratch:
            init = self.known.get(pa)
            if init is not None:
                if mask & mask_of([init]):
                    return init
                # The known value is gone: the closest surviving value, preferring a
                # precondition (an atom always seen with one value is likely required).
                return min(values_of(mask), key=lambda v: (
                    v[0] is Mode.ABSENT, (v[0] is not init[0]) + (v[1] is not init[1])))
        value = FROM_SCRATCH[mask]
        assert value is not None
        return value

    # ------------------------------------------------------------------ probes

    def _design(self, action: str, only: set[PaTuple] | frozenset[PaTuple] | None
                ) -> tuple[list[Probe], list[Probe], list[Probe]]:
        pas = self.pas[action]
        masks = self.vs.masks
        tied = self.tied.get(action, {})
        grouped = {*tied, *tied.values()} if tied else set()
        # Atoms on one ground atom can only be read together: nothing tells them apart.
        todo = [pa for pa in pas if (only is None or pa in only) and COUNT[masks[pa]] > 1
                and pa.atom not in grouped]
        if not todo:
            return [], [], []
        if any(not SAFE_VALUES[masks[pa]] for pa in pas):
            probe = self.explore(action)
            return [], [], [probe] if probe is not None else []
        base: dict[LiftedAtom, bool] = {}
        for pa in pas:
            mask = masks[pa]
            safe = SAFE_VALUES[mask]
            base[pa.atom] = safe[0] if len(safe) == 1 else \
                min(safe, key=lambda v: (SPLIT[mask][v], v))
        for atom, rep in tied.items():
            base[atom] = base[rep]
        safe_probes: list[Probe] = []
        risky: list[Probe] = []
        final: list[Probe] = []
        if any(SPLIT[masks[pa]][base[pa.atom]] < COUNT[masks[pa]] for pa in todo):
            safe_probes.append(self._probe((action, SAFE), base, SAFE,
                                           f"{action}: what changes?"))
        both = [pa for pa in todo if len(SAFE_VALUES[masks[pa]]) == 2]
        if both:
            alt = dict(base)
            for pa in both:
                alt[pa.atom] = not base[pa.atom]
            for atom, rep in tied.items():
                alt[atom] = alt[rep]
            safe_probes.append(self._probe((action, "alt"), alt, SAFE,
                                           f"{action}: what changes with {len(both)} "
                                           f"atoms at their other value?"))
        for pa in todo:
            mask = masks[pa]
            other = not base[pa.atom]
            doubt = mask & violating(other)
            if not doubt or doubt == mask:
                continue
            if pa.atom in tied:
                continue  # flipped together with its representative
            assignment = dict(base)
            assignment[pa.atom] = other
            for atom, rep in tied.items():
                if rep == pa.atom:
                    assignment[atom] = other
            if tied and self._surely_fails(action, assignment):
                continue  # its failure is already known and cannot be narrowed
            required = f"(not {pa.atom})" if not base[pa.atom] else str(pa.atom)
            if self.hypothesis(pa)[0] is not Mode.ABSENT:
                # risky orders the expected failures: those the known model itself
                # predicts go last, so a query is likelier to end on a real failure
                # with every weaker guess before it already cleared.
                final.append(self._probe(pa, assignment, FAIL,
                                         f"does {action} require {required}?",
                                         risky=2 if self._from_known(pa) else 1))
            else:
                risky.append(self._probe(pa, assignment, RISKY,
                                   f"does {action} run without {required}?", risky=1))
        return safe_probes, risky, final

    def check(self, action: str) -> list[Probe]:
        """Two steps the evidence says surely run (every atom at a value a run showed
        safe; the second with each atom that has two such values at its other one),
        asked once before the result is taken (the engine's final check); none when an
        atom has no safe value. A stationary agent runs both. One that changed after the
        runs that showed those values safe (an agent drifting during the assessment,
        rev13b) may refuse: its later refusals were each read as the one atom its probe
        flipped, which rests on every other atom's value being safe still."""
        pas = self.pas[action]
        masks = self.vs.masks
        if not pas or any(not SAFE_VALUES[masks[pa]] for pa in pas):
            return []
        tied = self.tied.get(action, {})
        base = {pa.atom: SAFE_VALUES[masks[pa]][0] for pa in pas}
        alt = {pa.atom: SAFE_VALUES[masks[pa]][-1] for pa in pas}
        for atom, rep in tied.items():
            base[atom], alt[atom] = base[rep], alt[rep]
        out = [Probe(action, base, SAFE, f"{action}: does it run where the evidence says "
                                         f"it surely does?")]
        if alt != base:
            out.append(Probe(action, alt, SAFE, f"{action}: does it run with the atoms "
                                                f"that may be either at their other value?"))
        return out

    def _probe(self, key: object, assignment: dict[LiftedAtom, bool], kind: str,
               purpose: str, risky: int = 0) -> Probe:
        """A new probe, or the one designed for the same question last round when its
        state is unchanged: a probe keeps its grounding (objects) as long as it lives."""
        old = self._previous.get(key)
        if old is not None and old.kind == kind and old.risky == risky \
                and old.assignment == assignment:
            return old
        action = key.action if isinstance(key, PaTuple) else str(key[0])  # type: ignore[index]
        probe = Probe(action, assignment, kind, purpose, risky)
        self._previous[key] = probe
        return probe

    def explore(self, action: str) -> Probe | None:
        """A state to try the action in while some atom has no known safe value."""
        stamp = self.vs.version.get(action, 0)
        last = self._exploring.get(action)
        if last is not None and last[0] == stamp:
            return last[1]
        probe = self._explore(action)
        self._exploring[action] = (stamp, probe)
        return probe

    def _explore(self, action: str) -> Probe | None:
        if action in self.gave_up:
            return None
        tried = self.explored.setdefault(action, [])
        pas = self.pas[action]
        if len(tried) > 2 * len(pas) + 2:
            self.gave_up.add(action)
            return None
        masks = self.vs.masks
        candidates: list[dict[LiftedAtom, bool]] = []
        # AIA's state first, the known model's second: a failed exploration is the one
        # failure that pays for no precondition literal, and the known model's state can
        # only be trusted where the known model is right (it often is not: a drifted
        # negative precondition makes it fail where AIA's runs).
        for hyp in (self._from_scratch, self.hypothesis):
            cand = {}
            for pa in pas:
                safe = SAFE_VALUES[masks[pa]]
                cand[pa.atom] = safe[-1] if safe else satisfying(hyp(pa))[-1]
            candidates.append(cand)
        act = self.actions[action]
        atoms = [pa.atom for pa in pas]
        if action not in self.vs.executed_actions:
            for t in self.pool:
                if t.action[0] == action:
                    continue
                objs = sorted({o for atom in t.state for o in atom[1:]})
                for args in itertools.islice(itertools.permutations(objs, act.arity), 8):
                    binding = dict(zip(act.parameter_names, args, strict=True))
                    candidates.append({a: a.ground(binding) in t.state for a in atoms})
        for done in tried:
            for atom in atoms:
                flipped = dict(done)
                flipped[atom] = not flipped[atom]
                candidates.append(flipped)
        tied = self.tied.get(action, {})
        known_failing: list[dict[LiftedAtom, bool]] = []
        for cand in candidates:
            for atom, rep in tied.items():
                cand[atom] = cand[rep]
            if cand in tried:
                continue
            if self._surely_fails(action, cand):
                known_failing.append(cand)
                continue
            tried.append(cand)
            return Probe(action, cand, EXPLORE, f"is there a state where {action} runs?",
                         risky=len(pas))
        # Every candidate above is known to fail without asking: the hypotheses' states
        # fall where an observed refusal already lies (a drifted negative precondition
        # on an atom both hypotheses set true, the refused state the same: canary21's
        # put-down needing (not (clear ?x))). Flipping one atom of such a state, as of a
        # refused one, leaves the refusal's clause; atoms the hypothesis lets take
        # either value first, so the hypothesis's own precondition still holds.
        hyp = self.hypothesis
        order = sorted(pas, key=lambda pa: len(satisfying(hyp(pa))) < 2)
        for done in known_failing:
            for pa in order:
                if pa.atom in tied:
                    continue
                flipped = dict(done)
                flipped[pa.atom] = not flipped[pa.atom]
                for atom, rep in tied.items():
                    if rep == pa.atom:
                        flipped[atom] = flipped[pa.atom]
                if flipped in tried or self._surely_fails(action, flipped):
                    continue
                tried.append(flipped)
                return Probe(action, flipped, EXPLORE,
                             f"is there a state where {action} runs?", risky=len(pas))
        self.gave_up.add(action)
        return None

    def resample(self, action: str, *, apart: bool = False
                 ) -> dict[LiftedAtom, bool] | None:
        """A state in which the action surely runs (every atom at a value the evidence
        shows safe) and which tells its unseen known outcomes apart from the others where
        it can: per atom, the safe value after which the most (unseen, other) pairs of
        outcomes leave it differently; then the value that reveals the most effects the
        outcomes' steps left open (:meth:`OutcomeSpace.open_effects`). None while some
        atom has no safe value, or when the state could show nothing of either kind.
        ``apart``: its probabilities are wanted (outcome_shares): with no unseen outcome,
        the state tells every two live outcomes apart where it can."""
        space = self.vs.outcomes.get(action)
        if space is None:
            return None
        masks = self.vs.masks
        live = space.live()
        # Added outcomes in doubt too: they are asked until they repeat.
        unseen = space.unseen_known() + space.unrepeated()
        pairs = [(u, r) for u in unseen for r in live if r is not u]
        if apart and not pairs:
            pairs = [(a, b) for i, a in enumerate(live) for b in live[i + 1:]]
        opened: dict[PaTuple, list[int]] = {}
        for r, pa in self.vs.open_effects(action):
            opened.setdefault(pa, []).append(r.effects[pa])
        tied = self.tied.get(action, {})
        state: dict[LiftedAtom, bool] = {}
        reveals = 0
        for pa in self.pas[action]:
            mask = masks[pa]
            safe = SAFE_VALUES[mask]
            if not safe:
                return None
            effects = opened.get(pa, ())

            def shows(v: bool, effects: Sequence[int] = effects) -> int:
                return sum(1 for m in effects if v in revealing(m))

            state[pa.atom] = min(safe, key=lambda v: (
                -sum(1 for u, r in pairs
                     if not posts(u.possible(pa), v) & posts(r.possible(pa), v)),
                -shows(v), SPLIT[mask][v], v))
            reveals += shows(state[pa.atom])
        if not unseen and not reveals and not space.doubts() and not apart:
            # Outcomes that must still show side by side (mixing): any state it runs in.
            return None
        for atom, rep in tied.items():
            state[atom] = state[rep]
        return state

    def restorer(self, need: Mapping[LiftedAtom, bool], free: frozenset[LiftedAtom],
                 exclude: str) -> tuple[str, dict[LiftedAtom, bool]] | None:
        """A step of another, deterministic action that sets each shared atom of
        ``need`` to its value there whatever it was before: it runs whatever the atoms of
        ``free`` (those a chance effect left unknown, ``need``'s among them) are, since
        both of their values are safe for it, and every value the evidence still allows
        it leaves each atom of ``need`` at that value; every other atom at a value a run
        showed safe, and every other shared atom's value after it predictable. Between
        two resampled steps of ``exclude`` whose chance effect takes those atoms, it lets
        one answer draw that action twice (docs/assessment.md, "Two draws in one
        answer"). The action and its state (the atoms of ``free`` it has are free in its
        probe); None when no action does so. Fewest atoms first, then by name."""
        if any(a.startswith("?") for atom in free for a in atom.args):
            return None
        found: list[tuple[int, str, dict[LiftedAtom, bool]]] = []
        masks = self.vs.masks
        for name in sorted(self.pas):
            pas = self.pas[name]
            if name == exclude or name in self.vs.outcomes or self.actions[name].equal:
                continue
            atoms = {pa.atom for pa in pas}
            if not all(atom in atoms for atom in need):
                continue
            own = set(self.actions[name].parameter_names)
            state: dict[LiftedAtom, bool] = {}
            for pa in pas:
                m = masks[pa]
                safe = SAFE_VALUES[m]
                if pa.atom in free:
                    if safe != (False, True) or (
                            pa.atom in need and AFTER[m] != (need[pa.atom], need[pa.atom])):
                        break
                    state[pa.atom] = need.get(pa.atom, False)
                    continue
                if not safe or (own.isdisjoint(pa.atom.args) and AFTER[m][safe[0]] is None):
                    break
                state[pa.atom] = safe[0]
            else:
                found.append((len(pas), name, state))
        if not found:
            return None
        _, name, state = min(found, key=lambda f: (f[0], f[1]))
        return name, state

    def _from_known(self, pa: PaTuple) -> bool:
        if self.from_scratch:
            return False
        init = self.known.get(pa)
        return init is not None and init[0] is not Mode.ABSENT and \
            bool(self.vs.masks[pa] & mask_of([init]))

    def _from_scratch(self, pa: PaTuple) -> PaValue:
        value = FROM_SCRATCH[self.vs.masks[pa]]
        assert value is not None
        return value

    def _surely_fails(self, action: str, assignment: Mapping[LiftedAtom, bool]) -> bool:
        masks = self.vs.masks
        for pa in self.pas[action]:
            if not masks[pa] & ~violating(assignment[pa.atom]) & ALL_VALUES:
                return True
        for clause in self.vs.open_clauses(action):
            live = self.vs.live_literals(clause)
            if live and all(v is not None and assignment[pa.atom] == v for pa, v in live):
                return True
        return False
