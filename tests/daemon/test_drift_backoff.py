"""A drift alarm an assessment did not confirm (it ended with no change, or failed) is not
queued again, by the stream's detector or the fleet audit, while its back-off lasts
(``detection.unexplained_backoff_s``, doubling up to ``unexplained_max_backoff_s``) and the
action's counts are not told apart from the ones that assessment was handed; counts that
differ, a new model version, or the back-off's end let the next alarm through."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.versions import ModelRef, build_version
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.agent_watch import AgentWatch, WatchSettings, drift_kind
from capwatch.daemon.checkpoint import backoff_state, restore_backoff
from capwatch.daemon.registry import Registry, seed_baselines
from capwatch.daemon.service import build_service
from capwatch.models_store import open_store
from capwatch.monitor.action_drift import ActionMonitor
from capwatch.monitor.drift import DriftEvidence, DriftMonitor
from tests.daemon.helpers import HALF, SAMPLE, example, one_agent_stream, simulated

SETTINGS = WatchSettings(unexplained_backoff_s=600.0, unexplained_max_backoff_s=1800.0)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _watch(clock: Clock, agent: str = "courier-v1-000") -> AgentWatch:
    domain = example("courier.pddl")
    version = build_version(ModelRef("courier-v1", None, 1), domain,
                            datetime(2026, 1, 1, tzinfo=UTC))
    return AgentWatch(agent, "courier-v1", 0, version, DriftMonitor(), SETTINGS, clock,
                      domain=domain)


def _evidence(w: AgentWatch, first: int, second: int) -> DriftEvidence:
    """The audit's evidence over a pick table that counted ``first`` executions of its
    first outcome and ``second`` of its second."""
    mon = ActionMonitor(w.domain.action("pick"))
    for outcome, n in ((0, first), (1, second)):
        for _ in range(n):
            mon.observe(outcome)
    return mon.evidence()


def _assessed_unconfirmed(w: AgentWatch) -> None:
    """Queue the watch's alarms and end the work with no change."""
    item = w.work_item()
    assert item.drift, "an alarm to assess"
    w.queued(item.key)
    w.settle(item.key)


def test_an_unconfirmed_audit_drift_is_held_until_its_back_off_passes_doubling() -> None:
    clock = Clock()
    w = _watch(clock)
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    # The next audits reject the same behaviour (new tables, like counts): held back.
    clock.now = 10.0
    assert w.add_audit_alarm(_evidence(w, 310, 190), "pick") is None
    assert not w.buffered and w.held_back == 1
    clock.now = 599.0
    assert w.add_audit_alarm(_evidence(w, 290, 210), "pick") is None
    # Past the back-off: assessed again; unconfirmed again, it waits twice as long.
    clock.now = 600.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    clock.now = 600.0 + 1199.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is None
    clock.now = 600.0 + 1200.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    # Bounded by unexplained_max_backoff_s (1800 s here, not 2400).
    clock.now = 1800.0 + 1800.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None


def test_a_real_drift_after_an_unconfirmed_one_is_assessed_at_once() -> None:
    clock = Clock()
    w = _watch(clock)
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    clock.now = 30.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is None
    # The action now behaves otherwise again: another drift, not the one assessed.
    alarm = w.add_audit_alarm(_evidence(w, 60, 440), "pick")
    assert alarm is not None and w.ripe()
    item = w.work_item()
    assert item.drift["pick"]["counts"] == [60, 440]
    # Unconfirmed too, it is backed off afresh (600 s, not doubled) against its own counts.
    w.queued(item.key)
    w.settle(item.key)
    clock.now = 30.0 + 599.0
    assert w.add_audit_alarm(_evidence(w, 62, 438), "pick") is None
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None


def test_a_new_model_version_ends_the_back_off() -> None:
    clock = Clock()
    w = _watch(clock)
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    w.install(w.version, w.domain)
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None


def test_only_the_assessed_actions_drift_is_held() -> None:
    clock = Clock()
    w = _watch(clock)
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    # A work of the same agent about something else, ended unconfirmed too, does not
    # back the pick drift off a second time.
    assert w.add_canary_finding(AgentTransition(
        w.agent_id, w.family, None, None, None, frozenset(), ("drop", "r1", "p1", "a"),
        frozenset(), False, True))
    key = w.work_item().key
    w.queued(key)
    w.settle(key)
    clock.now = 600.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None


def test_a_watch_evicted_and_read_back_keeps_holding_the_drift(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        seed_baselines(store, {"courier-v1": example("courier.pddl")}, datetime.now(UTC))
        registry = Registry(store)
        w = registry.load("courier-v1-000", "courier-v1", 0)
        assert w is not None
        assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
        _assessed_unconfirmed(w)
        registry.drop(["courier-v1-000"])
        back = registry.load("courier-v1-000", "courier-v1", 0)
        assert back is not None and back is not w
        assert back.add_audit_alarm(_evidence(back, 300, 200), "pick") is None
        # Compared with what was assessed, not merely held: other counts pass.
        assert back.add_audit_alarm(_evidence(back, 60, 440), "pick") is not None
    finally:
        store.close()


def _courier_stream(rounds: int) -> list[AgentTransition]:
    return one_agent_stream("courier", "courier-pick-wear.pddl", at_step=0, seed=3,
                            rounds=rounds)


def test_the_streams_alarm_over_an_unconfirmed_drift_is_held_too() -> None:
    clock = Clock()
    stream = _courier_stream(3000)
    w = _watch(clock, stream[0].agent_id)
    alarms = []
    for i, t in enumerate(stream):
        finding = w.observe(t)
        if finding.alarm is not None:
            alarms.append(i)
            _assessed_unconfirmed(w)
    # The worn gripper's first alarm is assessed; the same wear alarms no more within the
    # back-off (before it, each alarm's work ending freed the next).
    assert len(alarms) == 1, alarms
    assert w.held_back >= 1
    clock.now = 600.0
    again = [i for i, t in enumerate(stream) if w.observe(t).alarm is not None]
    assert again, "past the back-off, the same drift alarms again"


def test_an_unreachable_agent_does_not_double_the_back_off_of_a_drift_it_never_judged(
        ) -> None:
    # The agent's query endpoint was down for three assessments of a real drift: each
    # failed without an answer. Doubled per failure (as for 'no change'), the same drift
    # was held 2,400 s (here; up to unexplained_max_backoff_s, 6 h by default) after the
    # agent was back, although no answer had ever said the model was right.
    clock = Clock()
    w = _watch(clock)
    for start in (0.0, 600.0, 1200.0):
        clock.now = start
        assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
        item = w.work_item()
        w.queued(item.key)
        w.settle(item.key, learnt=False)
        clock.now = start + 599.0
        assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is None, "held the first wait"
    clock.now = 1800.0  # the agent is back: the drift is assessed after the first wait
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    # An answer that found no change counts as the first unexplained end: 600 s, then 1200.
    _assessed_unconfirmed(w)
    clock.now = 1800.0 + 600.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    clock.now = 2400.0 + 1199.0
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is None


def test_an_unreachable_agent_keeps_a_longer_hold_and_the_inconsistencies_first_wait() -> None:
    clock = Clock()
    w = _watch(clock)
    finding = AgentTransition(w.agent_id, w.family, None, None, None, frozenset(),
                              ("drop", "r1", "p1", "a"), frozenset(), False, True)
    for start in (0.0, 600.0):
        clock.now = start
        assert w.add_canary_finding(finding), "queued again after the first wait"
        key = w.work_item().key
        w.queued(key)
        w.settle(key, learnt=False)
        clock.now = start + 599.0
        assert not w.add_canary_finding(finding)
    ((kind, entry),) = w.backoff.items()
    assert entry == (1200.0, 0)  # held until 600 + 600, no unexplained end counted
    # A hold already longer than the first wait (unexplained ends) is not cut short.
    clock.now = 2000.0
    w.back_off([kind])
    w.back_off([kind])
    assert w.backoff[kind] == (2000.0 + 1200.0, 2)
    w.back_off([kind], doubling=False)
    assert w.backoff[kind] == (2000.0 + 1200.0, 2)


def _pipeline(path: Path) -> Any:
    d = build_service(simulated(path, agents=2, rounds=100, scheduler={"checkpoint_s": 3600.0}),
                      publisher=MemoryPublisher()).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    return d


def _records(d: Any) -> list[Any]:
    out: list[Any] = []
    while got := d.source.poll(1.0):
        out += got
    return out


@pytest.mark.parametrize("evicted", [False, True])
def test_a_restarted_daemon_keeps_holding_the_drift(tmp_path: Path, evicted: bool) -> None:
    """A work that ended "no change" leaves nothing in the store's queue: the back-off,
    and the counts it compares an alarm with, are saved with the agent's drift snapshot
    (by the checkpoint, or by the eviction of an agent whose tables the work's end
    dropped), so a replica started afresh over the same store does not ask the agent
    the same questions again; other counts still pass."""
    first = _pipeline(tmp_path)
    records = _records(first)
    first.handle_batch(records[:300])
    agent = next(w.agent_id for w in first.registry if w.family == "courier-v1")
    w = first.registry.get(agent)
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is None  # held here
    if evicted:
        assert not first.drift.has(agent)
        assert first.checkpoints.evict_watches([w]) == 1
    first.checkpoint()
    first.source.close()
    first.store.close()

    # A fresh pipeline (a restart) over the same store; the agent's next record reads
    # its snapshot back.
    second = _pipeline(tmp_path)
    second.handle_batch(_records(second))
    back = second.registry.get(agent)
    assert back is not None and back is not w and back.transitions
    assert back.add_audit_alarm(_evidence(back, 300, 200), "pick") is None
    assert back.held_back == 1
    # Backed off once: the next "no change" doubles the wait (1,200 s, not 600 s).
    assert back.backoff[drift_kind("pick")][1] == 1
    assert 0 < back.backoff[drift_kind("pick")][0] - back.clock() <= 600.0
    assert back.add_audit_alarm(_evidence(back, 60, 440), "pick") is not None
    second.source.close()
    second.store.close()


def test_an_unreadable_back_off_leaves_the_restored_tables(tmp_path: Path) -> None:
    """A snapshot's back-off that does not read is skipped (logged); the agent's tables
    are restored from the snapshot all the same."""
    first = _pipeline(tmp_path)
    first.handle_batch(_records(first)[:300])
    first.checkpoint()
    first.source.close()
    saved = first.store.load_drift_snapshots("capwatch", "simulated")
    # Snapshots of agents with no back-off carry none (as those written before it).
    assert saved and all("backoff" not in s.state for s in saved)
    snap = saved[0]
    first.store.save_drift_snapshots("capwatch", [replace(snap, state={
        **snap.state, "backoff": {"kinds": {"pick|drift": {"times": "twice", "ago_s": 1.0}}}})])
    first.store.close()

    second = _pipeline(tmp_path)
    second.handle_batch(_records(second))
    back = second.registry.get(snap.agent_id)
    assert back is not None and back.drift_restored == (snap.partition, snap.next_offset)
    assert back.backoff == {}
    second.source.close()
    second.store.close()


def test_a_back_off_read_back_ends_when_it_would_have() -> None:
    """What a snapshot keeps of a back-off (how many times, how long ago) gives the
    reader the same end, doubled ones and the first wait of an agent not reached alike,
    less the time between the snapshot and its reading."""
    clock = Clock()
    w = _watch(clock)
    w.back_off(["pick|drift"], doubling=False)  # not reached: the first wait, no count
    w.back_off(["drop|x"])
    w.back_off(["drop|x"])
    clock.now = 50.0
    saved = json.loads(json.dumps(backoff_state(w)))
    other = Clock()
    other.now = 1000.0
    back = _watch(other)
    restore_backoff(back, saved, elapsed_s=10.0)
    assert back.backoff == {"pick|drift": (1000.0 + 600.0 - 50.0 - 10.0, 0),
                            "drop|x": (1000.0 + 1200.0 - 50.0 - 10.0, 2)}


def _awaiting_drift_work(d: Any) -> Any:
    """A courier agent of ``d`` awaiting the work its audit alarm queued (counts 300/200)."""
    w = next(w for w in d.registry if w.family == "courier-v1")
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    d.queue(w)
    assert w.awaiting is not None
    return w


def _ends_unconfirmed(d: Any, agent: str, key: str) -> None:
    from capwatch.daemon.work import Settled, Settlement

    d.store.claim("w", datetime.now(UTC), 60.0)
    d.store.complete(key, "w")
    d.results.apply(Settled(agent, key, Settlement.UNCHANGED))


@pytest.mark.parametrize("other_replica", [False, True])
def test_a_rebalance_while_the_drift_work_is_awaited_keeps_its_back_off(
        tmp_path: Path, other_replica: bool) -> None:
    """The agent's partition is revoked while its drift work is awaited, and assigned
    again (to this replica, or to another over the same store); the work then ends with
    no change. The watch that awaits it there was loaded without the counts the work
    assesses, so its end backed nothing off and the next audit asked the same questions
    again (a reviewer's doubt, session 18)."""
    d = _pipeline(tmp_path)
    records = _records(d)
    d.handle_batch(records[:300])
    w = _awaiting_drift_work(d)
    agent, key = w.agent_id, w.awaiting
    d.revoke({0})
    if other_replica:
        d.source.close()
        d.store.close()
        d = _pipeline(tmp_path)
    else:
        d.assign({0})
    d.handle_batch(records[300:])
    back = d.registry.get(agent)
    assert back is not None and back is not w and back.awaiting == key
    _ends_unconfirmed(d, agent, key)
    assert back.awaiting is None
    assert back.add_audit_alarm(_evidence(back, 300, 200), "pick") is None, "held"
    assert back.add_audit_alarm(_evidence(back, 60, 440), "pick") is not None
    d.source.close()
    d.store.close()


@pytest.mark.parametrize("other_replica", [False, True])
def test_a_work_that_ends_while_no_replica_holds_the_agent_still_backs_off(
        tmp_path: Path, other_replica: bool) -> None:
    """The agent's partition is revoked while its drift work is awaited; the work ends
    with no change before any replica loads the agent again (a worker elsewhere ran it);
    then the partition is assigned (here, or to another replica over the same store) and
    the agent's records arrive. Its next holder should hold the same drift back, as a
    watch that awaited the work would: instead it learns only that the work left the
    queue, and the next audit asks the agent the same questions again. Held once (seen
    ending here and read with the agent's snapshot, one end), from the end: the first
    wait."""
    d = _pipeline(tmp_path)
    records = _records(d)
    d.handle_batch(records[:300])
    w = _awaiting_drift_work(d)
    agent, key = w.agent_id, w.awaiting
    d.revoke({0})
    (item,) = d.store.claim("another-replica", datetime.now(UTC), 60.0)
    assert item.key == key
    d.store.complete(key, "another-replica")
    d.poll_results()
    if other_replica:
        d.source.close()
        d.store.close()
        d = _pipeline(tmp_path)
    else:
        d.assign({0})
    d.handle_batch(records[300:])
    d.poll_results()
    back = d.registry.get(agent)
    assert back is not None and back is not w and back.awaiting is None
    try:
        assert back.add_audit_alarm(_evidence(back, 300, 200), "pick") is None, "held"
        until, times = back.backoff[drift_kind("pick")]
        assert times == 1 and 0 < until - back.clock() <= back.settings.unexplained_backoff_s
        assert back.add_audit_alarm(_evidence(back, 60, 440), "pick") is not None
    finally:
        d.source.close()
        d.store.close()


def test_a_work_read_with_the_snapshot_backs_off_from_its_end(tmp_path: Path) -> None:
    """The same on another replica, the work ending 300 s after the revoke's snapshot:
    its next holder backs off from the end (the store keeps it), a wait of 600 s from
    there, not from the snapshot (300 s: short by the time between)."""
    d = _pipeline(tmp_path)
    records = _records(d)
    d.handle_batch(records[:300])
    w = _awaiting_drift_work(d)
    agent, key = w.agent_id, w.awaiting
    d.revoke({0})
    # The revoke 300 s before the end: its snapshot stamped so (no sleep for it).
    (snap,) = [s for s in d.store.load_drift_snapshots("capwatch", "simulated")
               if s.agent_id == agent]
    assert snap.state["backoff"]["awaiting"] == key
    d.store.save_drift_snapshots("capwatch", [
        replace(snap, updated_at=snap.updated_at - timedelta(seconds=300))])
    assert [i.key for i in d.store.claim("another-replica", datetime.now(UTC), 60.0)] == [key]
    d.store.complete(key, "another-replica")
    d.source.close()
    d.store.close()
    d = _pipeline(tmp_path)
    d.handle_batch(records[300:])
    back = d.registry.get(agent)
    assert back is not None and back.awaiting is None
    try:
        until, times = back.backoff[drift_kind("pick")]
        # From the end, less the seconds this test took since (not 300 s less).
        assert times == 1 and 600.0 - 60.0 < until - back.clock() <= 600.0
        assert back.add_audit_alarm(_evidence(back, 300, 200), "pick") is None, "held"
    finally:
        d.source.close()
        d.store.close()


def test_a_quiet_agents_work_that_ends_while_no_replica_holds_it_still_backs_off(
        tmp_path: Path) -> None:
    """The same on another replica for an agent with no record between the checkpoint
    that saved its tables and the revoke: the audit's alarm queued its work. The
    revoke's checkpoint writes the snapshots of the tables changed since, so its
    snapshot did not say which work it awaited."""
    d = _pipeline(tmp_path)
    records = _records(d)
    d.handle_batch(records[:300])
    d.checkpoint()
    w = _awaiting_drift_work(d)
    agent, key = w.agent_id, w.awaiting
    d.revoke({0})
    (item,) = d.store.claim("another-replica", datetime.now(UTC), 60.0)
    assert item.key == key
    d.store.complete(key, "another-replica")
    d.source.close()
    d.store.close()
    d = _pipeline(tmp_path)
    d.handle_batch(records[300:])
    d.poll_results()
    back = d.registry.get(agent)
    assert back is not None and back.awaiting is None
    try:
        assert back.add_audit_alarm(_evidence(back, 300, 200), "pick") is None, "held"
    finally:
        d.source.close()
        d.store.close()


@pytest.mark.parametrize("other_replica", [False, True])
def test_an_agent_without_drift_tables_whose_work_ends_while_no_replica_holds_it(
        tmp_path: Path, other_replica: bool) -> None:
    """The same for an agent with no drift table (a rover: no action of two outcomes)
    whose work an inconsistency queued (a canary's, the same for a record's): the
    revoke's checkpoint wrote no snapshot of it (it wrote those of agents with tables),
    so the replica assigned its partition after the work ended did not know the work,
    and the same inconsistency started the same assessment again."""
    d = _pipeline(tmp_path)
    records = _records(d)
    d.handle_batch(records[:300])
    w = d.registry.get("rover-v1-000")
    assert w is not None and not d.drift.has(w.agent_id)
    refused = AgentTransition(
        w.agent_id, w.family, None, None, None, frozenset(map(tuple, HALF)), tuple(SAMPLE),
        frozenset(map(tuple, HALF)), False, False)
    assert w.add_canary_finding(refused)
    d.queue(w)
    agent, key = w.agent_id, w.awaiting
    assert key is not None
    d.revoke({0})
    assert [i.key for i in d.store.claim("another-replica", datetime.now(UTC), 60.0)] == [key]
    d.store.complete(key, "another-replica")
    d.poll_results()
    if other_replica:
        d.source.close()
        d.store.close()
        d = _pipeline(tmp_path)
    else:
        d.assign({0})
    d.handle_batch(records[300:])
    d.poll_results()
    back = d.registry.get(agent)
    assert back is not None and back is not w and back.awaiting is None
    try:
        assert not back.add_canary_finding(refused), "held"
        ((_, (until, times)),) = back.backoff.items()
        assert times == 1 and 0 < until - back.clock() <= back.settings.unexplained_backoff_s
    finally:
        d.source.close()
        d.store.close()


def test_work_ended_on_another_replica_backs_off_once(tmp_path: Path) -> None:
    """Another replica's worker ran this replica's agent's drift work to a 'no change'
    end: this replica sees only the work leaving the store's queue (poll_results), the
    other has no watch of the agent. The end counts once (a reviewer's doubt, session
    18: that it doubled the back-off): the first wait, and the next end doubles it."""
    d = _pipeline(tmp_path)
    d.handle_batch(_records(d)[:300])
    w = _awaiting_drift_work(d)
    (item,) = d.store.claim("other-replica", datetime.now(UTC), 60.0)
    d.store.complete(item.key, "other-replica")
    d.poll_results()
    assert w.awaiting is None
    until, times = w.backoff[drift_kind("pick")]
    assert times == 1 and 0 < until - w.clock() <= w.settings.unexplained_backoff_s
    d.source.close()
    d.store.close()


def test_an_unreachable_end_on_another_replica_is_the_first_wait_not_a_doubling(
        tmp_path: Path) -> None:
    """Another replica's worker failed this replica's agent's drift work for good because
    the agent could not be reached: this replica sees the work leave the queue. Taken for
    an answered end (before session 20), each such end counted and doubled the wait, as
    the replica that ran it would not (Settlement.UNREACHABLE): a real drift was held for
    hours after an outage elsewhere. The ended item's failure is read from the store."""
    from capwatch.assess.agent import AgentUnavailable
    from capwatch.daemon.retry import describe_agent_failure

    d = _pipeline(tmp_path)
    records = _records(d)
    d.handle_batch(records[:300])
    w = _awaiting_drift_work(d)
    unreachable = describe_agent_failure(AgentUnavailable("connection refused")).message
    for more in (records[300:350], records[350:400]):
        (item,) = d.store.claim("other-replica", datetime.now(UTC), 60.0)
        d.store.release(item.key, "other-replica", unreachable, datetime.now(UTC), 0)
        d.poll_results()
        assert w.awaiting is None
        until, times = w.backoff[drift_kind("pick")]
        assert times == 0, "no answered end counted"
        assert 0 < until - w.clock() <= w.settings.unexplained_backoff_s, "the first wait"
        # The drift again once the wait passed, queued again and failed again elsewhere.
        d.handle_batch(more)
        w.backoff.clear()
        assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
        d.queue(w)
        assert w.awaiting is not None and w.awaiting != item.key
    # A failure of another kind there is an answered end here, as before.
    (item,) = d.store.claim("other-replica", datetime.now(UTC), 60.0)
    d.store.release(item.key, "other-replica", "ValueError: a bad model", datetime.now(UTC), 0)
    d.poll_results()
    assert w.backoff[drift_kind("pick")][1] == 1
    d.source.close()
    d.store.close()


def test_a_parked_work_replaced_by_one_without_drift_does_not_keep_the_old_counts(
        tmp_path: Path) -> None:
    """An unloaded agent parked for a drift work, then for another work that assesses no
    drift (the store's queue holding both, read oldest first at a start): the watch
    loaded awaits the second work, and must not take the first one's counts, or the
    second's unexplained end backs off a drift no assessment was asked about."""
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        seed_baselines(store, {"courier-v1": example("courier.pddl")}, datetime.now(UTC))
        registry = Registry(store)
        registry.park("courier-v1-000", "k1", (), {"pick": (300, 200)})
        registry.park("courier-v1-000", "k2", ("drop|x",))
        w = registry.load("courier-v1-000", "courier-v1", 0)
        assert w is not None and w.awaiting == "k2"
        assert not w.drift_tested
        w.settle("k2")
        assert drift_kind("pick") not in w.backoff
        assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    finally:
        store.close()


def test_a_loaded_watch_awaiting_another_work_drops_the_earlier_works_drift(
        tmp_path: Path) -> None:
    """The same for a loaded watch told of a work queued elsewhere (Registry.park)."""
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        seed_baselines(store, {"courier-v1": example("courier.pddl")}, datetime.now(UTC))
        registry = Registry(store)
        w = registry.load("courier-v1-000", "courier-v1", 0)
        assert w is not None
        registry.park("courier-v1-000", "k1", (), {"pick": (300, 200)})
        registry.park("courier-v1-000", "k2", ("drop|x",))
        w.settle("k2")
        assert drift_kind("pick") not in w.backoff
    finally:
        store.close()


def test_a_back_off_found_at_a_start_is_counted_from_the_end_not_the_load(
        tmp_path: Path) -> None:
    """``resume_queued`` finds a work that ended unexplained 100 s before the start
    (Registry.hold_back); the agent's first record comes 400 s later. The watch loaded
    then holds the kind until 600 s after the end, as a watch that awaited the work would:
    the figure kept was seconds ago at the start, applied from the load, so the hold
    lasted 400 s longer (until 1,000 s after the end)."""
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        seed_baselines(store, {"courier-v1": example("courier.pddl")}, datetime.now(UTC))
        clock = Clock()
        registry = Registry(store, SETTINGS, clock=clock)
        base = ModelRef("courier-v1", None, 1)
        registry.hold_back("courier-v1-000", base, ("drop|x",), 100.0)
        clock.now = 400.0
        w = registry.load("courier-v1-000", "courier-v1", 0)
        assert w is not None
        until, times = w.backoff["drop|x"]
        assert times == 1
        # The watch's own (monotonic) clock: 600 - 100 - 400 s left of the wait.
        assert until - w.clock() == pytest.approx(100.0, abs=5.0)
    finally:
        store.close()


def test_a_work_failed_for_good_found_at_a_start_is_held_from_its_end(
        tmp_path: Path) -> None:
    """``resume_queued`` finds a work queued an hour ago whose retries failed it for good
    100 s before the start: its kind is held 500 s more, from the failure (the store
    keeps when it ended). Counted from its queuing, as before, it lay past the horizon
    (``unexplained_max_backoff_s``, 1,800 s) and backed nothing off: the agent's next
    inconsistency of that kind started the same assessment again."""
    from capwatch.contracts.store import PendingAssessment
    from capwatch.daemon.registry import resume_queued

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}", clock="caller")
    try:
        t0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
        seed_baselines(store, {"courier-v1": example("courier.pddl")}, t0)
        base = ModelRef("courier-v1", None, 1)
        store.enqueue(PendingAssessment(
            "k", "courier-v1-000", "courier-v1",
            {"base": base.to_json(), "evidence_kinds": ["drop|x"]}, t0))
        store.claim("w", t0, 60.0)
        failed_at = t0 + timedelta(hours=1)
        assert store.release("k", "w", "refused", failed_at, max_attempts=0, now=failed_at)
        clock = Clock()
        registry = Registry(store, SETTINGS, clock=clock)
        resume_queued(registry, store, failed_at + timedelta(seconds=100),
                      SETTINGS.unexplained_max_backoff_s)
        w = registry.load("courier-v1-000", "courier-v1", 0)
        assert w is not None
        until, times = w.backoff["drop|x"]
        assert times == 1 and until - w.clock() == pytest.approx(500.0)
    finally:
        store.close()


def test_dropped_watches_back_offs_are_bounded(tmp_path: Path) -> None:
    """Every watch dropped with a back-off (evicted, or its partition moved away) left an
    entry for its reload; one whose partition went for good was never removed, so the
    registry grew with every agent that ever moved away. Kept up to ``held_limit``: past
    it, those whose back-off passed go, then those ending soonest; a reload of an agent
    still kept holds its back-off as before."""
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        seed_baselines(store, {"courier-v1": example("courier.pddl")}, datetime.now(UTC))
        registry = Registry(store, SETTINGS)
        registry.held_limit = 4
        agents = [f"courier-v1-{i:03d}" for i in range(12)]
        for i, agent in enumerate(agents):
            w = registry.load(agent, "courier-v1", 0)
            assert w is not None
            w.backoff[drift_kind("pick")] = (w.clock() + (1 if i % 2 else 100_000), 1)
            registry.drop([agent])
            assert len(registry._backoff) <= registry.held_limit
        # The latest dropped, long back-off kept: read back, it holds.
        back = registry.load(agents[-2], "courier-v1", 0)
        assert back is not None and drift_kind("pick") in back.backoff
    finally:
        store.close()


def test_held_ends_of_agents_not_loaded_are_bounded(tmp_path: Path) -> None:
    """Hints name every replica's agents, so the ends seen for agents not loaded here
    (Registry.hold_ended) are kept up to ``held_limit``, the longest-lasting first."""
    from capwatch.contracts.store import PendingAssessment

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        clock = Clock()
        registry = Registry(store, SETTINGS, clock=clock)
        registry.held_limit = 4
        base = ModelRef("courier-v1", None, 1).to_json()
        for i in range(12):
            clock.now = float(i)
            registry.hold_ended(PendingAssessment(
                f"k{i}", f"courier-v1-{i:03d}", "courier-v1",
                {"base": base, "evidence_kinds": ["drop|x"]}, datetime.now(UTC),
                status="done"))
            assert len(registry._held) <= 4
        assert "courier-v1-011" in registry._held
    finally:
        store.close()


def test_a_work_this_replicas_worker_ends_after_its_agent_moved_away_still_backs_off(
        tmp_path: Path) -> None:
    """The same with the work run here: the agent's partition is revoked while this
    replica's worker runs its drift work, which ends with no change (the worker's Settled
    finds no watch), and the partition comes back. The parked work was released there
    and then, and the watch loaded later queued the same drift again."""
    from capwatch.daemon.work import Settled, Settlement

    d = _pipeline(tmp_path)
    records = _records(d)
    d.handle_batch(records[:300])
    w = _awaiting_drift_work(d)
    agent, key = w.agent_id, w.awaiting
    d.revoke({0})
    (claimed,) = d.store.claim("this-replica", datetime.now(UTC), 60.0)
    assert claimed.key == key
    d.store.complete(key, "this-replica")
    d.results.apply(Settled(agent, key, Settlement.UNCHANGED))
    d.poll_results()
    d.assign({0})
    d.handle_batch(records[300:])
    d.poll_results()
    back = d.registry.get(agent)
    assert back is not None and back is not w and back.awaiting is None
    try:
        assert back.add_audit_alarm(_evidence(back, 300, 200), "pick") is None, "held"
        assert back.add_audit_alarm(_evidence(back, 60, 440), "pick") is not None
    finally:
        d.source.close()
        d.store.close()


@pytest.mark.parametrize("end", ["no change", "unreachable", "a version"])
def test_an_ended_work_held_for_an_agent_not_loaded_backs_off_as_its_watch_would(
        tmp_path: Path, end: str) -> None:
    """What Registry.hold_ended keeps of a work that ended while no watch of its agent
    was loaded, applied at the agent's load: the drift with its counts (and the kinds)
    doubled as an answered end; the first wait only, no end counted, if the agent was not
    reached; nothing if the work stored a version (the watch loads it: another model)."""
    from capwatch.contracts.store import PendingAssessment
    from capwatch.daemon.retry import UNREACHABLE_PREFIX

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        domain = example("courier.pddl")
        seed_baselines(store, {"courier-v1": domain}, datetime.now(UTC))
        base = ModelRef("courier-v1", None, 1)
        if end == "a version":
            store.put(build_version(ModelRef("courier-v1", "courier-v1-000", 1), domain,
                                    datetime.now(UTC), parent=store.latest("courier-v1", None)))
        registry = Registry(store, SETTINGS)
        registry.hold_ended(PendingAssessment(
            "k1", "courier-v1-000", "courier-v1",
            {"base": base.to_json(), "evidence_kinds": ["drop|x"],
             "drift": {"pick": {"counts": [300, 200]}}}, datetime.now(UTC),
            status="failed" if end == "unreachable" else "done",
            last_error=UNREACHABLE_PREFIX + "connection refused" if end == "unreachable"
            else None))
        w = registry.load("courier-v1-000", "courier-v1", 0)
        assert w is not None
        if end == "a version":
            assert w.backoff == {}
            assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
            return
        times = 0 if end == "unreachable" else 1
        for kind in ("drop|x", drift_kind("pick")):
            until, n = w.backoff[kind]
            assert n == times and 0 < until - w.clock() <= 600.0
        assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is None
        assert w.add_audit_alarm(_evidence(w, 60, 440), "pick") is not None
    finally:
        store.close()


def _assessed_parked_dropped(store: Any) -> tuple[Registry, Any]:
    """courier-v1-000 assessed (unconfirmed), its work k2 parked, the agent dropped."""
    seed_baselines(store, {"courier-v1": example("courier.pddl")}, datetime.now(UTC))
    registry = Registry(store, SETTINGS)
    w = registry.load("courier-v1-000", "courier-v1", 0)
    assert w is not None
    assert w.add_audit_alarm(_evidence(w, 300, 200), "pick") is not None
    _assessed_unconfirmed(w)
    registry.park(w.agent_id, "k2", (), {"pick": (60, 440)})
    registry.drop([w.agent_id])
    return registry, w


def test_a_held_end_comes_after_the_back_off_a_dropped_watch_kept(tmp_path: Path) -> None:
    """A watch with a drift back-off (one end) awaits a second work over other counts
    when its partition moves away; that work ends (no change) before the agent is loaded
    again. Loaded, the watch doubles the wait (two ends) and takes the second work's
    counts as no longer awaited: the dropped watch's back-off, applied after the held end,
    overwrote it (one end), and its counts stayed marked awaited."""
    from capwatch.contracts.store import PendingAssessment

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        registry, w = _assessed_parked_dropped(store)
        agent = w.agent_id
        ended = PendingAssessment(
            "k2", agent, "courier-v1",
            {"base": w.version.ref.to_json(), "drift": {"pick": {"counts": [60, 440]}}},
            datetime.now(UTC), status="done")
        registry.unpark_ended(set(), lambda keys: {k: ended for k in keys if k == "k2"})
        back = registry.load(agent, "courier-v1", 0)
        assert back is not None and back.awaiting is None
        assert back.backoff[drift_kind("pick")][1] == 2
        assert back.drift_tested == {"pick": ((60, 440), False)}
    finally:
        store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def caller_clock_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    from tests.support.pg_schema import scratch_schema
    with scratch_schema(request.getfixturevalue("postgres_dsn")) as url:
        yield url


def test_a_hint_released_late_backs_off_from_the_works_end(
        caller_clock_store_url: str) -> None:
    """A parked agent (not loaded here) whose work another replica ended without a version:
    this replica notices 400 s after the end (the end's ``ended_at``, on the store's
    clock), a store outage or a poll later. The wait counts from the end, as on the
    replica that ran the work, so 200 s of the 600 s back-off are left, not 600 (before
    session 22 unpark_ended held it from the notice)."""
    from capwatch.contracts.store import PendingAssessment

    ended = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    store = open_store(caller_clock_store_url, clock="caller")
    try:
        seed_baselines(store, {"courier-v1": example("courier.pddl")}, ended)
        clock = Clock()
        clock.now = 5000.0
        registry = Registry(store, SETTINGS, clock=clock)
        agent = "courier-v1-000"
        w = registry.load(agent, "courier-v1", 0)
        assert w is not None
        registry.park(agent, "k2", (), {"pick": (60, 440)})
        registry.drop([agent])
        store.enqueue(PendingAssessment(
            "k2", agent, "courier-v1",
            {"base": w.version.ref.to_json(), "drift": {"pick": {"counts": [60, 440]}}},
            ended - timedelta(seconds=30)))
        claimed = store.claim("other/w0", ended - timedelta(seconds=20), 60.0)
        assert [i.key for i in claimed] == ["k2"]
        store.complete("k2", "other/w0", now=ended)
        registry.unpark_ended(set(), store.queue_items_by_key,
                              lambda: store.store_now(ended + timedelta(seconds=400)))
        back = registry.load(agent, "courier-v1", 0)
        assert back is not None and back.awaiting is None
        until, ends = back.backoff[drift_kind("pick")]
        assert ends == 1
        # The watch's back-off runs on its own monotonic clock: 400 s of it have passed.
        assert until - back.clock() == pytest.approx(200.0, abs=5.0)
    finally:
        store.close()


def test_a_store_failing_at_its_clock_releases_no_hint(tmp_path: Path) -> None:
    """unpark_ended reads the store's clock before it releases any hint: a store failing
    there leaves the hints for the next poll, which backs them off (rev22b: released
    first, the agent lost its back-off and its next holder queued the same evidence)."""
    from capwatch.contracts.store import PendingAssessment

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        registry, w = _assessed_parked_dropped(store)
        agent = w.agent_id
        at = datetime.now(UTC)
        ended = PendingAssessment(
            "k2", agent, "courier-v1",
            {"base": w.version.ref.to_json(), "drift": {"pick": {"counts": [60, 440]}}},
            at, status="done", ended_at=at)

        def down() -> datetime:
            raise ConnectionError("the store went away")

        def items(keys: list[str]) -> dict[str, PendingAssessment]:
            return {k: ended for k in keys if k == "k2"}

        with pytest.raises(ConnectionError):
            registry.unpark_ended(set(), items, down)
        registry.unpark_ended(set(), items, lambda: at)
        back = registry.load(agent, "courier-v1", 0)
        assert back is not None and back.awaiting is None
        assert back.backoff[drift_kind("pick")][1] == 2
    finally:
        store.close()
