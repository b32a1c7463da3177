"""JSONL source: line offsets, resume from a checkpoint, following a growing file."""

from __future__ import annotations

import errno
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.adapters.io.streams import JsonlPublisher, JsonlSource
from capwatch.contracts.wire import DeadLetter, DeadLetterRecord, dead_letter_record


def _all(source: JsonlSource) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while True:
        batch = source.poll(0.01)
        if not batch:
            return out
        out += [(r.offset, r.value) for r in batch]


def test_offsets_are_line_numbers_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"a\n\nb\r\n  \nc")
    source = JsonlSource(str(path))
    source.start(lambda p: None, lambda p: None, {})
    assert _all(source) == [(0, b"a"), (2, b"b"), (4, b"c")]
    assert source.exhausted()
    source.close()
    resumed = JsonlSource(str(path))
    resumed.start(lambda p: None, lambda p: None, {0: 3})
    assert _all(resumed) == [(4, b"c")]
    resumed.close()


def test_follow_waits_for_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"one\n")
    source = JsonlSource(str(path), follow=True)
    source.start(lambda p: None, lambda p: None, {})
    assert _all(source) == [(0, b"one")]
    with open(path, "ab") as f:
        f.write(b"tw")
        f.flush()
        assert _all(source) == []  # a writer is midway through the line
        f.write(b"o\nthree\n")
    assert _all(source) == [(1, b"two"), (2, b"three")]
    assert not source.exhausted()
    source.close()


def test_an_over_long_jsonl_line_is_measured_not_held(tmp_path: Path) -> None:
    import hashlib

    long_line = b"x" * 5_000_000
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"a": 1}\n' + long_line + b"\n" + b'{"b": 2}\n')
    source = JsonlSource(str(path), max_line_bytes=1000)
    source.start(lambda p: None, lambda p: None, {})
    records = source.poll(0.1)
    source.close()
    assert [r.offset for r in records] == [0, 1, 2]
    cut = records[1]
    assert len(cut.value) <= 1002 and cut.size == len(long_line)
    assert cut.sha256 == hashlib.sha256(long_line).hexdigest()
    assert records[2].value == b'{"b": 2}' and records[2].size is None


def test_a_followed_over_long_line_still_being_written_is_read_once_complete(
        tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"y" * 5000)
    source = JsonlSource(str(path), follow=True, max_line_bytes=1000)
    source.start(lambda p: None, lambda p: None, {})
    assert source.poll(0.01) == []
    with open(path, "ab") as f:
        f.write(b"y" * 5000 + b"\n")
    [record] = source.poll(0.01)
    source.close()
    assert record.size == 10_000 and record.offset == 0


def test_a_finished_file_answers_an_empty_poll_after_the_timeout_not_at_once(
        tmp_path: Path) -> None:
    # The daemon's loop polls until the workers finish; an instant empty answer made it spin
    # and starve the assessment threads of the GIL.
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"a\nb\n")
    waits: list[float] = []
    source = JsonlSource(str(path), wait=waits.append)
    source.start(lambda p: None, lambda p: None, {})
    assert [r.value for r in source.poll(0.5)] == [b"a", b"b"]
    assert waits == []  # records came back: no wait
    assert source.poll(0.5) == [] and source.poll(0.5) == []
    assert waits == [0.5, 0.5] and source.exhausted()
    source.close()


# ------------------------------------------------------------------ JSONL outputs, disk full


def _letter(i: int, size: int = 3000) -> DeadLetterRecord:
    return dead_letter_record(DeadLetter(f"bad {i}", b"x" * size), "in.jsonl", 0, i,
                              datetime(2026, 1, 1, tzinfo=UTC))


def _offsets(path: Path) -> list[int]:
    # json.loads raises on a torn line, which is what these tests look for.
    return [json.loads(line)["offset"] for line in path.read_bytes().splitlines()]


_REAL_WRITE = os.write


class DiskFull:
    """os.write as on a file system with ``room`` bytes left: a short write, then ENOSPC.
    (os is patched as a whole module, so the real write is kept aside.)"""

    def __init__(self, room: int) -> None:
        self.room = room

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = _REAL_WRITE(fd, bytes(data[:self.room]))
        self.room -= n
        return n


def test_a_full_disk_leaves_no_torn_line_and_every_line_once_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pub = JsonlPublisher(tmp_path)
    pub.dead_letter(_letter(0))
    pub.flush()
    full = DiskFull(room=4500)  # one and a half lines fit
    monkeypatch.setattr(os, "write", full.write)
    for i in range(1, 4):
        pub.dead_letter(_letter(i))
    for _ in range(3):  # the daemon retries while the disk stays full
        with pytest.raises(OSError):
            pub.flush()
        assert _offsets(tmp_path / "deadletter.jsonl") == [0]
        full.room = 4500
    monkeypatch.undo()  # room again
    pub.flush()
    assert _offsets(tmp_path / "deadletter.jsonl") == [0, 1, 2, 3]
    pub.close()


def test_lines_waiting_past_the_limit_are_flushed_and_a_failure_keeps_none_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pub = JsonlPublisher(tmp_path, max_pending_bytes=10_000)
    monkeypatch.setattr(os, "write", DiskFull(room=0).write)
    handed = 0
    for i in range(10):
        try:
            pub.dead_letter(_letter(i))  # the pipeline hands a refused record again later
            handed = i + 1
        except OSError:
            break
    assert 0 < handed < 10, "the pending lines are bounded"
    monkeypatch.undo()
    for i in range(handed, 10):
        pub.dead_letter(_letter(i))
    pub.close()
    assert _offsets(tmp_path / "deadletter.jsonl") == list(range(10))
