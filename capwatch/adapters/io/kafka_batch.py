"""One v2 record batch (uncompressed, or a compressed one's records once decompressed)
read into capwatch's :class:`Record`s: the per-record
loop of :mod:`capwatch.adapters.io.kafka_records`, apart from its subclass of
kafka-python's reader so that mypyc compiles it (capwatch/native.py): no class of
kafka-python's here, only its error type, called at run time.

Compiled, the loop's integers and byte reads are C; the varints longer than a byte go to
:func:`_varint` (a C call returning a C struct when compiled) instead of kafka-python's
``decode_varint`` (a Python call and a tuple). Pure Python (``CAPWATCH_PURE_PYTHON``, no
build) it is the loop session 19 wrote, each varint's one-byte case in place.
"""

from __future__ import annotations

from typing import Final

from kafka.errors import CorruptRecordError

from capwatch.contracts.ports import Record

__all__ = ["HEADER_SIZE", "read_batch"]

HEADER_SIZE: Final = 61
"""A v2 batch's header (``DefaultRecordBatch.HEADER_STRUCT.size``; a test checks it): the
first record starts there."""


def _varint(buffer: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it, as kafka-python's
    ``decode_varint`` reads it (ValueError past ten bytes, IndexError past the end)."""
    result = 0
    shift = 0
    while True:
        b = buffer[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= 64:
            raise ValueError("Out of int64 range")


def read_batch(buffer: bytes, topic: str, partition: int, base_offset: int,
               first_timestamp: int, log_append_time: int | None, count: int,
               start: int = HEADER_SIZE) -> list[Record]:
    """The ``count`` records of a v2 batch from ``start`` to the end of ``buffer``: an
    uncompressed batch's bytes, header included (``start`` the header's size), or a
    compressed batch's records decompressed (``start`` 0). ``log_append_time``: the
    batch's max timestamp when the broker stamps the records (every record then has it),
    else None (each has first_timestamp + its delta).

    A record's attributes are one byte (int8), as the protocol's spec and the Java client
    read them, whatever its value (unused so far, 0 as producers write it); kafka-python
    reads them as a varint, so that a byte of 0x80 or more took the next byte with it and
    shifted the rest of the record (read as corrupt, or as other fields). Both the
    compressed and the uncompressed batches are read here, so they agree.

    Raises CorruptRecordError where kafka-python's reader would (a record whose fields do
    not fill its length, bytes left after the last record, a negative header count or
    header key size; a negative record key or value size is a null one); a buffer cut short
    raises it too, as does a varint past int64 and a header key not UTF-8 (kafka-python's
    reader decodes the keys). A corrupt batch hands out none of its records
    (kafka-python's reader handed out those before the fault, then raised): the consumer's
    position stays before the batch, and the batch is fetched again at the next poll
    (:class:`RecordsIntoRecords` ``take``), which raises again while it stays corrupt."""
    out: list[Record] = []
    pos = start
    try:
        # Each varint's one-byte case is written out in place, not called: this loop runs
        # once a record on the poll's thread, and a call a field (five of them) was most of
        # what kafka-python's own reader spent (kafka19's callgrind figures in
        # docs/performance.md); the longer forms go to _varint.
        for _ in range(count):
            b = buffer[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                length, pos = _varint(buffer, pos)
            end = pos + length
            pos += 1  # attributes: an int8, unused in v2 (see the docstring)
            b = buffer[pos]
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                delta, pos = _varint(buffer, pos)
            b = buffer[pos]
            if b < 0x80:
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                offset_delta, pos = _varint(buffer, pos)
            b = buffer[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                size, pos = _varint(buffer, pos)
            key: bytes | None = None
            if size >= 0:
                key = buffer[pos:pos + size]
                pos += size
            b = buffer[pos]
            if b < 0x80:
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                size, pos = _varint(buffer, pos)
            value = b""  # a null value is handed on as empty, as KafkaSource did
            if size >= 0:
                value = buffer[pos:pos + size]
                pos += size
            b = buffer[pos]
            if b < 0x80:
                headers = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                headers, pos = _varint(buffer, pos)
            if headers < 0:
                raise CorruptRecordError(f"Found invalid number of record headers {headers}")
            for _ in range(headers):  # capwatch reads no headers: checked and skipped
                size, pos = _varint(buffer, pos)
                if size < 0:
                    raise CorruptRecordError(f"Invalid negative header key size {size}")
                try:
                    # Decoded only to refuse what kafka-python's reader refuses (it
                    # decodes every key): a batch must not pass here and fail when
                    # compressed, which its reader reads (docs/reliability.md, session 20).
                    buffer[pos:pos + size].decode()
                except UnicodeDecodeError as e:
                    raise CorruptRecordError(f"Invalid header key (not UTF-8): {e}") from e
                pos += size
                size, pos = _varint(buffer, pos)
                if size > 0:
                    pos += size
            if pos != end or pos > len(buffer):
                raise CorruptRecordError(f"Invalid record size: expected to read {length} bytes"
                                         f" in record payload, but instead read "
                                         f"{pos - end + length}")
            stamp = first_timestamp + delta if log_append_time is None else log_append_time
            out.append(Record(topic, partition, base_offset + offset_delta, key, value,
                              stamp / 1000 if stamp >= 0 else None))
    except (IndexError, ValueError) as e:
        # ValueError: a varint past int64 (_varint), in a batch whose CRC holds (written
        # so). kafka-python's reader calls both corrupt; let out as they are, they were no
        # KafkaError for the daemon to retry, and take() left the reader truthy and spent,
        # which Fetcher.fetched_records looped on without end.
        raise CorruptRecordError(f"Found invalid record structure: {e!r}") from e
    if pos != len(buffer):
        raise CorruptRecordError(f"{len(buffer) - pos} unconsumed bytes after all records "
                                 f"consumed")
    return out
