"""Canary probes: ask an agent to run actions, so a capability it lost is found even when
the stream does not show it.

A lost capability is invisible to the monitor when the agent stops attempting the
action, and a lost precondition is invisible when the agent's own groundings and states
happen to satisfy it. Each round (a scheduler job, run on the main loop) the prober picks,
per agent, the actions idle for ``idle_s`` and, at a lower rate (every ``busy_s``), the
actions still in use. Each is grounded with objects drawn afresh every time (respecting
the action's equality constraints, ``Action.admits``) and run from a start state drawn
from the agent's recent states (idle actions only) or designed: the family problem's
initial state, or nothing but the grounded precondition (which any precondition the model
lacks fails). The grounded precondition is made true in it. The agent is asked on a
thread of its own. An answer the model cannot explain comes back to the main loop as a
:class:`~capwatch.daemon.work.CanaryFinding`, evidence exactly like an inconsistent
transition from the stream but from no record (offset -1), so it holds no commit.
"""

from __future__ import annotations

import math
import random
import threading
import time
from array import array
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import datetime

import structlog

from capwatch.assess.agent import AgentUnavailable, QueryNotAttempted
from capwatch.assess.canary_objects import (
    Pools,
    Taken,
    can_hold,
    distinct_grounding,
    fresh_objects,
    missing_types,
    probe_pools,
    repeated,
    with_fresh,
)
from capwatch.assess.observations import Trace, infer_object_types
from capwatch.assess.shortcuts import find_shortcuts
from capwatch.contracts.agent_protocol import AgentProtocolError, AgentRejectedQuery
from capwatch.contracts.ports import AgentDirectory
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.pacing import Pacers
from capwatch.daemon.work import CanaryFinding, Result
from capwatch.model.consistency import Verdict, check_declared
from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom, LiftedAtom
from capwatch.model.grounding import Grounder

log = structlog.get_logger("capwatch.daemon")


PROBE_THREADS = 4
MAX_BACKLOG = 256
"""Probes waiting for an answer past which a round submits no more: the rest stay due and
go out in a later round, so slow or unreachable agents cannot grow the queue without end."""
REPEAT = 0.25
"""Share of probes grounded on one object twice (canary_objects.repeated): a drift that
shows only there (an action now needing two parameters to differ) is found from them, and
the other probes keep every ground atom of the action apart, as every effect and
precondition literal needs to show on its own."""
RECENT_STATES = 4
"""Recent states kept per agent as start states (one taken per round; the newest is the
watch's own, so at most three more states per agent are held here)."""


class _Probes:
    """One agent's canary bookkeeping, held for every agent watched (idle ones included),
    so kept small: its last ``RECENT_STATES`` distinct states as tuples of atoms (a
    frozenset costs ~3-5 times more) and its actions' last probe times in an array, in
    the order of its model's actions (dict entries keyed by (agent, action) cost ~90
    bytes each, for every action of the model)."""

    __slots__ = ("domain", "recent", "times")

    def __init__(self, domain: Domain, old: _Probes | None = None) -> None:
        self.domain = domain
        """The model ``times`` follows (a new version may have other actions)."""
        self.recent: tuple[tuple[GroundAtom, ...], ...] = old.recent if old else ()
        self.times = array("d", [_NEVER]) * len(domain.actions)
        """Monotonic time (the watch's clock) each action was last probed."""
        if old is not None:
            before = {a.name: t for a, t in zip(old.domain.actions, old.times, strict=True)}
            for i, action in enumerate(domain.actions):
                self.times[i] = before.get(action.name, _NEVER)


_NEVER = -1e18


def _made_true(action: Action, binding: Mapping[str, str], base: Collection[GroundAtom],
               rng: random.Random | None = None) -> set[GroundAtom]:
    """``base`` with the grounded precondition made true; with ``rng``, each atom the
    action's effects change (and its precondition does not fix) also set, drawn per atom
    with even odds, either to the value the effect changes (a delete's atom true, an
    add's false) or to the value it would leave (a delete's atom false, an add's true).

    An effect shows only where it changes something: a lost delete of an atom every
    start state had false (sokoban's ``(at-goal ?s)`` of a stone off the goals; storage's
    ``(in ?c ?p)`` from a designed state) was never seen. A precondition gained on that
    atom shows only from the other value: the agent now needing an atom it adds to be
    false refuses only where it is already true, which no designed start state had
    (session 20: 6 of 174 such narrowings found from designed states alone). Per atom,
    not per probe: a drift on one atom is then seen from half the designed probes
    whichever way it goes, at no extra query. An atom some outcome adds and another
    deletes is left as is."""
    pos = {a.ground(binding) for a in action.pre_pos}
    neg = {a.ground(binding) for a in action.pre_neg}
    state = (set(base) | pos) - neg
    if rng is not None:
        adds = {a.ground(binding) for o in action.outcomes for a in o.add}
        dels = {a.ground(binding) for o in action.outcomes for a in o.delete}
        fixed = pos | neg
        for atom in sorted((adds ^ dels) - fixed):
            # Changed: a delete's atom true, an add's false; held: the other way round.
            if (atom in dels) == (rng.random() < 0.5):
                state.add(atom)
            else:
                state.discard(atom)
    return state


def _alone(action: Action, atom: LiftedAtom, binding: Mapping[str, str]) -> bool:
    """Whether no other literal of the precondition grounds to ``atom``'s ground atom."""
    ground = atom.ground(binding)
    return not any(a is not atom and a.ground(binding) == ground
                   for a in (*action.pre_pos, *action.pre_neg))


def _same(atoms: tuple[GroundAtom, ...], state: frozenset[GroundAtom]) -> bool:
    """Whether a state kept as a tuple (of distinct atoms) is ``state``."""
    return len(atoms) == len(state) and state.issuperset(atoms)


class _Taken:
    """Object names a fresh one must not take (the agent's states', the problem's, the
    pools'), gathered only when a fresh name is wanted: most rounds want none."""

    def __init__(self, recent: Iterable[Iterable[GroundAtom]], init: Iterable[GroundAtom],
                 pools: Pools) -> None:
        self._sources = (recent, init, pools)
        self._names: set[str] | None = None

    def __call__(self) -> Collection[str]:
        if self._names is None:
            recent, init, pools = self._sources
            names = {o for state in recent for atom in state for o in atom[1:]}
            names.update(o for atom in init for o in atom[1:])
            for objs in pools.values():
                names.update(objs)
            self._names = names
        return self._names


class _Round:
    """A canary round under way (CanaryProber.start_round)."""

    __slots__ = ("forget", "lookup", "objects", "optimal", "order", "period_s", "problems",
                 "start", "started", "visited")

    def __init__(self, order: list[AgentWatch], start: int,
                 lookup: Callable[[str], AgentWatch | None],
                 problems: Mapping[str, frozenset[GroundAtom]],
                 objects: Mapping[str, Mapping[str, tuple[str, ...]]], started: float,
                 period_s: float | None, optimal: bool) -> None:
        self.order = order
        self.start = start
        """The index in ``order`` of the first agent visited (then round the end)."""
        self.visited = 0
        """Agents whose turn came (``order`` from ``start``)."""
        self.lookup = lookup
        self.problems = problems
        self.objects = objects
        self.started = started
        self.period_s = period_s
        self.optimal = 0 if optimal else len(order)
        """Agents (``order`` from its start) whose optimal runs were checked."""
        self.forget: list[str] | None = None
        """Agents of the prober's own to check, once every agent's turn came."""


class CanaryProber:
    def __init__(self, *, agents: AgentDirectory, metrics: DaemonMetrics, idle_s: float,
                 clock: Callable[[], datetime], post: Callable[[Result], None],
                 busy_s: float | None = None, seed: int = 0,
                 executor: Executor | None = None, pacers: Pacers | None = None,
                 timer: Callable[[], float] = time.perf_counter) -> None:
        self.agents = agents
        self.pacers = pacers
        """Paces each probe thread's queries while the stream is behind (daemon.pacing)."""
        self.metrics = metrics
        self.idle_s = idle_s
        self.busy_s = busy_s if busy_s is not None else 2 * idle_s
        """Actions the agent still runs are probed this often: a lost precondition its
        own states happen to satisfy shows only from other states."""
        self.clock = clock
        self.post = post
        self._rng = random.Random(seed)
        self._agents: dict[str, _Probes] = {}
        """Per agent watched, its recent states and when each action was last probed."""
        self._backlog = 0
        """Probes submitted and not yet answered (a slow agent must not grow the queue)."""
        self._searching: set[str] = set()
        """Agents whose optimal-run search is queued or running (under ``_lock``)."""
        self._lock = threading.Lock()
        self._closed = False
        """Set at shutdown: commands still queued for the main loop must not submit probes."""
        self._timer = timer
        """Times a round's slices and paces the round (:meth:`round_slice`)."""
        self._round: _Round | None = None
        self._resume: tuple[str, int] | None = None
        """The agent (and its index in the round's order) the next round begins with."""
        self._pool = executor or ThreadPoolExecutor(max_workers=PROBE_THREADS,
                                                    thread_name_prefix="canary")

    @property
    def probing(self) -> bool:
        """Whether a round is under way (agents to visit, or departed ones to forget)."""
        return self._round is not None

    def probe_idle(self, watches: Iterable[AgentWatch],
                   problems: Mapping[str, frozenset[GroundAtom]],
                   objects: Mapping[str, Mapping[str, tuple[str, ...]]]) -> None:
        """A whole round in this call: queue a probe of every due action of every agent
        not awaiting work (a round already under way is finished instead)."""
        self.start_round(watches, problems, objects)
        while self.round_slice(None):
            pass

    def start_round(self, watches: Iterable[AgentWatch],
                    problems: Mapping[str, frozenset[GroundAtom]],
                    objects: Mapping[str, Mapping[str, tuple[str, ...]]], *,
                    lookup: Callable[[str], AgentWatch | None] | None = None,
                    period_s: float | None = None, optimal: bool = False) -> bool:
        """Begin a round over ``watches``, visited by :meth:`round_slice`, from the agent
        where the last round found the backlog full: a round stops there (nothing more
        can go out), and starting every round at the registry's first agent left the
        later ones unprobed for as long as slow agents kept the backlog full.

        ``lookup`` gives an agent's watch when its turn comes (None once evicted or
        moved away since the round began: skipped); without it the agents watched are
        those given. With ``period_s``, each slice visits at least the round's share
        for the time gone since it began, so a round ends within ``period_s`` however
        seldom the main loop turns. With ``optimal``, every agent's optimal runs are
        checked too (:meth:`check_optimal`), in slices, a full backlog or not. False
        (nothing begun) while one is under way (it is left to finish) and after
        :meth:`close`."""
        if self._closed or self._round is not None:
            return False
        order = list(watches)
        if lookup is None:
            lookup = {w.agent_id: w for w in order}.get
        self._round = _Round(order, self._resume_at(order), lookup, problems, objects,
                             self._timer(), period_s, optimal)
        return True

    def _resume_at(self, order: Sequence[AgentWatch]) -> int:
        """Where the round begins: the agent the last one stopped at, found by its place
        (the registry keeps its order; agents loaded since come last), or searched for
        once agents before it left, or its place if it left too."""
        if self._resume is None or not order:
            return 0
        agent_id, index = self._resume
        if index < len(order) and order[index].agent_id == agent_id:
            return index
        for i, watch in enumerate(order):
            if watch.agent_id == agent_id:
                return i
        return index if index < len(order) else 0

    def round_slice(self, budget_s: float | None) -> bool:
        """The round's next agents for about ``budget_s`` (at least one, and at least
        the round's pace: :meth:`start_round`; None: the whole rest), then, once every
        agent is visited or the backlog is full, every agent's optimal runs checked (if
        the round was begun so) and the agents no longer watched forgotten (in slices
        too). True while the round is still under way."""
        r = self._round
        if r is None:
            return False
        if self._closed:
            self._round = None
            return False
        began = self._timer()
        n = len(r.order)
        owed = 0
        if budget_s is not None and r.period_s is not None:
            share = (began - r.started) / r.period_s if r.period_s > 0 else 1.0
            owed = math.ceil(n * min(1.0, share)) - r.visited
        visits = 0
        while r.visited < n:
            index = (r.start + r.visited) % n
            watch = r.order[index]
            if self._backlog >= MAX_BACKLOG:
                # Nothing more can go out this round: the next one begins here.
                self._resume = (watch.agent_id, index)
                r.visited = n
                break
            r.visited += 1
            current = r.lookup(watch.agent_id)
            if current is not None and self._visit(current, r.problems, r.objects):
                # Full before all its due actions went out: the next round begins with it.
                self._resume = (current.agent_id, index)
                r.visited = n
                break
            visits += 1
            if r.visited == n:
                self._resume = (r.order[r.start].agent_id, r.start)
            elif (budget_s is not None and visits >= owed
                    and self._timer() - began >= budget_s):
                return True
        while r.optimal < n:
            current = r.lookup(r.order[r.optimal].agent_id)
            r.optimal += 1
            if current is not None:
                self._check_optimal(current, r.objects)
            if budget_s is not None and self._timer() - began >= budget_s:
                return True
        if r.forget is None:
            # Only once every agent's turn came: one a slice did not reach yet is not gone.
            r.forget = list(self._agents)
        while r.forget:
            agent_id = r.forget.pop()
            if r.lookup(agent_id) is None:
                # No longer watched here (evicted, moved away): a reloaded one starts
                # its rounds afresh.
                self._agents.pop(agent_id, None)
            if r.forget and budget_s is not None and self._timer() - began >= budget_s:
                return True
        self._round = None
        return False

    def _visit(self, watch: AgentWatch, problems: Mapping[str, frozenset[GroundAtom]],
               objects: Mapping[str, Mapping[str, tuple[str, ...]]]) -> bool:
        """Queue a probe of every due action of one agent not awaiting work; True if the
        backlog filled before all went out (the rest stay due)."""
        if watch.awaiting is not None:
            return False
        now = watch.clock()
        probes = self._agents.get(watch.agent_id)
        if probes is None or probes.domain is not watch.domain:
            probes = self._agents[watch.agent_id] = _Probes(watch.domain, probes)
        last = watch.last_state  # read once: a frozen watch reads it from its bytes
        if last and (not probes.recent or not _same(probes.recent[-1], last)):
            probes.recent = (*probes.recent, tuple(last))[-RECENT_STATES:]
        recent = probes.recent
        executed = watch.last_executed
        times = probes.times
        known = objects.get(watch.family)
        init = problems.get(watch.family, frozenset())
        pools: Pools | None = None
        """The problem's objects completed from the agent's states (once a round, and
        only for an action whose types the problem lacks: canary_objects)."""
        due: list[tuple[frozenset[GroundAtom], GroundAction]] = []
        full = False
        held = 0
        """Backlog slots taken for probes not yet handed to the pool: given back if this
        visit fails half way (each failure would otherwise keep them, and the canary
        stop for good once MAX_BACKLOG of them were kept)."""
        try:
            for i, action in enumerate(watch.domain.actions):
                last_run = executed.get(action.name, -1e18)
                last_probe = times[i]
                idle = now - max(last_run, last_probe) >= self.idle_s
                if not idle and now - last_probe < self.busy_s:
                    continue
                with self._lock:
                    if self._backlog >= MAX_BACKLOG:
                        full = True
                        break
                    self._backlog += 1
                held += 1
                use: Pools
                if known is not None and not missing_types(action, known):
                    use = known
                else:
                    if pools is None:
                        pools = probe_pools(watch.domain, known, recent)
                    use = pools
                taken = _Taken(recent, init, use)
                args = self._grounding(action, use, taken, watch.domain)
                if args is None:
                    self._done()
                    held -= 1
                    continue
                ground = (action.name, *args)
                binding = dict(zip(action.parameter_names, args, strict=True))
                base, designed = self._start(recent, init, designed_only=not idle)
                # From a designed start, each effect's atom is set so that the effect
                # changes it or leaves it (_made_true).
                state = _made_true(action, binding, base, self._rng if designed else None)
                times[i] = now
                due.append((frozenset(state), ground))
                if idle and (action.pre_pos or action.pre_neg):
                    wider = self._one_literal_false(action, binding, state, base, use, taken)
                    if wider is not None:
                        with self._lock:
                            if self._backlog >= MAX_BACKLOG:
                                full = True
                                break
                            self._backlog += 1
                        held += 1
                        due.append(wider)
            if due:
                self._pool.submit(self._probe, watch.agent_id, watch.family, watch.domain,
                                  due)
                held = 0
        finally:
            if held:
                with self._lock:
                    self._backlog -= held
        return full

    def _grounding(self, action: Action, objects: Pools, taken: Taken = tuple,
                   domain: Domain | None = None) -> tuple[str, ...] | None:
        """Objects drawn at random per parameter, distinct where possible, until the
        action's equality constraints admit them; None if no try does. A type with no
        objects gets fresh names (canary_objects). One probe in ``REPEAT`` then names
        objects more than once, where the types, the model's constraints and its
        precondition allow (canary_objects.repeated)."""
        pools = with_fresh(action, objects, taken)
        for _ in range(20):
            args: list[str] = []
            for pool in pools:
                fresh = [o for o in pool if o not in args]
                args.append(self._rng.choice(fresh or list(pool)))
            if action.admits(args):
                if len(args) > 1 and self._rng.random() < REPEAT:
                    return repeated(action, pools, args, self._rng,
                                    domain.types if domain else None) or tuple(args)
                return tuple(args)
        return None

    def _one_literal_false(self, action: Action, binding: Mapping[str, str],
                           state: set[GroundAtom], base: Collection[GroundAtom],
                           pools: Pools, taken: Taken
                           ) -> tuple[frozenset[GroundAtom], GroundAction] | None:
        """The probe's state with one precondition literal, drawn at random, made false:
        the model says the action does not apply there, so an agent that runs it lost
        that literal. Making the whole precondition true (the probe above) cannot show a
        literal no longer needed, and an action the agent never runs shows it nowhere
        else: before session 19 such a widening stayed unknown unless
        ``assessment.reassess_every_s`` was set.

        The literal must be false alone: where the drawn objects put another literal of
        the precondition on its atom (a repeated object: a problem with one object of a
        type), making it false makes that one false too (or cannot be done), and a
        literal dropped alone never showed in such a grounding (session 19's first
        gap). The probe is then grounded again on objects that all differ (fresh names
        once the pools run out), from the same start state. None only where the model's
        own ``(= ?a ?b)`` ties the two literals: no state tells them apart, so dropping
        one changes nothing the agent can show."""
        literals: list[tuple[LiftedAtom, bool] | tuple[str, str, bool]] = [
            (a, True) for a in sorted(action.pre_pos)]
        literals += [(a, False) for a in sorted(action.pre_neg)]
        names = set(action.parameter_names)
        literals += [(x, y, True) for x, y in sorted(action.equal) if {x, y} <= names]
        literals += [(x, y, False) for x, y in sorted(action.distinct) if {x, y} <= names]
        drawn = self._rng.choice(literals)
        if len(drawn) == 3:
            return self._constraint_false(action, binding, base, pools, taken, drawn)
        atom, positive = drawn
        args = tuple(binding[n] for n in action.parameter_names)
        if not _alone(action, atom, binding):
            again = distinct_grounding(action, pools, taken, self._rng)
            if again is None:
                return None
            args = again
            binding = dict(zip(action.parameter_names, args, strict=True))
            if not _alone(action, atom, binding):
                return None
            state = _made_true(action, binding, base)
        ground = atom.ground(binding)
        flipped = state - {ground} if positive else state | {ground}
        return frozenset(flipped), (action.name, *args)

    def _constraint_false(self, action: Action, binding: Mapping[str, str],
                          base: Collection[GroundAtom], pools: Pools, taken: Taken,
                          constraint: tuple[str, str, bool]
                          ) -> tuple[frozenset[GroundAtom], GroundAction] | None:
        """The probe grounded so that one of the model's constraints between two
        parameters fails, its precondition otherwise true: ``(not (= ?a ?b))`` with one
        object for both, ``(= ?a ?b)`` with two. The model says the action does not
        apply there, so an agent that runs it lost the constraint, which no grounding
        the model admits shows (the constraints are literals of the precondition too,
        drawn like the others). None where the types leave no such grounding or the
        precondition cannot hold on it."""
        x, y, equal = constraint
        names = action.parameter_names
        of = dict(zip(names, with_fresh(action, pools, taken), strict=True))
        out = dict(binding)
        if equal:
            # Two objects: y gets another of its type (a fresh one if it has no other).
            others = [o for o in of[y] if o != out[x]]
            ty = action.parameters[names.index(y)].type
            out[y] = (self._rng.choice(others) if others
                      else fresh_objects(ty, 1, {*taken(), out[x]})[0])
        elif out[x] in of[y]:
            out[y] = out[x]
        elif out[y] in of[x]:
            out[x] = out[y]
        else:
            # Neither object is of the other's type: one both types have, if any.
            common = sorted(set(of[x]) & set(of[y]))
            if not common:
                return None
            out[x] = out[y] = self._rng.choice(common)
        pair = (x, y) if x <= y else (y, x)
        rest = (action.replace(equal=action.equal - {pair}) if equal
                else action.replace(distinct=action.distinct - {pair}))
        if not rest.admits_binding(out) or not can_hold(action, out):
            return None
        state = _made_true(action, out, base)
        return frozenset(state), (action.name, *(out[n] for n in names))

    def _start(self, recent: Sequence[Collection[GroundAtom]], init: frozenset[GroundAtom], *,
               designed_only: bool) -> tuple[Collection[GroundAtom], bool]:
        """Where a probe starts (its precondition is then made true there): a recent state
        of the agent, the family problem's initial state, or the empty state, in which only
        the precondition will hold, so any precondition the model lacks fails there. An
        action the agent still runs already shows what it does in its own states: it is
        probed from the designed ones only. Returns the state and whether it is designed
        (not the agent's)."""
        if recent and not designed_only and self._rng.random() < 2 / 3:
            return self._rng.choice(list(recent)), False
        return (init if init and self._rng.random() < 0.5 else frozenset()), True

    def check_optimal(self, watches: Iterable[AgentWatch],
                      objects: Mapping[str, Mapping[str, tuple[str, ...]]]) -> None:
        """Reduced functionality from optimal runs: where the agent marked its steps
        optimal but the model reaches their end in fewer, something the model relies on
        no longer works (papers/daaisy.md §4.1). Searched on the prober's thread."""
        for watch in watches:
            self._check_optimal(watch, objects)

    def _check_optimal(self, watch: AgentWatch,
                       objects: Mapping[str, Mapping[str, tuple[str, ...]]]) -> None:
        agent_id = watch.agent_id
        with self._lock:
            # One search an agent at a time: its runs wait in the watch (a few, bounded:
            # optimal_runs) while the last is queued, where a round each added another
            # task to a pool slowed by pacing, without bound (rev22b).
            if agent_id in self._searching:
                return
        runs = watch.take_optimal_runs()
        if not runs or watch.awaiting is not None:
            return
        with self._lock:
            self._searching.add(agent_id)
        try:
            self._pool.submit(self._shortcuts, agent_id, watch.family, watch.domain, runs,
                              objects.get(watch.family))
        except BaseException:
            with self._lock:
                self._searching.discard(agent_id)
            raise

    def _shortcuts(self, agent_id: str, family: str, domain: Domain,
                   runs: list[tuple[AgentTransition, ...]],
                   objects: Mapping[str, tuple[str, ...]] | None) -> None:
        try:
            self._search(agent_id, family, domain, runs, objects)
        finally:
            with self._lock:
                self._searching.discard(agent_id)

    def _search(self, agent_id: str, family: str, domain: Domain,
                runs: list[tuple[AgentTransition, ...]],
                objects: Mapping[str, tuple[str, ...]] | None) -> None:
        if self.pacers is not None:
            self.pacers.pacer().pace()  # the search asks no agent: paced once, before it
        traces = [Trace(tuple([run[0].state, *(t.next_state for t in run)]),
                        tuple(t.action for t in run), optimal=True,
                        source=f"episode {run[0].episode_id}") for run in runs]
        objs = objects if objects is not None else infer_object_types(
            domain, (s for t in traces for s in t.states), (a for t in traces for a in t.actions))
        try:
            report = find_shortcuts(domain, traces, objs)
        except Exception:
            log.exception("optimal-trace check failed", agent_id=agent_id)
            return
        shortened = {s.trace for s in report.shortcuts}
        for trace, run in zip(traces, runs, strict=True):
            if trace.source not in shortened:
                continue
            self.metrics.canaries.labels(family, "shortcut").inc()
            log.info("an optimal run is longer than the model's plan", agent_id=agent_id,
                     episode=run[0].episode_id, steps=len(run))
            for t in run:
                # From no record (offset -1): the run is evidence, not a commit holder.
                self.post(CanaryFinding(agent_id, AgentTransition(
                    agent_id, family, t.episode_id, t.step, t.time, t.state, t.action,
                    t.next_state, True, True)))

    def close(self) -> None:
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _done(self) -> None:
        with self._lock:
            self._backlog -= 1

    def _probe(self, agent_id: str, family: str, domain: Domain,
               due: list[tuple[frozenset[GroundAtom], GroundAction]]) -> None:
        """One agent's probes of a round, one after the other. An agent that cannot be
        reached fails the round once: each probe used to be a task of its own, and an
        unreachable agent logged "canary failed" and counted "unavailable" once per due
        action within a second (oper19), each after the client's retries. A probe the
        agent answered and refused (QueryNotAttempted: that start state; a 4xx) or
        answered outside the protocol fails alone: another probe may be answered."""
        try:
            for i, (state, ground) in enumerate(due):
                try:
                    self._ask(agent_id, family, domain, state, ground)
                except (QueryNotAttempted, AgentRejectedQuery, AgentProtocolError) as e:
                    self._unavailable(agent_id, family, e)
                except AgentUnavailable as e:
                    self._unavailable(agent_id, family, e, skipped=len(due) - i - 1)
                    return
        finally:
            for _ in due:
                self._done()

    def _unavailable(self, agent_id: str, family: str, error: AgentUnavailable,
                     skipped: int = 0) -> None:
        self.metrics.canaries.labels(family, "unavailable").inc()
        if skipped:
            log.warning("canary failed", agent_id=agent_id, error=str(error),
                        probes_skipped=skipped)
        else:
            log.warning("canary failed", agent_id=agent_id, error=str(error))

    def _ask(self, agent_id: str, family: str, domain: Domain,
             state: frozenset[GroundAtom], ground: GroundAction) -> None:
        agent = self.agents.agent(agent_id, family)
        if self.pacers is not None:
            agent = self.pacers.agent(agent)
        answer = agent.query(state, [ground], 1)[0]
        # An answer in words the model lacks (an unknown predicate, a wrong arity) is the
        # agent breaking the protocol, not behaviour: read as a transition, every such atom
        # was an unexplained change and raised an unexplained_inconsistency alert and an
        # assessment about the probed action, whatever it was.
        arity = {p.name: p.arity for p in domain.predicates}
        outside = next((a for a in answer.state
                        if not a or arity.get(a[0], -1) != len(a) - 1), None)
        if outside is not None:
            self.metrics.canaries.labels(family, "invalid_answer").inc()
            log.warning("canary failed", agent_id=agent_id,
                        error=f"the agent's answer holds ({' '.join(outside)}), outside "
                              f"the vocabulary of family {family}")
            return
        grounder = Grounder(domain)
        op = grounder.operator(ground)
        s = grounder.index.encode(state)
        # The answer says whether the agent executed: a refusal of an action the model
        # says applies (or an execution of one it says does not), nothing changed, is a
        # finding too.
        verdict, _ = check_declared(op, s, grounder.index.encode(answer.state),
                                    answer.executed > 0)
        self.metrics.canaries.labels(family, verdict.name.lower()).inc()
        if verdict is Verdict.INCONSISTENT:
            t = AgentTransition(agent_id, family, "canary", None, self.clock(), state, ground,
                                answer.state, False, answer.executed > 0)
            log.info("canary found an inconsistency", agent_id=agent_id, action=list(ground))
            self.post(CanaryFinding(agent_id, t))
