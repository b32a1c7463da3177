"""Agent answers are checked before an assessment may use them (issue 12).

A version is published as the agent's true capability, so an answer capwatch cannot
believe must fail the assessment with the reason, never shape a model:

- each answer is in the model's vocabulary (known predicates with their arity), names only
  objects of the question (PDDL effects touch only an action's arguments and the domain's
  constants), stays within the state-size limit, and says that nothing changed when nothing
  was executed;
- a deterministic agent answers the same question the same way every time;
- asked again what it was seen doing (a few observed transitions, each twice), a
  deterministic agent answers as it behaved;
- the learned model explains every transition the agent was seen making (the evidence the
  assessment started from): if the answers lead to a model the agent's own reported
  behaviour contradicts, the answers are wrong, not the behaviour.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

from capwatch.assess.agent import AgentQuery, QueryResult, State
from capwatch.contracts.wire import AgentTransition
from capwatch.model.consistency import Verdict
from capwatch.model.domain import Domain, GroundAction
from capwatch.model.errors import ModelError
from capwatch.monitor.transition_monitor import TransitionMonitor


class AnswerRejected(Exception):
    """The agent's answers cannot be believed. Not AgentUnavailable: asking again soon
    does not help, so the assessment fails after its attempts with this reason."""


class CheckedAgent:
    """An :class:`AgentQuery` whose every answer is checked (see the module docstring)."""

    def __init__(self, inner: AgentQuery, domain: Domain, max_state_atoms: int = 100_000
                 ) -> None:
        self.inner = inner
        self.arity = {p.name: p.arity for p in domain.predicates}
        self.constants = frozenset(c.name for c in domain.constants)
        self.deterministic = not domain.is_probabilistic
        self.max_state_atoms = max_state_atoms
        self._answers: dict[tuple[State, tuple[GroundAction, ...]], tuple[int, State]] = {}
        self._lock = threading.Lock()

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        results = self.inner.query(state, plan, samples)
        allowed = self.constants | {o for a in state for o in a[1:]} | {
            o for a in plan for o in a[1:]}
        for r in results:
            self._check(r, state, plan, allowed)
        if self.deterministic and results:
            key = (frozenset(state), tuple(plan))
            first = (results[0].executed, frozenset(results[0].state))
            with self._lock:
                seen = self._answers.setdefault(key, first)
            if any((r.executed, frozenset(r.state)) != seen for r in results):
                raise AnswerRejected("the agent answered the same question differently"
                                     " although its model is deterministic")
        return results

    def _check(self, r: QueryResult, state: State, plan: Sequence[GroundAction],
               allowed: frozenset[str]) -> None:
        if not 0 <= r.executed <= len(plan):
            raise AnswerRejected(f"the agent reported executing {r.executed} steps of a"
                                 f" {len(plan)}-step plan")
        if len(r.state) > self.max_state_atoms:
            raise AnswerRejected(f"the agent answered with {len(r.state)} atoms, more than"
                                 f" the limit of {self.max_state_atoms}")
        for atom in r.state:
            n = self.arity.get(atom[0])
            if n is None:
                raise AnswerRejected(f"the agent answered with the unknown predicate"
                                     f" {atom[0]!r}")
            if len(atom) - 1 != n:
                raise AnswerRejected(f"the agent answered with {atom[0]!r} of {len(atom) - 1}"
                                     f" arguments; it takes {n}")
            stray = [o for o in atom[1:] if o not in allowed]
            if stray:
                raise AnswerRejected(f"the agent answered with the object {stray[0]!r},"
                                     " which is neither in the question nor a constant")
        if r.executed == 0 and frozenset(r.state) != frozenset(state):
            raise AnswerRejected("the agent executed nothing yet reported a changed state")


def unexplained(model: Domain, transitions: Iterable[AgentTransition]) -> list[AgentTransition]:
    """The observed transitions ``model`` cannot explain (judged as the monitor judges)."""
    monitor = TransitionMonitor(model)
    out = []
    for t in transitions:
        try:
            verdict = monitor.observe(t.state, t.action, t.next_state).verdict
        except ModelError:
            out.append(t)
            continue
        if verdict is Verdict.INCONSISTENT:
            out.append(t)
    return out


SPOT_CHECKS = 3


def spot_check(agent: AgentQuery, model: Domain, observed: Sequence[AgentTransition],
               checks: int = SPOT_CHECKS) -> int:
    """Ask a deterministic agent, twice each, to run ``checks`` of the transitions it was
    seen making, from the state it made them in; raise AnswerRejected unless every answer is
    what it did. The contradicting ones (the evidence of the change) go first. Returns the
    queries asked. Stochastic models are skipped: one outcome need not repeat."""
    if model.is_probabilistic:
        return 0
    chosen = [t for t in observed if t.executed is not None or t.next_state != t.state]
    asked = 0
    for t in chosen[:checks]:
        for _ in range(2):
            r = agent.query(t.state, [t.action], 1)[0]
            asked += 1
            ran = r.executed == 1
            expected_state = t.next_state if t.executed is not False else t.state
            if (t.executed is not None and ran != t.executed) \
                    or frozenset(r.state) != expected_state:
                raise AnswerRejected(
                    f"asked to repeat {list(t.action)} from the state it was seen in (partition"
                    f" {t.partition} offset {t.offset}), the agent answered executed={r.executed}"
                    f" with {len(r.state)} atoms where it was seen"
                    f" {'refusing' if t.executed is False else 'reaching'}"
                    f" {len(expected_state)} atoms: its answers disagree with its behaviour")
    return asked
