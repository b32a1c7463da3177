"""Kafka: the consumer-group source of transitions and the publisher of what capwatch says.

kafka-python (pure Python, no librdkafka to install) with manual commits only: the
daemon decides when a partition's offset may move (after everything the records before
it caused is durable). The producer is idempotent with ``acks=all``, so a retried send
inside one producer session never duplicates a record, and :meth:`KafkaPublisher.flush`
raises if any send since the previous flush failed: the daemon then does not commit.

About 480 lines (over the ~400 guideline) because the source's group handling stays in one
place: its rebalance listener, the rewind of partitions given back, the commit of where a
partition starts (``latest``), and the commit that finds the member dropped from its group
all work on the same state.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from kafka import (
    AsyncConsumerRebalanceListener,
    KafkaAdminClient,
    KafkaConsumer,
    KafkaProducer,
)
from kafka.admin import NewTopic
from kafka.errors import (
    CommitFailedError,
    IllegalGenerationError,
    KafkaTimeoutError,
    RebalanceInProgressError,
    TopicAlreadyExistsError,
    UnknownMemberIdError,
)
from kafka.future import Future as KafkaFuture
from kafka.structs import OffsetAndMetadata, TopicPartition

from capwatch.adapters.io.kafka_backoff import PartitionBackoff
from capwatch.adapters.io.kafka_common import (
    FETCH_MAX_WAIT_MS,
    ISOLATION_LEVELS,
    LINGER_MS,
    MAX_REQUEST_BYTES,
    METADATA_MAX_AGE_MS,
    OFFSET_RESETS,
    PARTITION_FETCH_BYTES,
    PendingPublisher,
    PublishError,
    fetch_bytes,
    heartbeat_ms,
    topic_id_text,
)
from capwatch.adapters.io.kafka_join import await_group_metadata, finish_join, join_unfinished
from capwatch.adapters.io.kafka_records import ReadNotes
from capwatch.adapters.io.kafka_records import install as install_records
from capwatch.contracts.errors import error_text
from capwatch.contracts.ports import AssignmentLost, PartitionFailing, Rebalance, Record

_MEMBERSHIP_LOST = (CommitFailedError, RebalanceInProgressError, UnknownMemberIdError,
                    IllegalGenerationError)
"""What kafka-python's commit raises when the group no longer counts this member or is
rebalancing without it (kafka-python 3 wraps the last two in CommitFailedError)."""

log = structlog.get_logger("capwatch.kafka")

_TOPIC_WAIT_S = 30.0

__all__ = ["KafkaPublisher", "KafkaSource", "PublishError", "ensure_topics", "list_topics"]


def list_topics(bootstrap: str, *, security: Mapping[str, Any] | None = None,
                client_id: str = "capwatch-admin", timeout_s: float = 10.0) -> set[str]:
    """The cluster's topics: a connection check (security settings included) that fails
    within about ``timeout_s``."""
    ms = int(timeout_s * 1000)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id,
                             request_timeout_ms=ms, bootstrap_timeout_ms=ms,
                             **(security or {}))
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def described_topic_id(bootstrap: str, topic: str, *,
                       security: Mapping[str, Any] | None = None,
                       client_id: str = "capwatch-admin", timeout_s: float = 10.0
                       ) -> str | None:
    """``topic``'s id (KnowsTopicId) asked of the cluster by an admin client of its own
    (Metadata v10+, Kafka 2.8+): for a source whose consumer is out of reach (in a child
    process). None if the cluster has no such topic or no id for it."""
    ms = int(timeout_s * 1000)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id,
                             request_timeout_ms=ms, bootstrap_timeout_ms=ms,
                             **(security or {}))
    try:
        described = admin.describe_topics([topic])
    finally:
        admin.close()
    for t in described:
        if t.get("name", t.get("topic")) == topic:
            return topic_id_text(t.get("topic_id"))
    return None


def ensure_topics(bootstrap: str, *, transitions: str, models: str, alerts: str,
                  dead_letter: str, partitions: int = 6, replication_factor: int = 1,
                  client_id: str = "capwatch-admin",
                  security: Mapping[str, Any] | None = None) -> list[str]:
    """Create the topics capwatch uses if missing; returns those it created.

    The model topic is compacted: it keeps the newest version per agent forever, which is
    what a consumer joining late needs (the store keeps the full history). ``security``:
    kafka-python's security_protocol, sasl_* and ssl_* arguments.
    """
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id,
                             **(security or {}))
    created = []
    try:
        existing = set(admin.list_topics())
        if transitions in existing:
            _warn_partitions(admin, transitions, partitions)
        wanted = [
            NewTopic(transitions, partitions, replication_factor),
            NewTopic(models, partitions, replication_factor,
                     topic_configs={"cleanup.policy": "compact"}),
            NewTopic(alerts, partitions, replication_factor),
            NewTopic(dead_letter, partitions, replication_factor),
        ]
        for topic in wanted:
            if topic.name in existing:
                continue
            try:
                admin.create_topics([topic])
                created.append(topic.name)
            except TopicAlreadyExistsError:
                pass
        await_leaders(admin, {t: partitions for t in created})
    finally:
        admin.close()
    return created


def _warn_partitions(admin: Any, topic: str, partitions: int) -> None:
    """A transitions topic made before the daemon (a broker's auto-create as a producer
    first wrote, say) keeps its own partition count: at most that many replicas get records,
    whatever ``kafka.partitions`` says, and nothing else would tell the operator.

    A warning, not a refusal: the daemon does not know how many replicas will join (the
    chart's ``replicaCount`` is not in its configuration), one replica on a one-partition
    topic is a valid set-up, and a replica beyond the partitions stands by, ready, and takes
    over a partition when its owner stops (/readyz notes it)."""
    try:
        (described,) = admin.describe_topics([topic])
        found = len(described.get("partitions") or [])
    except Exception as e:  # a hint only: never fail the start over it
        log.debug("could not describe the transitions topic", topic=topic, error=error_text(e))
        return
    if found and found < partitions:
        log.warning(partition_shortfall(topic, found, partitions),
                    topic=topic, partitions=found, configured=partitions)
    elif found > partitions:
        log.info("the transitions topic has more partitions than kafka.partitions; "
                 "up to that many replicas share the records",
                 topic=topic, partitions=found, configured=partitions)


def partition_shortfall(topic: str, found: int, configured: int) -> str:
    """What a transitions topic with fewer partitions than configured means for scale-out."""
    readers = "one replica" if found == 1 else f"at most {found} replicas"
    return (f"the transitions topic {topic} has {found} partition{'s' * (found != 1)}, not"
            f" the {configured} of kafka.partitions (it existed before capwatch started: a"
            f" broker's auto-create when a producer wrote first makes the broker's"
            f" num.partitions, often 1). So {readers} of the group read records; any"
            f" further replica stands by (/readyz: ready, \"standing by\") and only takes"
            f" over when one stops: adding replicas adds no throughput. To spread the load,"
            f" give the topic as many partitions as replicas (kafka-topics.sh --alter"
            f" --topic {topic} --partitions {configured}) once the group has caught up:"
            f" records already written stay where they are, an agent's later ones may go"
            f" to another partition")


TOPICS_READY_S = 30.0
"""How long :func:`ensure_topics` waits for the topics it created to show their leaders."""


def await_leaders(admin: Any, topics: Mapping[str, int], timeout_s: float = TOPICS_READY_S,
                  sleep: Callable[[float], None] = time.sleep) -> bool:
    """Wait until the broker's metadata shows each of ``topics`` (name → partitions) with
    a leader for every partition; False (and a warning) if that takes over ``timeout_s``.

    CreateTopics answers once the controller took the topic; a broker can answer metadata
    requests with the new topic and no partitions for a moment after (KRaft). A consumer
    that joined its group then was assigned nothing, and learnt of the partitions only at
    its next metadata refresh: minutes with a client's defaults, 30 s with the daemon's.
    """
    pending = dict(topics)
    deadline = time.monotonic() + timeout_s
    while pending:
        try:
            described = admin.describe_topics(sorted(pending))
        except Exception as e:  # a metadata answer lost on a busy broker: ask again
            log.debug("describing new topics failed", error=str(e)[:300])
            described = []
        for t in described:
            parts = t.get("partitions") or []
            if t.get("name") in pending and not t.get("error_code") \
                    and len(parts) >= pending[t["name"]] \
                    and all(not p.get("error_code") and p.get("leader_id", -1) >= 0
                            for p in parts):
                del pending[t["name"]]
        if not pending:
            break
        if time.monotonic() >= deadline:
            log.warning("new topics have no leader yet; consumers see their partitions at "
                        "their next metadata refresh", topics=sorted(pending),
                        waited_s=timeout_s)
            return False
        sleep(0.1)
    return True


class _Listener(AsyncConsumerRebalanceListener):  # type: ignore[misc]
    """The daemon's rebalance callbacks, run off kafka-python's IO thread.

    kafka-python 3 calls a listener on its IO thread, where a blocking consumer call (the
    commit the daemon makes when it gives partitions up) raises "Cannot block on net.run()
    from the IO thread itself": a surviving replica then failed every rebalance, retried,
    and never consumed again (red-team rerun of issue 12, a second replica joining). The
    callbacks therefore run on a thread of their own while the IO loop awaits them, so the
    commit, the store's writes and the heartbeats all go on. The caller of ``poll()`` is
    blocked meanwhile, so the callbacks still run while the main loop waits, as before.
    """

    def __init__(self, on_assign: Rebalance, on_revoke: Rebalance, topic: str,
                 consumer: KafkaConsumer) -> None:
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self.topic = topic
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        parts = {tp.partition for tp in revoked if tp.topic == self.topic}
        if parts:
            await self._off_io_thread(self.on_revoke, parts)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        parts = {tp.partition for tp in assigned if tp.topic == self.topic}
        if parts:
            await self._off_io_thread(self.on_assign, parts)

    async def _off_io_thread(self, callback: Rebalance, parts: set[int]) -> None:
        done = KafkaFuture()
        loop = self.consumer._net  # kafka-python 3's IO loop: results go back through it

        def run() -> None:
            try:
                callback(parts)
            except BaseException as e:  # handed to the awaiting IO-loop task, raised there
                loop.call_soon_threadsafe(lambda error=e: done.failure(error))
            else:
                loop.call_soon_threadsafe(lambda: done.success(None))

        threading.Thread(target=run, name="capwatch-rebalance", daemon=True).start()
        await done


class KafkaSource:
    """A consumer-group member reading the transitions topic; commits only when told."""

    def __init__(self, bootstrap: str, topic: str, group_id: str, *,
                 client_id: str = "capwatch", max_poll_records: int = 500,
                 fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS,
                 partition_fetch_bytes: int = PARTITION_FETCH_BYTES,
                 session_timeout_ms: int = 10_000, max_message_bytes: int = 1_000_000,
                 auto_offset_reset: str = "earliest",
                 isolation_level: str = "read_committed",
                 security: Mapping[str, Any] | None = None) -> None:
        if auto_offset_reset not in OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be one of {OFFSET_RESETS}")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {ISOLATION_LEVELS}")
        self.name = topic
        self.topic = topic
        self._config: dict[str, Any] = dict(
            bootstrap_servers=bootstrap, group_id=group_id, client_id=client_id,
            enable_auto_commit=False, auto_offset_reset=auto_offset_reset,
            # kafka-python's default is read_uncommitted, librdkafka's read_committed: the
            # same stream must mean the same under both (kafka_common.ISOLATION_LEVELS).
            isolation_level=isolation_level,
            max_poll_records=max_poll_records, session_timeout_ms=session_timeout_ms,
            fetch_max_wait_ms=fetch_max_wait_ms,
            heartbeat_interval_ms=heartbeat_ms(session_timeout_ms),
            max_partition_fetch_bytes=fetch_bytes(max_message_bytes, partition_fetch_bytes),
            # The group leader assigns only the partitions its metadata lists; a leader
            # that joined before it knew the topic (just created, or by another replica)
            # gives every member nothing until its next refresh: 5 minutes by default.
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
            **(security or {}),
        )
        self._join_wait_s = session_timeout_ms / 1000
        """How long one poll keeps driving an unfinished join round (kafka_join): members
        rejoin at their next heartbeat, a third of this."""
        self._consumer: KafkaConsumer | None = None
        self._rewind: set[int] = set()
        """Partitions given up at a revoke that must be read again from the group's
        committed offset if the group hands them back (:meth:`_settle`); until that
        worked, none of their records is handed out."""
        self._unstarted: set[int] = set()
        """With ``latest``: partitions assigned whose group commit is not known yet to
        exist; one without gets its resolved start committed (:meth:`_settle`) before any
        of its records is handed out."""
        self._notes = ReadNotes()
        """What the record reader saw beside the records (kafka_records)."""
        self._read: set[int] = set()
        """Partitions any record of which was handed out since they were assigned."""
        self._passed: dict[int, int] = {}
        """Per partition none of whose records was handed out since it was assigned, where
        this source committed it past offsets without a record (:meth:`_pass_unread`)."""
        self._backoff: PartitionBackoff | None = None

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        del resume  # the group's committed offsets are the checkpoint
        self._consumer = KafkaConsumer(**self._config)
        # Fetched batches read straight into Records (kafka_records): kafka-python's own
        # per-record parsing was most of what one process paid beyond its pipeline.
        self._backoff = PartitionBackoff(self._consumer, self.topic, self._notes.faults)
        if not install_records(self._consumer, self._notes):
            log.warning("kafka-python's fetcher is not the one capwatch's record reader was "
                        "written for; reading records through kafka-python's own parser")
        self._await_topic(self._consumer)

        def revoked(parts: set[int]) -> None:
            self._forget(parts)
            try:
                on_revoke(parts)
            finally:
                # The daemon has dropped what it held of them, whether or not its
                # checkpoint went through: a replay from the commit must rebuild it.
                self._rewind |= parts

        def assigned(parts: set[int]) -> None:
            # Partitions not assigned again were dropped with their state: if they come
            # back later, kafka-python fetches their committed offset itself.
            self._rewind &= parts
            self._forget(parts)
            if self._config["auto_offset_reset"] == "latest":
                self._unstarted = set(parts)
            self._settle()
            on_assign(parts)

        self._consumer.subscribe([self.topic], listener=_Listener(assigned, revoked,
                                                                  self.topic, self._consumer))
        if not await_group_metadata(self._consumer, self.topic, _TOPIC_WAIT_S):
            log.warning("joining the consumer group before the group's metadata lists the "
                        "topic's partitions", topic=self.topic, waited_s=_TOPIC_WAIT_S)

    def _await_topic(self, consumer: KafkaConsumer) -> None:
        """Join the group only once this member's metadata lists the topic's partitions
        (see ``metadata_max_age_ms``), within a bound: a topic that never shows up is
        the daemon's start-up check's to report, and joining anyway loses nothing."""
        deadline = time.monotonic() + _TOPIC_WAIT_S
        while not consumer.partitions_for_topic(self.topic):
            if time.monotonic() >= deadline:
                log.warning("joining the consumer group before the topic's partitions are "
                            "known", topic=self.topic, waited_s=_TOPIC_WAIT_S)
                return
            time.sleep(0.2)

    def _settle(self, strict: bool = False) -> None:
        """Move each partition of :attr:`_rewind` back to the group's committed offset,
        and commit the start of each of :attr:`_unstarted` that has none.

        Rewind: kafka-python keeps a partition's fetch position when a rebalance gives it
        back to the member that held it (as Java's consumer does), but the daemon gave up
        everything the partition's records left in memory at the revoke (buffered
        evidence, whose records lie after the commit), counting on the next owner to
        replay them from the commit. Read on from the kept position, that evidence was
        lost, and the next commit passed it (a PostgreSQL restart under three replicas,
        session 8).

        Start: with ``latest`` a partition nothing was committed of starts at its end,
        wherever that is when a member first asks. A member that stopped before its first
        checkpoint (a SIGKILL, a revoke whose checkpoint failed) left no commit, and the
        next owner started at the end again: every record produced in between was never
        read (400 of 800 in a fault run of session 10). The end, resolved here, is
        committed for the group before any record of the partition is handed out; no
        record before it is the group's to handle, so the commit rule holds.

        A failure leaves the partitions listed (``strict``: and raises, an outage the main
        loop reports and retries, unless the group dropped this member, which its next
        poll rejoins): :meth:`poll` tries again and hands out none of their records
        meanwhile (records fetched from a position kafka-python resolved itself are
        dropped; the commit read or made later is where they are read from again: a
        commit found only at a later poll, after the rebalance listener could not read
        it, once left the records dropped meanwhile unread, behind the next checkpoint)."""
        consumer = self._consumer
        if consumer is None:
            return
        held = consumer.assignment()
        wait_ms = int(self._join_wait_s * 1000)
        unstarted: dict[int, TopicPartition] = {}
        for p in sorted(self._rewind | self._unstarted):
            tp = TopicPartition(self.topic, p)
            if tp not in held:
                self._rewind.discard(p)
                self._unstarted.discard(p)
                continue
            try:
                offset = consumer.committed(tp, timeout_ms=wait_ms)
            except Exception as e:
                if strict:
                    raise
                # In a rebalance callback: failing it would not undo the assignment.
                log.warning("reading a partition's committed offset failed; its records "
                            "wait until it is read", partition=p, error=str(e)[:300])
                return
            if offset is not None:
                # None of its records was handed out since it was assigned, but some may
                # have been fetched and held back (poll drops them while it waits here):
                # kafka-python's position is past them, so it is read from the commit.
                consumer.seek(tp, offset)
                self._rewind.discard(p)
                self._unstarted.discard(p)
            elif self._config["auto_offset_reset"] == "latest":
                unstarted[p] = tp
            else:  # earliest: nothing to lose by not committing where it starts
                consumer.seek_to_beginning(tp)
                self._rewind.discard(p)
        if unstarted:
            self._commit_start(unstarted, wait_ms, strict)

    def _commit_start(self, parts: Mapping[int, TopicPartition], wait_ms: int,
                      strict: bool) -> None:
        """Commit the end of each of ``parts`` (none committed yet) and read on from it."""
        consumer = self._consumer
        assert consumer is not None
        try:
            ends = consumer.end_offsets(list(parts.values()), timeout_ms=wait_ms)
            consumer.commit({tp: OffsetAndMetadata(ends[tp], "", -1)
                             for tp in parts.values()})
        except Exception as e:
            if strict and not isinstance(e, _MEMBERSHIP_LOST):
                raise
            log.warning("committing where partitions start failed; their records wait "
                        "until it is done", partitions=sorted(parts), error=str(e)[:300])
            return
        for p, tp in parts.items():
            consumer.seek(tp, ends[tp])
            self._rewind.discard(p)
            self._unstarted.discard(p)
        log.info("partitions start at their end (auto_offset_reset latest); committed",
                 offsets={p: ends[tp] for p, tp in parts.items()})

    def poll(self, timeout_s: float) -> list[Record]:
        assert self._consumer is not None, "start() first"
        if self._rewind or self._unstarted:
            self._settle(strict=True)
        backoff = self._backoff  # made by start()
        if backoff is not None:
            backoff.resume_due()
        try:
            batch = self._consumer.poll(timeout_ms=int(timeout_s * 1000))
        except Exception as e:
            if backoff is not None:
                backoff.failed(e)  # a partition's own failure: it alone waits (kafka_backoff)
            raise
        if backoff is not None and backoff.waits:
            backoff.delivered(tp.partition for tp, messages in batch.items() if messages)
        if join_unfinished(self._consumer):
            # A group round outlasted the poll: see kafka_join for why it must not be
            # left to finish unattended.
            finish_join(self._consumer, self._join_wait_s)
        waiting = self._rewind | self._unstarted
        records = []
        read = self._read
        for tp, messages in batch.items():
            if tp.partition in waiting:
                # Read from its kept position, not the commit, or from a start not yet
                # committed: fetched again from where _settle puts it.
                continue
            if messages:
                read.add(tp.partition)
            if messages and type(messages[0]) is Record:  # kafka_records read them
                records += messages
                continue
            for m in messages:
                value = m.value if m.value is not None else b""
                stamp = m.timestamp / 1000 if m.timestamp is not None and m.timestamp >= 0 \
                    else None
                records.append(Record(tp.topic, tp.partition, m.offset, m.key, value, stamp))
        if self._notes.recordless:
            self._pass_unread(waiting)
        return records

    def _pass_unread(self, waiting: set[int]) -> None:
        """Commit past the offsets without a record the reader found in a partition none
        of whose records was handed out since it was assigned.

        Such a partition was read from the group's committed offset (or, nothing
        committed, from where kafka-python's reset put it, before which no record is the
        group's), so the range the reader noted starts there and holds no record: the
        commit rule holds. A member that stopped after committing a partition's last
        record but before reading the marker behind it left the group's offset at the
        marker, and the daemon commits only after records it handles: the next owner left
        the group's lag at 1 until a record came. What a partition waiting for its
        commit (_settle) read was fetched from a position not yet the commit: forgotten."""
        offsets = {}
        for p, (_, end) in list(self._notes.recordless.items()):
            if p in waiting:
                self._notes.recordless.pop(p, None)
            elif p not in self._read and self._passed.get(p, -1) < end:
                offsets[p] = end
        if not offsets:
            return
        self._passed.update(offsets)

        def answered(_: object, response: object) -> None:
            if isinstance(response, BaseException):
                # Left behind until a record comes; a later range tries again.
                log.info("commit past offsets without a record not taken",
                         offsets=offsets, error=error_text(response))

        assert self._consumer is not None
        try:
            self._consumer.commit_async(
                {TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                 for p, o in offsets.items()}, callback=answered)
        except Exception as e:
            log.warning("committing past offsets without a record failed",
                        offsets=offsets, error=error_text(e))

    def member_id(self) -> str | None:
        """This member's id in the group (None before it joined)."""
        if self._consumer is None:
            return None
        return self._consumer.group_metadata().member_id or None

    def topic_id(self) -> str | None:
        """See :class:`~capwatch.contracts.ports.KnowsTopicId`: from the consumer's
        metadata (kafka-python keeps the ids of Metadata v10+, Kafka 2.8+), no round trip;
        the assignment it is asked at was made from that metadata."""
        if self._consumer is None:
            return None
        return topic_id_text(self._consumer._client.cluster.topic_id(self.topic))

    def backed_off(self, error: BaseException) -> bool:
        """Whether ``error``, raised by the last poll, was a partition's own: that
        partition waits alone (kafka_backoff), the next poll reads the others at once."""
        return self._backoff is not None and self._backoff.last is error

    def recordless(self) -> dict[int, tuple[int, int]]:
        """See :class:`~capwatch.contracts.ports.SkipsRecordless`."""
        return dict(self._notes.recordless)

    def failing(self) -> Mapping[int, PartitionFailing]:
        """See :class:`~capwatch.contracts.ports.ReportsFailingPartitions`: the
        partitions backed off alone (kafka_backoff), until they hand out records again."""
        return self._backoff.failing if self._backoff is not None else {}

    def _forget(self, parts: set[int]) -> None:
        self._notes.forget(parts)
        self._read -= parts
        for p in parts:
            self._passed.pop(p, None)
        if self._backoff is not None:
            self._backoff.forget(parts)

    def commit(self, offsets: Mapping[int, int]) -> None:
        consumer = self._consumer
        if consumer is None or not offsets:
            return
        try:
            consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                             for p, o in offsets.items()})
        except _MEMBERSHIP_LOST as e:
            # The group went on without this member (its session or poll interval ran
            # out, a frozen replica) or is rebalancing: every partition it held may be
            # another member's by now. It rejoins at its next poll; until the group gives
            # it partitions again none of their records is handed out, and those it gets
            # back are read from the commit (as after a revoke). Before, the commit's
            # failure was an outage: retried with a growing wait while the main loop went
            # on handling the lost partitions' records (a consumer-process replica retried
            # it for 16 s before SIGTERM).
            lost = {tp.partition for tp in consumer.assignment()
                    if tp.topic == self.topic} | set(offsets)
            self._rewind |= lost
            raise AssignmentLost(lost, error_text(e)) from e

    def commit_async(self, offsets: Mapping[int, int],
                     done: Callable[[BaseException | None], None]) -> None:
        """See :class:`~capwatch.contracts.ports.CommitsInBackground`: kafka-python calls
        ``done`` from a later :meth:`poll`. A membership lost shows in ``done``'s error;
        the caller's synchronous commit then raises AssignmentLost as :meth:`commit` does."""
        consumer = self._consumer
        if consumer is None or not offsets:
            done(None)
            return

        def answered(_: object, response: object) -> None:
            done(response if isinstance(response, BaseException) else None)

        consumer.commit_async({TopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1)
                               for p, o in offsets.items()}, callback=answered)

    def exhausted(self) -> bool:
        return False

    def lag(self) -> dict[int, int]:
        try:
            return {p: max(0, end - position) for p, (end, position) in self.ends().items()}
        except Exception:  # lag is a metric: never let it break a checkpoint
            return {}

    def ends(self) -> dict[int, tuple[int, int]]:
        """Per assigned partition, its end offset and this consumer's position (a round
        trip to the broker)."""
        if self._consumer is None:
            return {}
        assigned = list(self._consumer.assignment())
        if not assigned:
            return {}
        ends = self._consumer.end_offsets(assigned)
        return {tp.partition: (ends[tp], self._consumer.position(tp)) for tp in assigned}

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close(autocommit=False)
            self._consumer = None


class KafkaPublisher(PendingPublisher):
    """Model versions (compacted topic, key = agent), alerts and dead letters."""

    def __init__(self, bootstrap: str, *, models_topic: str, alerts_topic: str,
                 dead_letter_topic: str, client_id: str = "capwatch",
                 security: Mapping[str, Any] | None = None) -> None:
        super().__init__(models_topic=models_topic, alerts_topic=alerts_topic,
                         dead_letter_topic=dead_letter_topic)
        self._config: dict[str, Any] = dict(
            bootstrap_servers=bootstrap, client_id=client_id, acks="all",
            enable_idempotence=True, linger_ms=LINGER_MS, max_request_size=MAX_REQUEST_BYTES,
            **(security or {}),
        )
        self._producer = KafkaProducer(**self._config)
        self._generation = 0
        """Which producer a record went through (a handle is ``(generation, future)``)."""
        self._gave_up = threading.Event()
        self._renewing = threading.Lock()
        """Set when the current producer expired a record itself (see :meth:`_expired`)."""

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> Any:
        if self._gave_up.is_set():
            self._renew_producer("it expired a record", only_if_gave_up=True)
        # The producer and its generation read together: a flush replacing the producer
        # between two unlocked reads labelled a record sent through the new producer with
        # the old generation, so that its expiry or a lost partition (_expired, _stranded)
        # was never seen and the wedged producer stayed in use until some other record
        # expired (up to another delivery_timeout_ms). The send itself is outside the
        # lock: it may wait for metadata (max_block_ms).
        with self._renewing:
            generation, producer = self._generation, self._producer
        return generation, producer.send(topic, key=key, value=value)

    def _renew_producer(self, why: str, only_if_gave_up: bool = False) -> None:
        """A new producer; the old one's records not yet answered fail ("closed
        forcefully") and are sent again through it. At least once: one the old producer
        did deliver goes out twice, the same record."""
        with self._renewing:  # senders and a flush may find it expired at once: one new
            if only_if_gave_up and not self._gave_up.is_set():
                return
            old, self._producer = self._producer, KafkaProducer(**self._config)
            self._generation += 1
            self._gave_up.clear()
        log.warning("kafka producer replaced", reason=why)
        try:
            old.close(timeout=0)
        except KafkaTimeoutError:
            # kafka-python's close() flushes first and raises while any batch is
            # incomplete, before it force-closes: the old sender would go on retrying,
            # its records never failed, so never sent again (and, before the new producer
            # was made first, the old one stayed in use: rev14's frozen broker run
            # "replaced" it 174 times and published nothing).
            sender = getattr(old, "_sender", None)
            if sender is not None:
                sender.force_close()

    def _expired(self, handle: Any) -> bool:
        """The current producer gave the record up itself: its batch expired after
        delivery_timeout_ms (its partition vanished with a deleted topic, a broker down
        that long). kafka-python's idempotent producer then delivers nothing more, to any
        topic, and reports no fatal error: with the models topic deleted and auto-created
        with fewer partitions, no version, alert or commit went out for as long as the
        daemon ran, and a SIGTERM took 108 s (docs/reliability.md, session 14). Only a
        new producer sends again."""
        generation, future = handle
        return generation == self._generation and future.is_done and \
            isinstance(future.exception, KafkaTimeoutError)

    def _stranded(self, handle: Any) -> bool:
        """The record waits for a partition its topic no longer has: the topic was deleted
        and made again with fewer partitions (the broker's auto-creation makes one).
        kafka-python chose the partition at send() and retries it until
        delivery_timeout_ms (120 s), its producer delivering nothing else meanwhile: every
        output and commit stalled for two minutes (faults15). A new producer routes it
        again by the topic's metadata now. A topic not known at all (deleted, not yet made
        again) is waited for."""
        generation, future = handle
        if generation != self._generation or future.is_done:
            return False
        partition = getattr(getattr(future, "_produce_future", None), "topic_partition", None)
        metadata = getattr(self._producer, "_metadata", None)
        if partition is None or metadata is None:
            return False
        partitions = metadata.partitions_for_topic(partition.topic)
        return partitions is not None and partition.partition not in partitions

    def _flush_client(self, timeout_s: float) -> None:
        with self._lock:
            handles = [r.handle for r in self._pending if not isinstance(r.handle, Exception)]
        if self._gave_up.is_set() or any(self._expired(h) for h in handles):
            # Before flushing: a wedged producer's flush only times out, so the records
            # it expired would never be looked at again.
            self._renew_producer("it expired a record")
        elif any(self._stranded(h) for h in handles):
            self._renew_producer("a record waits for a partition its topic no longer has"
                                 " (the topic was deleted and made again)")
        self._producer.flush(timeout=timeout_s)
        # kafka-python's idempotent producer turns any non-retriable refusal of one record
        # (a record over the topic's max.message.bytes) into a fatal state: it sends nothing
        # more, ever, and the daemon would never commit again. A new producer takes over;
        # the failed records are sent again through it.
        manager = getattr(self._producer, "_transaction_manager", None)
        if manager is not None and manager.has_fatal_error():
            log.error("kafka producer failed for good; replacing it")
            self._renew_producer("failed for good")

    def _failure(self, handle: Any, timeout_s: float) -> tuple[Exception | None, bool]:
        try:
            handle[1].get(timeout=timeout_s)
        except Exception as e:
            if self._expired(handle):
                self._gave_up.set()  # the record is sent again, through a new producer
            return e, False
        return None, False

    def close(self) -> None:
        self.close_with(lambda: self._producer.close(timeout=10))
