"""Sources and publishers that need no server: JSONL files or stdin, the log, and
in-memory collection (the demo's summary and tests read it).

Offsets: a JSONL source's offset is the line number (0-based); it resumes from the
daemon's checkpoint in the models store, so a restarted daemon skips what it finished.
The simulated fleet's source is capwatch.adapters.sim.source.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO

import structlog

from capwatch.contracts.ports import Rebalance, Record
from capwatch.contracts.wire import AlertEvent, DeadLetterRecord, ModelVersionEvent


class JsonlSource:
    """One event per line; ``-`` reads stdin. ``follow`` keeps reading as the file grows.

    A line longer than ``max_line_bytes`` is never held whole: its first bytes are kept and
    the rest is read in chunks only to measure and hash it, so the record that reaches the
    daemon says how long the line was and can be refused (and dead-lettered) for its size.
    """

    _CHUNK = 1 << 20

    def __init__(self, path: str, *, follow: bool = False, batch: int = 500,
                 max_line_bytes: int = 16 * 1024 * 1024,
                 wait: Callable[[float], None] = time.sleep) -> None:
        self.path = path
        self._wait = wait
        self.name = "stdin" if path == "-" else Path(path).name
        self.follow = follow
        self.batch = batch
        self.max_line_bytes = max_line_bytes
        self._file: IO[bytes] | None = None
        self._line = 0
        self._skip = 0
        self._eof = False

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        self._file = sys.stdin.buffer if self.path == "-" else open(self.path, "rb")  # noqa: SIM115
        self._skip = resume.get(0, 0)
        on_assign({0})

    def poll(self, timeout_s: float) -> list[Record]:
        assert self._file is not None, "start() first"
        records: list[Record] = []
        while len(records) < self.batch:
            start = self._file.tell() if self.follow else 0
            raw = self._file.readline(self.max_line_bytes + 2)
            if not raw:
                self._eof = True
                if not records:
                    # Like a Kafka poll, an empty answer waits out the timeout. A finished
                    # file answered at once, and the daemon's loop then spun on the GIL
                    # for as long as assessments ran (depot: 37 queries took 16-45 s in
                    # `capwatch run` against 1.7 s in `capwatch assess offline`).
                    self._wait(min(timeout_s, 0.2) if self.follow else timeout_s)
                break
            size: int | None = None
            digest: str | None = None
            if not raw.endswith(b"\n") and len(raw) == self.max_line_bytes + 2:
                size, digest, complete = self._skip_rest(raw)
                if not complete and self.follow:
                    self._file.seek(start)  # a writer is midway through the line
                    break
            elif not raw.endswith(b"\n") and self.follow:
                # A writer is midway through the line: read it whole next time.
                self._file.seek(start)
                break
            line = self._line
            self._line += 1
            if line < self._skip:
                continue
            value = raw.rstrip(b"\r\n") if size is None else raw
            if size is None and not value.strip():
                continue
            records.append(Record(self.name, 0, line, None, value, size=size, sha256=digest))
        return records

    def _skip_rest(self, head: bytes) -> tuple[int, str, bool]:
        """Read past the rest of an over-long line: (its length without the line end, its
        SHA-256, whether its end was found)."""
        assert self._file is not None
        h = hashlib.sha256(head)
        size = len(head)
        while True:
            chunk = self._file.readline(self._CHUNK)
            if not chunk:
                return size, h.hexdigest(), False
            if chunk.endswith(b"\n"):
                body = chunk.rstrip(b"\r\n")
                h.update(body)
                return size + len(body), h.hexdigest(), True
            h.update(chunk)
            size += len(chunk)

    def commit(self, offsets: Mapping[int, int]) -> None:
        """The daemon's checkpoint in the store is the only record of progress."""

    def exhausted(self) -> bool:
        return self._eof and not self.follow

    def lag(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        if self._file is not None and self._file is not sys.stdin.buffer:
            self._file.close()
        self._file = None


class MemoryPublisher:
    """Keeps everything published, in order (the demo's summary, tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.models: list[ModelVersionEvent] = []
        self.alerts: list[AlertEvent] = []
        self.dead_letters: list[DeadLetterRecord] = []

    def model_version(self, event: ModelVersionEvent) -> None:
        with self._lock:
            self.models.append(event)

    def alert(self, event: AlertEvent) -> None:
        with self._lock:
            self.alerts.append(event)

    def dead_letter(self, record: DeadLetterRecord) -> None:
        with self._lock:
            self.dead_letters.append(record)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Nothing is buffered."""

    def close(self) -> None:
        """Nothing to release; the lists stay readable."""


class LogPublisher:
    """Events as structured log lines (the no-server default for alerts)."""

    def __init__(self, inner: MemoryPublisher | None = None) -> None:
        self.log = structlog.get_logger("capwatch.events")
        self.inner = inner

    def model_version(self, event: ModelVersionEvent) -> None:
        self.log.info("model version", agent_id=event.agent_id, family=event.family,
                      version=event.version, delta=event.delta, summary=event.summary)
        if self.inner is not None:
            self.inner.model_version(event)

    def alert(self, event: AlertEvent) -> None:
        self.log.warning("alert", alert_type=event.alert_type, severity=event.severity,
                         agent_id=event.agent_id, summary=event.summary,
                         dedup_key=event.dedup_key)
        if self.inner is not None:
            self.inner.alert(event)

    def dead_letter(self, record: DeadLetterRecord) -> None:
        self.log.warning("dead letter", reason=record.reason, source=record.source,
                         partition=record.partition, offset=record.offset)
        if self.inner is not None:
            self.inner.dead_letter(record)

    def flush(self, timeout_s: float = 10.0) -> None:
        """Log lines are written synchronously."""

    def close(self) -> None:
        """Nothing to release."""


class JsonlPublisher:
    """Appends each event as one JSON line to models.jsonl, alerts.jsonl, deadletter.jsonl.

    Lines wait in memory until :meth:`flush` (or until ``max_pending_bytes`` of them wait)
    and reach a file whole or not at all: a write that fails (the disk is full) is cut
    back to the file's last flushed size, and the lines stay pending for the next flush.
    Before, a full disk left torn lines and retries appended the same lines again and
    again, so the space freed afterwards filled up with copies and the daemon never
    recovered (red-team rerun of issue 12, session 3).
    """

    NAMES = ("models", "alerts", "deadletter")

    def __init__(self, directory: Path, max_pending_bytes: int = 4 * 1024 * 1024) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fds = {name: os.open(directory / f"{name}.jsonl",
                                   os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                     for name in self.NAMES}
        self._durable = {name: os.fstat(fd).st_size for name, fd in self._fds.items()}
        """Per file: the size up to which every line is whole and flushed."""
        self._pending: dict[str, list[bytes]] = {name: [] for name in self.NAMES}
        self._pending_bytes = 0
        self.max_pending_bytes = max_pending_bytes

    def _write(self, name: str, data: str) -> None:
        line = data.encode() + b"\n"
        with self._lock:
            if self._pending_bytes + len(line) > self.max_pending_bytes:
                # Raises before this line is kept: the caller hands the record again.
                self._flush_locked()
            self._pending[name].append(line)
            self._pending_bytes += len(line)

    def model_version(self, event: ModelVersionEvent) -> None:
        self._write("models", event.model_dump_json())

    def alert(self, event: AlertEvent) -> None:
        self._write("alerts", event.model_dump_json())

    def dead_letter(self, record: DeadLetterRecord) -> None:
        self._write("deadletter", record.model_dump_json())

    def flush(self, timeout_s: float = 10.0) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        for name, fd in self._fds.items():
            lines = self._pending[name]
            if not lines:
                continue
            data = b"".join(lines)
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError:
                # No torn line and no second copy: the file goes back to what was flushed.
                os.ftruncate(fd, self._durable[name])
                raise
            self._durable[name] += len(data)
            self._pending[name] = []
            self._pending_bytes -= len(data)

    def close(self) -> None:
        self.flush()
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
