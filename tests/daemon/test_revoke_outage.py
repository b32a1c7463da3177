"""A partition revoked while the store is down: the commit never passes evidence that is
not durable, and the partition's next owner (this replica again, or another) replays it
from the last commit and queues it under the key it had (docs/daemon.md, "What survives a
crash")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.ports import AssignmentLost, Record
from capwatch.contracts.store import StoreError
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample, refused_sample

WRITES = ("save_drift_snapshots", "save_activity", "save_offsets", "enqueue", "add_alerts",
          "live_queue_items", "outbox_keys")
"""What a main loop or a revoke writes or reads in the store around queued evidence."""


class CommitLog(JsonlSource):
    """The JSONL source, keeping every commit the daemon made."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.commits: list[dict[int, int]] = []

    def commit(self, offsets: Mapping[int, int]) -> None:
        self.commits.append(dict(offsets))
        super().commit(offsets)


class Outage:
    """The store failing from ``fail_from`` on (one of :data:`WRITES`, and every later one
    a checkpoint makes) until :meth:`end`."""

    def __init__(self, store: Any, monkeypatch: pytest.MonkeyPatch, fail_from: str) -> None:
        self.down = False
        self.failed: list[str] = []
        failing = WRITES[WRITES.index(fail_from):]
        for name in failing:
            real = getattr(store, name)
            monkeypatch.setattr(store, name, self._wrap(name, real))

    def _wrap(self, name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.failed.append(name)
                raise StoreError("connection to the database lost")
            return real(*args, **kwargs)
        return call

    @contextlib.contextmanager
    def during(self) -> Iterator[None]:
        self.down = True
        try:
            yield
        finally:
            self.down = False


def _pipeline(tmp_path: Path) -> tuple[Pipeline, CommitLog, list[Record]]:
    # Offsets 0-1 fine, 2 the first refusal (buffered: the debounce wants 3), 3-5 fine,
    # then two more refusals (6, 7) that make the evidence ripe.
    lines = [good_sample("rover-b", 0), good_sample("rover-b", 1), refused_sample("rover-a", 2),
             good_sample("rover-b", 3), good_sample("rover-b", 4), good_sample("rover-b", 5),
             refused_sample("rover-a", 6), refused_sample("rover-a", 7)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    source = CommitLog(str(path))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600.0})
    d = build_service(cfg, publisher=MemoryPublisher(), source=source).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    records = d.source.poll(1.0)
    assert [r.offset for r in records] == list(range(8))
    return d, source, records


def _revoke(d: Pipeline, partitions: set[int]) -> None:
    """The revoke as confluent-kafka's source and the consumer process call it: an error
    is logged and the rebalance goes on (kafka-python does the same once the member is
    out of the group); either way the partitions are gone."""
    with contextlib.suppress(StoreError):
        d.revoke(partitions)


def _passed(commits: list[dict[int, int]], offset: int) -> list[dict[int, int]]:
    return [c for c in commits if c.get(0, 0) > offset]


@pytest.mark.parametrize("fail_from", ["save_activity", "save_offsets"])
def test_a_revoke_whose_checkpoint_fails_gives_the_partition_up_without_a_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_from: str) -> None:
    d, source, records = _pipeline(tmp_path)
    outage = Outage(d.store, monkeypatch, fail_from)
    d.handle(records[0])
    d.checkpoint()
    assert source.commits == [{0: 1}]
    for r in records[1:6]:
        d.handle(r)
    watch = d.registry.get("rover-a")
    assert watch is not None
    key = watch.work_key()
    with outage.during():
        _revoke(d, {0})
    # The revoke's checkpoint (rover-b's activity, then the offset 2 that rover-a's
    # buffered refusal holds) is what failed.
    assert outage.failed and outage.failed[0] == fail_from
    assert source.commits == [{0: 1}]
    # Given up: nothing of the partition is left to queue or commit later.
    assert d.registry.get("rover-a") is None and d.registry.get("rover-b") is None
    d.sweep(force=True)
    d.checkpoint()
    assert d.store.queue_items() == []
    assert _passed(source.commits, 2) == [], source.commits

    # The next owner (here this replica, given the partition back) replays from the
    # commit: the evidence comes back under its key, and only its queuing lets the
    # commit move.
    d.assign({0})
    for r in records[2:]:
        d.handle(r)
    (item,) = d.store.queue_items()
    assert item.key == key
    assert [t["step"] for t in item.payload["inconsistent"]] == [2, 6, 7]
    d.checkpoint()
    assert source.commits[-1] == {0: 8}
    d.source.close()
    d.store.close()


def test_evidence_buffered_through_a_failed_revoke_is_never_committed_past(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store fails as the evidence is queued, stays down through the revoke and comes
    back: at no point does a commit pass the first buffered refusal, and the store holds
    no work and no alert the replay would not write again under the same key."""
    d, source, records = _pipeline(tmp_path)
    outage = Outage(d.store, monkeypatch, WRITES[0])
    for r in records[:6]:
        d.handle(r)
    with outage.during():
        for r in records[6:]:
            d.handle(r)  # ripe: queuing fails, the evidence stays buffered
        watch = d.registry.get("rover-a")
        assert watch is not None and len(watch.evidence) == 3
        key = watch.work_key()
        with pytest.raises(StoreError):
            d.checkpoint()
        _revoke(d, {0})
    d.sweep(force=True)
    d.checkpoint()
    assert _passed(source.commits, 2) == [], source.commits
    assert d.store.queue_items() == []
    d.assign({0})
    for r in records[2:]:
        d.handle(r)
    d.alert_promptly()
    (item,) = d.store.queue_items()
    assert item.key == key
    assert {a.key for a in d.store.outbox()} <= {f"queued:{key}"}
    d.checkpoint()
    assert source.commits[-1] == {0: 8}
    d.source.close()
    d.store.close()


class DroppedMember(CommitLog):
    """A source whose group went on without it: every commit says so, as a Kafka source's
    does once its member was dropped, until it is given the partitions again."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.dropped = False

    def commit(self, offsets: Mapping[int, int]) -> None:
        if self.dropped:
            raise AssignmentLost({0, *offsets}, "CommitFailedError: not part of a group")
        super().commit(offsets)


def test_a_commit_that_finds_the_member_dropped_gives_its_partitions_up_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Told by a commit that the group went on without it, the replica gives the
    partitions up at once without a commit (not an outage retried while it handles
    their records), and replays them from the commit when they come back."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(
        [good_sample("rover-b", 0), good_sample("rover-b", 1), refused_sample("rover-a", 2),
         good_sample("rover-b", 3), good_sample("rover-b", 4), good_sample("rover-b", 5),
         refused_sample("rover-a", 6), refused_sample("rover-a", 7)]) + "\n")
    source = DroppedMember(str(path))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600.0})
    d = build_service(cfg, publisher=MemoryPublisher(), source=source).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    d.assign({0})
    records = d.source.poll(1.0)
    d.handle(records[0])
    d.checkpoint()
    assert source.commits == [{0: 1}]
    for r in records[1:6]:
        d.handle(r)
    d._backlog = records[6:]  # handed out, not handled yet
    source.dropped = True
    d.checkpoint()  # neither raises (an outage) nor commits
    assert source.commits == [{0: 1}]
    assert d._outage is None
    assert 0 not in d.assigned and d._backlog == []
    assert d.registry.get("rover-a") is None and d.registry.get("rover-b") is None
    d.sweep(force=True)
    d.checkpoint()
    assert d.store.queue_items() == [] and source.commits == [{0: 1}]
    # Given back, the partition is replayed from the commit: the buffered refusal is
    # found again and queued under the key it had.
    source.dropped = False
    d.assign({0})
    for r in records[1:]:
        d.handle(r)
    (item,) = d.store.queue_items()
    assert [t["step"] for t in item.payload["inconsistent"]] == [2, 6, 7]
    d.checkpoint()
    assert source.commits[-1] == {0: 8}
    d.source.close()
    d.store.close()
