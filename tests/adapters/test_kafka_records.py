"""capwatch's reader of kafka-python's fetched batches (kafka_records) against
kafka-python's own: the same Records, the same position after any number taken, the same
refusals of corrupt batches. Batches are built with kafka-python's own builder; the real
broker's batches (compressed, transactional, with headers) are read in
tests/integration/test_kafka_records_broker.py."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.structs import TopicPartition

from capwatch.adapters.io import kafka_records
from capwatch.adapters.io.kafka_records import RecordsIntoRecords, install, read_batch
from capwatch.contracts.ports import Record

TP = TopicPartition("transitions", 2)


def batch(base: int, records: list[tuple[int, bytes | None, bytes | None, list[Any]]],
          compression: int = 0, log_append_time: int | None = None) -> bytes:
    """A v2 batch at offset ``base`` of (timestamp, key, value, headers); with
    ``log_append_time``, stamped by the broker at that time."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for i, (stamp, key, value, headers) in enumerate(records):
        builder.append(i, timestamp=stamp, key=key, value=value, headers=headers)
    buf = builder.build()
    struct.pack_into(">q", buf, 0, base)
    if log_append_time is not None:
        attributes = struct.unpack_from(">h", buf, 21)[0] | 0x08
        struct.pack_into(">h", buf, 21, attributes)
        struct.pack_into(">q", buf, 35, log_append_time)  # MaxTimestamp
        from kafka.record.util import calc_crc32c
        struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def kafka_pythons(blob: bytes, fetch_offset: int = 0) -> list[Record]:
    """What KafkaSource made of kafka-python's own reader's ConsumerRecords."""
    part = Fetcher.PartitionRecords(fetch_offset, TP, MemoryRecords(blob))
    out = []
    while part:
        for m in part.take(7):
            stamp = m.timestamp / 1000 if m.timestamp is not None and m.timestamp >= 0 \
                else None
            out.append(Record(m.topic, m.partition, m.offset, m.key,
                              m.value if m.value is not None else b"", stamp))
    return out


def ours(blob: bytes, fetch_offset: int = 0, take: int = 7) -> tuple[list[Record], list[int]]:
    """The Records, and the reader's next fetch offset after each take."""
    part = RecordsIntoRecords(fetch_offset, TP, MemoryRecords(blob))
    out: list[Record] = []
    positions = []
    while part:
        out += part.take(take)
        positions.append(part.next_fetch_offset)
    return out, positions


def mixed() -> list[tuple[int, bytes | None, bytes | None, list[Any]]]:
    """Keys and values null, empty, short and long (lengths of one to three varint bytes),
    headers or none, timestamps growing and not."""
    out: list[tuple[int, bytes | None, bytes | None, list[Any]]] = []
    for i in range(40):
        key = None if i % 7 == 3 else f"agent-{i % 5}".encode() * (1 + 30 * (i % 3 == 0))
        value = None if i % 11 == 5 else (b"" if i % 13 == 4 else b"v" * (i * i * 17))
        headers = [("h", b"x"), ("empty", None)] if i % 4 == 1 else []
        out.append((1_700_000_000_000 + (i * 37) % 11, key, value, headers))
    return out


def test_an_uncompressed_batch_reads_as_kafka_pythons_reader_made_it() -> None:
    blob = batch(100, mixed()[:20]) + batch(120, mixed()[20:])
    got, positions = ours(blob)
    assert got == kafka_pythons(blob)
    assert [r.offset for r in got] == list(range(100, 140))
    # The position after each take is the offset after the last record handed out.
    assert positions == [107, 114, 121, 128, 135, 140]


def test_compressed_and_broker_stamped_batches_read_the_same() -> None:
    blob = batch(0, mixed()[:10], compression=1) + batch(10, mixed()[10:25],
                                                          log_append_time=1_700_000_123_456)
    got, _ = ours(blob)
    assert got == kafka_pythons(blob)
    assert {r.timestamp for r in got[10:]} == {1_700_000_123.456}


def test_a_fetch_from_the_middle_of_a_batch_skips_the_records_before_it() -> None:
    blob = batch(50, mixed()[:20])
    got, positions = ours(blob, fetch_offset=57, take=500)
    assert got == kafka_pythons(blob, fetch_offset=57)
    assert [r.offset for r in got] == list(range(57, 70)) and positions == [70]


def test_a_batch_whose_records_do_not_fill_it_is_refused() -> None:
    good = batch(0, mixed()[:5])
    count = struct.unpack_from(">i", good, 57)[0]
    with pytest.raises(CorruptRecordError, match="unconsumed"):
        read_batch(good[:57] + struct.pack(">i", count - 1) + good[61:], "t", 0, 0, 0,
                   None, count - 1)
    with pytest.raises(CorruptRecordError):
        read_batch(good[:-3], "t", 0, 0, 0, None, count)
    # A record's length that its fields do not fill.
    first = 61  # the first record's length varint: one byte for these small records
    length = good[first] >> 1
    bad = good[:first] + bytes([(length + 1) << 1]) + good[first + 1:]
    with pytest.raises(CorruptRecordError):
        read_batch(bad, "t", 0, 0, 0, None, count)


def test_a_batch_failing_its_crc_is_refused_as_kafka_python_refuses_it() -> None:
    blob = bytearray(batch(0, mixed()[:5]))
    blob[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="crc"):
        ours(bytes(blob))


class _Consumer:
    """What install reads of a KafkaConsumer: its fetcher (made without a broker)."""

    def __init__(self) -> None:
        self._fetcher = Fetcher.__new__(Fetcher)


def test_installed_only_over_the_kafka_python_release_it_was_written_against(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The reader mirrors Fetcher.PartitionRecords' internals (_unpack_records, the
    # batch's _buffer, next_fetch_offset, drain) of kafka-python 3.0; the dependency allows
    # any 3.x. Another release keeps kafka-python's own reader, so a change there can
    # neither move a position nor fail the first poll on an attribute renamed.
    consumer = _Consumer()
    assert install(consumer)  # the release installed here: the one it was written for
    assert consumer._fetcher.PartitionRecords is RecordsIntoRecords
    monkeypatch.setattr(kafka_records, "KAFKA_PYTHON", "3.1.0")
    other = _Consumer()
    assert not install(other)
    assert other._fetcher.PartitionRecords is Fetcher.PartitionRecords


def test_a_corrupt_batch_raises_at_every_take_not_once() -> None:
    # After the first raise the reader's generator is spent: take() then returned []
    # while the reader stayed truthy, and kafka-python's Fetcher.fetched_records loops
    # while records are wanted and its reader is truthy, so the daemon's retried poll()
    # spun inside kafka-python forever, at the same position, never returning to notice
    # a revoke. Every take raises instead, records before the batch handed out first.
    blob = bytearray(batch(0, mixed()[:5]) + batch(5, mixed()[5:9]))
    blob[-1] ^= 0xFF
    part = RecordsIntoRecords(0, TP, MemoryRecords(bytes(blob)))
    assert [r.offset for r in part.take(500)] == [0, 1, 2, 3, 4]
    for _ in range(3):
        with pytest.raises(CorruptRecordError, match="crc"):
            part.take(500)
        assert part.next_fetch_offset == 5


def _kept_last_offset(blob: bytes, last_offset_delta: int, control: bool = False) -> bytes:
    """``blob`` (one batch) as compaction leaves it (its last offset kept past its last
    record) and, with ``control``, marked a transaction's control batch."""
    from kafka.record.util import calc_crc32c
    buf = bytearray(blob)
    struct.pack_into(">i", buf, 23, last_offset_delta)
    if control:
        struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x20)
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _positions(cls: Any, blob: bytes, fetch_offset: int, takes: list[int]) -> list[Any]:
    part = cls(fetch_offset, TP, MemoryRecords(blob))
    out: list[Any] = []
    i = 0
    while part:
        got = part.take(takes[i % len(takes)])
        i += 1
        # A null value is handed on as empty (as KafkaSource made it of kafka-python's).
        out.append(([(r.offset, r.key, r.value or b"") for r in got], part.next_fetch_offset,
                     part.leader_epoch))
    return out


def test_positions_after_every_take_are_kafka_pythons_over_every_batch_shape() -> None:
    # Compared take by take with kafka-python's own reader, not with figures written by
    # hand: a control batch, a compacted batch whose last offset outlives its records, an
    # empty batch, a compressed one, a fetch from the middle, a last batch cut short.
    import random
    rng = random.Random(19)
    for _ in range(150):
        blob, off = b"", rng.randrange(0, 50)
        start = off
        for _ in range(rng.randrange(1, 5)):
            n = 0 if rng.random() < 0.1 else rng.randrange(1, 12)
            shape = rng.random()
            one = batch(off, mixed()[:n], compression=1 if shape < 0.2 else 0)
            last = max(n - 1, 0)
            if 0.2 <= shape < 0.5 or n == 0:
                last = n + rng.randrange(0, 4)
                one = _kept_last_offset(one, last, control=0.2 <= shape < 0.3)
            blob += one
            off += last + 1
        if rng.random() < 0.2:
            blob = blob[:-rng.randrange(1, 30)]
        fetch_offset = start + rng.randrange(0, 8)
        takes = [rng.randrange(1, 9) for _ in range(4)]
        assert _positions(RecordsIntoRecords, blob, fetch_offset, takes) == \
            _positions(Fetcher.PartitionRecords, blob, fetch_offset, takes)


def _recrc(buf: bytearray) -> bytes:
    """``buf`` (one batch, edited) with its length and CRC made to fit it again."""
    from kafka.record.util import calc_crc32c
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _with_bad_varint(blob: bytes) -> bytes:
    """``blob`` (one uncompressed batch) with its first record's timestamp delta replaced by
    a varint of eleven continuation bytes (past int64) and the CRC made valid again: a
    producer's bug, not the wire's, so that check_crcs passes it."""
    buf = bytearray(blob)
    first = 61  # the first record's length varint: one byte for these small records
    assert buf[first] < 0x80
    # length, attributes, then the timestamp delta (one byte in these records).
    delta_at = first + 2
    assert buf[delta_at] < 0x80
    return _recrc(buf[:delta_at] + bytearray([0xFF] * 11) + buf[delta_at + 1:])


def test_a_varint_past_int64_in_a_batch_whose_crc_holds_is_a_corrupt_batch() -> None:
    # decode_varint raises ValueError past int64; read_batch let it out as such, so
    # take() did not keep it as the reader's fault: the next take returned [] from the
    # spent generator while the reader stayed truthy, and Fetcher.fetched_records looped
    # on it without end (the consumer process's child spun at 100% CPU inside poll(),
    # never serving a commit; in one process the ValueError, no KafkaError, stopped the
    # daemon). kafka-python's own reader calls it a CorruptRecordError.
    blob = _with_bad_varint(batch(0, [(1_700_000_000_000, b"k", b"v", [])] * 3))
    with pytest.raises(CorruptRecordError, match="invalid record structure"):
        kafka_pythons(blob)
    with pytest.raises(CorruptRecordError, match="invalid record structure"):
        read_batch(blob, "t", 0, 0, 0, None, 3)
    good = batch(0, mixed()[:4])
    part = RecordsIntoRecords(0, TP, MemoryRecords(good + _with_bad_varint(
        batch(4, [(1_700_000_000_000, b"k", b"v", [])] * 3))))
    assert [r.offset for r in part.take(500)] == [0, 1, 2, 3]
    with pytest.raises(CorruptRecordError):
        part.take(500)
    # Never truthy with nothing to hand out: what made fetched_records loop.
    assert not part or part.take(500) != []


def test_any_failure_of_the_reader_is_its_fault_never_an_empty_truthy_reader(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever a future fault raises (not only CorruptRecordError), the reader must not
    # be left truthy with a spent generator.
    def broken(*args: Any) -> list[Record]:
        raise TypeError("a reader's own bug")

    monkeypatch.setattr(kafka_records, "read_batch", broken)
    part = RecordsIntoRecords(0, TP, MemoryRecords(batch(0, mixed()[:3])))
    with pytest.raises(TypeError):
        part.take(500)
    assert not part and part.next_fetch_offset == 0


def test_a_header_key_not_utf8_is_refused_as_kafka_pythons_reader_refuses_it() -> None:
    # The v2 format's header key is a UTF-8 string; kafka-python's reader decodes it and
    # calls a record whose key does not decode corrupt. capwatch reads no header, but a
    # batch must not pass uncompressed and fail compressed (which kafka-python reads).
    good = batch(0, [(1_700_000_000_000, b"k", b"v", [("hk", b"x")])])
    at = good.index(b"hk")
    blob = _recrc(bytearray(good[:at] + b"\xff\xfe" + good[at + 2:]))
    with pytest.raises(CorruptRecordError):
        kafka_pythons(blob)
    with pytest.raises(CorruptRecordError, match="header key"):
        read_batch(blob, "t", 0, 0, 0, None, 1)
    # A key that decodes (not ASCII) passes both.
    utf8 = batch(0, [(1_700_000_000_000, b"k", b"v", [("clé", b"x")])])
    assert ours(utf8)[0] == kafka_pythons(utf8)


def test_a_corrupt_batch_is_fetched_again_not_held() -> None:
    # A batch corrupt only on the wire (its CRC fails) reads well when fetched again; the
    # reader holding it raised at every poll until the partition was revoked or the
    # process restarted. Drained instead, the fetcher asks the broker again from the
    # same position (nothing handed out of the batch, nothing committed past it); a
    # batch corrupt in the log raises again at each fetch, as the Java client re-raises.
    blob = bytearray(batch(0, mixed()[:5]) + batch(5, mixed()[5:9]))
    blob[-1] ^= 0xFF
    part = RecordsIntoRecords(0, TP, MemoryRecords(bytes(blob)))
    assert [r.offset for r in part.take(500)] == [0, 1, 2, 3, 4]
    with pytest.raises(CorruptRecordError, match="crc"):
        part.take(500)
    assert not part and part.next_fetch_offset == 5


def test_the_batch_readers_varint_and_header_size_are_kafka_pythons() -> None:
    # kafka_batch (compiled with mypyc) reads varints itself rather than calling
    # kafka-python's decode_varint: the same values, positions and refusals.
    import random

    from kafka.record.default_records import DefaultRecordBatch
    from kafka.record.util import decode_varint, encode_varint

    from capwatch.adapters.io.kafka_batch import HEADER_SIZE, _varint

    assert DefaultRecordBatch.HEADER_STRUCT.size == HEADER_SIZE
    rng = random.Random(20)
    values = [0, 1, -1, 63, -64, 64, -65, 2**31 - 1, -2**31, 2**63 - 1, -2**63,
              *(rng.randrange(-2**63, 2**63) >> rng.randrange(0, 63) for _ in range(2000))]
    for v in values:
        buf = bytearray(b"\x00\x00")
        encode_varint(v, buf.append)
        buf += b"\x01"
        assert _varint(bytes(buf), 2) == decode_varint(buf, 2) == (v, len(buf) - 1)
    for bad in (b"\xff" * 10 + b"\x01", b"\x80" * 10, b"\xff" * 3):
        with pytest.raises((ValueError, IndexError)) as ours_:
            _varint(bad, 0)
        with pytest.raises((ValueError, IndexError)) as theirs:
            decode_varint(bad, 0)
        assert type(ours_.value) is type(theirs.value)


def _with_attributes(blob: bytes, value: int) -> bytes:
    """``blob`` (one uncompressed batch) with every record's attributes byte set to
    ``value`` and its CRC made valid again (a producer's choice, which check_crcs passes)."""
    from kafka.record.util import decode_varint
    buf = bytearray(blob)
    pos = 61
    for _ in range(struct.unpack_from(">i", buf, 57)[0]):
        length, after = decode_varint(buf, pos)
        buf[after] = value  # the attributes: right after the record's length
        pos = after + length
    assert pos == len(buf)
    return _recrc(buf)


def _compressed(blob: bytes) -> bytes:
    """``blob`` (one uncompressed batch) as a gzip batch of the same records, byte for
    byte (kafka-python's builder would write every attributes byte 0)."""
    from kafka.codec import gzip_encode
    buf = bytearray(blob[:61] + gzip_encode(blob[61:]))
    struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 1)  # gzip
    return _recrc(buf)


@pytest.mark.parametrize("attributes", [0x00, 0x01, 0x7F, 0x80, 0xC1, 0xFF])
def test_a_records_attributes_are_one_byte_compressed_or_not(attributes: int) -> None:
    # The spec's attributes are an int8 (unused, written 0): one byte, whatever its value,
    # as the Java client reads it. kafka-python reads a varint there, so a byte of 0x80 or
    # more took the timestamp delta's byte with it and shifted the whole record; its
    # compressed batches (read by kafka-python's code) and the uncompressed ones (ours)
    # disagreed. Both kinds now read one byte: the same records as with attributes 0.
    plain = batch(40, mixed()[:12])
    expected, _ = ours(plain)
    odd = _with_attributes(plain, attributes)
    for blob in (odd, _compressed(odd)):
        assert ours(blob)[0] == expected
        assert ours(blob, fetch_offset=45)[0] == expected[5:]
    assert _compressed(plain) != plain and ours(_compressed(plain))[0] == expected
    if attributes >= 0x80:
        # kafka-python's own reader shifts the record: refused, or other fields.
        try:
            theirs = kafka_pythons(_compressed(odd))
        except CorruptRecordError:
            theirs = []
        assert theirs != expected


def test_the_reader_notes_the_offsets_it_reads_past_without_a_record() -> None:
    # A transaction's markers after the records, then a compacted batch whose last offset
    # outlives its records: the source may commit past them once the records before
    # them are handled (the checkpoint: tests/daemon/test_recordless_commit.py).
    from capwatch.adapters.io.kafka_records import ReadNotes

    marker = _kept_last_offset(batch(5, mixed()[:1]), 0, control=True)
    second = _kept_last_offset(batch(6, mixed()[:1]), 0, control=True)
    blob = batch(0, mixed()[:5]) + marker + second
    notes = ReadNotes()
    cls = type("Noted", (RecordsIntoRecords,), {"notes": notes})
    part = cls(0, TP, MemoryRecords(blob))
    assert [r.offset for r in part.take(5)] == [0, 1, 2, 3, 4]
    assert notes.recordless == {}  # not read past yet
    assert part.take(5) == [] and not part
    assert notes.recordless == {2: (5, 7)} and part.next_fetch_offset == 7
    # Compaction kept offsets 12-14 past the batch's last record (11): read past too.
    notes = ReadNotes()
    cls = type("Noted", (RecordsIntoRecords,), {"notes": notes})
    part = cls(10, TP, MemoryRecords(_kept_last_offset(batch(10, mixed()[:2]), 4)))
    assert [r.offset for r in part.take(500)] == [10, 11] and not part
    assert notes.recordless == {2: (12, 15)}
    notes.forget({2})
    assert notes.recordless == {}
    # A take's failure is noted as the partition's: the very object the poll raises.
    damaged = bytearray(batch(0, mixed()[:3]))
    damaged[-1] ^= 0xFF
    part = cls(0, TP, MemoryRecords(bytes(damaged)))
    with pytest.raises(CorruptRecordError) as raised:
        part.take(500)
    assert notes.faults[2] is raised.value


def _transactional(base: int, producer_id: int, n: int, marker: str | None = None) -> bytes:
    """A transactional v2 batch of ``producer_id`` at ``base``: ``n`` records of
    :func:`mixed`, or with ``marker`` ("abort" or "commit") its control batch, one control
    record as a broker writes it (key: version 0 and the type; value: version 0 and a
    coordinator epoch)."""
    from kafka.record.util import calc_crc32c
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
        producer_epoch=0, base_sequence=0 if marker is None else -1, batch_size=1 << 30)
    if marker is None:
        for i, (stamp, key, value, headers) in enumerate(mixed()[:n]):
            builder.append(i, timestamp=stamp, key=key, value=value, headers=headers)
    else:
        builder.append(0, timestamp=1_700_000_000_000,
                       key=struct.pack(">hh", 0, 0 if marker == "abort" else 1),
                       value=struct.pack(">hi", 0, 3), headers=[])
    buf = builder.build()
    struct.pack_into(">q", buf, 0, base)
    if marker is not None:
        struct.pack_into(">h", buf, 21, struct.unpack_from(">h", buf, 21)[0] | 0x20)
        struct.pack_into(">I", buf, 17, calc_crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def _committed_positions(cls: Any, blob: bytes, fetch_offset: int, takes: list[int],
                         aborted: list[Any]) -> list[Any]:
    from kafka.protocol.consumer import IsolationLevel
    part = cls(fetch_offset, TP, MemoryRecords(blob),
               isolation_level=IsolationLevel.READ_COMMITTED, aborted_transactions=aborted)
    out: list[Any] = []
    i = 0
    while part:
        got = part.take(takes[i % len(takes)])
        i += 1
        out.append(([(r.offset, r.key, r.value or b"") for r in got], part.next_fetch_offset))
    return out


def test_read_committed_skips_what_kafka_pythons_reader_skips_take_by_take() -> None:
    # Producers' transactions interleaved, each committed or aborted, a plain producer's
    # batches between them, the response's list of aborted transactions as the broker
    # makes it (producer id, first offset), fetches from anywhere: the same records and
    # positions as kafka-python's own reader under read_committed, never an aborted one.
    import collections
    import random
    Aborted = collections.namedtuple("Aborted", "producer_id first_offset")
    rng = random.Random(22)
    skipped = 0
    for _ in range(200):
        blob, off = b"", rng.randrange(0, 30)
        open_tx: dict[int, int] = {}
        start = off
        aborted: list[Any] = []
        doomed: set[int] = set()
        for _ in range(rng.randrange(1, 9)):
            pid = rng.choice([-1, 7, 8, 9])
            if pid == -1:
                n = rng.randrange(1, 6)
                blob += batch(off, mixed()[:n])
            elif pid in open_tx and rng.random() < 0.4:
                end = "abort" if pid in doomed else "commit"
                blob += _transactional(off, pid, 1, marker=end)
                del open_tx[pid]
                doomed.discard(pid)
                n = 1
            else:
                n = rng.randrange(1, 6)
                if pid not in open_tx:
                    open_tx[pid] = off
                    if rng.random() < 0.5:
                        doomed.add(pid)
                        aborted.append(Aborted(pid, off))
                blob += _transactional(off, pid, n)
            off += n
        for pid in list(doomed):  # their markers come after the fetched range
            del open_tx[pid]
        fetch_offset = start + rng.randrange(0, 4)
        takes = [rng.randrange(1, 9) for _ in range(4)]
        mine = _committed_positions(RecordsIntoRecords, blob, fetch_offset, takes, aborted)
        assert mine == _committed_positions(Fetcher.PartitionRecords, blob, fetch_offset,
                                            takes, aborted)
        uncommitted = _positions(RecordsIntoRecords, blob, fetch_offset, takes)
        skipped += sum(len(g) for g, *_ in uncommitted) - sum(len(g) for g, _ in mine)
    assert skipped > 100  # aborted records were there to skip


def test_an_aborted_transaction_is_read_past_as_offsets_without_a_record() -> None:
    # Records 0-2, producer 7's aborted batch 3-5 and its abort marker 6: under
    # read_committed only 0-2 are handed out, and 3-7 are noted as holding none, so the
    # checkpoint may commit the partition's end once 0-2 are handled.
    import collections

    from kafka.protocol.consumer import IsolationLevel

    from capwatch.adapters.io.kafka_records import ReadNotes
    Aborted = collections.namedtuple("Aborted", "producer_id first_offset")
    blob = batch(0, mixed()[:3]) + _transactional(3, 7, 3) + \
        _transactional(6, 7, 1, marker="abort")
    notes = ReadNotes()
    cls = type("Noted", (RecordsIntoRecords,), {"notes": notes})
    part = cls(0, TP, MemoryRecords(blob), isolation_level=IsolationLevel.READ_COMMITTED,
               aborted_transactions=[Aborted(7, 3)])
    assert [r.offset for r in part.take(500)] == [0, 1, 2] and not part
    assert notes.recordless == {2: (3, 7)} and part.next_fetch_offset == 7
    # Read uncommitted, the same batch's records are handed out.
    part = RecordsIntoRecords(0, TP, MemoryRecords(blob))
    assert [r.offset for r in part.take(500)] == [0, 1, 2, 3, 4, 5]
