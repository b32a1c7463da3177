"""Per-agent live state, owned by the replica that owns the agent's partition.

What must outlive the replica is in the models store (model versions, queued
assessments, offsets); what lives here is soft: the grounded model, the debounce
buffer of inconsistent transitions and when each action was last seen working.
Everything here can be rebuilt from the store plus a replay from the committed offset,
and the daemon's commit rule (never past a buffered transition) makes that replay
rebuild the debounce buffer exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from capwatch.daemon.assessor import ObservedTransition
from capwatch.model.domain import Domain, GroundAtom
from capwatch.models_store.base import ModelStore, ModelVersion
from capwatch.monitor.drift import DriftAlarm
from capwatch.monitor.transition_monitor import MonitorLimits, TransitionMonitor


@dataclass
class AgentState:
    agent_id: str
    family: str
    partition: int
    version: ModelVersion
    domain: Domain
    monitor: TransitionMonitor
    evidence: list[ObservedTransition] = field(default_factory=list)
    evidence_since: float | None = None
    """Monotonic time the oldest buffered inconsistency arrived (debounce clock)."""
    alarms: dict[str, DriftAlarm] = field(default_factory=dict)
    awaiting: str | None = None
    """Key of the queued assessment; set until a new version (or its failure) arrives."""
    transitions: int = 0
    inconsistent: int = 0
    last_offset: int = -1
    last_executed: dict[str, float] = field(default_factory=dict)
    """Action name → monotonic time it was last seen executing (canaries probe the rest)."""
    last_state: frozenset[GroundAtom] = frozenset()
    objects: dict[str, str] = field(default_factory=dict)
    """Objects seen in the stream, for canary queries."""
    drift_restored: tuple[int, int] | None = None
    """(partition, next offset) of the drift snapshot this agent's tables were restored
    from: its records before that offset are already counted, and a replay skips them."""

    @classmethod
    def from_version(cls, agent_id: str, family: str, partition: int,
                     version: ModelVersion, limits: MonitorLimits | None = None) -> AgentState:
        domain = version.domain()
        return cls(agent_id, family, partition, version, domain,
                   TransitionMonitor(domain, limits))

    def install(self, version: ModelVersion) -> None:
        """Switch to a new model version: evidence against the old one is moot."""
        self.version = version
        self.domain = version.domain()
        self.monitor.replace_model(self.domain)
        self.evidence.clear()
        self.evidence_since = None
        self.alarms.clear()
        self.awaiting = None

    def first_buffered_offset(self) -> int | None:
        # Canary findings carry offset -1: they come from no record and hold no commit.
        return min((o.offset for o in self.evidence if o.offset >= 0), default=None)


class Registry:
    """The agents this replica owns, loaded lazily from the store on first sight."""

    def __init__(self, store: ModelStore, limits: MonitorLimits | None = None) -> None:
        self.store = store
        self.limits = limits
        self._agents: dict[str, AgentState] = {}

    def __len__(self) -> int:
        return len(self._agents)

    def __iter__(self) -> Iterator[AgentState]:
        return iter(list(self._agents.values()))

    def get(self, agent_id: str) -> AgentState | None:
        return self._agents.get(agent_id)

    def current_version(self, agent_id: str, family: str) -> ModelVersion | None:
        """The agent's own newest version, else its family's baseline."""
        own = self.store.latest(family, agent_id)
        return own if own is not None else self.store.latest(family, None)

    def load(self, agent_id: str, family: str, partition: int) -> AgentState | None:
        """The agent's state, rebuilt from the store when first seen; None: unknown family."""
        state = self._agents.get(agent_id)
        if state is not None and state.family == family:
            state.partition = partition
            return state
        version = self.current_version(agent_id, family)
        if version is None:
            return None
        state = AgentState.from_version(agent_id, family, partition, version, self.limits)
        self._agents[agent_id] = state
        return state

    def in_partitions(self, partitions: set[int]) -> list[AgentState]:
        return [a for a in self._agents.values() if a.partition in partitions]

    def drop(self, agent_ids: list[str]) -> None:
        for a in agent_ids:
            self._agents.pop(a, None)
