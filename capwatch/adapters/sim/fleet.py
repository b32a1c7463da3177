"""An in-process simulated fleet: many reference agents over several model families.

Each agent is a :class:`~capwatch.adapters.sim.agent.SimulatedAgent` wandering through
episodes of its family's problem. Drift is scheduled per agent or per family at an
agent-local step: from the first episode that starts at or after that step the agent
behaves by the drifted model, which is what the daemon must discover. The fleet emits
wire-format bytes (the same bytes a Kafka producer would send), so the daemon's decoder
sees exactly what production sees.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.adapters.sim.grounded import SharedGroundings
from capwatch.assess.agent import AgentQuery
from capwatch.contracts.wire import AgentTransition, encode_transition
from capwatch.model.domain import Domain, Problem


@dataclass(frozen=True, slots=True)
class FamilySpec:
    name: str
    domain: Domain
    problem: Problem


@dataclass(frozen=True, slots=True)
class DriftSpec:
    """From ``at_step`` (counted per agent) on, the target behaves by ``domain``."""

    domain: Domain
    at_step: int
    agent_id: str | None = None
    family: str | None = None

    def __post_init__(self) -> None:
        if (self.agent_id is None) == (self.family is None):
            raise ValueError("a drift targets exactly one of agent_id or family")


@dataclass
class _Member:
    agent_id: str
    family: FamilySpec
    agent: SimulatedAgent
    steps: int = 0
    episodes: int = 0
    pending: list[bytes] = field(default_factory=list)
    drifted: bool = False
    drifted_at: int | None = None
    """The agent's step count when its model was switched (drifts apply between episodes,
    so this can be later than the drift's ``at_step``)."""


@dataclass(frozen=True, slots=True)
class FleetEvent:
    agent_id: str
    value: bytes


class SimulatedFleet:
    """Round-robin over agents; every call to :meth:`events` yields the next transitions.

    ``episode_steps`` bounds an episode's length; ``p_inapplicable`` is the share of steps
    where an agent attempts an action whose precondition fails (evidence about
    preconditions, and how a drifted precondition shows up in the stream).
    """

    def __init__(self, families: Mapping[str, FamilySpec], agents: Mapping[str, str],
                 drifts: list[DriftSpec] | None = None, *, seed: int = 0,
                 episode_steps: int = 12, p_inapplicable: float = 0.25,
                 start_time: datetime | None = None) -> None:
        self.families = dict(families)
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._members: dict[str, _Member] = {}
        groundings = SharedGroundings()
        for i, (agent_id, family) in enumerate(sorted(agents.items())):
            spec = self.families[family]
            agent = SimulatedAgent(spec.domain, seed=seed * 7919 + i, problem=spec.problem,
                                   groundings=groundings)
            self._members[agent_id] = _Member(agent_id, spec, agent)
        self.drifts = list(drifts or [])
        for d in self.drifts:
            if d.agent_id is not None and d.agent_id not in self._members:
                raise ValueError(f"drift targets unknown agent {d.agent_id!r}")
            if d.family is not None and d.family not in self.families:
                raise ValueError(f"drift targets unknown family {d.family!r}")
        self.episode_steps = episode_steps
        self.p_inapplicable = p_inapplicable
        self._time = start_time or datetime(2026, 1, 1, tzinfo=UTC)

    @classmethod
    def build(cls, families: Mapping[str, FamilySpec], agents_per_family: int,
              drifts: list[DriftSpec] | None = None, **kwargs: object) -> SimulatedFleet:
        agents = {f"{name}-{i:03d}": name for name in families for i in range(agents_per_family)}
        return cls(families, agents, drifts, **kwargs)  # type: ignore[arg-type]

    @property
    def agent_ids(self) -> list[str]:
        return list(self._members)

    def family_of(self, agent_id: str) -> str:
        return self._members[agent_id].family.name

    def agent(self, agent_id: str) -> AgentQuery:
        """The agent's query interface (what the daemon's assessment asks)."""
        return self._members[agent_id].agent

    def simulated_agent(self, agent_id: str) -> SimulatedAgent:
        return self._members[agent_id].agent

    def true_model(self, agent_id: str) -> Domain:
        return self._members[agent_id].agent.domain

    def drifted_agents(self) -> list[str]:
        return [m.agent_id for m in self._members.values() if m.drifted]

    def drift_step(self, agent_id: str) -> int | None:
        """The step at which ``agent_id`` switched to a drifted model (None: it has not)."""
        return self._members[agent_id].drifted_at

    def steps(self, agent_id: str) -> int:
        """Transitions ``agent_id`` has produced so far."""
        return self._members[agent_id].steps

    def _apply_drifts(self, m: _Member) -> None:
        # The latest drift due wins (the later one in the list on a tie): switching to
        # each due drift in turn flipped an agent with two of them back and forth before
        # every episode.
        due = [d for d in self.drifts if (d.agent_id == m.agent_id or d.family == m.family.name)
               and m.steps >= d.at_step]
        if not due:
            return
        latest = max(enumerate(due), key=lambda x: (x[1].at_step, x[0]))[1]
        if m.agent.domain != latest.domain:
            m.agent.switch_model(latest.domain)
            m.drifted = True
            m.drifted_at = m.steps

    def _episode(self, m: _Member) -> list[bytes]:
        self._apply_drifts(m)
        m.episodes += 1
        episode = f"{m.agent_id}-ep{m.episodes:05d}"
        out = []
        trace = m.agent.random_walk(self.episode_steps, p_inapplicable=self.p_inapplicable)
        for k, (s, a, s2) in enumerate(trace.transitions()):
            self._time += timedelta(milliseconds=100)
            t = AgentTransition(m.agent_id, m.family.name, episode, k, self._time, s, a, s2, False,
                           trace.executed[k])
            out.append(encode_transition(t))
        return out

    def next_event(self, agent_id: str) -> FleetEvent:
        with self._lock:
            m = self._members[agent_id]
            while not m.pending:
                m.pending = self._episode(m)
            m.steps += 1
            return FleetEvent(agent_id, m.pending.pop(0))

    def events(self, rounds: int) -> Iterator[FleetEvent]:
        """``rounds`` transitions of every agent, interleaved as a fleet would be."""
        ids = list(self._members)
        for _ in range(rounds):
            for agent_id in ids:
                yield self.next_event(agent_id)
