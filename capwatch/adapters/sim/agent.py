"""The reference simulated agent: answers plan-outcome queries by simulating a PDDL/PPDDL model.

It stands in for a real agent in tests, benchmarks, demos and the reference HTTP agent
server. Its model can be switched at run time (drift injection) and it can act on its
own: execute an optimal plan for a problem, or wander at random, producing the traces
the fleet simulator publishes.

Query semantics (papers/daaisy.md Def. 6, design.md §1): the agent is put in the given
state and executes the plan step by step; the first step whose precondition fails stops
it. The answer is ⟨n_F, s_F⟩: the number of steps executed and the state after them.
Stochastic actions draw their outcome from the agent's own seeded RNG, independently for
every sample.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from capwatch.adapters.sim.grounded import Blocked, SharedGroundings
from capwatch.assess.agent import QueryResult, State
from capwatch.assess.search import (
    DEFAULT_MAX_STATES,
    Goal,
    SuccessorIndex,
    breadth_first,
    static_predicates,
)
from capwatch.contracts.agent_protocol import InvalidQuery
from capwatch.model.domain import Domain, GroundAction, GroundAtom, Problem
from capwatch.model.grounding import Grounder, GroundOperator, StateMask
from capwatch.model.simulate import step

log = logging.getLogger(__name__)

# The atom index interns every atom any query ever mentions; a long-running server fed
# arbitrary object names would grow it without bound, so it is rebuilt past this size.
MAX_INTERNED_ATOMS = 200_000

# Ground operator lists kept per model (see SimulatedAgent._operators); episodes of one
# agent almost always start from one problem, so a few entries cover them.
MAX_OPERATOR_LISTS = 8


@dataclass(frozen=True, slots=True)
class QueryRecord:
    """One answered query, for logs and for counting what an assessment cost."""

    number: int
    """1-based position of this query in the agent's lifetime."""
    plan_length: int
    samples: int
    executed: tuple[int, ...]
    """n_F of every sample."""
    model_version: int


@dataclass(frozen=True, slots=True)
class AgentStats:
    queries: int
    samples: int
    model_version: int
    """1 for the model the agent started with, +1 on every switch_model."""
    domain: str


@dataclass(frozen=True, slots=True)
class Episode:
    """An episode the agent ran: ``states[i]`` --``actions[i]``--> ``states[i + 1]``."""

    states: tuple[State, ...]
    actions: tuple[GroundAction, ...]
    executed: tuple[bool, ...]
    """Whether each action's precondition held (a refused action leaves the state as is)."""
    optimal: bool
    """True only when the whole trace is an optimal plan (deterministic model, no replanning)."""
    goal_reached: bool

    def transitions(self) -> Iterator[tuple[State, GroundAction, State]]:
        for i, action in enumerate(self.actions):
            yield self.states[i], action, self.states[i + 1]


class SimulatedAgent:
    """An :class:`~capwatch.assess.agent.AgentQuery` that simulates a symbolic model.

    Thread-safe: queries, model switches and episodes are serialised by one lock, so the
    HTTP server may call it from many request threads and a test may inject drift while
    queries are in flight (each query runs entirely on the old or the new model).
    """

    def __init__(self, domain: Domain, seed: int | None = None, *,
                 problem: Problem | None = None, history: int = 1000,
                 on_query: Callable[[QueryRecord], None] | None = None,
                 groundings: SharedGroundings | None = None) -> None:
        self._lock = threading.Lock()
        self._groundings = groundings if groundings is not None else SharedGroundings(
            MAX_OPERATOR_LISTS)
        self._domain = domain
        self._grounder = Grounder(domain)
        self._rng = random.Random(seed)
        self._version = 1
        self._queries = 0
        self._samples = 0
        self._history: deque[QueryRecord] = deque(maxlen=history)
        self._on_query = on_query
        self._ops: dict[tuple[int, frozenset[GroundAtom]],
                        tuple[Problem, list[GroundOperator], SuccessorIndex]] = {}
        self.problem = problem
        """Default problem for :meth:`run_optimal` and :meth:`random_walk`."""

    # ------------------------------------------------------------------ model

    @property
    def domain(self) -> Domain:
        return self._domain

    @property
    def model_version(self) -> int:
        return self._version

    def switch_model(self, domain: Domain) -> int:
        """Start behaving according to ``domain`` (drift injection); returns the new version."""
        grounder = Grounder(domain)
        with self._lock:
            old = self._domain.name
            self._domain = domain
            self._grounder = grounder
            self._ops = {}
            self._version += 1
            version = self._version
        log.info("agent model switched", extra={"from_domain": old, "to_domain": domain.name,
                                                "model_version": version})
        return version

    # ------------------------------------------------------------------ queries

    @property
    def stats(self) -> AgentStats:
        with self._lock:
            return AgentStats(self._queries, self._samples, self._version, self._domain.name)

    @property
    def history(self) -> list[QueryRecord]:
        """The most recent queries (bounded by ``history`` at construction), oldest first."""
        with self._lock:
            return list(self._history)

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise InvalidQuery(f"samples must be a positive integer, got {samples!r}")
        with self._lock:
            domain = self._domain
            self._check_state(domain, state)
            self._check_plan(domain, plan)
            if len(self._grounder.index) > MAX_INTERNED_ATOMS:
                self._grounder = Grounder(domain)
                self._ops = {}
            grounder = self._grounder
            ops = [grounder.operator(tuple(a)) for a in plan]
            start = grounder.index.encode(state)
            results = []
            for _ in range(samples):
                executed, final = self._execute(ops, start)
                results.append(QueryResult(executed, grounder.index.decode(final)))
            self._queries += 1
            self._samples += samples
            record = QueryRecord(self._queries, len(plan), samples,
                                 tuple(r.executed for r in results), self._version)
            self._history.append(record)
        log.debug("agent query", extra={"query": record.number, "plan_length": record.plan_length,
                                        "samples": samples, "executed": record.executed,
                                        "model_version": record.model_version})
        if self._on_query is not None:
            self._on_query(record)
        return results

    def _execute(self, ops: Sequence[GroundOperator], state: StateMask) -> tuple[int, StateMask]:
        executed = 0
        for op in ops:
            ok, state = step(op, state, self._rng)
            if not ok:
                break
            executed += 1
        return executed, state

    @staticmethod
    def _check_state(domain: Domain, state: Iterable[GroundAtom]) -> None:
        predicates = domain.predicate_map
        for atom in state:
            try:
                # str.join checks every element is a string without a Python call each.
                "".join(atom)
            except TypeError:
                raise InvalidQuery(f"state atom {atom!r} is not a tuple of names") from None
            if not atom or isinstance(atom, str):
                raise InvalidQuery(f"state atom {atom!r} is not a tuple of names")
            pred = predicates.get(atom[0])
            if pred is None:
                raise InvalidQuery(
                    f"state atom {_show(atom)}: unknown predicate {atom[0]!r} in domain "
                    f"{domain.name}"
                )
            if pred.arity != len(atom) - 1:
                raise InvalidQuery(f"state atom {_show(atom)}: predicate {pred.name!r} takes "
                                   f"{pred.arity} arguments, found {len(atom) - 1}")

    @staticmethod
    def _check_plan(domain: Domain, plan: Sequence[GroundAction]) -> None:
        actions = domain.action_map
        for i, ground in enumerate(plan):
            if not ground or not all(isinstance(x, str) for x in ground):
                raise InvalidQuery(f"plan step {i}: {ground!r} is not a tuple of names")
            action = actions.get(ground[0])
            if action is None:
                raise InvalidQuery(f"plan step {i} {_show(ground)}: unknown action {ground[0]!r} "
                                   f"in domain {domain.name}")
            if action.arity != len(ground) - 1:
                raise InvalidQuery(f"plan step {i} {_show(ground)}: action {action.name!r} takes "
                                   f"{action.arity} arguments, found {len(ground) - 1}")

    # ------------------------------------------------------------------ acting

    def _problem(self, problem: Problem | None) -> Problem:
        p = problem if problem is not None else self.problem
        if p is None:
            raise ValueError("no problem given and the agent has no default problem")
        return p

    def _operators(self, problem: Problem, start: Iterable[GroundAtom]
                   ) -> tuple[list[GroundOperator], SuccessorIndex]:
        """The operators of ``problem`` that static facts of ``start`` leave possible, and
        an index finding those a state may trigger; made once per model and set of static
        facts: grounding enumerates the bindings of every action (seconds on IPC domains
        with many parameters), which every episode would otherwise pay again. The caller
        holds the lock."""
        static = static_predicates(self._domain)
        statics = frozenset(a for a in start if a and a[0] in static)
        # Keyed by the problem's identity (see SharedGroundings); cleared on every model
        # switch, so the model is the current one.
        key = (id(problem), statics)
        found = self._ops.get(key)
        if found is None:
            if len(self._ops) >= MAX_OPERATOR_LISTS:
                self._ops.clear()
            grounder = self._grounder
            ops = [grounder.operator(a)
                   for a in self._groundings.get(self._domain, problem, statics)]
            found = self._ops[key] = (problem, ops, SuccessorIndex(ops))
        return found[1], found[2]

    def run_optimal(self, problem: Problem | None = None, *, max_steps: int = 200,
                    max_states: int = DEFAULT_MAX_STATES) -> Episode:
        """Execute an optimal plan for ``problem`` and return the trace.

        In a deterministic model this is one optimal plan. In a probabilistic one the
        agent plans over the all-outcomes determinisation and replans after every step
        (the sampled outcome may not be the one planned for), so the trace is a sensible
        goal-directed episode but not marked optimal. Stops when the goal holds, no plan
        exists any more (a dead end), or after ``max_steps``.
        """
        p = self._problem(problem)
        with self._lock:
            domain, grounder = self._domain, self._grounder
            ops, _ = self._operators(p, p.init)
            goal = Goal.of(grounder, p.goal_pos, p.goal_neg)
            state = grounder.index.encode(p.init)
            states = [state]
            actions: list[GroundAction] = []
            replanned = False
            plan = breadth_first(ops, state, goal, max_states=max_states).plan or []
            while plan and len(actions) < max_steps:
                ground = plan.pop(0)
                op = grounder.operator(ground)
                _, state = step(op, state, self._rng)
                actions.append(ground)
                states.append(state)
                if not op.action.is_deterministic and not goal.satisfied(state):
                    replanned = True
                    plan = breadth_first(ops, state, goal, max_states=max_states).plan or []
            decoded = tuple(grounder.index.decode(s) for s in states)
            reached = goal.satisfied(state)
            deterministic = not domain.is_probabilistic
        return Episode(decoded, tuple(actions), (True,) * len(actions),
                     optimal=reached and deterministic and not replanned, goal_reached=reached)

    def random_walk(self, steps: int, problem: Problem | None = None, *,
                    state: Iterable[GroundAtom] | None = None,
                    p_inapplicable: float = 0.0) -> Episode:
        """Wander for up to ``steps`` steps, choosing uniformly among applicable actions.

        With probability ``p_inapplicable`` a step instead attempts an action whose
        precondition fails (the state stays as is): real agents try such actions too, and
        those transitions are evidence about preconditions. Stops early in a dead end.
        """
        if not 0.0 <= p_inapplicable <= 1.0:
            raise ValueError(f"p_inapplicable must be in [0, 1], got {p_inapplicable}")
        p = self._problem(problem)
        start = p.init if state is None else frozenset(state)
        with self._lock:
            grounder, rng = self._grounder, self._rng
            ops, index = self._operators(p, start)
            mask = grounder.index.encode(start)
            states = [mask]
            actions: list[GroundAction] = []
            executed: list[bool] = []
            for _ in range(steps):
                # In operator order, as a scan of all of them would list them: a seed
                # gives the same walk however the operators are found.
                positions = [i for i in index.candidates(mask) if ops[i].applicable(mask)]
                applicable = [ops[i] for i in positions]
                if p_inapplicable and rng.random() < p_inapplicable:
                    blocked = Blocked(ops, positions)
                    if blocked:
                        op = rng.choice(blocked)
                        actions.append((op.action.name, *op.args))
                        executed.append(False)
                        states.append(mask)
                        continue
                if not applicable:
                    break
                op = rng.choice(applicable)
                _, mask = step(op, mask, rng)
                actions.append((op.action.name, *op.args))
                executed.append(True)
                states.append(mask)
            goal = Goal.of(grounder, p.goal_pos, p.goal_neg)
            reached = goal.satisfied(mask)
            decoded = tuple(grounder.index.decode(s) for s in states)
        return Episode(decoded, tuple(actions), tuple(executed), optimal=False,
                       goal_reached=reached)

    def emit_trace(self, problem: Problem | None = None, *, optimal: bool = False,
                   steps: int = 20, p_inapplicable: float = 0.0
                   ) -> Iterator[tuple[State, GroundAction, State]]:
        """Transitions ⟨s, a, s'⟩ of one episode, for the fleet simulator."""
        trace = (self.run_optimal(problem, max_steps=steps) if optimal
                 else self.random_walk(steps, problem, p_inapplicable=p_inapplicable))
        return trace.transitions()


def _show(atom: Sequence[object]) -> str:
    return "(" + " ".join(str(x) for x in atom) + ")"
