"""The versioned model registry's interface and record types.

A *lineage* is a sequence of model versions 1, 2, 3, ... A family (the model a group of
agents was deployed with) has a baseline lineage, ``agent_id`` ``None``; an agent that
drifted gets a lineage of its own whose first version's parent is the family baseline
it was running. Until then the agent runs its family's baseline.

Writes name the version they create (optimistic concurrency), so a retried write of
the same version is recognised by its content key and is a no-op, and two replicas
racing to write the same version cannot both win: the loser gets a
:class:`VersionConflict`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from capwatch.model.diff import (
    Change,
    change_from_json,
    change_to_json,
    describe_changes,
    model_changes,
)
from capwatch.model.domain import Domain
from capwatch.model.pddl_writer import write_domain
from capwatch.model.serialize import domain_from_json, domain_to_json

JSON = dict[str, Any]


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says why."""


class VersionConflict(StoreError):
    """A different model already holds this (family, agent, version)."""


class UnknownVersion(StoreError):
    """No such model version (or the parent named by a write does not exist)."""


def _utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"timestamp {t.isoformat()} has no time zone; capwatch stores UTC")
    return t.astimezone(UTC)


@dataclass(frozen=True, slots=True, order=True)
class ModelRef:
    """Names one model version. ``agent_id`` ``None`` is the family baseline."""

    family: str
    agent_id: str | None
    version: int

    def __str__(self) -> str:
        owner = self.agent_id if self.agent_id is not None else "baseline"
        return f"{self.family}/{owner}@{self.version}"

    def to_json(self) -> JSON:
        return {"family": self.family, "agent_id": self.agent_id, "version": self.version}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelRef:
        agent = data.get("agent_id")
        return cls(str(data["family"]), None if agent is None else str(agent),
                   int(data["version"]))


def content_key(payload: Mapping[str, Any]) -> str:
    """SHA-256 of canonical JSON: equal content gives an equal key on every host."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ModelVersion:
    """One stored model with where it came from and why."""

    ref: ModelRef
    parent: ModelRef | None
    delta_to_parent: int
    delta_to_baseline: int
    """Δ from the family baseline version this lineage forked from (0 for baselines)."""
    changed_pal_tuples: tuple[Change, ...]
    summary: tuple[str, ...]
    evidence: JSON
    model_json: JSON
    pddl: str
    created_at: datetime
    key: str = field(default="")
    """Content key: identical retries carry identical keys."""

    @property
    def family(self) -> str:
        return self.ref.family

    @property
    def agent_id(self) -> str | None:
        return self.ref.agent_id

    @property
    def version(self) -> int:
        return self.ref.version

    def domain(self) -> Domain:
        return domain_from_json(self.model_json)

    def identity(self) -> JSON:
        """What the content key covers: everything but the key itself."""
        return {
            "ref": self.ref.to_json(),
            "parent": self.parent.to_json() if self.parent else None,
            "delta_to_parent": self.delta_to_parent,
            "delta_to_baseline": self.delta_to_baseline,
            "changed_pal_tuples": [change_to_json(c) for c in self.changed_pal_tuples],
            "summary": list(self.summary),
            "evidence": self.evidence,
            "model": self.model_json,
            "pddl": self.pddl,
            "created_at": _utc(self.created_at).isoformat(),
        }

    def to_json(self) -> JSON:
        """The published form (model events, ``capwatch models show --json``)."""
        data = self.identity()
        data["key"] = self.key
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelVersion:
        parent = data.get("parent")
        return cls(
            ref=ModelRef.from_json(data["ref"]),
            parent=ModelRef.from_json(parent) if parent else None,
            delta_to_parent=int(data["delta_to_parent"]),
            delta_to_baseline=int(data["delta_to_baseline"]),
            changed_pal_tuples=tuple(change_from_json(c) for c in data["changed_pal_tuples"]),
            summary=tuple(str(s) for s in data["summary"]),
            evidence=dict(data["evidence"]),
            model_json=dict(data["model"]),
            pddl=str(data["pddl"]),
            created_at=datetime.fromisoformat(str(data["created_at"])),
            key=str(data.get("key", "")),
        )


def build_version(
    ref: ModelRef,
    domain: Domain,
    created_at: datetime,
    *,
    parent: ModelVersion | None = None,
    baseline: Domain | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> ModelVersion:
    """Make the record for a new version: Δ, changed pal-tuples and summary from the parent.

    ``baseline`` is the family baseline the lineage forked from; it defaults to the parent
    for a lineage's first agent version and is the domain itself for a baseline.
    """
    if ref.version < 1:
        raise ValueError("versions start at 1")
    if parent is not None:
        old = parent.domain()
        changes = model_changes(old, domain)
        summary = describe_changes(old, domain, changes)
    else:
        changes, summary = [], []
    if ref.agent_id is None:
        base_delta = 0
    else:
        if baseline is None and parent is not None and parent.agent_id is None:
            baseline = parent.domain()
        if baseline is None:
            raise ValueError(f"{ref}: an agent version needs the family baseline to measure Δ")
        base_delta = len(model_changes(baseline, domain))
    version = ModelVersion(
        ref=ref, parent=parent.ref if parent else None, delta_to_parent=len(changes),
        delta_to_baseline=base_delta, changed_pal_tuples=tuple(changes),
        summary=tuple(summary), evidence=dict(evidence or {}),
        model_json=domain_to_json(domain), pddl=write_domain(domain),
        created_at=_utc(created_at),
    )
    return _with_key(version)


def _with_key(v: ModelVersion) -> ModelVersion:
    return ModelVersion(v.ref, v.parent, v.delta_to_parent, v.delta_to_baseline,
                        v.changed_pal_tuples, v.summary, v.evidence, v.model_json, v.pddl,
                        v.created_at, content_key(v.identity()))


@dataclass(frozen=True, slots=True)
class VersionDiff:
    """What differs between two stored versions, in pal-tuples and in words."""

    a: ModelRef
    b: ModelRef
    changes: tuple[Change, ...]
    summary: tuple[str, ...]

    @property
    def delta(self) -> int:
        return len(self.changes)

    def to_json(self) -> JSON:
        return {"a": self.a.to_json(), "b": self.b.to_json(), "delta": self.delta,
                "changes": [change_to_json(c) for c in self.changes],
                "summary": list(self.summary)}


def diff_versions(a: ModelVersion, b: ModelVersion) -> VersionDiff:
    old, new = a.domain(), b.domain()
    changes = model_changes(old, new)
    return VersionDiff(a.ref, b.ref, tuple(changes),
                       tuple(describe_changes(old, new, changes)))


@dataclass(frozen=True, slots=True)
class LineageSummary:
    family: str
    agent_id: str | None
    latest_version: int
    updated_at: datetime
    delta_to_baseline: int


@dataclass(frozen=True, slots=True)
class DriftSnapshot:
    """One agent's saved drift state and the stream position it is consistent with."""

    agent_id: str
    model: ModelRef
    """The model version the tables were counted against; restore only into it."""
    source: str
    partition: int
    next_offset: int
    """Every record of (``source``, ``partition``) before this offset is counted in
    ``state``, none at or after it: a replay skips the ones before."""
    state: JSON
    """capwatch.monitor.snapshot's versioned JSON."""
    updated_at: datetime

    @property
    def family(self) -> str:
        return self.model.family


@dataclass(frozen=True, slots=True)
class PendingAssessment:
    """A unit of assessment work that must survive a restart of the replica that queued it."""

    key: str
    """Idempotency key chosen by the producer, e.g. ``agent/action/first-offset``."""
    agent_id: str
    family: str
    payload: JSON
    enqueued_at: datetime
    attempts: int = 0
    status: str = "pending"
    claimed_by: str | None = None
    lease_until: datetime | None = None
    last_error: str | None = None


QUEUE_STATUSES = ("pending", "claimed", "done", "failed")


@dataclass(frozen=True, slots=True)
class OutboxAlert:
    """An alert waiting to be routed, written in the same transaction as what caused it.

    The store does not interpret ``alert`` (capwatch.alerts owns the format); it only
    indexes what routing needs: the dedup key (suppression), the group key (grouping)
    and the time.
    """

    key: str
    """Idempotency key chosen by the producer: the same cause always writes the same key."""
    dedup_key: str
    group_key: str
    family: str
    alert_type: str
    alert: JSON
    created_at: datetime
    """The alert's own time; suppression windows and group waits are measured on it."""
    status: str = "pending"
    delivery: str | None = None
    """Key of the :class:`AlertDelivery` that carried it (status ``routed``)."""


OUTBOX_STATUSES = ("pending", "routed", "suppressed")


@dataclass(frozen=True, slots=True)
class AlertDelivery:
    """One alert the router let out (alone or grouping several), and the sinks that
    have not acknowledged it yet."""

    key: str
    alert: JSON
    sinks_pending: tuple[str, ...]
    created_at: datetime
    members: tuple[str, ...] = ()
    """Outbox keys this delivery carries (set by a routing plan; not read back)."""
    status: str = "pending"
    attempts: int = 0
    not_before: datetime | None = None
    last_error: str | None = None


DELIVERY_STATUSES = ("pending", "sent")


@dataclass(frozen=True, slots=True)
class RoutingPlan:
    """What one routing pass decided, applied by the store in one transaction."""

    suppressed: tuple[str, ...] = ()
    """Outbox keys dropped inside their dedup key's suppression window."""
    deliveries: tuple[AlertDelivery, ...] = ()
    sent: Mapping[str, datetime] = field(default_factory=dict)
    """Dedup key → time of the newest alert let through with it."""


RoutingPlanner = Callable[[Sequence[OutboxAlert], Mapping[str, datetime]], RoutingPlan]
"""Pure: (pending outbox rows oldest first, last-sent time per their dedup keys) → plan."""


class ModelStore(Protocol):
    """The registry every backend implements; see docs/operations.md for semantics."""

    def close(self) -> None: ...

    # -- model versions ------------------------------------------------------------------
    def put(self, version: ModelVersion,
            alerts: Sequence[OutboxAlert] = ()) -> ModelVersion:
        """Store ``version``; a retry of identical content returns the stored row.
        ``alerts`` go to the alert outbox in the same transaction (idempotent by key)."""
        ...

    def get(self, ref: ModelRef) -> ModelVersion | None: ...

    def latest(self, family: str, agent_id: str | None = None) -> ModelVersion | None:
        """Newest version of one lineage (``agent_id`` ``None``: the family baseline)."""
        ...

    def history(self, family: str, agent_id: str | None = None) -> list[ModelVersion]:
        """All versions of one lineage, oldest first."""
        ...

    def model_at(self, agent_id: str, at: datetime,
                 family: str | None = None) -> ModelVersion | None:
        """The model agent ``agent_id`` ran at time ``at``: its own lineage's newest
        version created by then, else its family's baseline at that time."""
        ...

    def lineages(self, family: str | None = None) -> list[LineageSummary]: ...

    # -- pending assessments (a durable work queue) ---------------------------------------
    def enqueue(self, item: PendingAssessment, alerts: Sequence[OutboxAlert] = ()) -> bool:
        """Queue work; False when an item with that key already exists (a retry).
        ``alerts`` go to the alert outbox in the same transaction."""
        ...

    def claim(self, worker: str, now: datetime, lease_seconds: float,
              limit: int = 1) -> list[PendingAssessment]:
        """Take up to ``limit`` pending items, or items whose lease ran out, oldest first."""
        ...

    def complete(self, key: str, worker: str) -> None:
        """Mark claimed work done; only the worker holding the lease may."""
        ...

    def release(self, key: str, worker: str, error: str, not_before: datetime,
                max_attempts: int = 5,
                failure_alerts: Sequence[OutboxAlert] = ()) -> bool:
        """Give claimed work back after a failure; it is ``failed`` after max_attempts.
        Returns True when it failed for good, and only then writes ``failure_alerts``
        to the outbox, in the same transaction."""
        ...

    def queue_items(self, status: str | None = None) -> list[PendingAssessment]: ...

    # -- consumer checkpoints -------------------------------------------------------------
    def save_offsets(self, group: str, offsets: Mapping[tuple[str, int], int],
                     at: datetime) -> None:
        """Record the next offset to process per (topic, partition), in one transaction."""
        ...

    def load_offsets(self, group: str) -> dict[tuple[str, int], int]: ...

    # -- drift state ----------------------------------------------------------------------
    def save_drift_snapshots(self, group: str, snapshots: Sequence[DriftSnapshot]) -> int:
        """Upsert per (group, agent) in one transaction; returns how many were written.
        A snapshot older than the stored one (same source and partition, smaller
        ``next_offset``: a replica that lost the partition writing late) is ignored."""
        ...

    def load_drift_snapshots(self, group: str, source: str,
                             partitions: Iterable[int] | None = None) -> list[DriftSnapshot]:
        """The group's snapshots for agents last seen in ``partitions`` of ``source``
        (all partitions when None)."""
        ...

    # -- alert outbox -----------------------------------------------------------------------
    def add_alerts(self, alerts: Sequence[OutboxAlert]) -> int:
        """Write alerts to the outbox; returns how many were new (retries add nothing)."""
        ...

    def route_alerts(self, planner: RoutingPlanner, now: datetime) -> RoutingPlan:
        """In one transaction, excluding other routers: read the pending outbox and the
        last-sent times of its dedup keys, ask ``planner``, and apply its plan."""
        ...

    def claim_deliveries(self, now: datetime, lease_seconds: float,
                         limit: int = 100) -> list[AlertDelivery]:
        """Pending deliveries due by ``now``, oldest first; each is held for
        ``lease_seconds`` (another replica retries it if this one dies delivering)."""
        ...

    def finish_delivery(self, key: str, delivered: Sequence[str], now: datetime,
                        error: str | None = None,
                        retry_at: datetime | None = None) -> AlertDelivery:
        """Record which sinks took the alert; it is ``sent`` once none is left, else due
        again at ``retry_at``."""
        ...

    def outbox(self, status: str | None = None) -> list[OutboxAlert]: ...

    def deliveries(self, status: str | None = None) -> list[AlertDelivery]: ...

    def prune_alerts(self, before: datetime) -> int:
        """Forget routed alerts, sent deliveries and sent times older than ``before``."""
        ...


def lineage_chain(store: ModelStore, ref: ModelRef) -> list[ModelVersion]:
    """The version and its ancestors across lineages, root (a baseline) first."""
    chain: list[ModelVersion] = []
    seen: set[ModelRef] = set()
    current: ModelRef | None = ref
    while current is not None:
        if current in seen:
            raise StoreError(f"parent cycle at {current}")
        seen.add(current)
        v = store.get(current)
        if v is None:
            raise UnknownVersion(f"no model version {current}")
        chain.append(v)
        current = v.parent
    return chain[::-1]


def next_ref(store: ModelStore, family: str, agent_id: str | None) -> ModelRef:
    latest = store.latest(family, agent_id)
    return ModelRef(family, agent_id, latest.version + 1 if latest else 1)


def record_new_model(store: ModelStore, family: str, agent_id: str | None, domain: Domain,
                     created_at: datetime,
                     evidence: Mapping[str, Any] | None = None) -> ModelVersion:
    """Append ``domain`` to a lineage, forking an agent lineage from its family baseline.

    Convenience for callers that do not track versions themselves; a caller that must
    retry safely should build the version once (:func:`build_version`) and retry
    :meth:`ModelStore.put` with that same record.
    """
    ref = next_ref(store, family, agent_id)
    parent = store.latest(family, agent_id)
    baseline: Domain | None = None
    if agent_id is not None:
        if parent is None:
            parent = store.model_at(agent_id, created_at, family)
            if parent is None:
                raise UnknownVersion(f"family {family} has no baseline to fork {agent_id} from")
        baseline = _fork_baseline(store, parent).domain()
    return store.put(build_version(ref, domain, created_at, parent=parent,
                                   baseline=baseline, evidence=evidence))


def _fork_baseline(store: ModelStore, v: ModelVersion) -> ModelVersion:
    for ancestor in reversed(lineage_chain(store, v.ref)):
        if ancestor.agent_id is None:
            return ancestor
    raise StoreError(f"{v.ref} descends from no family baseline")
