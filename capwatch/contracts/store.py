"""The models store's roles: what each caller may ask of it, and the records it keeps.

One SQL class (capwatch.models_store) implements every role; each caller depends on the
role it uses, so the alerts, the daemon's workers and its checkpointer state what they
need and a test can give them a fake of just that:

- :class:`ModelRegistry`: model versions per lineage (put, get, latest, history, ...);
- :class:`WorkQueue`: queued assessments, claimed with a lease and released on failure;
- :class:`Checkpoints`: consumer offsets and drift-table snapshots;
- :class:`AlertOutboxStore`: the alert outbox, its routing and deliveries.

Writes name the version they create (optimistic concurrency), so a retried write of the
same version is recognised by its content key and is a no-op, and two replicas racing to
write the same version cannot both win: the loser gets a :class:`VersionConflict`.
Semantics of every call: docs/operations.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from capwatch.contracts.versions import JSON, LineageSummary, ModelRef, ModelVersion


class StoreError(RuntimeError):
    """The store cannot do what was asked; the message says why."""


class VersionConflict(StoreError):
    """A different model already holds this (family, agent, version)."""


class LeaseLost(StoreError):
    """Claimed work is no longer held by the worker that claimed it: its lease ran out and
    another worker holds (or finished) it."""


@dataclass(frozen=True, slots=True)
class Held:
    """Claimed work a write is made for (:meth:`ModelRegistry.put`): the write happens
    only while ``worker`` still holds ``key``'s lease, which it renews to ``now +
    lease_seconds`` in the write's own transaction."""

    key: str
    worker: str
    now: datetime
    lease_seconds: float


class UnknownVersion(StoreError):
    """No such model version (or the parent named by a write does not exist)."""


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
    topic_id: str | None = None
    """The incarnation of ``source`` the position is on (Kafka's topic id, new each time
    the topic is created; None if the source knows none): a topic deleted and created
    again under its name starts its offsets from 0 again, and a position of the topic
    before says nothing of its records."""

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
    ended_at: datetime | None = None
    """When the work left the queue (done, or failed for good), on the store's clock
    (:meth:`WorkQueue.store_now`); None while it is live, and for a work that ended before
    the store kept it (schema 7): its reader falls back to the earliest time it knows.
    Set by the store, not by the producer."""
    finite: bool = field(default=False, compare=False)
    """The payload holds JSON's own types only, and no float but finite ones (a work item
    without drift evidence: names, numbers, lists): a store may write it with a faster
    encoder (``WorkQueue.enqueue_many``). Not stored; read back, an item says False."""


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


class ModelRegistry(Protocol):
    """Model versions, per lineage."""

    def put(self, version: ModelVersion, alerts: Sequence[OutboxAlert] = (),
            held: Held | None = None) -> ModelVersion:
        """Store ``version``; a retry of identical content returns the stored row.
        ``alerts`` go to the alert outbox in the same transaction (idempotent by key).
        ``held``: the claimed work the version is learned for; in the same transaction,
        :class:`LeaseLost` (and nothing written) unless its worker still holds it, and
        its lease renewed if so, so no other worker can claim it in between."""
        ...

    def get(self, ref: ModelRef) -> ModelVersion | None: ...

    def latest(self, family: str, agent_id: str | None = None) -> ModelVersion | None:
        """Newest version of one lineage (``agent_id`` ``None``: the family baseline)."""
        ...

    def history(self, family: str, agent_id: str | None = None) -> list[ModelVersion]:
        """All versions of one lineage, oldest first."""
        ...

    def own_lineages(self, agent_ids: Sequence[str]) -> set[tuple[str, str]]:
        """(family, agent id) of every lineage of its own that one of ``agent_ids`` has:
        one query for a batch of agents seen for the first time."""
        ...

    def model_at(self, agent_id: str, at: datetime,
                 family: str | None = None) -> ModelVersion | None:
        """The model agent ``agent_id`` ran at time ``at``: its own lineage's newest
        version created by then, else its family's baseline at that time."""
        ...

    def lineages(self, family: str | None = None) -> list[LineageSummary]: ...

    def newest_versions(self) -> list[ModelRef]:
        """The newest version of every lineage (baselines' agent_id None), ordered by
        family and agent: what :meth:`lineages` names, read from the primary key alone
        (every replica's drift gauges ask every 15 s)."""
        ...

    def model_texts(self, refs: Sequence[ModelRef]) -> dict[ModelRef, str]:
        """The model (``ModelVersion.model_json``) of each of ``refs`` that is stored, as
        the store's JSON text, in a few round trips: the drift gauges' first read compares
        every agent's model, and tells equal models apart by their text without parsing
        them. Equal models have equal texts within one store (not across backends)."""
        ...



class WorkQueue(Protocol):
    """Pending assessments: a durable work queue with leases."""

    def enqueue(self, item: PendingAssessment, alerts: Sequence[OutboxAlert] = ()) -> bool:
        """Queue work; False when an item with that key already exists (a retry).
        ``alerts`` go to the alert outbox in the same transaction."""
        ...

    def enqueue_many(self, items: Sequence[tuple[PendingAssessment, Sequence[OutboxAlert]]]
                     ) -> list[bool]:
        """:meth:`enqueue` of each (item, its alerts), all in one transaction: all queued
        or, on an error, none. Per item, whether it was new."""
        ...

    def claim(self, worker: str, now: datetime, lease_seconds: float,
              limit: int = 1) -> list[PendingAssessment]:
        """Take up to ``limit`` pending items, or items whose lease ran out, oldest first.

        Whose clock says what is due and which lease ran out is the store's (``now``,
        the caller's clock, only where the store keeps the caller's: SQLite, tests): a
        store several replicas share keeps the database's, so that one replica's clock
        stepped back or running ahead neither stalls work nor takes a live lease."""
        ...

    def renew(self, key: str, worker: str, now: datetime, lease_seconds: float) -> None:
        """Extend the lease of claimed work ``worker`` holds to ``lease_seconds`` from the
        store's now (see :meth:`claim`); :class:`LeaseLost` when it no longer holds it."""
        ...

    def complete(self, key: str, worker: str,
                 alerts: Sequence[OutboxAlert] = (), now: datetime | None = None) -> None:
        """Mark claimed work done; only the worker holding the lease may. ``alerts`` (what
        ending the work says) go to the outbox in the same transaction, so a worker that
        lost the lease writes neither. The work's ``ended_at`` is the store's now (``now``,
        the caller's, only where the store keeps the caller's clock, as for
        :meth:`claim`; without it, the host's)."""
        ...

    def release(self, key: str, worker: str, error: str, not_before: datetime,
                max_attempts: int = 5,
                failure_alerts: Sequence[OutboxAlert] = (),
                now: datetime | None = None) -> bool:
        """Give claimed work back after a failure; it is ``failed`` after max_attempts.
        Returns True when it failed for good, and only then writes ``failure_alerts``
        to the outbox and the work's ``ended_at`` (as :meth:`complete`), in the same
        transaction. ``now``: the caller's clock when it
        reckoned ``not_before``; a store on the database's clock keeps the delay
        between them, not the caller's time (without it, ``not_before`` is taken as the
        store's own time)."""
        ...

    def queue_items(self, status: str | None = None) -> list[PendingAssessment]: ...

    def live_queue_items(self) -> list[PendingAssessment]:
        """Pending and claimed work, read at once: work given back for a retry (claimed
        to pending) between a read of each status would be in neither."""
        ...

    def queue_items_by_key(self, keys: Sequence[str]) -> dict[str, PendingAssessment]:
        """Key → the work of those ``keys`` the queue holds, whatever its status: how
        work seen leaving the live queue ended (done, or failed and with what error), and
        when (``ended_at``)."""
        ...

    def store_now(self, now: datetime) -> datetime:
        """What time it is on the store's clock (``now``, the caller's, where it keeps the
        caller's): to compare with a time the store wrote (a lease, ``ended_at``)."""
        ...



class Checkpoints(Protocol):
    """Where a consumer group stands: offsets and the drift state consistent with them."""

    def save_offsets(self, group: str, offsets: Mapping[tuple[str, int], int],
                     at: datetime) -> None:
        """Record the next offset to process per (topic, partition), in one transaction."""
        ...

    def load_offsets(self, group: str) -> dict[tuple[str, int], int]: ...

    def save_drift_snapshots(self, group: str, snapshots: Sequence[DriftSnapshot]) -> int:
        """Upsert per (group, agent) in one transaction; returns how many were written.
        A snapshot older than the stored one (same source and partition, smaller
        ``next_offset``: a replica that lost the partition writing late) is ignored."""
        ...

    def load_drift_snapshots(self, group: str, source: str,
                             partitions: Iterable[int] | None = None,
                             agent_ids: Iterable[str] | None = None) -> list[DriftSnapshot]:
        """The group's snapshots for agents last seen in ``partitions`` of ``source``
        (all partitions when None), only of ``agent_ids`` when given."""
        ...



class AlertOutboxStore(Protocol):
    """The alert outbox: alerts written with their cause, routed and delivered."""

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

    def undelivered(self) -> tuple[int, int]:
        """(alerts waiting to be routed, deliveries some sink has not taken yet, whoever
        holds their lease), counted in the store."""
        ...

    def outbox(self, status: str | None = None) -> list[OutboxAlert]: ...

    def deliveries(self, status: str | None = None) -> list[AlertDelivery]: ...

    def carried_by(self, keys: Sequence[str]) -> dict[str, AlertDelivery]:
        """Outbox key → the delivery that carried it, with ``members`` (every outbox key
        it carried) filled in; keys not routed (or pruned) are left out."""
        ...

    def outbox_keys(self, keys: Sequence[str]) -> set[str]:
        """Those of ``keys`` that are in the outbox, whatever their status."""
        ...

    def prune_alerts(self, before: datetime) -> int:
        """Forget routed alerts, sent deliveries and sent times older than ``before``."""
        ...


class ModelStore(ModelRegistry, WorkQueue, Checkpoints, AlertOutboxStore, Protocol):
    """Every role: what a backend implements (and what wiring code holds)."""

    def close(self) -> None: ...
