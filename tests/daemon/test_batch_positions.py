"""A batch's positions (the next offset per partition, the newest record's time per
partition and per source, the records counted per source) are the same whether they come
from what the intake noted as it read each record (a whole batch of one source) or from
the records themselves (a batch cut short, or of several sources)."""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.ports import Record
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample


def _pipeline(tmp_path: Path) -> Pipeline:
    path = tmp_path / "in.jsonl"
    path.write_text("")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    d = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path))).pipeline
    d.seed_families()
    return d


def _record(source: str, partition: int, offset: int, agent: str, step: int,
            stamp: float) -> Record:
    return Record(source, partition, offset, agent.encode(),
                  good_sample(agent, step).encode(), stamp)


def _count(d: Pipeline, source: str) -> float | None:
    value: float | None = d.metrics.registry.get_sample_value(
        "capwatch_records_total", {"source": source})
    return value


def _newest(d: Pipeline, source: str) -> float | None:
    value: float | None = d.metrics.registry.get_sample_value(
        "capwatch_last_record_timestamp_seconds", {"source": source})
    return value


def test_a_batch_of_interleaved_partitions_moves_each_to_its_last_record(
        tmp_path: Path) -> None:
    d = _pipeline(tmp_path)
    # Partitions interleaved, each one's last record not the batch's last.
    batch = [_record("t", 0, 10, "rover-a", 0, 100.0), _record("t", 1, 5, "rover-b", 0, 101.0),
             _record("t", 0, 11, "rover-a", 1, 102.0), _record("t", 2, 7, "rover-c", 0, 99.0),
             _record("t", 1, 6, "rover-b", 1, 103.0), _record("t", 2, 8, "rover-c", 1, 98.0)]
    d.handle_batch(batch)
    assert d.processed == 6
    assert d.checkpoints.commit_offsets() == {0: 12, 1: 7, 2: 9}
    assert d.batches.newest_stamp == {0: 102.0, 1: 103.0, 2: 98.0}
    assert _count(d, "t") == 6
    assert _newest(d, "t") == 103.0
    # The next batch starts afresh: only its own records move the positions (its newest
    # record older than the last batch's, as a producer's clock may make it).
    d.handle_batch([_record("t", 1, 7, "rover-b", 2, 90.0)])
    assert d.checkpoints.commit_offsets() == {0: 12, 1: 8, 2: 9}
    assert d.batches.newest_stamp == {0: 102.0, 1: 90.0, 2: 98.0}
    assert _count(d, "t") == 7
    assert _newest(d, "t") == 90.0


def test_a_batch_of_two_sources_counts_each_source_and_partition(tmp_path: Path) -> None:
    d = _pipeline(tmp_path)
    batch = [_record("t", 0, 3, "rover-a", 0, 50.0), _record("u", 0, 9, "rover-b", 0, 60.0),
             _record("t", 0, 4, "rover-a", 1, 55.0)]
    d.handle_batch(batch)
    assert d.processed == 3
    assert _count(d, "t") == 2 and _count(d, "u") == 1
    assert _newest(d, "t") == 55.0 and _newest(d, "u") == 60.0
    # Both sources' partition 0 are one partition to the checkpoint, as before.
    assert d.checkpoints.commit_offsets() == {0: 10}
