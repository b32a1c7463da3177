"""What both Kafka backends share (kafka-python in kafka.py, confluent-kafka in
kafka_confluent.py), so the commit rule and the message limits cannot drift apart.

- :class:`PendingPublisher`: which topic and key each event goes to, and the publisher's
  side of the commit rule: every record sent is kept until the broker acknowledged it; a
  flush raises :class:`PublishError` while any is not, sending failed ones again, so the
  daemon commits no offset past a dead letter, model event or alert the broker refused.
- :func:`fetch_bytes`: how much one partition fetch may hold, from the setting and the
  message limit.
- :func:`topic_id_text`: one text for a topic's id, whichever client read it.

No Kafka client is imported here.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from capwatch.contracts.ports import DeliveryError
from capwatch.contracts.wire import AlertEvent, DeadLetterRecord, ModelVersionEvent

MAX_REQUEST_BYTES = 8_388_608
"""The producer's largest record: a model version of a big domain fits; a dead letter is
cut far below it (contracts.wire.MAX_DEAD_LETTER_RAW)."""

MAX_ALERT_BYTES = 512 * 1024
"""The largest alert record: half a broker's default ``message.max.bytes`` (1 MB), which
topics made by others keep. A larger alert goes out without its evidence (see
:func:`alert_record`)."""

LINGER_MS = 5

FETCH_MAX_WAIT_MS = 100
"""How long the broker may hold a fetch for partitions with nothing new (kafka.
fetch_max_wait_ms; both clients default to 500). A consumer has one fetch per broker in
flight, and kafka-python (like the Java client) leaves out of it the partitions whose
fetched records are not yet all handed out: a fetch held for the partitions that are
caught up stalls the one still behind. Reading a topic whose partitions end at different
offsets, capwatch over kafka-python spent half its time in such waits (docs/
performance.md); an idle replica pays 10 fetches a second per broker instead of 2."""

OFFSET_RESETS = ("earliest", "latest")
"""Where a partition with no committed offset is read from (``kafka.auto_offset_reset``)."""

ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
"""Which records of transactional producers a consumer hands out (``kafka.isolation_level``):
``read_committed`` only those of committed transactions (and no record past the first
transaction still open: the broker's last stable offset), ``read_uncommitted`` every
record as soon as it is written, an aborted transaction's too. Both clients take the same
names (kafka-python's ``isolation_level``, librdkafka's ``isolation.level``)."""

METADATA_MAX_AGE_MS = 30_000
"""How often a consumer refreshes the cluster's metadata (both clients default to 5
minutes). The group leader assigns only the partitions its metadata lists: a topic grown,
or created by another replica a moment before this one joined, is read within this long
rather than after 5 minutes."""


class PublishError(DeliveryError):
    """A record could not be written to Kafka; nothing after it may be committed."""


PARTITION_FETCH_BYTES = 4_194_304
"""How much one fetch may bring of one partition (kafka.partition_fetch_bytes; both
clients default to 1 MiB). kafka-python fetches a partition again only once its fetched
records are all handed out, so the main loop waits out a whole fetch every few batches:
1 MiB is ~190 messages of 5.6 KB. At 4 MiB capwatch run over kafka-python came back from
a poll empty 1-7 times per 100,000 records of 3-5.6 KB instead of 8-30
(docs/performance.md)."""


_HALF = (1 << 64) - 1


def topic_id_text(found: object) -> str | None:
    """A topic's id as stored beside positions (KnowsTopicId), the same text from every
    client: the UUID's usual 36-character form. kafka-python hands a ``uuid.UUID``;
    librdkafka a ``Uuid`` whose ``str()`` is base64 of the same 16 bytes, read here by its
    two signed 64-bit halves (rev22b: the two forms of one topic compared as different
    topics, so switching ``kafka.client`` dropped every saved position). None when there
    is no id: none given, or all zeros (a broker before Kafka 2.8)."""
    if found is None:
        return None
    value: uuid.UUID
    if isinstance(found, uuid.UUID):
        value = found
    else:
        most = getattr(found, "get_most_significant_bits", None)
        least = getattr(found, "get_least_significant_bits", None)
        if callable(most) and callable(least):
            value = uuid.UUID(int=((int(most()) & _HALF) << 64) | (int(least()) & _HALF))
        else:
            try:
                value = uuid.UUID(str(found))
            except ValueError:  # not a UUID's text: kept as given, compared as it is
                return str(found) or None
    return None if value.int == 0 else str(value)


def fetch_bytes(max_message_bytes: int, partition_fetch_bytes: int = PARTITION_FETCH_BYTES
                ) -> int:
    """A partition fetch's size: oversized messages must reach the decoder (and the
    dead-letter topic) rather than stall the partition, so at least a little more than
    the limit."""
    return max(partition_fetch_bytes, max_message_bytes + 65_536)


def heartbeat_ms(session_timeout_ms: int) -> int:
    return max(1000, session_timeout_ms // 3)


def alert_record(event: AlertEvent) -> bytes:
    """The alert as one record, without its evidence when it would exceed MAX_ALERT_BYTES
    (then without its detail, then with its summary cut, while it still would).

    A record the broker refuses for its size is refused again on every attempt, and the
    flush it fails also carries the model versions and dead letters a commit waits for:
    one 6 MB alert (an operator's run: an unexplained assessment's query states) stopped
    everything the daemon published. The summary and detail say what happened; the
    evidence stays whole in the store's outbox (``capwatch alerts show``)."""
    value = event.model_dump_json().encode()
    if len(value) <= MAX_ALERT_BYTES:
        return value
    note = (f"the evidence ({len(value):,} bytes with it) is left out of this record, which"
            f" is limited to {MAX_ALERT_BYTES:,} bytes; `capwatch alerts show` prints it")
    cut = event.model_copy(update={"evidence": {"omitted": note}}).model_dump_json().encode()
    if len(cut) <= MAX_ALERT_BYTES:
        return cut
    # A grouped alert's detail (one cause per agent) can be large as well.
    bare = event.model_copy(update={
        "evidence": {"omitted": note},
        "detail": {"omitted": f"the detail is left out too; {note}"},
    })
    cut = bare.model_dump_json().encode()
    if len(cut) <= MAX_ALERT_BYTES:
        return cut
    # So can the summary (one line per cause, or text an agent supplied): its beginning
    # is kept. A character is 1 to 6 bytes in the record (UTF-8 or an escape), so the
    # cut is by the bytes per character of what is kept, measured again until it fits
    # (once or twice; every round keeps fewer characters, so it ends).
    summary = event.summary
    empty = len(bare.model_copy(update={"summary": ""}).model_dump_json().encode())
    keep, size = len(summary), len(cut) - empty
    def tail(kept: int) -> str:
        return (f" [... {len(summary) - kept:,} more characters of the summary left out;"
                " `capwatch alerts show` prints it whole]")

    while True:
        room = MAX_ALERT_BYTES - empty - len(tail(0).encode()) - 64
        keep = max(0, min(keep - 1, keep * room // max(size, 1)))
        cut = bare.model_copy(update={"summary": summary[:keep] + tail(keep)}
                              ).model_dump_json().encode()
        if len(cut) <= MAX_ALERT_BYTES or keep == 0:
            return cut
        size = len(bare.model_copy(update={"summary": summary[:keep]}).model_dump_json()
                   .encode()) - empty


class Sent(NamedTuple):
    """A record handed to the client and not yet known to be acknowledged."""

    topic: str
    key: bytes | None
    value: bytes
    handle: Any
    """The backend's own: a future (kafka-python), a delivery report (confluent-kafka),
    or the exception the send raised at once."""


class PendingPublisher:
    """Model versions (compacted topic, key = agent), alerts and dead letters, kept until
    acknowledged. A backend provides :meth:`_produce`, :meth:`_flush_client` and
    :meth:`_failure`."""

    def __init__(self, *, models_topic: str, alerts_topic: str,
                 dead_letter_topic: str) -> None:
        self.models_topic = models_topic
        self.alerts_topic = alerts_topic
        self.dead_letter_topic = dead_letter_topic
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._pending: list[Sent] = []
        """Every record sent and not yet acknowledged, kept until it is: a failed one is
        sent again, and until it goes through no flush succeeds (so nothing is committed
        past it)."""
        self.newest_model: Callable[[bytes], bytes | None] | None = None
        """Given a model-version record, its agent's newest version's record if that is
        newer, else None (the daemon's store answers). A replica's version can reach the
        topic after a newer one another replica published meanwhile (the work's new
        holder, after this replica was cut off from the broker, frozen past its lease, or
        refused): sent again at a later flush, or held inside the client until the
        connection came back. The compacted topic then kept the older for good
        (docs/reliability.md, session 16). So a record sent again goes out as the newest,
        and once a model version is acknowledged, a newer one stored meanwhile is sent
        after it: whichever replica's record lands last, the newest follows it. Raising
        (the store is down), the record waits as unsent or unchecked and the next flush
        fails (nothing is committed past it) until it answers."""

    # ------------------------------------------------------------------ the backend's part

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> Any:
        """Hand one record to the client; returns the handle :meth:`_failure` reads."""
        raise NotImplementedError

    def _flush_client(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) for every record handed over to be answered."""
        raise NotImplementedError

    def _failure(self, handle: Any, timeout_s: float) -> tuple[Exception | None, bool]:
        """After a client flush: (why the record is not acknowledged, or None if it is;
        True if it is still in flight, so sending it again would only duplicate it)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the contract

    def _send(self, topic: str, key: str | None, value: bytes) -> None:
        raw_key = key.encode() if key is not None else None
        handle = self._attempt(topic, raw_key, value)
        with self._lock:
            self._pending.append(Sent(topic, raw_key, value, handle))

    def _attempt(self, topic: str, key: bytes | None, value: bytes) -> Any:
        try:
            return self._produce(topic, key, value)
        except Exception as e:  # a full queue, a record too large: the next flush says so
            return e

    def model_version(self, event: ModelVersionEvent) -> None:
        self._send(self.models_topic, event.agent_id, event.model_dump_json().encode())

    def alert(self, event: AlertEvent) -> None:
        # A grouped alert ("*": several agents) is keyed by its family, so a family's
        # grouped alerts stay in order without all landing on the partition of key "*".
        key = event.family if event.agent_id == "*" else event.agent_id
        self._send(self.alerts_topic, key, alert_record(event))

    def dead_letter(self, record: DeadLetterRecord) -> None:
        self._send(self.dead_letter_topic, None, record.model_dump_json().encode())

    def flush(self, timeout_s: float = 10.0) -> None:
        """Return once everything sent so far (by any thread) is acknowledged; raise
        PublishError, keeping the failed records to send again, otherwise."""
        with self._flushing:
            self._flush_client(timeout_s)
            with self._lock:
                sent = list(self._pending)
            failed: list[Exception] = []
            keep: list[Sent] = []
            for record in sent:
                error, in_flight = self._outcome(record.handle, timeout_s)
                if error is None:
                    newer = self._newer(record)
                    if newer is not None:
                        keep.append(newer)
                    continue
                failed.append(error)
                keep.append(record if in_flight else self._again(record))
            with self._lock:
                done = {id(r) for r in sent}
                self._pending = [r for r in self._pending if id(r) not in done] + keep
            if failed:
                raise PublishError(f"{len(failed)} record(s) could not be written to Kafka"
                                   f" (sent again): {failed[0]}")

    def _again(self, record: Sent) -> Sent:
        """``record`` sent again (a model version: its agent's newest, see
        :attr:`newest_model`)."""
        value = record.value
        if record.topic == self.models_topic and self.newest_model is not None:
            try:
                value = self.newest_model(value) or value
            except Exception as e:  # the store is down: the record waits, unsent
                return record._replace(handle=e)
        return record._replace(value=value,
                               handle=self._attempt(record.topic, record.key, value))

    def _newer(self, acknowledged: Sent) -> Sent | None:
        """After a model version was acknowledged: its agent's newer version, sent now so
        that it lands after it (see :attr:`newest_model`); None if there is none."""
        if acknowledged.topic != self.models_topic or self.newest_model is None:
            return None
        try:
            value = self.newest_model(acknowledged.value)
        except Exception as e:  # the store is down: checked again at the next flush
            return acknowledged._replace(handle=e)
        if value is None:
            return None
        return acknowledged._replace(
            value=value, handle=self._attempt(acknowledged.topic, acknowledged.key, value))

    def _outcome(self, handle: Any, timeout_s: float) -> tuple[Exception | None, bool]:
        if isinstance(handle, Exception):
            return handle, False
        return self._failure(handle, timeout_s)

    def pending(self) -> int:
        """Records not yet acknowledged."""
        with self._lock:
            return len(self._pending)

    def close_with(self, close_client: Callable[[], None]) -> None:
        """A last flush (a failure is left to the next start, which replays from the last
        commit), then the client's close."""
        with contextlib.suppress(Exception):
            self.flush()
        close_client()
