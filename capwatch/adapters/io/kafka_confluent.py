"""Kafka through confluent-kafka (librdkafka): the optional backend (``kafka.client:
confluent-kafka``, the ``confluent`` extra), behind the same contracts as kafka.py.

librdkafka fetches, decompresses and batches in native threads, so a consumer reads an
order of magnitude more messages per core than kafka-python (docs/performance.md). The
rules are kafka.py's: manual commits only, of the offsets the daemon names (and, with
``latest``, of where a partition nothing was committed of starts); rebalance
callbacks forwarded with this topic's partitions (and, as kafka-python does, an exception
in one is logged rather than breaking the group); the producer idempotent with
``acks=all``, each record kept until acknowledged (kafka_common.PendingPublisher); the
same fetch size for oversized messages. Security settings arrive as kafka-python's
keyword arguments (KafkaConfig.client_options) and are mapped to librdkafka's keys here.
Topics are created and the brokers probed with kafka-python's admin client (a required
dependency), for both backends.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

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
from capwatch.contracts.ports import AssignmentLost, PartitionFailing, Rebalance, Record

log = structlog.get_logger("capwatch.kafka")

__all__ = ["ConfluentKafkaPublisher", "ConfluentKafkaSource", "PublishError",
           "librdkafka_security"]

_MEMBERSHIP_LOST = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError._ASSIGNMENT_LOST})
"""Commit errors that say the group no longer counts this member as its partitions'
owner."""
_LIBRDKAFKA_LOG = logging.getLogger("kafka.librdkafka")
"""librdkafka's own log lines, through the daemon's logging (not straight to stderr)."""

_ADMIN_KEYS = frozenset({"bootstrap.servers", "client.id", "logger"})
"""The consumer's settings an admin client of the same cluster takes (with its security
ones)."""
_DEFAULT_FETCH_MAX = 52_428_800
"""librdkafka's fetch.max.bytes default; raised only for a larger message limit."""


def librdkafka_security(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """kafka-python's security keyword arguments as librdkafka configuration keys."""
    out: dict[str, Any] = {}
    for name, value in (options or {}).items():
        if name == "security_protocol":
            out["security.protocol"] = value
        elif name == "sasl_mechanism":
            out["sasl.mechanism"] = value
        elif name == "sasl_plain_username":
            out["sasl.username"] = value
        elif name == "sasl_plain_password":
            out["sasl.password"] = value
        elif name == "ssl_cafile":
            out["ssl.ca.location"] = value
        elif name == "ssl_certfile":
            out["ssl.certificate.location"] = value
        elif name == "ssl_keyfile":
            out["ssl.key.location"] = value
        elif name == "ssl_password":
            out["ssl.key.password"] = value
        elif name == "ssl_check_hostname":
            out["ssl.endpoint.identification.algorithm"] = "https" if value else "none"
        else:
            raise ValueError(f"no librdkafka equivalent for the Kafka option {name!r}")
    if str(out.get("security.protocol", "")).endswith("SSL") and "ssl.ca.location" not in out:
        # As kafka-python's default context does: the system's CAs (the wheel's OpenSSL
        # is linked statically and would otherwise know none).
        out["ssl.ca.location"] = "probe"
    return out


_REFUSALS = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL,
                       KafkaError.SASL_AUTHENTICATION_FAILED,
                       KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       KafkaError.GROUP_AUTHORIZATION_FAILED})
"""Errors librdkafka only logs and retries, but an operator must hear of: the brokers
refuse our login, certificate or rights."""


class _Errors:
    """Errors librdkafka reports outside any call's result, raised at the next call that
    can say so (poll, commit, flush): a fatal one at every call from then on, a refusal
    once per report (the daemon's outage handling says it on /readyz and retries, and a
    login that starts working clears it)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.fatal: KafkaError | None = None
        self.refusal: KafkaError | None = None
        self._last: str | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal = error
        elif error.code() in _REFUSALS:
            self.refusal = error
        text = f"{error.name()}: {error.str()}"
        if text != self._last:  # a broker down is reported every few seconds
            log.warning("kafka client error", client=self.what, error=text)
            self._last = text

    def raise_pending(self) -> None:
        if self.fatal is not None:
            raise KafkaException(self.fatal)
        refusal, self.refusal = self.refusal, None
        if refusal is not None:
            raise KafkaException(refusal)


class ConfluentKafkaSource:
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
        self._batch = max_poll_records
        partition_fetch = fetch_bytes(max_message_bytes, partition_fetch_bytes)
        fetch_max = max(_DEFAULT_FETCH_MAX, partition_fetch)
        self._errors = _Errors("consumer")
        self._config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "group.id": group_id, "client.id": client_id,
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": auto_offset_reset, "isolation.level": isolation_level,
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": heartbeat_ms(session_timeout_ms),
            "max.partition.fetch.bytes": partition_fetch,
            "fetch.max.bytes": fetch_max,
            "fetch.wait.max.ms": fetch_max_wait_ms,
            # librdkafka stops fetching a partition for this long once its prefetch queue
            # is full (queued.max.messages.kbytes, 64 MB: ~12,000 messages of 5.6 KB);
            # by its default 1000 ms the daemon had emptied the queue and waited: 300-500
            # ms stalls every 1-1.5 s on 5.6 KB messages (docs/performance.md).
            "fetch.queue.backoff.ms": fetch_max_wait_ms,
            "receive.message.max.bytes": max(100_000_000, fetch_max + 65_536),
            # As kafka-python's source: partitions the leader's metadata does not list yet
            # are assigned within 30 s, not after librdkafka's default 5 minutes.
            "topic.metadata.refresh.interval.ms": METADATA_MAX_AGE_MS,
            "error_cb": self._errors, "logger": _LIBRDKAFKA_LOG,
            # Served by consume(), for asynchronous commits only, in the order sent.
            "on_commit": self._answered,
            **librdkafka_security(security),
        }
        self._commits: collections.deque[Callable[[BaseException | None], None]] = \
            collections.deque()
        """The ``done`` of each asynchronous commit not yet answered, oldest first."""
        self._consumer: Consumer | None = None
        self._closing = False
        self._lost: set[int] = set()
        """Partitions a commit found this member no longer owns: none of their records is
        handed out until the group assigns them again (librdkafka reads them from the
        commit then)."""
        self._latest = auto_offset_reset == "latest"
        self._unstarted: set[int] = set()
        """With ``latest``: assigned partitions whose start could not be committed at the
        assignment (:meth:`_commit_starts`); none of their records is handed out until
        it is."""
        self._wait_s = session_timeout_ms / 1000
        self._assigned: list[TopicPartition] = []
        """This topic's partitions assigned to this member (their positions are read at
        each poll)."""
        self._after: dict[int, int] = {}
        """Per partition, the offset after the last record handed out since it was
        assigned."""
        self._blind: set[int] = set()
        """Partitions whose position may have passed something not handed out as a
        record (an error event, records dropped while lost or unstarted): no recordless
        range is said of them until a record is handed out again."""
        self._base: dict[int, int | None] = {}
        """Per partition none of whose records was handed out since it was assigned, the
        group's committed offset it was read from (None: could not be read), as read when
        its position first moved; then where this source committed it on to."""
        self._recordless: dict[int, tuple[int, int]] = {}
        """See :meth:`recordless`."""
        self._failing: Mapping[int, PartitionFailing] = {}
        """See :meth:`failing` (replaced whole at each change: read on other threads)."""

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        del resume  # the group's committed offsets are the checkpoint

        def forward(callback: Rebalance, what: str) -> Any:
            def call(consumer: Consumer, partitions: list[TopicPartition]) -> None:
                parts = {tp.partition for tp in partitions if tp.topic == self.topic}
                # The daemon already checkpointed before close(); kafka-python does not call
                # the listener there either.
                if not parts or self._closing:
                    return
                self._forget(parts)
                if what == "assign":
                    self._assigned = [TopicPartition(self.topic, p) for p in sorted(parts)]
                    self._lost -= parts
                    self._unstarted = set()
                    if self._latest:
                        self._start(consumer, partitions)
                else:
                    self._assigned = [tp for tp in self._assigned
                                      if tp.partition not in parts]
                try:
                    callback(parts)
                except Exception:
                    log.exception("rebalance callback failed", partitions=sorted(parts),
                                  callback=what)
            return call

        self._consumer = Consumer(self._config)
        self._consumer.subscribe([self.topic], on_assign=forward(on_assign, "assign"),
                                 on_revoke=forward(on_revoke, "revoke"))

    def _start(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """In the assign callback, with ``latest``: each partition nothing was committed
        of starts at its end, committed for the group before any of its records is
        handed out (see KafkaSource._settle: without the commit, a member stopped before
        its first checkpoint was followed by one starting at the end again, and the
        records produced in between were never read). The assignment then names each
        start, so librdkafka reads from exactly the offset committed. A failure leaves
        them in :attr:`_unstarted`, retried by :meth:`poll`."""
        mine = [TopicPartition(tp.topic, tp.partition) for tp in partitions
                if tp.topic == self.topic]
        try:
            committed = self._committed(consumer, mine)
            starts = self._commit_starts(consumer, [tp for tp in committed if tp.offset < 0])
        except Exception as e:  # failing the callback would not undo the assignment
            self._unstarted = {tp.partition for tp in mine}
            log.warning("committing where partitions start failed; their records wait "
                        "until it is done", partitions=sorted(self._unstarted),
                        error=str(e)[:300])
            return
        if starts:
            consumer.assign([TopicPartition(tp.topic, tp.partition,
                                            starts.get(tp.partition, tp.offset))
                             for tp in partitions])

    def _committed(self, consumer: Consumer, parts: list[TopicPartition]
                   ) -> list[TopicPartition]:
        """The group's commit of each of ``parts``; raises if one could not be read.

        librdkafka answers a partition whose commit it could not read with the error set
        and the offset invalid, as if nothing were committed: taken as such, its end was
        committed over the group's commit, skipping every record between them."""
        committed: list[TopicPartition] = consumer.committed(parts, self._wait_s)
        for tp in committed:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return committed

    def _commit_starts(self, consumer: Consumer, parts: list[TopicPartition]
                       ) -> dict[int, int]:
        """Commit the end of each of ``parts`` (none committed yet); partition → end."""
        if not parts:
            return {}
        starts = {tp.partition: consumer.get_watermark_offsets(
            tp, timeout=self._wait_s, cached=False)[1] for tp in parts}
        answer = consumer.commit(offsets=[TopicPartition(self.topic, p, o)
                                          for p, o in starts.items()], asynchronous=False)
        for tp in answer or []:
            if tp.error is not None:
                raise KafkaException(tp.error)
        log.info("partitions start at their end (auto_offset_reset latest); committed",
                 offsets=starts)
        return starts

    def _retry_starts(self, consumer: Consumer) -> None:
        """:meth:`_start` again for the partitions it could not do, outside a callback:
        their committed offset (or the end just committed) is where they are read from."""
        mine = [TopicPartition(self.topic, p) for p in sorted(self._unstarted)]
        committed = self._committed(consumer, mine)
        starts = self._commit_starts(consumer, [tp for tp in committed if tp.offset < 0])
        for tp in committed:
            consumer.seek(TopicPartition(self.topic, tp.partition,
                                         starts.get(tp.partition, tp.offset)))
        self._unstarted = set()

    def poll(self, timeout_s: float) -> list[Record]:
        assert self._consumer is not None, "start() first"
        if self._unstarted:
            try:
                self._retry_starts(self._consumer)
            except KafkaException as e:
                error = e.args[0] if e.args else None
                if not (isinstance(error, KafkaError) and error.code() in _MEMBERSHIP_LOST):
                    raise  # an outage: the main loop reports it and polls again
                # The group is going on without this member: the consume below serves
                # the rebalance that gives it partitions again (resetting _unstarted).
                log.warning("committing where partitions start failed; the member rejoins",
                            partitions=sorted(self._unstarted), error=error.str())
        # What is already fetched, at once; else wait for the first message only. (One
        # consume(batch, timeout) would wait for a whole batch or the timeout: a quiet
        # stream's records would sit in the queue for the whole timeout.)
        messages = self._consumer.consume(self._batch, 0)
        if not messages:
            messages = self._consumer.consume(1, timeout_s)
            if messages:
                messages += self._consumer.consume(self._batch - 1, 0)
        self._errors.raise_pending()
        records: list[Record] = []
        append = records.append
        topic = self.topic
        after = self._after
        failing = self._failing
        if failing:  # which of them hand out a record now (compared after the loop)
            before = {p: after.get(p) for p in failing}
        for m in messages:
            if m.error() is None:
                kind, stamp = m.timestamp()
                # A message without an error has its partition and offset (typed optional
                # for error events); no per-message check on the hot path.
                p, offset = m.partition(), m.offset()
                append(Record(topic, p, offset,  # type: ignore[arg-type]
                              m.key(), m.value() or b"",
                              stamp / 1000 if kind and stamp >= 0 else None))
                after[p] = offset + 1  # type: ignore[index,operator]
            else:
                self._message_error(m)
        if failing:
            self._delivered([p for p, at in before.items()
                             if after.get(p) is not None and after.get(p) != at])
        if self._lost or self._unstarted:
            lost = self._lost | self._unstarted
            records = [r for r in records if r.partition not in lost]
            self._blind |= lost
            for p in lost:
                after.pop(p, None)
                self._recordless.pop(p, None)
        self._passed_recordless(self._consumer)
        return records

    def _passed_recordless(self, consumer: Consumer) -> None:
        """Note where librdkafka's position passed offsets without a record.

        librdkafka hands out no control record (a transaction's commit or abort marker)
        nor, read_committed, an aborted transaction's records, but moves the consumer's
        position past them as :meth:`poll`'s consume does (a marker behind the last
        record shows at the consume after it). A position past the offset after the last
        record handed out thus spans offsets no record of which is this member's to
        handle (:meth:`recordless`). A partition none of whose records was handed out
        since it was assigned was read from the group's committed offset: offsets from
        there to the position hold none either, and the commit is moved past them here
        (a member that stopped after committing a partition's last record but before
        reading the marker behind it left the group's offset at the marker, and the next
        owner commits only after records it handles: the group's lag read 1 until a
        record came)."""
        if not self._assigned:
            return
        try:
            positions = consumer.position(self._assigned)
        except KafkaException:
            return  # read again at the next poll
        for tp in positions:
            p, position = tp.partition, tp.offset
            start = self._after.get(p)
            if position < 0 or (p in self._blind and start is None):
                continue
            self._blind.discard(p)  # a record was handed out after what was not
            if start is not None:
                if position > start:
                    self._recordless[p] = (start, position)
                continue
            if p not in self._base:
                self._base[p] = self._group_offset(consumer, p)
            base = self._base[p]
            if base is None or base < 0 or position <= base:
                continue
            self._recordless[p] = (base, position)
            self._base[p] = position
            self._commits.append(self._passed_answered)
            try:
                consumer.commit(offsets=[TopicPartition(self.topic, p, position)],
                                asynchronous=True)
            except KafkaException as e:
                self._commits.pop()
                self._base[p] = base  # tried again at the next poll
                log.warning("committing past offsets without a record failed",
                            partition=p, offset=position, error=str(e)[:300])

    def _group_offset(self, consumer: Consumer, partition: int) -> int | None:
        """The group's committed offset of ``partition`` (None if it could not be read)."""
        try:
            return int(self._committed(
                consumer, [TopicPartition(self.topic, partition)])[0].offset)
        except KafkaException as e:
            log.warning("reading a partition's committed offset failed; its commit is not "
                        "moved past offsets without a record until a record comes",
                        partition=partition, error=str(e)[:300])
            return None

    @staticmethod
    def _passed_answered(error: BaseException | None) -> None:
        if error is not None:  # the group's offset stays behind until a record comes
            log.info("commit past offsets without a record not taken", error=str(error)[:300])

    def recordless(self) -> dict[int, tuple[int, int]]:
        """See :class:`~capwatch.contracts.ports.SkipsRecordless`."""
        return dict(self._recordless)

    def _forget(self, parts: set[int]) -> None:
        for p in parts:
            self._after.pop(p, None)
            self._base.pop(p, None)
            self._recordless.pop(p, None)
        self._blind -= parts
        self._delivered(parts)

    def failing(self) -> Mapping[int, PartitionFailing]:
        """See :class:`~capwatch.contracts.ports.ReportsFailingPartitions`: the
        partitions whose error events (librdkafka's, each after a failed fetch, which it
        retries alone after ``fetch.error.backoff.ms``) came since a record of theirs was
        last handed out. librdkafka raises nothing for them: without this they showed
        only as lag, where kafka-python's failing partition was an outage on /readyz."""
        return self._failing

    def _delivered(self, parts: Iterable[int]) -> None:
        """These partitions handed out a record (past what failed) or left."""
        gone = self._failing.keys() & set(parts)
        if gone:
            self._failing = {p: f for p, f in self._failing.items() if p not in gone}

    def _message_error(self, m: Message) -> None:
        error = m.error()
        if error is None or error.code() == KafkaError._PARTITION_EOF:
            return
        p = m.partition()
        if p is not None and m.topic() == self.topic:
            # librdkafka skips some batches it cannot read (an unsupported format, a
            # failed CRC check), saying so only here: no recordless range spans them.
            self._blind.add(p)
            self._after.pop(p, None)
            self._recordless.pop(p, None)
            last = self._failing.get(p)
            text = f"{error.name()}: {error.str()}"
            self._failing = {**self._failing, p: PartitionFailing(1, time.time(), text)
                             if last is None else
                             PartitionFailing(last.failures + 1, last.since, text)}
        if error.fatal():
            raise KafkaException(error)
        self._errors(error)

    def member_id(self) -> str | None:
        """This member's id in the group (None before it joined)."""
        if self._consumer is None:
            return None
        return self._consumer.memberid() or None

    def commit(self, offsets: Mapping[int, int]) -> None:
        if self._consumer is None or not offsets:
            return
        self._errors.raise_pending()
        try:
            answer = self._consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                asynchronous=False)
        except KafkaException as e:
            error = e.args[0] if e.args else None
            if isinstance(error, KafkaError) and error.code() in _MEMBERSHIP_LOST:
                self._lose(offsets, error)
            raise
        for tp in answer or []:
            if tp.error is not None:
                if tp.error.code() in _MEMBERSHIP_LOST:
                    self._lose(offsets, tp.error)
                raise KafkaException(tp.error)

    def commit_async(self, offsets: Mapping[int, int],
                     done: Callable[[BaseException | None], None]) -> None:
        """See :class:`~capwatch.contracts.ports.CommitsInBackground` and
        :meth:`~capwatch.adapters.io.kafka.KafkaSource.commit_async`."""
        if self._consumer is None or not offsets:
            done(None)
            return
        self._errors.raise_pending()
        self._commits.append(done)
        try:
            self._consumer.commit(
                offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                asynchronous=True)
        except BaseException:
            self._commits.pop()
            raise

    def _answered(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if not self._commits:
            return  # not one of commit_async's
        done = self._commits.popleft()
        if error is None:
            error = next((tp.error for tp in partitions if tp.error is not None), None)
        done(KafkaException(error) if error is not None else None)

    def _lose(self, offsets: Mapping[int, int], error: KafkaError) -> None:
        """The group went on without this member (see KafkaSource.commit): librdkafka
        calls the revoke callback at a later poll; until then, and until the group assigns
        them again, none of the partitions' records is handed out."""
        assert self._consumer is not None
        lost = {tp.partition for tp in self._consumer.assignment()
                if tp.topic == self.topic} | set(offsets)
        self._lost |= lost
        raise AssignmentLost(lost, error.str())

    def exhausted(self) -> bool:
        return False

    def lag(self) -> dict[int, int]:
        if self._consumer is None:
            return {}
        try:
            positions = self._consumer.position(self._consumer.assignment())
            out = {}
            for tp in positions:
                # The high watermark of the last fetch: a metric, not worth a round trip.
                _, high = self._consumer.get_watermark_offsets(tp, cached=True)
                if tp.offset >= 0 and high >= 0:
                    out[tp.partition] = max(0, high - tp.offset)
            return out
        except Exception:  # lag is a metric: never let it break a checkpoint
            return {}

    def topic_id(self) -> str | None:
        """See :class:`~capwatch.contracts.ports.KnowsTopicId`: librdkafka's consumer
        metadata carries no topic id, so an admin client asks (DescribeTopics: one round
        trip, at an assignment); None if it does not answer within the session timeout."""
        admin = AdminClient({k: v for k, v in self._config.items()
                             if k in _ADMIN_KEYS or k.startswith(("security.", "sasl.",
                                                                  "ssl."))})
        try:
            futures = admin.describe_topics(TopicCollection([self.topic]),
                                            request_timeout=self._wait_s)
            found = futures[self.topic].result(timeout=self._wait_s).topic_id
        except Exception as e:  # the positions are then used as before: never fatal
            log.warning("the topic's id could not be read", topic=self.topic,
                        error=str(e)[:300])
            return None
        return topic_id_text(found)

    def close(self) -> None:
        if self._consumer is not None:
            self._closing = True
            self._consumer.close()
            self._consumer = None


class _Delivery:
    """A record's delivery report, filled in by librdkafka's callback."""

    __slots__ = ("done", "error", "producer")

    def __init__(self, producer: Producer) -> None:
        self.done = False
        self.error: KafkaError | None = None
        self.producer = producer
        """The producer it was handed to: if that one was replaced before answering, no
        report will ever come."""

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        self.error = error
        self.done = True


class ConfluentKafkaPublisher(PendingPublisher):
    """Model versions (compacted topic, key = agent), alerts and dead letters."""

    def __init__(self, bootstrap: str, *, models_topic: str, alerts_topic: str,
                 dead_letter_topic: str, client_id: str = "capwatch",
                 security: Mapping[str, Any] | None = None) -> None:
        super().__init__(models_topic=models_topic, alerts_topic=alerts_topic,
                         dead_letter_topic=dead_letter_topic)
        self._errors = _Errors("producer")
        self._config: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "client.id": client_id, "acks": "all",
            "enable.idempotence": True, "linger.ms": LINGER_MS,
            "message.max.bytes": MAX_REQUEST_BYTES,
            "error_cb": self._errors, "logger": _LIBRDKAFKA_LOG,
            **librdkafka_security(security),
        }
        self._producer = Producer(self._config)

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> Any:
        producer = self._producer
        delivery = _Delivery(producer)
        producer.produce(topic, value=value, key=key, on_delivery=delivery)
        producer.poll(0)  # serve earlier delivery reports
        return delivery

    def _flush_client(self, timeout_s: float) -> None:
        self._producer.flush(timeout_s)
        if self._errors.fatal is not None:
            # An idempotent producer's fatal error (its sequence broken): this instance
            # sends nothing more. A new one takes over; what the old one did not confirm
            # counts as failed and is sent again by the caller.
            log.error("kafka producer failed for good; replacing it",
                      error=self._errors.fatal.str())
            self._errors.fatal = None
            self._producer = Producer(self._config)
        refusal, self._errors.refusal = self._errors.refusal, None
        if refusal is not None:  # what is pending stays pending; the reason is this
            raise PublishError(f"the brokers refused the producer: {refusal.str()}")

    def _failure(self, handle: Any, timeout_s: float) -> tuple[Exception | None, bool]:
        assert isinstance(handle, _Delivery)
        if not handle.done and handle.producer is not self._producer:
            return PublishError("its producer failed before acknowledging it"), False
        if not handle.done:
            # Still queued or in flight: librdkafka retries it until message.timeout.ms,
            # and a second copy would only duplicate it.
            return PublishError(f"not acknowledged within {timeout_s:g} s"), True
        if handle.error is not None:
            return KafkaException(handle.error), False
        return None, False

    def close(self) -> None:
        self.close_with(lambda: None)  # a Producer has no close: its last flush is it
