"""JSONL source: line offsets, resume from a checkpoint, following a growing file."""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource


def _all(source: JsonlSource) -> list[tuple[int, bytes]]:
    out = []
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
