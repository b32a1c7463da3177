"""The scheduled checkpoint's flush runs off the main loop; its commit follows the flush.

The commit rule (docs/daemon.md, "Checkpoints and the commit rule") must hold exactly as
with the flush on the main loop: no offset is committed before every output of the records
before it is acknowledged. Here the publisher's flush waits for the test to let it finish
(a fake publisher; the same over a real broker is tests/integration/test_commit_kill.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from capwatch.adapters.io.kafka_common import PublishError
from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.ports import Record
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample

HANG_S = 60.0
"""A hang guard for waits on the flush thread, not a speed target."""


class GatedPublisher(MemoryPublisher):
    """Flushes only once the test opens the gate; what a flush saw is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.flushing = threading.Event()
        self.fail: Exception | None = None
        self.flushed_letters: list[int] = []
        """Dead letters a flush acknowledged: those sent when it started (as a client's
        flush that takes the records in flight when it is called)."""

    def flush(self, timeout_s: float = 10.0) -> None:
        sent = len(self.dead_letters)
        self.flushing.set()
        assert self.gate.wait(HANG_S), "the test never opened the gate"
        if self.fail is not None:
            raise self.fail
        self.flushed_letters.append(sent)


class AnsweringSource(JsonlSource):
    """Commits in the background as the Kafka sources do; the test answers them."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.sent: list[tuple[dict[int, int], Callable[[BaseException | None], None]]] = []
        self.synchronous: list[dict[int, int]] = []

    def commit_async(self, offsets: Mapping[int, int],
                     done: Callable[[BaseException | None], None]) -> None:
        self.sent.append((dict(offsets), done))

    def commit(self, offsets: Mapping[int, int]) -> None:
        self.synchronous.append(dict(offsets))


def _pipeline(tmp_path: Path, lines: list[str], source: JsonlSource | None = None
              ) -> tuple[Pipeline, GatedPublisher]:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    publisher = GatedPublisher()
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    d = build_service(cfg, publisher=publisher,
                      source=source or JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    return d, publisher


def _committed(d: Pipeline) -> dict[int, int]:
    return {p: o for (_, p), o in d.store.load_offsets(d.checkpoints.group).items()}


def _handle(d: Pipeline) -> list[Record]:
    records = d.source.poll(1.0)
    d.handle_batch(records)
    return records


def _flushed(d: Pipeline) -> None:
    pending = d.checkpoints._pending
    assert pending is not None
    assert pending.done.wait(HANG_S)


def test_nothing_is_committed_until_the_flush_acknowledged_every_output(
        tmp_path: Path) -> None:
    lines = [good_sample(step=0), "not json", good_sample(step=1), "{}"]
    d, publisher = _pipeline(tmp_path, lines)
    _handle(d)
    assert len(publisher.dead_letters) == 2
    d.checkpoint(background=True)
    assert publisher.flushing.wait(HANG_S)  # the flush runs, in its own thread
    d.commit_flushed()  # the main loop's next turns: the flush has not finished
    assert _committed(d) == {}
    assert not d.checkpoints.committing
    publisher.gate.set()
    _flushed(d)
    assert d.checkpoints.committing
    d.commit_flushed()
    assert _committed(d) == {0: 4}
    assert publisher.flushed_letters == [2]
    assert not d.checkpoints.committing


def test_a_failed_flush_commits_nothing_and_is_raised_on_the_main_loop(
        tmp_path: Path) -> None:
    d, publisher = _pipeline(tmp_path, [good_sample(step=0), "not json"])
    _handle(d)
    publisher.fail = PublishError("1 record(s) could not be written to Kafka")
    publisher.gate.set()
    d.checkpoint(background=True)
    _flushed(d)
    with pytest.raises(PublishError):
        d.commit_flushed()
    assert _committed(d) == {}
    publisher.fail = None  # the broker is back: the next checkpoint commits
    d.checkpoint(background=True)
    _flushed(d)
    d.commit_flushed()
    assert _committed(d) == {0: 2}


def test_offsets_taken_while_a_flush_runs_wait_for_a_flush_of_their_own(
        tmp_path: Path) -> None:
    # A flush started before a record's output was handed to the publisher need not
    # acknowledge it: the offsets past that record are not the running flush's to commit.
    lines = [good_sample(step=0), "not json", "not json either", good_sample(step=1)]
    d, publisher = _pipeline(tmp_path, lines)
    records = d.source.poll(1.0)
    d.handle_batch(records[:2])
    d.checkpoint(background=True)
    assert publisher.flushing.wait(HANG_S)
    d.handle_batch(records[2:])
    d.checkpoint(background=True)  # the first flush still runs: nothing new is taken
    publisher.gate.set()
    _flushed(d)
    d.commit_flushed()
    assert _committed(d) == {0: 2}
    d.checkpoint(background=True)
    _flushed(d)
    d.commit_flushed()
    assert _committed(d) == {0: 4}
    assert publisher.flushed_letters == [1, 2]


def test_a_synchronous_checkpoint_waits_for_a_running_flush(tmp_path: Path) -> None:
    d, publisher = _pipeline(tmp_path, [good_sample(step=0), "not json"])
    _handle(d)
    d.checkpoint(background=True)
    assert publisher.flushing.wait(HANG_S)
    opener = threading.Timer(0.0, publisher.gate.set)  # lets the flush end while we wait
    opener.start()
    d.checkpoint()  # the shutdown's, a revoke's
    opener.join()
    assert _committed(d) == {0: 2}
    assert d.checkpoints._pending is None
    assert publisher.flushed_letters == [1]  # the running flush covered the same offsets


def test_partitions_given_up_while_their_flush_runs_are_not_committed(
        tmp_path: Path) -> None:
    d, publisher = _pipeline(tmp_path, [good_sample(step=0), good_sample(step=1)])
    _handle(d)
    d.checkpoint(background=True)
    assert publisher.flushing.wait(HANG_S)
    d.checkpoints.forget({0})  # revoked (their own checkpoint committed them) or lost
    publisher.gate.set()
    _flushed(d)
    d.commit_flushed()
    assert _committed(d) == {}


def test_an_asynchronous_commit_the_broker_refused_is_made_again_synchronously(
        tmp_path: Path) -> None:
    source = AnsweringSource(str(tmp_path / "in.jsonl"))
    d, publisher = _pipeline(tmp_path, [good_sample(step=0), good_sample(step=1)], source)
    publisher.gate.set()
    _handle(d)
    d.checkpoint(background=True)
    _flushed(d)
    d.commit_flushed()
    (offsets, done), = source.sent
    assert offsets == {0: 2} and source.synchronous == []
    done(RuntimeError("the group is rebalancing"))  # at a later poll
    assert d.checkpoints.committing
    d.commit_flushed()  # the next turn
    assert source.synchronous == [{0: 2}]
    assert not d.checkpoints.committing
    d.checkpoint(background=True)  # taken: nothing new to flush or commit
    assert d.checkpoints._pending is None
    assert len(source.sent) == 1 and source.synchronous == [{0: 2}]


def test_an_answer_after_a_later_synchronous_commit_does_not_move_the_record_back(
        tmp_path: Path) -> None:
    source = AnsweringSource(str(tmp_path / "in.jsonl"))
    d, publisher = _pipeline(tmp_path, [good_sample(step=0), good_sample(step=1)], source)
    publisher.gate.set()
    records = d.source.poll(1.0)
    d.handle_batch(records[:1])
    d.checkpoint(background=True)
    _flushed(d)
    d.commit_flushed()
    d.handle_batch(records[1:])
    d.checkpoint()  # the shutdown's: synchronous
    assert source.synchronous == [{0: 2}]
    (offsets, done), = source.sent
    assert offsets == {0: 1}
    done(None)  # answered late
    d.checkpoint()
    assert source.synchronous == [{0: 2}]  # still known committed: no commit again


def test_a_revoke_gives_its_partitions_up_uncommitted_when_a_running_flush_does_not_end(
        tmp_path: Path) -> None:
    # A revoke holds the whole group's rebalance: it may not wait without limit for a
    # flush waiting on a broker that does not answer. Bounded, it gives the partitions up
    # without a commit (their next owner replays them), never commits them early, and
    # the flush ending later commits nothing of them either.
    d, publisher = _pipeline(tmp_path, [good_sample(step=0), "not json"])
    _handle(d)
    d.checkpoint(background=True)
    assert publisher.flushing.wait(HANG_S)
    d.checkpoints.sync_wait_s = 0.05
    revoked = threading.Event()

    def revoke() -> None:
        d.revoke({0})
        revoked.set()

    threading.Thread(target=revoke, daemon=True).start()
    try:
        # The gate stays shut: before, the revoke waited for the flush (HANG_S).
        assert revoked.wait(HANG_S / 2), "the revoke waited for the flush without limit"
        assert _committed(d) == {}
        assert 0 not in d.assigned and len(d.registry) == 0
    finally:
        publisher.gate.set()
    _flushed(d)
    d.commit_flushed()
    assert _committed(d) == {}
    assert d.checkpoints._pending is None
