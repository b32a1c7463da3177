"""An agent whose assessment is still queued when the replica restarts (or its partition
moves, or it is reloaded) starts out awaiting that work: evidence of the kinds the work
assesses, replayed or new, is still what that work is about, so it is neither buffered
again nor alerted a second time, and the work ending unexplained still backs it off.
Through the pipeline and the store; no servers."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.store import PendingAssessment
from capwatch.daemon.alerting import queued_alert_key
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.registry import Registry, seed_baselines
from capwatch.daemon.service import build_service
from capwatch.models_store import open_store
from tests.daemon.helpers import config, example, refused_sample, run_queued
from tests.daemon.test_prompt_alert_awaiting import DriftedRover, refused_navigate


def _start(tmp_path: Path, path: Path) -> Pipeline:
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 50, "debounce_s": 3600.0})
    d = build_service(cfg, publisher=MemoryPublisher(), agents=DriftedRover(),
                      source=JsonlSource(str(path))).pipeline
    d.open()
    return d


@contextlib.contextmanager
def _replicas(tmp_path: Path, path: Path) -> Iterator[tuple[Pipeline, Pipeline]]:
    """Two replicas of :func:`_start` sharing one store, both reading ``path``."""
    first = _start(tmp_path, path)
    second = _start(tmp_path, path)
    try:
        yield first, second
    finally:
        for d in (first, second):
            d.source.close()
            d.store.close()


def test_the_awaited_works_kinds_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in [
        refused_sample(step=0), refused_sample(step=1), refused_navigate(step=2)]))
    d = _start(tmp_path, path)
    try:
        d.handle_batch(d.source.poll(1.0)[:1])
        d.sweep(force=True)
        watch = d.registry.get("rover-a")
        assert watch is not None and watch.awaiting is not None
        first = watch.awaiting
        assert d.checkpoints.checkpoint()
    finally:
        d.source.close()
        d.store.close()

    d = _start(tmp_path, path)  # the replica restarts; its work is still queued
    try:
        records = d.source.poll(1.0)
        assert [r.offset for r in records] == [1, 2]
        d.handle_batch(records)
        watch = d.registry.get("rover-a")
        assert watch is not None and watch.awaiting == first
        # The refused sample is what the queued work assesses; only the navigate is new.
        assert [e.offset for e in watch.evidence] == [2]
        assert {r.key for r in d.store.outbox()} == {queued_alert_key(first),
                                                    queued_alert_key(watch.work_key())}
        assert d.checkpoints.commit_offsets() == {0: 2}
        # The work ends unexplained: the refused sample's kind is backed off again.
        (claimed,) = d.store.claim("other/w0", d.clock(), 60.0, 1)
        assert claimed.key == first
        d.store.complete(first, "other/w0")
        d.poll_results()
        assert watch.awaiting is None
        assert any(k.startswith("sample_rock") for k in watch.backoff), watch.backoff
    finally:
        d.source.close()
        d.store.close()


def test_a_dropped_watch_awaits_the_same_kinds_when_loaded_again(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        seed_baselines(store, {"rover-v1": example("rover.pddl")}, datetime.now(UTC))
        registry = Registry(store)
        registry.park("parked", "k1", ("sample_rock:x",))
        w = registry.load("parked", "rover-v1", 0)
        assert w is not None and w.awaiting == "k1" and w.queued_kinds == {"sample_rock:x"}
        registry.drop(["parked"])  # its partition moves away, and back
        w = registry.load("parked", "rover-v1", 0)
        assert w is not None and w.awaiting == "k1" and w.queued_kinds == {"sample_rock:x"}
        registry.drop(["parked"])
        registry.unpark("parked")
        w = registry.load("parked", "rover-v1", 0)
        assert w is not None and w.awaiting is None and w.queued_kinds == frozenset()
    finally:
        store.close()


def test_evidence_kept_across_a_version_keeps_its_alert_across_a_restart(
        tmp_path: Path) -> None:
    """A new fault seen while an assessment ran, still unexplained by the version it
    installed, is kept under the key its alert went out under (naming the version in
    use then). A restart before it is queued replays it from the commit it held, under
    the new version: the same key again, so no second alert and none left open."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in [
        refused_sample(step=0), refused_navigate(step=1)]))
    d = _start(tmp_path, path)
    try:
        records = d.source.poll(1.0)
        d.handle_batch(records[:1])
        d.sweep(force=True)
        d.handle_batch(records[1:])
        watch = d.registry.get("rover-a")
        assert watch is not None
        kept = watch.work_key()
        assert run_queued(d) == 1
        assert watch.version.ref.agent_id == "rover-a" and watch.work_key() == kept
        d.checkpoints.checkpoint()
        assert d.checkpoints.commit_offsets() == {0: 1}
        before = {r.key for r in d.store.outbox()}
    finally:
        d.source.close()
        d.store.close()

    d = _start(tmp_path, path)
    try:
        records = d.source.poll(1.0)
        assert [r.offset for r in records] == [1]
        d.handle_batch(records)
        watch = d.registry.get("rover-a")
        assert watch is not None and [e.offset for e in watch.evidence] == [1]
        assert watch.work_key() == kept
        assert {r.key for r in d.store.outbox()} == before
        d.sweep(force=True)
        (item,) = d.store.queue_items("pending")
        assert item.key == kept
        assert {r.key for r in d.store.outbox()} == before
    finally:
        d.source.close()
        d.store.close()


def test_a_partition_that_moves_here_brings_the_work_its_last_owner_queued(
        tmp_path: Path) -> None:
    """Two replicas share the store. The partition's owner queues an assessment, commits
    past its evidence and dies; the other, running all along, gets the partition and
    reads on from the commit, where the same fault shows again: it awaits the queued work
    instead of queuing (and alerting) it a second time, and adopts what that work ends
    with."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in [
        refused_sample(step=0), refused_sample(step=1)]))
    with _replicas(tmp_path, path) as (survivor, owner):
        survivor.revoke({0})  # the group gives partition 0 to the owner
        owner.handle_batch(owner.source.poll(1.0)[:1])
        owner.sweep(force=True)
        (queued,) = owner.store.queue_items("pending")
        assert owner.checkpoints.checkpoint()
        assert owner.checkpoints.commit_offsets() == {0: 1}
        alerts = {r.key for r in owner.store.outbox()}
        # The owner dies here; the partition comes back, read on from the commit.
        survivor.assign({0})
        survivor.handle_batch(survivor.source.poll(1.0)[1:])
        survivor.sweep(force=True)
        watch = survivor.registry.get("rover-a")
        assert watch is not None and watch.awaiting == queued.key
        assert [i.key for i in survivor.store.queue_items("pending")] == [queued.key]
        assert {r.key for r in survivor.store.outbox()} == alerts
        assert survivor.awaiting() == {"rover-a": queued.key}
        assert run_queued(survivor) == 1
        assert watch.awaiting is None and watch.version.ref.agent_id == "rover-a"


def test_a_hint_of_another_replicas_work_is_released_when_that_work_ends(
        tmp_path: Path) -> None:
    """Work queued for an agent this replica never sees parks it as a hint at an
    assignment; once the work leaves the queue the hint goes, so the replica does not
    report the agent as awaiting an assessment forever."""
    path = tmp_path / "in.jsonl"
    path.write_text(refused_sample(step=0) + "\n")
    with _replicas(tmp_path, path) as (bystander, owner):
        owner.handle_batch(owner.source.poll(1.0))
        owner.sweep(force=True)
        (queued,) = owner.store.queue_items("pending")
        bystander.assign({1})
        assert bystander.awaiting() == {"rover-a": queued.key}
        assert run_queued(owner) == 1
        bystander.poll_results()
        assert bystander.awaiting() == {}


def test_an_agent_whose_partition_moved_away_is_released_when_another_replica_ends_its_work(
        tmp_path: Path) -> None:
    """The owner queues an assessment and loses the partition in a rebalance before it
    ends; another replica's worker runs it. The former owner must not report the agent
    as awaiting an assessment forever (found by the failover review: a survivor's
    capwatch_agents_awaiting_assessment stayed at 1 after every item was done, so it never
    settled and a run with --exit-when-idle never ended)."""
    path = tmp_path / "in.jsonl"
    path.write_text(refused_sample(step=0) + "\n")
    with _replicas(tmp_path, path) as (owner, other):
        owner.handle_batch(owner.source.poll(1.0))
        owner.sweep(force=True)
        (queued,) = owner.store.queue_items("pending")
        assert owner.awaiting() == {"rover-a": queued.key}
        owner.revoke({0})  # the rebalance moves partition 0 away
        assert run_queued(other) == 1
        owner.poll_results()
        assert owner.awaiting() == {}


def test_a_partition_that_moves_here_during_a_store_outage_still_awaits_the_queued_work(
        tmp_path: Path) -> None:
    """As above, but the store does not answer when the partition arrives (oper21: a
    replica SIGKILLed while PostgreSQL was down; its partitions' new owner could not read
    the queue at the assignment, queued the replayed evidence a second time, and two
    replicas assessed one agent at once: the second's version was refused by the store's
    conflict check and its worker logged 'assessment crashed'). The queue is read again
    before the next record is handled, once the store answers."""
    import sqlite3

    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in [
        refused_sample(step=0), refused_sample(step=1)]))
    with _replicas(tmp_path, path) as (survivor, owner):
        survivor.revoke({0})
        owner.handle_batch(owner.source.poll(1.0)[:1])
        owner.sweep(force=True)
        (queued,) = owner.store.queue_items("pending")
        assert owner.checkpoints.checkpoint()
        read = survivor.store.live_queue_items

        def down() -> list[PendingAssessment]:
            raise sqlite3.OperationalError("unable to open database file")

        survivor.store.live_queue_items = down  # type: ignore[method-assign]
        survivor.assign({0})  # the store is down: the queue is not read here
        survivor.store.live_queue_items = read  # type: ignore[method-assign]
        survivor.handle_batch(survivor.source.poll(1.0)[1:])
        survivor.sweep(force=True)
        watch = survivor.registry.get("rover-a")
        assert watch is not None and watch.awaiting == queued.key
        assert [i.key for i in survivor.store.queue_items("pending")] == [queued.key]
