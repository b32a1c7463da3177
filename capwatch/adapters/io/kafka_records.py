"""kafka-python's fetched batches read straight into capwatch's :class:`Record`.

kafka-python parses every fetched record on the thread that calls ``poll()``, in pure
Python: per record a ``DefaultRecord`` (seven generic varint calls, a ``bytearray`` slice
copied again into ``bytes`` for the key and for the value), then a 13-field
``ConsumerRecord`` (header sizes, two deserializer calls, property look-ups), which
:class:`~capwatch.adapters.io.kafka.KafkaSource` then turned into a ``Record``. In one
process that parsing runs under the same GIL as the pipeline, so it is paid in full on
the daemon's main loop (docs/performance.md, "kafka-python in one process").

:class:`RecordsIntoRecords` replaces the fetcher's per-partition reader
(``Fetcher.PartitionRecords``, set on the consumer's fetcher instance only) with one whose
batches yield ``Record``s directly. What kafka-python decides per batch is kept as it is:
the batch CRC (``check_crcs``), control batches skipped, a leader epoch noted, the
position after the last batch (a compacted batch's end), the metrics' counts (bytes by
batch), and under ``read_committed`` (capwatch's default, ``kafka.isolation_level``) an
aborted transaction's batches skipped by the fetch response's list of aborted
transactions and the abort markers, as kafka-python and the Java client skip them.
Deserializers (capwatch sets none) keep kafka-python's whole reader. A batch of the v2
format is read by :func:`read_batch`: one ``bytes`` of the batch (a compressed one's
records once kafka-python decompressed them), varints of one byte read inline, the key
and value sliced once. Compressed batches go there too so that both kinds read a record
alike: kafka-python's own reader takes a record's attributes (an int8 in the protocol) for
a varint, so a byte of 0x80 or more read differently compressed and uncompressed (a fuzz
found it; :func:`read_batch` reads one byte, as the spec and the Java client do). The old
message formats are read record by record as kafka-python reads them; with deserializers
kafka-python's own code reads and the records are converted. Before session 22
``read_committed`` went that slow way too (and capwatch read uncommitted, kafka-python's
default, while librdkafka reads committed: an aborted transaction's records were
monitored by one client and skipped by the other).

The position rule is kafka-python's: the reader's ``next_fetch_offset`` is the offset
after the last record handed out, set before each record is yielded (``poll()`` may stop
mid-batch at ``max_poll_records``), so the consumer's position, and through the daemon
every commit, is as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kafka import __version__ as KAFKA_PYTHON
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch

from capwatch.adapters.io.kafka_batch import HEADER_SIZE, read_batch
from capwatch.contracts.ports import Record

__all__ = ["ReadNotes", "RecordsIntoRecords", "install", "read_batch"]

WRITTEN_FOR = ("3.0.",)
"""The kafka-python releases whose ``Fetcher.PartitionRecords`` this reader mirrors (its
``_unpack_records``, the batch's ``_buffer`` and ``_maybe_uncompress``,
``next_fetch_offset``, ``drain``) and was checked against record for record
(tests/adapters/test_kafka_records.py, the broker's batches in
tests/integration/test_kafka_records_broker.py). The dependency allows any
3.x; over another release the consumer keeps kafka-python's own reader (:func:`install`):
slower, but a change there can neither move a position nor fail a poll."""

_CODEC_MASK = DefaultRecordBatch.CODEC_MASK
_LOG_APPEND_TIME = DefaultRecordBatch.LOG_APPEND_TIME


def _converted(m: Any) -> Record:
    """A ConsumerRecord of kafka-python's own reader as the Record KafkaSource made of it."""
    stamp = m.timestamp / 1000 if m.timestamp is not None and m.timestamp >= 0 else None
    return Record(m.topic, m.partition, m.offset, m.key,
                  m.value if m.value is not None else b"", stamp)


class ReadNotes:
    """What one consumer's readers saw that its records do not say, for its source.

    ``recordless``: per partition, the latest offsets ``[start, end)`` read past without a
    record to hand out (a transaction's marker, the offsets a compacted batch kept past its
    last record) from the offset after the last record handed out. No record of the log
    lies there, so whoever has handled every record before ``start`` may commit ``end``:
    the commit rule holds, and a stream ending with a committed transaction is not left
    one offset behind its end in the group's committed offsets.

    ``faults``: per partition, the last failure a take raised (a batch corrupt in the
    log, fetched again at each poll): the source backs that partition off alone.

    Written on the thread that polls, read on any: each update replaces one dict entry."""

    def __init__(self) -> None:
        self.recordless: dict[int, tuple[int, int]] = {}
        self.faults: dict[int, BaseException] = {}

    def skipped(self, partition: int, start: int, end: int) -> None:
        """Offsets ``[start, end)`` of ``partition`` hold no record to hand out."""
        if end <= start:
            return
        last = self.recordless.get(partition)
        if last is not None and last[0] <= start <= last[1]:
            start = last[0]  # two markers in a row, or a marker after a compacted end
        self.recordless[partition] = (start, end)

    def forget(self, partitions: set[int]) -> None:
        for p in partitions:
            self.recordless.pop(p, None)
            self.faults.pop(p, None)


class RecordsIntoRecords(Fetcher.PartitionRecords):  # type: ignore[misc]
    """kafka-python's per-partition reader of a fetch response, yielding Records."""

    next_fetch_offset: int  # kafka-python's, set in its __init__
    _fault: Exception | None = None
    notes: ReadNotes | None = None
    """Set on the subclass :func:`install` makes for a consumer whose source wants them."""

    def take(self, n: int | None = None) -> list[Any]:
        # Once the records raised, kafka-python's iterator is spent: its take() then
        # returns [] while the reader stays truthy, and Fetcher.fetched_records loops on
        # such a reader without end (the daemon retries a failed poll, and that poll never
        # returned, not even to see a revoke). So whatever the records raise, the reader
        # is drained: the position stays before the faulty batch (none of its records was
        # handed out) and the fetcher, holding no reader for the partition, fetches it
        # again from there. A batch corrupt only on the wire then reads well; one corrupt
        # in the log raises again at each fetch, as the Java client raises at each poll
        # (docs/reliability.md, session 20). The fault is kept for a take after the
        # drain, which the fetcher never makes (it skips a falsy reader).
        if self._fault is not None:
            raise self._fault
        try:
            return super().take(n)  # type: ignore[no-any-return]
        except Exception as e:
            self._fault = e
            self.drain()
            if self.notes is not None:
                self.notes.faults[self.topic_partition.partition] = e
            raise

    def _skip_to(self, offset: int) -> None:
        """Move the position to ``offset`` past offsets that hold no record to hand out."""
        if self.notes is not None:
            self.notes.skipped(self.topic_partition.partition, self.next_fetch_offset, offset)
        self.next_fetch_offset = offset

    def _unpack_records(self, tp: Any, records: Any, key_deserializer: Any,
                        value_deserializer: Any) -> Iterator[Record]:
        if key_deserializer is not None or value_deserializer is not None:
            for m in super()._unpack_records(tp, records, key_deserializer,
                                             value_deserializer):
                yield _converted(m)
            return
        topic, partition = tp.topic, tp.partition
        committed = self.isolation_level == IsolationLevel.READ_COMMITTED
        aborted = self.aborted_producer_ids  # kafka-python's, filled from the response
        batch = records.next_batch()
        last_batch = None
        while batch is not None:
            last_batch = batch
            if self.check_crcs and not batch.validate_crc():
                raise CorruptRecordError(
                    f"Record batch for partition {tp} at offset {batch.base_offset} failed "
                    f"crc check")
            if batch.magic != 2:
                for m in batch:  # the old formats: each record checks its own CRC
                    if self.check_crcs and not m.validate_crc():
                        raise CorruptRecordError(
                            f"Record for partition {tp} at offset {m.offset} failed crc check")
                    self.records_read += 1
                    self.bytes_read += m.size_in_bytes
                    self.next_fetch_offset = m.offset + 1
                    yield Record(topic, partition, m.offset, m.key,
                                 m.value if m.value is not None else b"",
                                 m.timestamp / 1000 if m.timestamp is not None
                                 and m.timestamp >= 0 else None)
                batch = records.next_batch()
                continue
            self.leader_epoch = batch.leader_epoch
            # read_committed, as kafka-python's reader and the Java client do it: the
            # fetch response lists each aborted transaction (producer id, first offset)
            # in the fetched range; from its first offset that producer's transactional
            # batches are skipped until its abort marker. Looked at only while the
            # response listed one: a stream without aborts pays one truth test a batch.
            if committed and (self.aborted_transactions or aborted) \
                    and batch.has_producer_id():
                self._consume_aborted_transactions_up_to(batch.last_offset)
                if batch.is_control_batch:
                    if self._contains_abort_marker(batch):
                        aborted.discard(batch.producer_id)
                elif batch.is_transactional and batch.producer_id in aborted:
                    self._skip_to(batch.next_offset)  # its records never happened
                    batch = records.next_batch()
                    continue
            if batch.is_control_batch:  # a transaction's marker, never handed out
                self._skip_to(batch.next_offset)
                batch = records.next_batch()
                continue
            start = HEADER_SIZE
            if batch.attributes & _CODEC_MASK:
                batch._maybe_uncompress()  # its records alone, from 0, in batch._buffer
                start = 0
            read = read_batch(
                bytes(batch._buffer), topic, partition, batch.base_offset,
                batch.first_timestamp,
                batch.max_timestamp if batch.timestamp_type == _LOG_APPEND_TIME else None,
                batch.records_count, start)
            self.records_read += len(read)
            self.bytes_read += batch.size_in_bytes
            for r in read:
                self.next_fetch_offset = r.offset + 1
                yield r
            batch = records.next_batch()
        # v2 keeps a batch's last offset when compaction removed its last records: the
        # next fetch starts after it, not at the last record read again.
        if last_batch is not None and last_batch.magic == 2:
            self._skip_to(last_batch.next_offset)
        self.drain()


def install(consumer: Any, notes: ReadNotes | None = None) -> bool:
    """Have ``consumer`` (a KafkaConsumer) read its fetches into Records, telling ``notes``
    what they do not say; False, leaving it as it was, where its fetcher is not the one
    this reader was written against: another kafka-python release than
    :data:`WRITTEN_FOR`, or a fetcher whose reader was replaced."""
    fetcher = getattr(consumer, "_fetcher", None)
    if not KAFKA_PYTHON.startswith(WRITTEN_FOR) or not isinstance(fetcher, Fetcher) \
            or getattr(fetcher, "PartitionRecords", None) is not Fetcher.PartitionRecords:
        return False
    fetcher.PartitionRecords = RecordsIntoRecords if notes is None else type(
        "RecordsIntoRecords", (RecordsIntoRecords,), {"notes": notes})
    return True
