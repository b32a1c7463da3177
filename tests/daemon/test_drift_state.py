"""Drift tables survive a restart and a partition move (simulated fleet, SQLite store)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.store import StoreError
from capwatch.daemon.checkpoint import PendingCommit
from capwatch.daemon.service import build_service
from capwatch.models_store import open_store
from capwatch.models_store.lineage import record_new_model
from capwatch.monitor.snapshot import snapshot_agent
from tests.daemon.helpers import EXAMPLES, example, run, simulated

AGENT = "courier-v1-002"
T0 = datetime(2026, 11, 25, tzinfo=UTC)


def _fleet(tmp_path: Path, rounds: int) -> Any:
    drifts = [{"agent_id": AGENT, "at_step": 20,
               "domain": str(EXAMPLES / "courier-pick-wear.pddl")}]
    return simulated(tmp_path, agents=3, rounds=rounds, drifts=drifts,
                     scheduler={"checkpoint_s": 3600.0})


def _alarm(tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """(offset of the record that raised the drift alarm, the alarm's evidence)."""
    store = open_store(f"sqlite:///{tmp_path / 'models.db'}")
    try:
        (item,) = [i for i in store.queue_items() if i.agent_id == AGENT]
        return int(item.key.rsplit("#", 1)[1]), item.payload["drift"]["pick"]
    finally:
        store.close()


def test_a_drift_under_way_at_a_restart_alarms_as_if_there_was_none(tmp_path: Path) -> None:
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    _, ref_out = run(_fleet(reference_dir, 300))
    ref_offset, ref_evidence = _alarm(reference_dir)
    assert [m.agent_id for m in ref_out.models] == [AGENT]
    assert ref_offset > 120 * 6, "the alarm must come after the restart below"

    # First run: the drift is under way but has not alarmed yet when the daemon stops.
    _, out1 = run(_fleet(tmp_path, 120))
    assert out1.models == [] and out1.alerts == []
    store = open_store(f"sqlite:///{tmp_path / 'models.db'}")
    try:
        (snap,) = [s for s in store.load_drift_snapshots("capwatch", "simulated")
                   if s.agent_id == AGENT]
        assert snap.next_offset == 720 and snap.model.agent_id is None
        seen = snap.state["actions"]["pick"]["seen"]
        assert seen > 0
        # A crash after the drift state was saved but before the offsets were: the
        # restarted daemon replays from an earlier commit and must not count twice.
        store.save_offsets("capwatch", {("simulated", 0): 400}, T0)
    finally:
        store.close()

    second, out2 = run(_fleet(tmp_path, 300))
    assert second.pipeline.processed == 300 * 6 - 400
    offset, evidence = _alarm(tmp_path)
    assert offset == ref_offset
    assert evidence == ref_evidence
    # One version and one alert over both runs, as without the restart.
    assert [m.agent_id for m in out1.models + out2.models] == [AGENT]
    assert [a.agent_id for a in out1.alerts + out2.alerts] == [AGENT]


def test_without_saved_state_the_alarm_comes_later(tmp_path: Path) -> None:
    """The control for the test above: the same restart with the drift state lost."""
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    run(_fleet(reference_dir, 300))
    ref_offset, _ = _alarm(reference_dir)
    run(_fleet(tmp_path, 120))
    store = open_store(f"sqlite:///{tmp_path / 'models.db'}")
    try:
        with store._tx() as tx:  # type: ignore[attr-defined]
            tx.run("DELETE FROM drift_state")
    finally:
        store.close()
    run(_fleet(tmp_path, 600))
    offset, _ = _alarm(tmp_path)
    # The tables refill only from the records after the commit (720 onwards).
    assert offset > ref_offset


def test_revocation_saves_and_assignment_restores_the_tables(tmp_path: Path) -> None:
    cfg = _fleet(tmp_path, 100)
    d = build_service(cfg, publisher=MemoryPublisher()).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    records = d.source.poll(1.0) + d.source.poll(1.0) + d.source.poll(1.0)
    for r in records[:500]:
        d.handle(r)
    before = snapshot_agent(d.drift, AGENT)
    assert before["actions"]["pick"]["seen"] > 0
    d.revoke({0})  # the partition moves away: state saved, agents dropped
    assert d.registry.get(AGENT) is None and d.drift.agent_states(AGENT) == {}
    d.assign({0})  # ... and comes back (or arrives at another replica)
    # Nothing is read into memory before the agent's first record (its batch reads it).
    assert d.checkpoints.saved_drift == {}
    assert AGENT in {s.agent_id for s in d.store.load_drift_snapshots("capwatch", "simulated")}
    for r in records[:500]:  # replayed records, already counted in the saved tables
        d.handle(r)
    assert snapshot_agent(d.drift, AGENT) == before
    agent = d.registry.get(AGENT)
    assert agent is not None and agent.drift_restored == (0, 500)
    for r in records[500:]:
        d.handle(r)
    assert snapshot_agent(d.drift, AGENT)["actions"]["pick"]["seen"] \
        >= before["actions"]["pick"]["seen"]
    d.source.close()
    d.store.close()


def test_tables_counted_on_a_topic_created_again_skip_none_of_its_records(
        tmp_path: Path) -> None:
    """The partition moves away, the topic is deleted and created again under its name
    (another Kafka topic id, offsets from 0 again) and the partition comes back: the
    agent's tables are restored, but the new topic's records at offsets below the old
    snapshot's position are counted, not taken for replays (before session 22 none of
    the first 500 was counted, and the snapshots of the new topic were refused by the
    store until its offsets passed 500)."""
    cfg = _fleet(tmp_path, 100)
    d = build_service(cfg, publisher=MemoryPublisher()).pipeline
    topic_id = ["id-1"]
    d.source.topic_id = lambda: topic_id[0]  # type: ignore[attr-defined]
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    records = d.source.poll(1.0) + d.source.poll(1.0) + d.source.poll(1.0)
    for r in records[:500]:
        d.handle(r)
    before = snapshot_agent(d.drift, AGENT)["actions"]["pick"]["seen"]
    assert before > 0
    d.revoke({0})
    topic_id[0] = "id-2"  # created again: the same records stand in for its new ones
    d.assign({0})
    for r in records[:500]:
        d.handle(r)
    agent = d.registry.get(AGENT)
    assert agent is not None and agent.drift_restored is None
    assert snapshot_agent(d.drift, AGENT)["actions"]["pick"]["seen"] == 2 * before
    d.revoke({0})
    (saved,) = [s for s in d.store.load_drift_snapshots("capwatch", "simulated")
                if s.agent_id == AGENT]
    assert (saved.next_offset, saved.topic_id) == (500, "id-2")
    assert saved.state["actions"]["pick"]["seen"] == 2 * before
    d.source.close()
    d.store.close()


def test_state_saved_for_an_older_model_version_is_not_restored(tmp_path: Path) -> None:
    run(_fleet(tmp_path, 120))
    store = open_store(f"sqlite:///{tmp_path / 'models.db'}")
    try:
        (snap,) = [s for s in store.load_drift_snapshots("capwatch", "simulated")
                   if s.agent_id == AGENT]
    finally:
        store.close()
    d = build_service(_fleet(tmp_path, 200), publisher=MemoryPublisher()).pipeline
    d.seed_families()
    # The agent got a version of its own meanwhile (e.g. from another replica's worker).
    v = record_new_model(d.store, "courier-v1", AGENT, example("courier-pick-wear.pddl"),
                         datetime.now(UTC))
    d.source.start(d.assign, d.revoke, {0: snap.next_offset})
    first = next(r for r in d.source.poll(1.0) if r.key == AGENT.encode())
    d.handle(first)
    agent = d.registry.get(AGENT)
    assert agent is not None and agent.version.ref == v.ref
    assert agent.drift_restored is None
    assert AGENT not in d.checkpoints.saved_drift
    d.source.close()
    d.store.close()


def test_agents_evicted_between_batches_alarm_as_if_they_stayed(tmp_path: Path) -> None:
    """With room for one agent, every idle agent is written to the store after each
    polled batch and read back at its next record: the drift alarm comes at the same
    record with the same evidence, and the same model is published."""
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    _, ref_out = run(_fleet(reference_dir, 300))
    ref_offset, ref_evidence = _alarm(reference_dir)

    cfg = _fleet(tmp_path, 300).model_copy(deep=True)
    cfg.limits.max_agents_in_memory = 1
    service, out = run(cfg)
    metrics = service.pipeline.metrics
    assert metrics.evictions._value.get() > 40  # six agents, once per polled batch
    assert metrics.restores._value.get() > 40
    assert _alarm(tmp_path) == (ref_offset, ref_evidence)
    assert [(m.agent_id, m.version, m.changes) for m in out.models] == \
        [(m.agent_id, m.version, m.changes) for m in ref_out.models]


def _revoked_and_back(tmp_path: Path) -> tuple[Any, list[Any], dict[str, Any]]:
    d = build_service(_fleet(tmp_path, 100), publisher=MemoryPublisher()).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    records = d.source.poll(1.0) + d.source.poll(1.0) + d.source.poll(1.0)
    d.handle_batch(records[:500])
    before = snapshot_agent(d.drift, AGENT)
    assert before["actions"]["pick"]["seen"] > 0
    d.revoke({0})
    d.assign({0})
    return d, records, before


def test_a_batch_reads_its_new_agents_saved_tables_in_one_query(tmp_path: Path) -> None:
    d, records, before = _revoked_and_back(tmp_path)
    reads: list[list[str] | None] = []
    load = d.store.load_drift_snapshots

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(sorted(args[3]) if len(args) > 3 else None)
        return load(*args, **kwargs)

    d.store.load_drift_snapshots = counted
    d.handle_batch(records[:500])  # replayed: already counted in the saved tables
    assert len(reads) == 1 and len(reads[0] or ()) == 6  # the six agents, together
    assert snapshot_agent(d.drift, AGENT) == before
    assert d.checkpoints.saved_drift == {}  # nothing kept past the batch
    d.source.close()
    d.store.close()


def test_a_record_without_a_key_still_gets_its_agents_saved_tables(tmp_path: Path) -> None:
    import msgspec

    d, records, before = _revoked_and_back(tmp_path)
    for r in records[:500]:  # as from a JSONL file: no key names the agent
        d.handle(msgspec.structs.replace(r, key=None))
    assert snapshot_agent(d.drift, AGENT) == before
    agent = d.registry.get(AGENT)
    assert agent is not None and agent.drift_restored == (0, 500)
    d.source.close()
    d.store.close()


def test_eviction_writes_only_the_tables_changed_since_they_were_saved(tmp_path: Path) -> None:
    """Tables a checkpoint saved and that did not change since are in the store already:
    eviction writes the others only, and every agent evicted comes back with exactly the
    tables it had, counting on as an agent never evicted does."""
    def started(path: Path) -> Any:
        path.mkdir()
        d = build_service(_fleet(path, 100), publisher=MemoryPublisher()).pipeline
        d.seed_families()
        d.source.start(d.assign, d.revoke, {})
        return d

    d, ref = started(tmp_path / "evicted"), started(tmp_path / "reference")
    records = d.source.poll(1.0) + d.source.poll(1.0) + d.source.poll(1.0)
    d.handle_batch(records[:400])
    ref.handle_batch(records[:400])
    d.checkpoints.checkpoint()  # every agent's tables saved
    # A few records more: some agents' tables change since, the others' do not.
    d.handle_batch(records[400:410])
    ref.handle_batch(records[400:410])
    agents = sorted(w.agent_id for w in d.registry if d.drift.has(w.agent_id))
    changed = {a for a in agents if d.drift.changed(a)}
    assert changed and changed != set(agents)
    written: list[str] = []
    save = d.store.save_drift_snapshots

    def counted(group: str, snaps: Any) -> Any:
        written.extend(s.agent_id for s in snaps)
        return save(group, snaps)

    d.store.save_drift_snapshots = counted
    d.checkpoints.evict(0)
    assert len(d.registry) == 0
    assert sorted(written) == sorted(changed)
    d.handle_batch(records[410:])
    ref.handle_batch(records[410:])
    for a in agents:
        assert snapshot_agent(d.drift, a) == snapshot_agent(ref.drift, a)
    for p in (d, ref):
        p.source.close()
        p.store.close()


HANG_S = 60.0
"""A hang guard for waits on the checkpoint's thread, not a speed target."""


def _started(path: Path) -> Any:
    path.mkdir()
    d = build_service(_fleet(path, 100), publisher=MemoryPublisher()).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    return d


def test_an_agent_evicted_while_its_tables_are_written_comes_back_exact(
        tmp_path: Path) -> None:
    """The scheduled checkpoint writes the snapshots in a thread of its own; eviction
    takes the tables it took as saved. Evicted while that write is in flight, an agent
    must not go (nor be read back) before its tables are in the store."""
    d, ref = _started(tmp_path / "evicted"), _started(tmp_path / "reference")
    records = d.source.poll(1.0) + d.source.poll(1.0) + d.source.poll(1.0)
    d.handle_batch(records[:400])
    ref.handle_batch(records[:400])
    agents = sorted(w.agent_id for w in d.registry if d.drift.has(w.agent_id))
    assert agents
    gate, writing = threading.Event(), threading.Event()
    held_when_written: list[int] = []
    save = d.store.save_drift_snapshots

    def gated(group: str, snaps: Any) -> Any:
        if not writing.is_set():  # the checkpoint's write: held until the gate opens
            writing.set()
            assert gate.wait(HANG_S), "the test never opened the gate"
            held_when_written.append(len(d.registry))
        return save(group, snaps)

    d.store.save_drift_snapshots = gated
    d.checkpoint(background=True)
    assert writing.wait(HANG_S)  # in flight; every agent's tables taken as saved
    assert not any(d.drift.changed(a) for a in agents)
    held = len(d.registry)
    evicting = threading.Thread(target=d.checkpoints.evict, args=(0,))
    evicting.start()
    # Gives a wrong eviction time to drop the agents under the write (it does not wait
    # for anything): how long the test looks, not a condition it waits for.
    evicting.join(0.5)
    gate.set()
    evicting.join(HANG_S)
    assert not evicting.is_alive()
    assert held_when_written == [held]  # nothing went while its tables were in flight
    assert len(d.registry) == 0
    d.handle_batch(records[400:])  # every agent read back from the store
    ref.handle_batch(records[400:])
    for a in agents:
        assert snapshot_agent(d.drift, a) == snapshot_agent(ref.drift, a)
    for p in (d, ref):
        p.source.close()
        p.store.close()


def test_a_background_snapshot_is_the_tables_at_its_checkpoint(tmp_path: Path) -> None:
    """The scheduled checkpoint takes the agents' tables as bytes on the main loop and
    encodes them in its writer's thread: what it writes is each agent's tables as they
    were at the checkpoint (at the position the snapshot names), though the main loop
    handled more of their records before the writer got to them."""
    d = _started(tmp_path / "daemon")
    records = d.source.poll(1.0) + d.source.poll(1.0) + d.source.poll(1.0)
    d.handle_batch(records[:400])
    agents = sorted(w.agent_id for w in d.registry if d.drift.has(w.agent_id))
    assert agents
    at_checkpoint = {a: snapshot_agent(d.drift, a, d.registry.get(a).version.ref.to_json())
                     for a in agents}
    gate = threading.Event()
    # A job ahead of the checkpoint's in the writer's queue holds it until the gate opens.
    d.checkpoints._writer.submit(PendingCommit(
        {}, d.publisher, lambda: None if gate.wait(HANG_S) else pytest.fail("no gate")))
    d.checkpoint(background=True)
    pending = d.checkpoints._pending
    assert pending is not None and not pending.written.is_set()
    d.handle_batch(records[400:800])  # the same agents go on meanwhile
    assert any(snapshot_agent(d.drift, a, at_checkpoint[a]["model"]) != at_checkpoint[a]
               for a in agents)
    gate.set()
    assert pending.done.wait(HANG_S) and pending.error is None
    saved = {s.agent_id: s for s in d.store.load_drift_snapshots("capwatch", "simulated")}
    assert sorted(saved) == agents
    for a in agents:
        assert saved[a].state == at_checkpoint[a]
        assert saved[a].next_offset == 400
    d.source.close()
    d.store.close()


def test_a_failed_background_write_is_made_by_the_eviction_after_it(tmp_path: Path) -> None:
    """The checkpoint's write fails in its thread: the agents' tables and activity count as
    unsaved again, so an eviction writes them itself; nothing is committed, and the error
    reaches the main loop."""
    d, ref = _started(tmp_path / "evicted"), _started(tmp_path / "reference")
    records = d.source.poll(1.0) + d.source.poll(1.0) + d.source.poll(1.0)
    d.handle_batch(records[:400])
    ref.handle_batch(records[:400])
    agents = sorted(w.agent_id for w in d.registry if d.drift.has(w.agent_id))
    transitions = sum(w.transitions for w in d.registry)
    save = d.store.save_drift_snapshots
    failed: list[int] = []

    def failing(group: str, snaps: Any) -> Any:
        if not failed:
            failed.append(len(snaps))
            raise StoreError("the store is down")
        return save(group, snaps)

    d.store.save_drift_snapshots = failing
    d.checkpoint(background=True)
    pending = d.checkpoints._pending
    assert pending is not None and pending.done.wait(HANG_S)
    assert failed == [len(agents)]
    d.checkpoints.evict(0)
    assert len(d.registry) == 0
    with pytest.raises(StoreError):
        d.commit_flushed()  # the main loop's next turn
    assert d.store.load_offsets("capwatch") == {}
    assert sum(a.transitions for a in d.store.activity()) == transitions
    d.handle_batch(records[400:])
    ref.handle_batch(records[400:])
    for a in agents:
        assert snapshot_agent(d.drift, a) == snapshot_agent(ref.drift, a)
    for p in (d, ref):
        p.source.close()
        p.store.close()


def test_an_eviction_does_not_wait_for_the_flush_of_a_checkpoint_that_writes_nothing(
        tmp_path: Path) -> None:
    """A scheduled checkpoint with only offsets to commit (no table or activity changed
    since the last: dead letters, say) has no store write; an eviction waits for a
    checkpoint's write, never for its flush, which waits on the broker and is what the
    thread is for."""
    d = _started(tmp_path / "d")
    records = d.source.poll(1.0)
    d.handle_batch(records)
    d.checkpoint()  # every table and count saved, every offset committed
    (partition, nxt), *_ = d.checkpoints._next.items()
    d.checkpoints.handled(partition, nxt)  # a record that changed no agent's state
    gate, flushing = threading.Event(), threading.Event()
    flush = d.publisher.flush

    def gated(timeout_s: float = 10.0) -> None:
        flushing.set()
        assert gate.wait(HANG_S), "the test never opened the gate"
        flush(timeout_s)

    d.publisher.flush = gated
    d.checkpoint(background=True)
    pending = d.checkpoints._pending
    assert pending is not None and pending.write is None
    assert flushing.wait(HANG_S)  # the broker has not answered the flush
    evicting = threading.Thread(target=d.checkpoints.evict, args=(0,))
    evicting.start()
    evicting.join(HANG_S)
    waited = evicting.is_alive()
    gate.set()
    evicting.join(HANG_S)
    assert not waited, "the eviction waited for the checkpoint's flush"
    assert len(d.registry) == 0
    assert pending.done.wait(HANG_S)
    d.commit_flushed()
    assert d.store.load_offsets("capwatch")[(d.source.name, partition)] == nxt + 1
    d.source.close()
    d.store.close()


def test_a_revoke_after_a_failed_background_write_saves_and_commits_its_partitions(
        tmp_path: Path) -> None:
    """The checkpoint's write failed in its thread and the store is back before the main
    loop saw it: a revoke (or the shutdown) coming first does the work itself, the
    tables put back by the failure written and the partitions' offsets committed, rather
    than failing on the earlier error and leaving the next owner a longer replay."""
    d = _started(tmp_path / "d")
    records = d.source.poll(1.0) + d.source.poll(1.0)
    d.handle_batch(records)
    agents = sorted(w.agent_id for w in d.registry if d.drift.has(w.agent_id))
    assert agents
    save = d.store.save_drift_snapshots
    failed: list[int] = []

    def failing(group: str, snaps: Any) -> Any:
        if not failed:
            failed.append(len(snaps))
            raise StoreError("the store is down")
        return save(group, snaps)

    d.store.save_drift_snapshots = failing
    d.checkpoint(background=True)
    pending = d.checkpoints._pending
    assert pending is not None and pending.done.wait(HANG_S)
    assert failed == [len(agents)]
    partitions = set(d.checkpoints._next)
    expected = dict(d.checkpoints.commit_offsets())
    d.revoke(partitions)
    assert len(d.registry) == 0
    assert {p: o for (_, p), o in d.store.load_offsets("capwatch").items()} == expected
    saved = {s.agent_id for s in d.store.load_drift_snapshots("capwatch", d.source.name)}
    assert set(agents) <= saved
    d.source.close()
    d.store.close()
