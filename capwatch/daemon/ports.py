"""The small interfaces the daemon wires together (adapters implement them).

The models store's interface is capwatch.models_store.base.ModelStore; the ones here
are the daemon's own: where records come from, where events go, how an agent is asked
and how a model is re-learned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from capwatch.adapters.wire import AlertEvent, DeadLetterRecord, ModelVersionEvent, Transition
from capwatch.assess.agent import AgentQuery
from capwatch.model.domain import Domain


@dataclass(frozen=True, slots=True)
class Record:
    """One message as a source delivered it."""

    source: str
    """Topic or file name."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes


Rebalance = Callable[[set[int]], None]


class Source(Protocol):
    """A partitioned, replayable stream of records (Kafka, a JSONL file, a simulated fleet).

    ``commit`` records, per partition, the offset of the next record to process; after a
    restart the source resumes there, so everything after the last commit is delivered
    again (at-least-once) and the daemon makes reprocessing harmless.
    """

    name: str

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        """Begin delivering. ``resume`` is the daemon's own checkpoint (next offset per
        partition) for sources that cannot keep one themselves; Kafka uses the group's."""
        ...

    def poll(self, timeout_s: float) -> list[Record]: ...

    def commit(self, offsets: Mapping[int, int]) -> None: ...

    def exhausted(self) -> bool:
        """True for a finite source (a file, a fixed simulation) that has nothing left."""
        ...

    def lag(self) -> dict[int, int]:
        """Records not yet consumed, per assigned partition (best effort)."""
        ...

    def close(self) -> None: ...


class Publisher(Protocol):
    """Where model versions, alerts and dead letters leave the process."""

    def model_version(self, event: ModelVersionEvent) -> None: ...

    def alert(self, event: AlertEvent) -> None: ...

    def dead_letter(self, record: DeadLetterRecord) -> None: ...

    def flush(self, timeout_s: float = 10.0) -> None:
        """Block until everything sent so far is durable at the destination."""
        ...

    def close(self) -> None: ...


class AgentDirectory(Protocol):
    """How to reach an agent for plan-outcome queries."""

    def agent(self, agent_id: str, family: str) -> AgentQuery: ...


@dataclass(frozen=True, slots=True)
class ObservedTransition:
    """A transition with where it came from, as evidence for an assessment."""

    transition: Transition
    partition: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        t = self.transition
        return {
            "partition": self.partition, "offset": self.offset, "episode_id": t.episode_id,
            "step": t.step, "state": sorted(list(a) for a in t.state),
            "action": list(t.action), "next_state": sorted(list(a) for a in t.next_state),
            "optimal": t.optimal, "executed": t.executed,
        }


@dataclass(frozen=True, slots=True)
class AssessmentRequest:
    agent_id: str
    family: str
    model: Domain
    """The model the agent was believed to follow when the evidence arrived."""
    agent: AgentQuery
    inconsistent: Sequence[tuple[frozenset[tuple[str, ...]], tuple[str, ...],
                                 frozenset[tuple[str, ...]]]] = ()
    """Observed (s, a, s') the model cannot explain."""
    inconsistent_executed: Sequence[bool | None] = ()
    """Per inconsistent transition, whether the agent said it executed (None: unknown)."""
    executed: Sequence[tuple[frozenset[tuple[str, ...]], tuple[str, ...],
                             frozenset[tuple[str, ...]]]] = ()
    """Recent transitions the model explained (they pin modes without a query)."""
    drifted_actions: Mapping[str, Any] = field(default_factory=dict)
    """Action name → provisional re-estimated action (probability drift)."""
    drift_probes: Mapping[str, tuple[tuple[str, ...], frozenset[tuple[str, ...]]]] = field(
        default_factory=dict)
    """Action name → (ground action, state it executed in): where to re-estimate it."""
    query_budget: int = 500
    samples: int = 30
    optimal_traces: Sequence[Sequence[tuple[str, ...]]] = ()


@dataclass(frozen=True, slots=True)
class AssessmentOutcome:
    model: Domain
    queries: int
    details: Mapping[str, Any] = field(default_factory=dict)


class Assessor(Protocol):
    """Re-learns the parts of a model the evidence says changed (DAAISy, AIA, estimation)."""

    def assess(self, request: AssessmentRequest) -> AssessmentOutcome: ...
