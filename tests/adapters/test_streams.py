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
