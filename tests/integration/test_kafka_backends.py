"""Both Kafka backends (kafka-python, confluent-kafka) against a real broker, through the
same Source and Publisher contracts: records in order with what the daemon needs of them,
offsets that move only when committed, rebalance callbacks, lag, and a publisher whose
flush fails (keeping the record) while the broker refuses a record."""

from __future__ import annotations

import os
import queue
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from capwatch.adapters.io.kafka import described_topic_id
from capwatch.adapters.io.kafka_process import ProcessKafkaSource
from capwatch.contracts.ports import AssignmentLost, DeliveryError, Publisher, Record, Source
from capwatch.contracts.wire import AlertEvent, DeadLetterRecord
from tests.integration._daemon_setup import wait

pytestmark = pytest.mark.integration

BACKENDS = ["kafka-python", "confluent-kafka"]
PROCESS = "kafka-python-process"
"""kafka-python in a process of its own (kafka.consumer_process): a source, not a backend
of its own (the publisher is kafka-python's)."""
SOURCES = [*BACKENDS, PROCESS]


def source_class(backend: str) -> Callable[..., Source]:
    if backend == "confluent-kafka":
        from capwatch.adapters.io.kafka_confluent import ConfluentKafkaSource

        return ConfluentKafkaSource
    if backend == PROCESS:
        from capwatch.adapters.io.kafka_process import ProcessKafkaSource

        return ProcessKafkaSource
    from capwatch.adapters.io.kafka import KafkaSource

    return KafkaSource


def publisher_class(backend: str) -> Callable[..., Publisher]:
    if backend == "confluent-kafka":
        from capwatch.adapters.io.kafka_confluent import ConfluentKafkaPublisher

        return ConfluentKafkaPublisher
    from capwatch.adapters.io.kafka import KafkaPublisher

    return KafkaPublisher


@pytest.fixture(params=SOURCES)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=BACKENDS)
def publisher_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def create(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)],
                            wait_for_metadata=True)
    finally:
        admin.close()


def produce(bootstrap: str, topic: str, items: list[tuple[bytes, bytes]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for key, value in items:
        producer.send(topic, key=key, value=value)
    producer.flush(30)
    producer.close()


class Member:
    """A source polled in a thread of its own, as a replica's main loop polls it, with
    what the rebalance callbacks said: the partitions it holds now. ``do`` runs a call in
    that thread (kafka-python's consumer is not thread-safe); ``threaded=False`` leaves
    the polling to the test."""

    def __init__(self, backend: str, bootstrap: str, topic: str, group: str,
                 threaded: bool = True, poll_s: float = 0.2, gap_s: float = 0.0,
                 **options: Any) -> None:
        self.poll_s = poll_s
        self.gap_s = gap_s
        """The polling thread's pause between polls: a main loop's work."""
        self.source = source_class(backend)(bootstrap, topic, group, session_timeout_ms=6000,
                                            max_poll_records=50, **options)
        self.held: set[int] = set()
        self.revoked: list[set[int]] = []
        self.records: list[Record] = []
        self.revoked_at = 0
        """How many of :attr:`records` came before the last revoke."""
        self._stop = threading.Event()
        self._calls: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True) if threaded else None
        self.source.start(self._assign, self._revoke, {})
        if self._thread is not None:
            self._thread.start()

    def _assign(self, parts: set[int]) -> None:
        self.held |= parts

    def _revoke(self, parts: set[int]) -> None:
        self.held -= parts
        self.revoked.append(set(parts))
        self.revoked_at = len(self.records)

    def poll(self) -> bool:
        """One poll; False, so that ``poll() or condition`` polls then tests."""
        self.records.extend(self.source.poll(self.poll_s))
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.gap_s)
            while not self._calls.empty():
                call, future = self._calls.get()
                try:
                    future.set_result(call())
                except Exception as e:
                    future.set_exception(e)

    def do(self, call: Callable[[], Any]) -> Any:
        if self._thread is None:
            return call()
        future: Future[Any] = Future()
        self._calls.put((call, future))
        return future.result(30)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self.source.close()


def polled(source: Source, into: list[Record]) -> set[int]:
    """Polls ``source`` once into ``into``: the partitions read so far."""
    into.extend(source.poll(0.2))
    return {r.partition for r in into}


def poll_until(members: list[Member], done: Callable[[], bool], timeout_s: float,
               what: str) -> None:
    try:
        wait(done, timeout_s, what)
    except AssertionError as e:
        got = [(len(m.records), sorted(m.held)) for m in members]
        raise AssertionError(f"{e}; (records, partitions) per member: {got}") from None


def test_records_arrive_in_order_and_only_a_commit_moves_the_group(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    create(kafka_bootstrap, kafka_topic, 3)
    items = [(f"agent-{i % 5}".encode(), f"{i}".encode()) for i in range(60)]
    produce(kafka_bootstrap, kafka_topic, items)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = Member(backend, kafka_bootstrap, kafka_topic, group)
    try:
        poll_until([first], lambda: len(first.records) >= 60, 60, "every record")
        assert first.held == {0, 1, 2}
        got = first.records
        assert len(got) == 60 and all(r.source == kafka_topic for r in got)
        assert all(r.timestamp is not None and abs(r.timestamp - time.time()) < 300
                   for r in got)
        by_key: dict[bytes | None, list[int]] = {}
        for r in got:
            by_key.setdefault(r.key, []).append(int(r.value))
        # Each key's records in the order sent, on one partition, at growing offsets.
        assert by_key == {k: [int(v) for kk, v in items if kk == k] for k, _ in items}
        for p in range(3):
            offsets = [r.offset for r in got if r.partition == p]
            assert offsets == list(range(len(offsets)))
        assert first.do(first.source.lag) == {0: 0, 1: 0, 2: 0}
        # Commit half of one partition only; nothing else may have moved.
        part = got[0].partition
        mine = [r for r in got if r.partition == part]
        first.do(lambda: first.source.commit({part: mine[len(mine) // 2].offset}))
    finally:
        first.close()
    second = Member(backend, kafka_bootstrap, kafka_topic, group)
    try:
        expected = 60 - len(mine) // 2
        poll_until([second], lambda: len(second.records) >= expected, 90,
                   f"the replay of {expected} records")
        again = second.records
        assert len(again) == expected
        assert [r.offset for r in again if r.partition == part] == \
            [r.offset for r in mine[len(mine) // 2:]]
    finally:
        second.close()


def test_lag_counts_records_not_yet_consumed(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    create(kafka_bootstrap, kafka_topic, 2)
    produce(kafka_bootstrap, kafka_topic, [(b"a", b"1"), (b"b", b"2")])
    m = Member(backend, kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}",
               threaded=False)
    try:
        poll_until([m], lambda: m.poll() or len(m.records) >= 2, 120, "the first records")
        assert sum(m.source.lag().values()) == 0
        produce(kafka_bootstrap, kafka_topic, [(b"a", b"3")] * 7)
        # Not polled: the seven wait, and lag says so once the client knows of them.
        wait(lambda: sum(m.source.lag().values()) == 7, 30, "lag to count seven")
        poll_until([m], lambda: m.poll() or len(m.records) >= 9, 60, "the rest")
        assert sum(m.source.lag().values()) == 0
    finally:
        m.close()


def produce_committing_and_aborting(bootstrap: str, topic: str, rounds: int) -> list[bytes]:
    """Transactions of one transactional producer over every partition, every other one
    aborted, the last aborted; the values of the committed records, in order."""
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             transactional_id=f"tx-{uuid.uuid4().hex}")
    producer.init_transactions()
    kept = []
    for t in range(rounds):
        producer.begin_transaction()
        abort = t % 2 == 1
        for i in range(10):
            value = f"{'aborted' if abort else 'committed'}-{t}-{i}".encode()
            producer.send(topic, key=f"agent-{i}".encode(), value=value)
            if not abort:
                kept.append(value)
        if abort:
            producer.flush()  # written to the log, then aborted (not dropped unsent)
            producer.abort_transaction()
        else:
            producer.commit_transaction()
    producer.close()
    return kept


def test_only_committed_transactions_are_handed_out_and_lag_ends_at_zero(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    # kafka.isolation_level's default, read_committed, with every client: an agent's
    # producer that aborts a transaction wrote transitions that never happened. Before,
    # kafka-python (read_uncommitted, its own default) handed the aborted records out and
    # librdkafka (read_committed, its default) skipped them.
    create(kafka_bootstrap, kafka_topic, 2)
    kept = produce_committing_and_aborting(kafka_bootstrap, kafka_topic, 6)
    m = Member(backend, kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}")
    try:
        poll_until([m], lambda: len(m.records) >= len(kept), 90, "the committed records")
        assert {r.partition for r in m.records} == {0, 1}
        wait(lambda: m.do(m.source.lag) == {0: 0, 1: 0}, 30,
             "the lag to reach 0 past the aborted transaction and the markers")
        values = [r.value for r in m.records]
        assert sorted(values) == sorted(kept), [v for v in values if v not in kept][:5]
        for p in (0, 1):  # each partition in the order written
            mine = [r.value for r in m.records if r.partition == p]
            assert mine == [v for v in kept if v in mine]
    finally:
        m.close()


def test_read_uncommitted_hands_out_an_aborted_transactions_records_too(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    create(kafka_bootstrap, kafka_topic, 2)
    kept = produce_committing_and_aborting(kafka_bootstrap, kafka_topic, 4)
    m = Member(backend, kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}",
               isolation_level="read_uncommitted")
    try:
        poll_until([m], lambda: len(m.records) >= 2 * len(kept), 90, "every record")
        values = [r.value for r in m.records]
        assert len(values) == 2 * len(kept) and set(kept) < set(values)
    finally:
        m.close()


def test_partitions_move_between_members_through_the_callbacks(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    create(kafka_bootstrap, kafka_topic, 4)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(backend, kafka_bootstrap, kafka_topic, group)
    b: Member | None = None
    try:
        poll_until([a], lambda: a.held == {0, 1, 2, 3}, 60, "the first member to hold all")
        b = second = Member(backend, kafka_bootstrap, kafka_topic, group)
        poll_until([a, second], lambda: bool(a.held) and bool(second.held)
                   and not a.held & second.held and a.held | second.held == {0, 1, 2, 3},
                   90, "the group to split")
        assert a.revoked, "the first member gave up partitions without a revoke callback"
        b = None
        second.close()
        poll_until([a], lambda: a.held == {0, 1, 2, 3}, 90, "the survivor to hold all")
    finally:
        a.close()
        if b is not None:
            b.close()


def test_a_partition_given_back_to_its_member_is_read_again_from_the_commit(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """A revoke makes the daemon give up what the partitions' records left in memory
    (evidence buffered after the commit), and the next owner replays them from the
    commit. kafka-python keeps a partition's position when the group hands it back to the
    member that held it: that member read on from where it was, and the evidence was lost
    (a PostgreSQL restart under three replicas, session 8). Whoever gets a partition,
    it is read from the group's committed offset."""
    create(kafka_bootstrap, kafka_topic, 2)
    produce(kafka_bootstrap, kafka_topic, [(f"k{i}".encode(), b"v") for i in range(40)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(backend, kafka_bootstrap, kafka_topic, group)
    b: Member | None = None
    try:
        poll_until([a], lambda: len(a.records) >= 40, 60, "every record")
        ends = {p: 1 + max(r.offset for r in a.records if r.partition == p) for p in (0, 1)}
        assert min(ends.values()) > 3
        a.do(lambda: a.source.commit({0: 3, 1: 3}))  # the rest not durable yet
        b = Member(backend, kafka_bootstrap, kafka_topic, group)
        second = b

        def replayed(m: Member) -> bool:
            if len(m.held) != 1:
                return False
            (p,) = m.held
            since = [r.offset for r in m.records[m.revoked_at:] if r.partition == p]
            return since == list(range(3, ends[p]))

        poll_until([a, second], lambda: not a.held & second.held
                   and a.held | second.held == {0, 1} and replayed(a) and replayed(second),
                   90, "both partitions read again from the commit")
    finally:
        a.close()
        if b is not None:
            b.close()


def test_with_latest_each_partition_starts_where_its_first_member_committed_it(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """With ``latest`` a partition nothing was committed of starts at its end, and the
    source commits that start for the group before handing out any of its records. A
    member then gives up its partitions without a commit (a revoke whose checkpoint
    failed; a SIGKILL is tests/chaos/test_kafka_latest.py): whoever gets a partition next,
    the member itself included, reads it from that start, so every record produced
    since is read (before, the next owner started at the end again: what was produced
    in between was never read, and its own partition handed back to a member skipped
    what it had read and not committed). What was in the topic before is never read."""
    create(kafka_bootstrap, kafka_topic, 2)
    produce(kafka_bootstrap, kafka_topic, [(f"k{i}".encode(), b"history") for i in range(20)])
    history = end_offsets_of(kafka_bootstrap, kafka_topic, 2)
    assert min(history.values()) > 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Member(backend, kafka_bootstrap, kafka_topic, group, auto_offset_reset="latest")
    b: Member | None = None
    try:
        poll_until([a], lambda: a.held == {0, 1}, 60, "both partitions assigned")
        # Committed when the assignment was made (before the callback said so).
        assert group_committed(kafka_bootstrap, kafka_topic, group) == history
        produce(kafka_bootstrap, kafka_topic, [(f"k{i}".encode(), b"old") for i in range(20)])
        poll_until([a], lambda: len(a.records) >= 20, 60, "the records produced")
        b = Member(backend, kafka_bootstrap, kafka_topic, group, auto_offset_reset="latest")
        second = b
        poll_until([a, second], lambda: len(a.held) == len(second.held) == 1
                   and a.held | second.held == {0, 1}, 90, "the partitions shared")
        produce(kafka_bootstrap, kafka_topic, [(f"k{i}".encode(), b"new") for i in range(20)])
        ends = end_offsets_of(kafka_bootstrap, kafka_topic, 2)

        def from_start(m: Member) -> bool:
            (p,) = m.held
            since = [r.offset for r in m.records[m.revoked_at:] if r.partition == p]
            return since == list(range(history[p], ends[p]))

        poll_until([a, second], lambda: from_start(a) and from_start(second), 60,
                   "each partition read from its committed start")
        assert a.revoked
        assert b"history" not in {r.value for m in (a, second) for r in m.records}
        assert group_committed(kafka_bootstrap, kafka_topic, group) == history
    finally:
        a.close()
        if b is not None:
            b.close()


def end_offsets_of(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from kafka import TopicPartition

    from tests.support.kafka_offsets import end_offsets

    ends = end_offsets(bootstrap, [TopicPartition(topic, p) for p in range(partitions)])
    return {tp.partition: o for tp, o in ends.items()}


def group_committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = admin.list_group_offsets(group)
    finally:
        admin.close()
    offsets = answer.get(group, answer)
    return {tp.partition: int(o.offset) for tp, o in offsets.items()
            if tp.topic == topic and int(o.offset) >= 0}


def test_members_polling_briefly_with_work_between_polls_get_their_partitions(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """The daemon polls for 0.1 s and works between polls; under load a group round
    outlasts such a poll. kafka-python 3 dropped a round that finished between polls
    (re-sent it: a new generation each time) or never applied it: with zero-timeout polls
    and 0.3 s between them no member ever got a partition (90 generations in 30 s). The
    first member forms the group in one round (no revoke before the second comes)."""
    create(kafka_bootstrap, kafka_topic, 4)
    produce(kafka_bootstrap, kafka_topic, [(f"k{i}".encode(), b"v") for i in range(20)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    members: list[Member] = []
    try:
        members.append(a := Member(backend, kafka_bootstrap, kafka_topic, group,
                                   poll_s=0.0, gap_s=0.3))
        poll_until(members, lambda: len(a.records) >= 20, 90, "every record")
        assert a.held == {0, 1, 2, 3} and a.revoked == []
        members.append(b := Member(backend, kafka_bootstrap, kafka_topic, group,
                                   poll_s=0.0, gap_s=0.3))
        poll_until(members, lambda: bool(a.held) and bool(b.held) and not a.held & b.held
                   and a.held | b.held == {0, 1, 2, 3}, 90, "the group to split")
    finally:
        for m in members:
            m.close()


def _alert(agent: str, family: str) -> AlertEvent:
    return AlertEvent(alert_type="capability_reduced", agent_id=agent, family=family,
                      severity="critical", summary="test", dedup_key=uuid.uuid4().hex,
                      time=datetime.now(UTC))


def _letter(size: int) -> DeadLetterRecord:
    return DeadLetterRecord(reason="test", source="t", partition=0, offset=0,
                            raw_base64="A" * size, time=datetime.now(UTC))


def _read(bootstrap: str, topic: str, n: int,
          timeout_s: float = 30) -> list[tuple[bytes | None, bytes]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    out: list[tuple[bytes | None, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend((m.key, m.value) for m in consumer)
    consumer.close()
    return out


@pytest.fixture
def out_topics(kafka_bootstrap: str, kafka_topic: str) -> Iterator[dict[str, str]]:
    names = {"models_topic": f"{kafka_topic}-m", "alerts_topic": f"{kafka_topic}-a",
             "dead_letter_topic": f"{kafka_topic}-d"}
    for name in names.values():
        # The dead-letter topic refuses records over 4 KB until the test raises its limit.
        create(kafka_bootstrap, name, 1,
               **({"max.message.bytes": "4096"} if name.endswith("-d") else {}))
    yield names


def test_the_publisher_keys_events_and_flush_confirms_them(
        publisher_backend: str, kafka_bootstrap: str, out_topics: dict[str, str]) -> None:
    pub = publisher_class(publisher_backend)(kafka_bootstrap, **out_topics)
    try:
        pub.alert(_alert("rover-1", "rover"))
        pub.alert(_alert("*", "rover"))  # a grouped alert: keyed by its family
        pub.dead_letter(_letter(100))
        pub.flush(30)
        assert [k for k, _ in _read(kafka_bootstrap, out_topics["alerts_topic"], 2)] == \
            [b"rover-1", b"rover"]
        (key, value), = _read(kafka_bootstrap, out_topics["dead_letter_topic"], 1)
        assert key is None and b'"reason":"test"' in value
    finally:
        pub.close()


def test_a_record_the_broker_refuses_fails_every_flush_until_it_is_written(
        publisher_backend: str, kafka_bootstrap: str, out_topics: dict[str, str]) -> None:
    """The commit rule's publisher half: flush raises (so the daemon commits nothing)
    while any record is refused, keeps the record, and sends it again."""
    pub = publisher_class(publisher_backend)(kafka_bootstrap, **out_topics)
    dlq = out_topics["dead_letter_topic"]
    try:
        pub.dead_letter(_letter(100))
        pub.dead_letter(_letter(20_000))  # over the topic's 4 KB
        for _ in range(2):
            with pytest.raises(DeliveryError):
                pub.flush(30)
        # The big one is not on the topic (its batch-mate may not be either: a broker
        # refuses a whole batch).
        assert all(len(v) < 4096 for _, v in _read(kafka_bootstrap, dlq, 2, timeout_s=3))

        def raise_the_limit() -> bool:
            admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
            try:
                admin.alter_configs([ConfigResource(
                    ConfigResourceType.TOPIC, dlq, configs={"max.message.bytes": "1000000"})])
                return True
            except ValueError:  # the admin client's check: the topic's configs not known yet
                return False
            finally:
                admin.close()

        wait(raise_the_limit, 30, "the topic's limit to be raised")

        def goes_through() -> bool:
            try:
                pub.flush(30)
            except DeliveryError:
                return False
            return True

        wait(goes_through, 60, "the refused record to be written once allowed")
        sizes = {len(v) > 20_000 for _, v in _read(kafka_bootstrap, dlq, 2)}
        assert sizes == {True, False}, "both records are on the topic"
        pub.flush(30)  # nothing is left pending
    finally:
        pub.close()


def test_a_record_bound_for_a_partition_its_topic_lost_is_sent_again_soon(
        publisher_backend: str, kafka_bootstrap: str, out_topics: dict[str, str]) -> None:
    """An output topic deleted while the daemon runs and made again with fewer partitions
    (the broker's auto-creation makes one). A record routed by the old metadata to a
    partition the topic no longer has can never be delivered: kafka-python retried it
    until its delivery timeout (120 s), and its producer delivered nothing else meanwhile,
    so every output (versions, alerts, dead letters) and every commit stalled for two
    minutes (faults15, docs/reliability.md). It must be routed again well before that."""
    pub = publisher_class(publisher_backend)(kafka_bootstrap, **out_topics)
    alerts = out_topics["alerts_topic"]
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    # kafka-python's partitioner sends key "rover-2" to partition 2 of 3.
    try:
        admin.delete_topics([alerts])
        wait(lambda: alerts not in admin.list_topics(), 60, "the one-partition topic gone")
        create(kafka_bootstrap, alerts, 3)
        pub.alert(_alert("rover-2", "rover"))
        pub.flush(30)  # the producer knows the topic's 3 partitions
        admin.delete_topics([alerts])
        wait(lambda: alerts not in admin.list_topics(), 60, "the topic deleted")
        create(kafka_bootstrap, alerts, 1)
        pub.alert(_alert("rover-2", "rover"))

        def goes_through() -> bool:
            try:
                pub.flush(2)
            except Exception:  # a delivery error, or the client's flush timing out
                return False
            return True

        wait(goes_through, 60, "the record to reach the topic made again")
        assert [k for k, _ in _read(kafka_bootstrap, alerts, 1)] == [b"rover-2"]
    finally:
        admin.close()
        pub.close()


def test_an_oversized_message_reaches_the_consumer_whole(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """A message over the fetch size must not stall its partition: the decoder refuses
    it (and dead-letters a cut copy), the records after it flow."""
    create(kafka_bootstrap, kafka_topic, 1, **{"max.message.bytes": str(4 << 20)})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_request_size=4 << 20)
    producer.send(kafka_topic, key=b"a", value=b"x" * (3 << 20))
    producer.send(kafka_topic, key=b"a", value=b"after")
    producer.flush(30)
    producer.close()
    m = Member(backend, kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}")
    try:
        poll_until([m], lambda: len(m.records) >= 2, 60, "both records")
        assert [len(r.value) for r in m.records] == [3 << 20, 5]
    finally:
        m.close()


def test_a_poll_returns_what_arrived_without_waiting_for_a_full_batch(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """On a quiet stream a record is handed over as soon as it is fetched, not after the
    poll's whole timeout (a batch of max_poll_records never fills)."""
    create(kafka_bootstrap, kafka_topic, 1)
    m = Member(backend, kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}",
               threaded=False)
    try:
        poll_until([m], lambda: m.poll() or m.held == {0}, 60, "the assignment")
        produce(kafka_bootstrap, kafka_topic, [(b"a", b"1")])
        t0 = time.monotonic()
        got: list[Record] = []
        while not got and time.monotonic() - t0 < 120:
            got = m.source.poll(120)
        assert len(got) == 1
        assert time.monotonic() - t0 < 60, "the poll sat out its timeout"
    finally:
        m.close()


@pytest.mark.parametrize(("before", "after"), [BACKENDS, BACKENDS[::-1]])
def test_the_other_client_resumes_where_the_group_committed(
        before: str, after: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """Switching kafka.client keeps the group's place: its offsets are the broker's."""
    create(kafka_bootstrap, kafka_topic, 1)
    produce(kafka_bootstrap, kafka_topic, [(b"a", b"%d" % i) for i in range(10)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = Member(before, kafka_bootstrap, kafka_topic, group, threaded=False)
    try:
        poll_until([first], lambda: first.poll() or len(first.records) >= 10, 120,
                   "every record")
        first.source.commit({0: 6})
    finally:
        first.close()
    second = Member(after, kafka_bootstrap, kafka_topic, group, threaded=False)
    try:
        poll_until([second], lambda: second.poll() or len(second.records) >= 4, 120,
                   "the rest")
        assert [r.offset for r in second.records] == [6, 7, 8, 9]
    finally:
        second.close()


def test_partitions_added_after_the_group_formed_are_read(
        publisher_backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """The assignment follows the partitions the member's metadata knows: partitions that
    appear later (a topic grown, or created a moment before the member subscribed and
    not yet in its metadata) are read once the metadata is refreshed, within 30 s, not
    after the clients' default 5 min (kafka-python's metadata_max_age_ms, librdkafka's
    topic.metadata.refresh.interval.ms). Each client (not the consumer process: it runs
    kafka-python's KafkaSource with the same settings in its child, and its callbacks
    are tested in test_partitions_move_between_members_through_the_callbacks; session 14
    dropped that case, ~30 s of waiting for the refresh at load 26)."""
    backend = publisher_backend
    from kafka.admin import NewPartitions

    create(kafka_bootstrap, kafka_topic, 1)
    member = Member(backend, kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}")
    try:
        poll_until([member], lambda: member.held == {0}, 60, "the first partition")
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            admin.create_partitions({kafka_topic: NewPartitions(total_count=3)})
        finally:
            admin.close()
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        deadline = time.monotonic() + 60
        while len(producer.partitions_for(kafka_topic)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # the producer's metadata lags the broker's as well
        producer.send(kafka_topic, key=b"k", value=b"on partition 2", partition=2)
        producer.flush(30)
        producer.close()
        poll_until([member], lambda: any(r.partition == 2 for r in member.records), 90,
                   "the record on the added partition")
        assert member.held == {0, 1, 2}
    finally:
        member.close()


def _dropped(source: Source, bootstrap: str, group: str) -> None:
    """Leave the member out of its group as a frozen replica is: no poll for longer than
    the group allows (the process source's child stopped, the others' poll interval cut
    to the least each client accepts)."""
    if isinstance(source, ProcessKafkaSource):
        member = source.member_id()
        assert source.child_pid is not None and member is not None
        os.kill(source.child_pid, signal.SIGSTOP)
        try:
            wait(lambda: member not in _members(bootstrap, group), 60,
                 "the group to drop the frozen member")
        finally:
            os.kill(source.child_pid, signal.SIGCONT)


def _members(bootstrap: str, group: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_groups([group])
    finally:
        admin.close()
    return {str(m["member_id"]) for m in described[group].get("members") or []}


@pytest.mark.parametrize("backend", SOURCES)
def test_a_member_dropped_from_its_group_hands_out_nothing_of_its_partitions_until_given_them_back(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """A commit that finds the member dropped from the group (a replica frozen past its
    session or poll interval) says so with AssignmentLost, at once, instead of an outage
    the daemon retried for seconds while it handled the lost partitions' records; the
    records come again from the commit once the group gives the partitions back."""
    create(kafka_bootstrap, kafka_topic, 2)
    produce(kafka_bootstrap, kafka_topic, [(f"k{i}".encode(), b"v") for i in range(40)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = source_class(backend)(kafka_bootstrap, kafka_topic, group,
                                   session_timeout_ms=6000, max_poll_records=5)
    if backend == "kafka-python":
        source._config["max_poll_interval_ms"] = 1000  # type: ignore[attr-defined]
    elif backend == "confluent-kafka":  # at least the session timeout
        source._config["max.poll.interval.ms"] = 6000  # type: ignore[attr-defined]
    held: set[int] = set()
    events: list[tuple[str, set[int]]] = []

    def assigned(parts: set[int]) -> None:
        held.update(parts)
        events.append(("assign", set(parts)))

    def revoked(parts: set[int]) -> None:
        held.difference_update(parts)
        events.append(("revoke", set(parts)))

    source.start(assigned, revoked, {})
    try:
        first: list[Record] = []
        wait(lambda: polled(source, first) == {0, 1} and held == {0, 1},
             60, "records")
        source.commit({0: 1, 1: 1})
        _dropped(source, kafka_bootstrap, group)
        lost: list[AssignmentLost] = []

        def commit_fails() -> bool:
            try:
                source.commit({0: 1, 1: 1})
            except AssignmentLost as e:
                lost.append(e)
                return True
            return False

        wait(commit_fails, 30, "a commit to find the member dropped")
        assert lost[0].partitions == {0, 1}
        again: list[Record] = []
        wait(lambda: polled(source, again) == {0, 1} and held == {0, 1},
             60,
            "the partitions given back")
        # Nothing handed out before the group gave them back, and then from the commit.
        assert events[-1][0] == "assign"
        for p in (0, 1):
            assert min(r.offset for r in again if r.partition == p) == 1, again
    finally:
        source.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_asynchronous_commit_moves_the_group_once_answered_and_a_refused_one_says_why(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """The scheduled checkpoint's commit is sent without waiting (CommitsInBackground):
    its answer comes at a later poll, in the order the commits were sent, and says when
    the broker did not take it, so that the daemon commits again synchronously (which
    raises AssignmentLost for a member dropped from its group, as above)."""
    from capwatch.contracts.ports import CommitsInBackground

    create(kafka_bootstrap, kafka_topic, 2)
    produce(kafka_bootstrap, kafka_topic, [(f"k{i}".encode(), b"v") for i in range(40)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = source_class(backend)(kafka_bootstrap, kafka_topic, group,
                                   session_timeout_ms=6000, max_poll_records=5)
    assert isinstance(source, CommitsInBackground)
    held: set[int] = set()
    source.start(held.update, held.difference_update, {})
    try:
        got: list[Record] = []
        wait(lambda: polled(source, got) == {0, 1} and held == {0, 1},
             60, "records")
        answers: list[BaseException | None] = []

        def answered(n: int) -> bool:
            source.poll(0.1)  # answers come at a poll
            return len(answers) >= n

        source.commit_async({0: 3, 1: 2}, answers.append)
        wait(lambda: answered(1), 30, "the commit's answer")
        assert answers == [None]
        assert group_committed(kafka_bootstrap, kafka_topic, group) == {0: 3, 1: 2}
        # A synchronous commit between two asynchronous ones (a revoke's checkpoint).
        source.commit_async({0: 4, 1: 4}, answers.append)
        source.commit({0: 5, 1: 5})
        source.commit_async({0: 6, 1: 6}, answers.append)
        wait(lambda: answered(3), 30, "both answers")
        assert answers == [None, None, None]
        assert group_committed(kafka_bootstrap, kafka_topic, group) == {0: 6, 1: 6}
        # A commit the broker refuses (here a partition the topic does not have) says why.
        answers.clear()
        source.commit_async({5: 1}, answers.append)
        wait(lambda: answered(1), 30, "the refusal")
        assert isinstance(answers[0], Exception), answers
        assert group_committed(kafka_bootstrap, kafka_topic, group) == {0: 6, 1: 6}
    finally:
        source.close()


def test_a_topic_created_again_under_its_name_has_another_id(
        backend: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    """KnowsTopicId, in both clients and the child-process source: the id an assigned
    member reads changes when the topic is deleted and created again under the same name
    (the activity and drift positions are told apart by it:
    tests/daemon/test_activity_after_crash.py, test_drift_state.py)."""
    ids: list[str | None] = []
    for _ in range(2):
        create(kafka_bootstrap, kafka_topic, 2)
        produce(kafka_bootstrap, kafka_topic, [(b"a", b"1"), (b"b", b"2")])
        ids.append(_assigned_topic_id(backend, kafka_bootstrap, kafka_topic))
        # One text whichever client read it (rev22b: librdkafka's was base64, so a
        # replica switched to the other client took its own saved positions for another
        # topic's): the admin client's reading is the reference.
        assert ids[-1] == described_topic_id(kafka_bootstrap, kafka_topic), ids
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            admin.delete_topics([kafka_topic])
        finally:
            admin.close()
        wait(lambda: kafka_topic not in _topics(kafka_bootstrap), 60, "the deletion")
    assert all(isinstance(i, str) and i for i in ids) and ids[0] != ids[1], ids


def _assigned_topic_id(backend: str, bootstrap: str, topic: str) -> str | None:
    """The topic id a member of a new group reads once it is assigned the topic."""
    from capwatch.contracts.ports import KnowsTopicId

    member = Member(backend, bootstrap, topic, f"g-{uuid.uuid4().hex[:8]}")
    try:
        poll_until([member], lambda: member.held == {0, 1}, 60, "the assignment")
        assert isinstance(member.source, KnowsTopicId)
        found: str | None = member.do(member.source.topic_id)
        return found
    finally:
        member.close()


def _topics(bootstrap: str) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()
