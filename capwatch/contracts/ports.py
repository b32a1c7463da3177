"""The interfaces between the daemon and its I/O adapters (the adapters implement them).

Where records come from (:class:`Source`), where events go (:class:`Publisher`) and how
an agent is reached (:class:`AgentDirectory`). The models store's roles are in
capwatch.contracts.store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol, runtime_checkable

import msgspec

from capwatch.assess.agent import AgentQuery
from capwatch.contracts.wire import AlertEvent, DeadLetterRecord, ModelVersionEvent


class Record(msgspec.Struct, frozen=True, gc=False):
    """One message as a source delivered it.

    A frozen msgspec Struct rather than a frozen dataclass: sources build one per message,
    and a frozen dataclass's ``__init__`` cost over a microsecond each, on the path whose
    whole budget is 10 µs (issue 13). ``gc=False``: it holds only immutable values.
    """

    source: str
    """Topic or file name."""
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: float | None = None
    """When the message was written (Kafka's record timestamp, Unix seconds), if known."""
    size: int | None = None
    """The whole message's length when ``value`` holds only its first bytes: a source stops
    keeping a message once it is over the size limit, so it is refused without being held
    in memory."""
    sha256: str | None = None
    """The whole message's SHA-256 (hex) when ``value`` holds only its first bytes."""


class DeliveryError(RuntimeError):
    """A publisher could not deliver what it was given (yet): nothing after it may be
    committed. The daemon retries; it is never a reason to exit."""


class AssignmentLost(RuntimeError):
    """The consumer group no longer counts this member as the owner of ``partitions``
    (dropped from the group, or a new generation began without it): a commit for them
    fails, and they may be another member's already. The source hands out none of their
    records until the group assigns them again (from the group's commit); the daemon
    gives up what it held of them without a commit. Not an outage: nothing is retried,
    the member rejoins at its next poll."""

    def __init__(self, partitions: frozenset[int] | set[int], why: str = "") -> None:
        super().__init__(frozenset(partitions), why)  # args: what pickle rebuilds it from
        self.partitions = frozenset(partitions)
        self.why = why

    def __str__(self) -> str:
        return (f"the consumer group dropped this member's partitions "
                f"{sorted(self.partitions)}" + (f": {self.why}" if self.why else ""))


Rebalance = Callable[[set[int]], None]


class GroupView(NamedTuple):
    """What the cluster says of a consumer group (DescribeGroups), for telling a replica
    that stands by (more members than partitions) from one that was left out."""

    state: str
    """The broker's word: Stable, PreparingRebalance, CompletingRebalance, Empty, Dead."""
    members: frozenset[str]
    """Member ids."""
    partitions: int | None
    """The topic's partitions, if known."""


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

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Raises :class:`AssignmentLost` when the group no longer has this member own
        them (a Kafka source); nothing is committed then."""
        ...

    def exhausted(self) -> bool:
        """True for a finite source (a file, a fixed simulation) that has nothing left."""
        ...

    def lag(self) -> dict[int, int]:
        """Records not yet consumed, per assigned partition (best effort)."""
        ...

    def close(self) -> None: ...

    # A source that is a consumer-group member (Kafka) also has
    # ``member_id() -> str | None``: its id in the group, None while it has none.


@runtime_checkable
class CommitsInBackground(Protocol):
    """A source whose commit can be sent without waiting for its answer (the Kafka
    clients in the daemon's own process): the scheduled checkpoint's commit then costs the
    main loop no round trip to the broker."""

    def commit_async(self, offsets: Mapping[int, int],
                     done: Callable[[BaseException | None], None]) -> None:
        """Send the commit; ``done`` is called on the thread that polls the source, at a
        later poll, with None once the broker took it or with why it did not (nothing
        is committed then: the caller commits again, synchronously)."""
        ...


@runtime_checkable
class KnowsTopicId(Protocol):
    """A source that can tell which incarnation of its topic it reads: Kafka gives each
    topic an id when it is created, so a topic deleted and created again under the same
    name (its offsets starting again from 0) has another id. Positions saved against the
    topic (the activity counts') are told from those of the topic before."""

    def topic_id(self) -> str | None:
        """The topic's id as the cluster gives it now (asked of the cluster, a round trip
        with some clients); None if not known (no such topic yet, a broker too old to
        have ids, no answer)."""
        ...


@runtime_checkable
class SkipsRecordless(Protocol):
    """A source that reads past offsets holding no record to hand out (Kafka: a
    transaction's commit or abort marker, offsets a compacted batch kept past its last
    record) and says where, so that a commit can pass them: committed at the last record's
    next offset, a stream ending with a transaction's marker stayed one offset behind its
    end in the group's committed offsets for good (the broker's group tools reported a
    lag of 1 with everything handled)."""

    def recordless(self) -> dict[int, tuple[int, int]]:
        """Per partition, offsets ``[start, end)`` known to hold no record to hand out
        (the latest such range read, after the last record handed out at the time): a
        caller that has handled every record before any offset in it may commit
        ``end``."""
        ...


class PartitionFailing(NamedTuple):
    """A partition whose fetches fail (:class:`ReportsFailingPartitions`)."""

    failures: int
    """Its fetches that failed since a record of it was last handed out (or it was
    assigned)."""
    since: float
    """When the first of them failed (``time.time()``)."""
    error: str
    """What the last one said."""


@runtime_checkable
class ReportsFailingPartitions(Protocol):
    """A source that reads each partition on its own and says which keep failing: a
    batch corrupt in the log, one its client cannot decompress. The client refetches such
    a partition after a wait of its own while the others read on, so the failure shows
    nowhere else but as that partition's lag."""

    def failing(self) -> Mapping[int, PartitionFailing]:
        """Per partition whose last fetch failed, how (callable from any thread)."""
        ...


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
