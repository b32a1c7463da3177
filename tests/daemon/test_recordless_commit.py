"""A commit passes offsets that hold no record (a transaction's marker after the last
record) once every record before them is handled: the group's committed offset then
reaches the partition's end, as the broker's group tools count it (the same against a
real broker and a transactional producer: tests/integration/test_transaction_commits.py).
"""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.ports import SkipsRecordless
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample


class MarkedSource(JsonlSource):
    """A JSONL source whose reader says which offsets after its records hold none."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.skips: dict[int, tuple[int, int]] = {}

    def recordless(self) -> dict[int, tuple[int, int]]:
        return dict(self.skips)


def _pipeline(tmp_path: Path, lines: list[str]) -> tuple[Pipeline, MarkedSource]:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    source = MarkedSource(str(path))
    assert isinstance(source, SkipsRecordless)
    d = build_service(config(tmp_path, source={"kind": "jsonl", "path": str(path)}),
                      publisher=MemoryPublisher(), source=source).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    return d, source


def _committed(d: Pipeline) -> dict[int, int]:
    return {p: o for (_, p), o in d.store.load_offsets(d.checkpoints.group).items()}


def test_the_commit_passes_a_trailing_marker_once_every_record_before_it_is_handled(
        tmp_path: Path) -> None:
    d, source = _pipeline(tmp_path, [good_sample(step=i) for i in range(4)])
    d.handle_batch(d.source.poll(1.0))
    d.checkpoint()
    assert _committed(d) == {0: 4}  # the marker not read yet: the last record's next
    source.skips = {0: (4, 6)}  # read at a later poll, with no record: the next checkpoint
    d.checkpoint()
    assert _committed(d) == {0: 6}
    assert d.checkpoints.commit_offsets() == {0: 6}


def test_a_range_after_records_not_yet_handled_is_not_passed(tmp_path: Path) -> None:
    d, source = _pipeline(tmp_path, [good_sample(step=i) for i in range(4)])
    records = d.source.poll(1.0)
    d.handle_batch(records[:2])  # offsets 0 and 1: 2 and 3 still to come
    source.skips = {0: (4, 6)}
    assert d.checkpoints.commit_offsets() == {0: 2}
    source.skips = {1: (2, 9)}  # another partition's
    assert d.checkpoints.commit_offsets() == {0: 2}
