"""A poll larger than a turn (``Pipeline.turn_records``: kafka-python's polls take several
turns' records) is handed to the pipeline a turn at a time: the source is not polled again
before the poll's last record is handled, nothing past a record not yet handled is
committed, a partition given up drops its records still waiting, and a store failure
keeps the turn's unhandled records before the rest, in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.ports import AssignmentLost, Rebalance, Record
from capwatch.contracts.store import StoreError
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample


class Polls:
    """A source whose polls return the given batches, then nothing."""

    name = "t"

    def __init__(self, batches: list[list[Record]]) -> None:
        self.batches = batches
        self.polls = 0
        self.commits: list[dict[int, int]] = []

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        on_assign({r.partition for b in self.batches for r in b})

    def poll(self, timeout_s: float) -> list[Record]:
        self.polls += 1
        return self.batches.pop(0) if self.batches else []

    def commit(self, offsets: Mapping[int, int]) -> None:
        self.commits.append(dict(offsets))

    def exhausted(self) -> bool:
        return not self.batches

    def lag(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        """Nothing to release."""


def _records(n: int, partitions: int = 1) -> list[Record]:
    """``n`` consistent steps of one rover per partition, round robin over partitions."""
    out = []
    for i in range(n):
        p = i % partitions
        agent = f"rover-{p}"
        out.append(Record("t", p, i // partitions, agent.encode(),
                          good_sample(agent, i // partitions).encode(), None))
    return out


def _pipeline(tmp_path: Path, batches: list[list[Record]], turn: int | None
              ) -> tuple[Pipeline, Polls, list[list[tuple[int, int]]]]:
    source = Polls(batches)
    d = build_service(config(tmp_path), publisher=MemoryPublisher(), source=source).pipeline
    d.turn_records = turn
    d.open()
    handed: list[list[tuple[int, int]]] = []
    handle = d.handle_batch

    def handle_batch(records: Sequence[Record]) -> None:
        if records:
            handed.append([(r.partition, r.offset) for r in records])
        handle(records)

    d.handle_batch = handle_batch  # type: ignore[method-assign]
    return d, source, handed


def test_a_poll_larger_than_a_turn_is_handled_a_turn_at_a_time(tmp_path: Path) -> None:
    d, source, handed = _pipeline(tmp_path, [_records(10)], turn=4)
    for _ in range(3):
        d._step()
    assert [len(b) for b in handed] == [4, 4, 2]
    assert source.polls == 1  # the poll's records first, then the next poll
    assert [o for b in handed for _, o in b] == list(range(10))
    d._step()
    assert source.polls == 2


def test_without_a_turn_a_poll_is_one_batch(tmp_path: Path) -> None:
    d, _, handed = _pipeline(tmp_path, [_records(10)], turn=None)
    d._step()
    assert [len(b) for b in handed] == [10]


def test_records_still_waiting_are_not_committed(tmp_path: Path) -> None:
    d, _, _ = _pipeline(tmp_path, [_records(10)], turn=4)
    d._step()
    assert d.checkpoints.commit_offsets() == {0: 4}
    d.checkpoint()
    d._step()
    d.checkpoint()
    assert d.source.commits == [{0: 4}, {0: 8}]  # type: ignore[attr-defined]


def test_a_partition_given_up_drops_its_waiting_records(tmp_path: Path) -> None:
    d, _, handed = _pipeline(tmp_path, [_records(12, partitions=2)], turn=4)
    d._step()
    d._lost(AssignmentLost({1}, "a new generation"))
    d._step()
    d._step()
    assert handed[0] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [b for b in handed[1:]] == [[(0, 2), (0, 3), (0, 4), (0, 5)]]


def test_a_store_failure_keeps_the_turn_before_the_rest(tmp_path: Path) -> None:
    d, source, handed = _pipeline(tmp_path, [_records(10)], turn=4)
    d._step()
    handle = d.handle_batch
    failed: list[bool] = []

    def failing(records: Sequence[Record]) -> None:
        if not failed:
            failed.append(True)
            # What handle_batch raises when the store fails at a batch's first record.
            raise StoreError("connection to the database lost")
        handle(records)

    d.handle_batch = failing  # type: ignore[method-assign]
    with pytest.raises(StoreError):
        d._step()
    assert d.processed == 4
    d._step()
    d._step()
    assert [o for b in handed for _, o in b] == list(range(10))
    assert [len(b) for b in handed] == [4, 4, 2]
    assert d.processed == 10
    assert source.polls == 1
