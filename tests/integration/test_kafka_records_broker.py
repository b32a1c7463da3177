"""kafka-python's source reads the broker's batches into Records itself (kafka_records):
the same records, offsets and positions as kafka-python's own reader gave, over every
kind of batch a producer writes (plain, compressed, transactional with their markers,
with headers, null keys and values), in one process and in the consumer process."""

from __future__ import annotations

import itertools
import struct
import time
import uuid
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import TopicPartition

from capwatch.adapters.io.kafka import KafkaSource
from capwatch.adapters.io.kafka_records import RecordsIntoRecords
from capwatch.contracts.ports import Record
from tests.integration._daemon_setup import wait
from tests.integration.test_kafka_backends import PROCESS, create, source_class

pytestmark = pytest.mark.integration


def write_every_kind(bootstrap: str, topic: str) -> None:
    """On one partition: plain batches, a gzip batch, two transactions (one aborted, one
    committed: each ends with a control batch no consumer sees), headers, null keys and
    values, values long enough for multi-byte lengths."""
    plain = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    for i in range(30):
        plain.send(topic, partition=0, key=None if i % 5 == 0 else f"k{i}".encode(),
                   value=None if i % 7 == 2 else b"p" * (i * 11),
                   headers=[("trace", b"x")] if i % 3 == 0 else None)
    plain.flush(30)
    plain.close()
    gzip = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                         compression_type="gzip")
    for i in range(20):
        gzip.send(topic, partition=0, key=f"g{i}".encode(), value=b"g" * (i * 300))
    gzip.flush(30)
    gzip.close()
    tx = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"t-{uuid.uuid4().hex}")
    tx.init_transactions()
    for commit in (False, True):
        tx.begin_transaction()
        for i in range(10):
            tx.send(topic, partition=0, key=f"t{i}".encode(), value=f"{commit}-{i}".encode())
        if commit:
            tx.commit_transaction()
        else:
            tx.flush(30)  # an abort drops what was not sent yet
            tx.abort_transaction()
    tx.close()


def kafka_pythons_own(bootstrap: str, topic: str, isolation: str = "read_committed",
                      n: int = 60) -> tuple[list[Record], int]:
    """The ``n`` records as KafkaSource made them of kafka-python's ConsumerRecords, and
    the consumer's position after them."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             max_poll_records=17, isolation_level=isolation)
    got: list[Record] = []
    try:
        consumer.assign([TopicPartition(topic, 0)])  # no group to join: the reference only
        consumer.seek_to_beginning()
        def more() -> bool:
            for tp, messages in consumer.poll(200).items():
                got.extend(Record(tp.topic, tp.partition, m.offset, m.key,
                                  m.value if m.value is not None else b"",
                                  m.timestamp / 1000 if m.timestamp >= 0 else None)
                           for m in messages)
            return len(got) >= n
        try:
            wait(more, 60, "kafka-python's own reader")
        except AssertionError as e:
            raise AssertionError(f"{e}: {len(got)} records, {consumer.assignment()}") from None
        (tp,) = consumer.assignment()
        return got, consumer.position(tp)
    finally:
        consumer.close()


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
@pytest.mark.parametrize("kind", ["kafka-python", PROCESS])
def test_every_kind_of_batch_reads_as_kafka_pythons_own_reader(
        kind: str, isolation: str, kafka_bootstrap: str, kafka_topic: str) -> None:
    # read_committed (kafka.isolation_level's default) leaves the aborted transaction's
    # ten records out, as kafka-python's own reader does: 60 records, 70 uncommitted.
    n = 60 if isolation == "read_committed" else 70
    create(kafka_bootstrap, kafka_topic, 1)
    write_every_kind(kafka_bootstrap, kafka_topic)
    expected, end = kafka_pythons_own(kafka_bootstrap, kafka_topic, isolation, n)
    assert len(expected) == n
    # The markers take offsets no record has: the source must skip them as kafka-python does.
    assert expected[-1].offset == end - 2 and end == 72
    source = source_class(kind)(kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}",
                                max_poll_records=17, isolation_level=isolation)
    got: list[Record] = []
    source.start(lambda parts: None, lambda parts: None, {})
    try:
        if isinstance(source, KafkaSource):
            consumer = source._consumer
            assert consumer is not None and \
                issubclass(consumer._fetcher.PartitionRecords, RecordsIntoRecords)
        def more() -> bool:
            got.extend(source.poll(0.2))
            return len(got) >= n

        wait(more, 60, "the source's records")
        assert got == expected
        if isinstance(source, KafkaSource):
            # Its position is kafka-python's: past the last control batch (end).
            assert source.ends() == {0: (end, end)} and source.lag() == {0: 0}
        else:
            # Every record handled, the committed transaction's marker (offset 71) left:
            # no lag. The consumer process counted from the daemon's last record (71
            # after 70) and reported 1 for as long as the stream stayed quiet; the child
            # reaches past the marker at a poll of its own, so it is waited for.
            wait(lambda: source.lag() == {0: 0}, 30, "no lag past the last marker")
    finally:
        source.close()


def test_a_batch_corrupt_on_the_wire_once_is_fetched_again_and_read(
        kafka_bootstrap: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first batch's CRC fails once (a fetch response damaged on the way): the poll
    # raises, none of the batch is handed out, and the next polls fetch it again from the
    # same position and read it whole. The reader used to keep the failed batch and
    # raise at every poll until the partition was revoked or the daemon restarted.
    from kafka.errors import CorruptRecordError
    from kafka.record.default_records import DefaultRecordBatch

    create(kafka_bootstrap, kafka_topic, 1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=20)
    for i in range(30):
        producer.send(kafka_topic, partition=0, key=b"k", value=b"v%d" % i)
    producer.flush(30)
    producer.close()
    damaged: list[int] = []
    validate = DefaultRecordBatch.validate_crc

    def once(batch: DefaultRecordBatch) -> bool:
        if not damaged:
            damaged.append(batch.base_offset)
            return False
        return bool(validate(batch))

    monkeypatch.setattr(DefaultRecordBatch, "validate_crc", once)
    source = KafkaSource(kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}")
    got: list[Record] = []
    failures: list[Exception] = []
    source.start(lambda parts: None, lambda parts: None, {})
    try:
        def more() -> bool:
            try:
                got.extend(source.poll(0.2))
            except CorruptRecordError as e:
                failures.append(e)
            return len(got) >= 30 or len(failures) > 5

        wait(more, 60, "the records after the damaged fetch")
        assert damaged == [0] and len(failures) == 1
        assert [r.offset for r in got] == list(range(30))
    finally:
        source.close()


def write_poisoned(bootstrap: str, topic: str, partition: int, count: int,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``count`` records on ``partition`` in one batch whose header key is not UTF-8: the
    broker takes it (Java reads the key with replacement characters) and kafka-python's
    reader refuses it at every fetch, a batch corrupt in the log."""
    from kafka.record.memory_records import MemoryRecordsBuilder
    from kafka.record.util import calc_crc32c

    built = MemoryRecordsBuilder.buffer

    def poisoned(self: Any) -> bytes:
        buf = bytearray(built(self))
        if b"\x04PZ" in buf:
            buf[:] = buf.replace(b"\x04PZ", b"\x04\xff\xfe")  # the key's length, then it
            struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
        return bytes(buf)

    monkeypatch.setattr(MemoryRecordsBuilder, "buffer", poisoned)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=50,
                             enable_idempotence=False)
    try:
        for i in range(count):
            producer.send(topic, partition=partition, key=b"k", value=b"bad%d" % i,
                          headers=[("PZ", b"x")])
        producer.flush(30)
    finally:
        producer.close()
        monkeypatch.undo()


@pytest.mark.parametrize("kind", ["kafka-python", PROCESS])
def test_a_partition_corrupt_in_the_log_waits_longer_each_time_while_the_others_read_on(
        kind: str, kafka_bootstrap: str, kafka_topic: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Partition 0 holds a batch kafka-python's reader refuses (written past the broker,
    # which takes it): every fetch of it fails. Its retries used to share one back-off
    # with the whole consumer, reset by every poll that worked, so it was fetched again
    # (and its failure sent) about twice a second for good. Now it waits alone, doubling
    # (kafka_backoff), while partition 1's records go on arriving.
    create(kafka_bootstrap, kafka_topic, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    for i in range(3):
        producer.send(kafka_topic, partition=0, key=b"k", value=b"good%d" % i)
    producer.flush(30)
    write_poisoned(kafka_bootstrap, kafka_topic, 0, 3, monkeypatch)
    for i in range(40):
        producer.send(kafka_topic, partition=1, key=b"k", value=b"other%d" % i)
        if i % 10 == 9:
            producer.flush(30)
    producer.close()
    source = source_class(kind)(kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}",
                                max_poll_records=5)
    got: list[Record] = []
    failed: list[float] = []
    source.start(lambda parts: None, lambda parts: None, {})
    try:
        def more() -> bool:
            # Everything that arrived, at once: a failure's time is when it came (the
            # consumer process's wait between two checks would queue them).
            while True:
                try:
                    if not (records := source.poll(0.05)):
                        break
                    got.extend(records)
                except Exception as e:
                    assert "header key" in str(e) or "invalid record" in str(e).lower(), e
                    # The partition's own, backed off alone: the daemon's loop polls on.
                    assert source.backed_off(e)  # type: ignore[attr-defined]
                    failed.append(time.monotonic())
            return len(failed) >= 4 and len(got) >= 43

        wait(more, 90, "four failures of partition 0 and every good record")
        assert sorted((r.partition, r.offset) for r in got) == \
            [(0, o) for o in range(3)] + [(1, o) for o in range(40)]
        gaps = [b - a for a, b in itertools.pairwise(failed)]
        # Each retry waits at least twice the last (0.5, 1, 2 s); the consumer process's
        # failures cross a channel, so their arrival may be late by a little.
        slack = 0.1 if isinstance(source, KafkaSource) else 0.3
        assert all(gap >= wait_s - slack for gap, wait_s in zip(gaps, [0.5, 1.0, 2.0],
                                                                   strict=False)), gaps
        if isinstance(source, KafkaSource):
            assert source._backoff is not None and source._backoff.waits[0][0] >= 4.0
        # Said as confluent-kafka's source says it (/readyz, the metric): partition 0
        # keeps failing, partition 1 does not.
        failing = source.failing()  # type: ignore[attr-defined]
        assert set(failing) == {0} and failing[0].failures >= 4, failing
        assert "header key" in failing[0].error or "invalid record" in failing[0].error.lower()
    finally:
        source.close()


def test_librdkafka_reads_the_batch_kafka_python_refuses(
        kafka_bootstrap: str, kafka_topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The same batch through confluent-kafka: librdkafka reads no header while it fetches
    # (a record's headers are parsed when asked for, and capwatch never asks), so the
    # batch is no failure there at all; every record of both partitions is handed out,
    # none of them twice, and no error is raised (docs/reliability.md, session 21,
    # confluent21: what librdkafka does with a batch it cannot read).
    create(kafka_bootstrap, kafka_topic, 2)
    write_poisoned(kafka_bootstrap, kafka_topic, 0, 3, monkeypatch)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    for i in range(10):
        producer.send(kafka_topic, partition=1, key=b"k", value=b"other%d" % i)
    producer.flush(30)
    producer.close()
    source = source_class("confluent-kafka")(kafka_bootstrap, kafka_topic,
                                             f"g-{uuid.uuid4().hex[:8]}", max_poll_records=5)
    got: list[Record] = []
    source.start(lambda parts: None, lambda parts: None, {})
    try:
        def more() -> bool:
            got.extend(source.poll(0.05))
            return len(got) >= 13

        wait(more, 60, "every record of both partitions")
        assert sorted((r.partition, r.offset) for r in got) == \
            [(0, o) for o in range(3)] + [(1, o) for o in range(10)]
        assert sorted(r.value for r in got if r.partition == 0) == [b"bad0", b"bad1", b"bad2"]
    finally:
        source.close()


def test_librdkafka_backs_a_partition_it_cannot_decompress_off_alone(
        kafka_bootstrap: str, kafka_topic: str) -> None:
    # A batch librdkafka cannot read: zstd whose stated content is larger than
    # receive.message.max.bytes (lowered here to 2 MB, with the fetch sizes it must
    # exceed, so that 4 MB of zeros, 153 bytes compressed, is over it; the broker takes
    # it). librdkafka posts an error event for partition 0 and backs that partition alone
    # off (fetch.error.backoff.ms, 500 ms) before fetching it again from the same offset;
    # the source takes the events without raising, partition 1's records all arrive, and
    # nothing after the batch is handed out nor said to hold no record.
    create(kafka_bootstrap, kafka_topic, 2)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, compression_type="zstd",
                             max_request_size=10_000_000, acks="all")
    for value in (b"good", bytes(4_000_000), b"after"):
        producer.send(kafka_topic, partition=0, key=b"k", value=value).get(30)
    producer.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    for i in range(20):
        producer.send(kafka_topic, partition=1, key=b"k", value=b"other%d" % i)
    producer.flush(30)
    producer.close()
    from capwatch.adapters.io.kafka_confluent import ConfluentKafkaSource

    source = ConfluentKafkaSource(kafka_bootstrap, kafka_topic, f"g-{uuid.uuid4().hex[:8]}",
                                  max_poll_records=5)
    source._config.update({"fetch.max.bytes": 1_000_000, "max.partition.fetch.bytes": 1_000_000,
                           "receive.message.max.bytes": 2_000_000})
    failed: list[float] = []
    seen = source._message_error

    def noted(m: Any) -> None:
        if m.partition() == 0:
            failed.append(time.monotonic())
        seen(m)

    source._message_error = noted  # type: ignore[method-assign]
    got: list[Record] = []
    source.start(lambda parts: None, lambda parts: None, {})
    try:
        def more() -> bool:
            got.extend(source.poll(0.05))
            return len(failed) >= 4 and len(got) >= 21

        wait(more, 60, "four failures of partition 0 and every readable record")
        assert sorted((r.partition, r.offset) for r in got) == \
            [(0, 0)] + [(1, o) for o in range(20)]
        # librdkafka's own back-off, not a fetch in a loop: about two a second (the
        # events reach the source when it polls, so two may come closer than 0.5 s).
        span = failed[-1] - failed[0]
        assert len(failed) <= 2 + span / 0.25, (len(failed), span)
        assert 0 not in source.recordless()
        # Said as kafka-python's sources say it (/readyz, the metric): before, only lag.
        failing = source.failing()
        assert set(failing) == {0} and failing[0].failures >= 4, failing
        assert failing[0].since <= time.time() - span + 0.5
    finally:
        source.close()
