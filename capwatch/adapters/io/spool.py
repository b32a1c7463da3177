"""A durable on-disk queue between the daemon's HTTP ingest and its pipeline.

The ingest endpoints (transition events over HTTP, OTLP traces) append accepted events to
the spool and answer only after ``fsync``: a 200 means the events survive a crash of the
daemon or the machine. The pipeline reads the spool as a :class:`~capwatch.contracts.ports.
Source` with one partition, whose offsets are the events' positions in the spool. The
daemon's checkpoint in the models store records how far it got, exactly as for a JSONL
file, so after a restart it resumes there and replays what was not committed
(at-least-once, the same guarantee as Kafka input).

Events live in segment files named by the offset of their first event
(``00000000000000001000.jsonl``). A new segment starts when the current one passes
``segment_bytes``; :meth:`SpoolSource.commit` deletes segments whose every event is
committed. When the spool holds more than ``max_bytes``, appends raise :class:`SpoolFull`
and the endpoints answer 503, so producers back off instead of filling the disk.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from capwatch.contracts.ports import Rebalance, Record

_SUFFIX = ".jsonl"


class SpoolFull(RuntimeError):
    """The spool is over its size limit: the pipeline has fallen behind."""


class Spool:
    """The writer side (thread-safe) and the shared state the source reads."""

    def __init__(self, directory: str | Path, *, segment_bytes: int = 64 * 1024 * 1024,
                 max_bytes: int = 1024 * 1024 * 1024) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.max_bytes = max_bytes
        self.changed = threading.Condition()
        self._lock = threading.Lock()
        self._segments: list[tuple[int, Path]] = sorted(
            (int(p.stem), p) for p in self.directory.glob(f"*{_SUFFIX}") if p.stem.isdigit())
        self._next = 0
        self._file: IO[bytes] | None = None
        self._size = 0
        self._broken: str | None = None
        if self._segments:
            first, last = self._segments[-1]
            data = last.read_bytes()
            if data and not data.endswith(b"\n"):
                # A crash mid-append: the torn tail was never acknowledged, so drop it.
                data = data[:data.rfind(b"\n") + 1]
                last.write_bytes(data)
            self._next = first + data.count(b"\n")
            self._size = sum(p.stat().st_size for _, p in self._segments)

    @property
    def end(self) -> int:
        """The offset the next appended event gets."""
        with self._lock:
            return self._next

    @property
    def size(self) -> int:
        with self._lock:
            return self._size

    def segments(self) -> list[tuple[int, Path]]:
        with self._lock:
            return list(self._segments)

    def append(self, events: Sequence[bytes]) -> int:
        """Append one event per line, fsync, and return the first event's offset."""
        if any(b"\n" in e or b"\r" in e for e in events):
            raise ValueError("spooled events are single lines")
        data = b"".join(e + b"\n" for e in events)
        with self._lock:
            if self._size + len(data) > self.max_bytes:
                raise SpoolFull(f"the ingest spool holds {self._size} bytes, the limit is"
                                f" {self.max_bytes}: the pipeline is behind")
            current = self._segments[-1][1] if self._segments else None
            if current is None or current.stat().st_size >= self.segment_bytes:
                current = self.directory / f"{self._next:020d}{_SUFFIX}"
                self._segments.append((self._next, current))
                if self._file is not None:
                    self._file.close()
                self._file = None
                _fsync_directory(self.directory)
            if self._broken is not None:
                raise OSError(f"the spool could not be restored after a failed write"
                              f" ({self._broken}): restart the daemon")
            if self._file is None:
                # Unbuffered: a buffered writer keeps what a failed write left unwritten
                # and writes it ahead of the next append.
                self._file = open(current, "ab", buffering=0)  # noqa: SIM115 - kept open
            first = self._next
            fd = self._file.fileno()
            start = os.fstat(fd).st_size
            try:
                view = memoryview(data)
                while view:
                    written = self._file.write(view)
                    if not written:  # never for a regular file; no endless loop if so
                        raise OSError(errno.EIO, "the spool file took no bytes")
                    view = view[written:]
                os.fsync(fd)
            except OSError as e:
                # A full disk stops a write midway: what it wrote (whole events of a batch
                # answered 503, and a torn line the next batch's first event would be
                # glued to) must go, or every later offset names another event.
                try:
                    os.ftruncate(fd, start)
                    os.fsync(fd)
                except OSError as e2:
                    self._broken = str(e2)
                raise e
            self._next += len(events)
            self._size += len(data)
        with self.changed:
            self.changed.notify_all()
        return first

    def release(self, committed: int) -> int:
        """Delete segments whose every event lies before ``committed``; returns how many."""
        removed = 0
        with self._lock:
            while len(self._segments) > 1 and self._segments[1][0] <= committed:
                _, path = self._segments.pop(0)
                self._size -= path.stat().st_size
                path.unlink()
                removed += 1
        return removed

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _fsync_directory(directory: Path) -> None:
    # A new segment's name must be durable too, or a crash could lose the file itself.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SpoolSource:
    """The pipeline's side of a :class:`Spool`: partition 0, offset = position."""

    def __init__(self, spool: Spool, name: str = "ingest", *, batch: int = 500) -> None:
        self.spool = spool
        self.name = name
        self.batch = batch
        self._next = 0
        self._file: IO[bytes] | None = None
        self._file_first = -1
        self._file_line = 0

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        self._next = resume.get(0, 0)
        segments = self.spool.segments()
        if segments and self._next < segments[0][0]:
            # Released segments were committed before: nothing before them is owed.
            self._next = segments[0][0]
        on_assign({0})

    def _open_at(self, offset: int) -> bool:
        """Position the reader on ``offset``; False when no segment holds it yet."""
        holder = None
        for first, path in self.spool.segments():
            if first <= offset:
                holder = (first, path)
        if holder is None:
            return False
        first, path = holder
        if self._file is not None and self._file_first == first and self._file_line <= offset:
            pass
        else:
            if self._file is not None:
                self._file.close()
            self._file = open(path, "rb")  # noqa: SIM115 - closed in close() or on moving
            self._file_first, self._file_line = first, first
        while self._file_line < offset:
            line = self._file.readline()
            if not line.endswith(b"\n"):
                self._file.seek(-len(line), 1)
                return False
            self._file_line += 1
        return True

    def poll(self, timeout_s: float) -> list[Record]:
        records: list[Record] = []
        if self._next >= self.spool.end:
            with self.spool.changed:
                self.spool.changed.wait_for(lambda: self._next < self.spool.end,
                                            timeout=timeout_s)
        end = self.spool.end
        while self._next < end and len(records) < self.batch:
            if not self._open_at(self._next):
                break
            assert self._file is not None
            line = self._file.readline()
            if not line.endswith(b"\n"):
                # The rest of this segment is not written yet, or the next one has begun.
                self._file.seek(-len(line), 1)
                if line == b"" and any(f > self._file_first for f, _ in self.spool.segments()):
                    self._file.close()
                    self._file = None
                    continue
                break
            records.append(Record(self.name, 0, self._next, None, line.rstrip(b"\r\n")))
            self._next += 1
            self._file_line += 1
        return records

    def commit(self, offsets: Mapping[int, int]) -> None:
        if 0 in offsets:
            self.spool.release(offsets[0])

    def exhausted(self) -> bool:
        return False

    def lag(self) -> dict[int, int]:
        return {0: max(0, self.spool.end - self._next)}

    def close(self) -> None:
        """Closes the reader and the spool (the daemon's source owns it)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.spool.close()
