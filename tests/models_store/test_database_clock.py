"""Replicas sharing a PostgreSQL store whose clocks disagree: the server's clock decides
when work is due and when a lease runs out (``SqlBase.clock``, ``"database"``); and the
one replica of a SQLite store whose clock is stepped back (``"monotonic"``).

Each replica is a store handle of its own and the clock it passes as ``now``, stepped
or set apart by the test (the machine's clock is shared and left alone)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from capwatch.contracts.store import AlertDelivery, Held, LeaseLost, OutboxAlert, RoutingPlan
from capwatch.model.domain import Domain
from capwatch.models_store import (
    ModelRef,
    ModelStore,
    PendingAssessment,
    build_version,
    open_store,
)
from capwatch.models_store.sqlite import SqliteModelStore

Clock = Callable[[], datetime]


def shifted(by: timedelta) -> Clock:
    return lambda: datetime.now(UTC) + by


BEHIND = shifted(timedelta(hours=-1))
"""A replica whose clock was stepped back an hour."""


@pytest.fixture
def replicas(postgres_dsn: str) -> Iterator[Callable[..., ModelStore]]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_dsn else "?"
    url = f"{postgres_dsn}{sep}options={quote(f'-csearch_path={schema}')}"
    opened: list[ModelStore] = []

    def replica(clock: str | None = None) -> ModelStore:
        s = open_store(url, clock=clock)
        opened.append(s)
        return s

    yield replica
    for s in opened:
        s.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def work(key: str, at: datetime) -> PendingAssessment:
    return PendingAssessment(key=key, agent_id="a1", family="rover", payload={"n": 1},
                             enqueued_at=at)


def claim_within(store: ModelStore, worker: str, clock: Clock, lease_s: float,
                 deadline_s: float) -> list[PendingAssessment]:
    """Claims until something is claimed or ``deadline_s`` passed (monotonic)."""
    end = time.monotonic() + deadline_s
    while True:
        got = store.claim(worker, clock(), lease_s)
        if got or time.monotonic() > end:
            return got
        time.sleep(0.05)


@pytest.mark.integration
def test_replica_stepped_back_an_hour_claims_work_when_due(
        replicas: Callable[..., ModelStore]) -> None:
    a, b, old = replicas(), replicas(), replicas("caller")
    a.enqueue(work("from-a", datetime.now(UTC)))
    b.enqueue(work("from-b", BEHIND()))  # its own work, stamped an hour back
    old.enqueue(work("old-rule", datetime.now(UTC)))
    # On the replica's own clock (the store's old rule) it waits an hour for all of it:
    assert old.claim("old/w0", BEHIND(), 60, 5) == []
    got = b.claim("b/w0", BEHIND(), 60, 5)
    assert sorted(i.key for i in got) == ["from-a", "from-b", "old-rule"]

    # A retry the stepped replica sets 30 s out is 30 s out, not 30 s less an hour (due
    # at once); one set 0.3 s out is claimed in about that.
    for key, wait_s in (("from-a", 30.0), ("old-rule", 30.0), ("from-b", 0.3)):
        at = BEHIND()
        b.release(key, "b/w0", "agent unreachable", at + timedelta(seconds=wait_s), 9,
                  now=at)
    (again,) = claim_within(b, "b/w0", BEHIND, 60, 30.0)
    assert again.key == "from-b"
    assert b.claim("b/w0", BEHIND(), 60, 5) == []


@pytest.mark.integration
def test_a_work_ended_by_a_replica_stepped_back_an_hour_ended_now(
        replicas: Callable[..., ModelStore]) -> None:
    """When a work ended (``ended_at``) is the server's time, whatever the clock of the
    replica ending it: another replica, reading its age against the store's now, finds
    seconds, not an hour more (a back-off counted from it, docs/daemon.md "No loops")."""
    a, b = replicas(), replicas()
    for key in ("done", "failed"):
        b.enqueue(work(key, BEHIND()))
    b.claim("b/w0", BEHIND(), 60, 2)
    b.complete("done", "b/w0", now=BEHIND())
    at = BEHIND()
    assert b.release("failed", "b/w0", "refused", at, 0, now=at)
    now = a.store_now(datetime.now(UTC) + timedelta(minutes=10))  # a's clock ahead
    for item in a.queue_items_by_key(["done", "failed"]).values():
        assert item.ended_at is not None
        assert timedelta(0) <= now - item.ended_at < timedelta(seconds=30)


@pytest.mark.integration
def test_replicas_ten_minutes_apart_keep_each_others_live_leases(
        replicas: Callable[..., ModelStore], rover: Domain) -> None:
    now, ahead = shifted(timedelta(0)), shifted(timedelta(minutes=10))
    a, b = replicas(), replicas()
    a.enqueue_many([(work("k1", now()), ()), (work("k2", now()), ())])
    (held_a,) = a.claim("a/w0", now(), 60)
    (held_b,) = b.claim("b/w0", ahead(), 60)
    assert b.claim("b/w1", ahead(), 60) == []
    assert a.claim("a/w1", now(), 60) == []
    # The lease's end is the server's now + 60 s, whichever replica's clock claimed it.
    assert held_a.lease_until is not None and held_b.lease_until is not None
    assert abs((held_b.lease_until - held_a.lease_until).total_seconds()) < 30
    # A version written under b's lease with b's clock renews it from the server's now.
    v = build_version(ModelRef("rover", None, 1), rover, ahead(),
                      evidence={"assessment_key": held_b.key})
    assert b.put(v, (), Held(held_b.key, "b/w0", ahead(), 60)) == v
    b.renew(held_b.key, "b/w0", ahead(), 60)
    assert a.claim("a/w1", now(), 60) == []

    # Alert deliveries: held for their lease by the server's clock too.
    alert = OutboxAlert(key="al1", dedup_key="d", group_key="g", family="rover",
                        alert_type="drift", alert={"x": 1}, created_at=now())

    def each(pending: object, last: object) -> RoutingPlan:
        return RoutingPlan(deliveries=(AlertDelivery(
            "dl1", {"x": 1}, ("kafka",), alert.created_at, members=("al1",)),))

    a.add_alerts([alert])
    a.route_alerts(each, now())
    (d,) = a.claim_deliveries(now(), 60)
    assert b.claim_deliveries(ahead(), 60) == []
    # What a replica compares a held delivery with (a finite run waiting for it): the
    # same now for both replicas, before the hold's end.
    for replica, clock in ((a, now), (b, ahead)):
        store_now = replica.store_now(clock())
        assert d.not_before is not None and store_now < d.not_before
        assert abs((store_now - datetime.now(UTC)).total_seconds()) < 30

    # On the caller's clock (the store's old rule) the replica ahead takes both at once:
    old = replicas("caller")
    assert sorted(i.key for i in old.claim("old/w0", ahead(), 60, 5)) == ["k1", "k2"]
    assert len(old.claim_deliveries(ahead(), 60)) == 1


@pytest.mark.integration
def test_lease_runs_out_when_its_holder_dies(replicas: Callable[..., ModelStore]) -> None:
    ahead, behind = shifted(timedelta(minutes=10)), shifted(timedelta(minutes=-10))
    a, b = replicas(), replicas()
    a.enqueue_many([(work("long", behind()), ()), (work("short", behind()), ())])
    (first,) = a.claim("a/w0", ahead(), 600)
    (second,) = a.claim("a/w0", ahead(), 0.5)
    assert (first.key, second.key) == ("long", "short")
    a.close()  # the holder dies, its clock ten minutes ahead of b's
    (taken,) = claim_within(b, "b/w0", behind, 60, 30.0)
    assert (taken.key, taken.attempts) == ("short", 2)
    assert b.claim("b/w0", behind(), 60) == []  # "long" is still held
    with pytest.raises(LeaseLost):
        b.renew("short", "a/w0", ahead(), 60)


def test_sqlite_replica_whose_clock_steps_back_an_hour_holds_nothing_back(
        tmp_path: Path) -> None:
    step = [timedelta(0)]

    def wall() -> datetime:
        return datetime.now(UTC) + step[0]

    store = SqliteModelStore(tmp_path / "m.db", wall_clock=wall)
    old = SqliteModelStore(tmp_path / "m.db", clock="caller")
    try:
        store.enqueue_many([(work("k1", wall()), ()), (work("k2", wall()), ())])
        (held,) = store.claim("w0", wall(), 60)
        step[0] = timedelta(hours=-1)
        # The old rule (the daemon's clock as it is) waits an hour for k2:
        assert old.claim("old/w0", wall(), 60) == []
        (got,) = store.claim("w1", wall(), 60)
        assert (held.key, got.key) == ("k1", "k2")
        # The leases run from the store's clock, not an hour short: both still held.
        assert store.claim("w2", wall(), 60) == []
        at = wall()
        store.release("k2", "w1", "agent unreachable", at + timedelta(seconds=0.3), 9,
                      now=at)
        (again,) = claim_within(store, "w1", wall, 60, 30.0)
        assert again.key == "k2"
        # A step forward is followed: the leases (60 s) run out at once.
        step[0] = timedelta(minutes=2)
        assert sorted(i.key for i in store.claim("w3", wall(), 60, 5)) == ["k1", "k2"]
    finally:
        store.close()
        old.close()


@pytest.mark.parametrize("stepped", ["before the restart", "while stopped"])
def test_sqlite_restart_after_a_step_back_keeps_due_work_due(tmp_path: Path,
                                                             stepped: str) -> None:
    step = [timedelta(0)]

    def wall() -> datetime:
        return datetime.now(UTC) + step[0]

    store = SqliteModelStore(tmp_path / "m.db", wall_clock=wall)
    store.keep_clock_every_s = 0.0  # every write keeps its reading (1 s apart by default)
    store.enqueue_many([(work(k, wall()), ()) for k in ("k1", "k2", "k3")])
    held, later = store.claim("w0", wall(), 60, 2)
    at = wall()
    store.release(later.key, "w0", "agent unreachable", at + timedelta(seconds=600), 9, now=at)
    if stepped == "before the restart":
        step[0] = timedelta(hours=-1)
        store.renew(held.key, "w0", wall(), 60)  # a write on the stepped clock
        store.close()
    else:
        store.close()
        step[0] = timedelta(hours=-1)
    again = SqliteModelStore(tmp_path / "m.db", wall_clock=wall)
    try:
        # k3 was due before the restart (on the old process's clock, an hour ahead of the
        # wall clock now): due at once, not in an hour. k1's lease and k2's retry delay
        # still run on that clock: neither is taken early.
        assert [i.key for i in again.claim("w1", wall(), 60, 5)] == ["k3"]
        assert (held.key, later.key) == ("k1", "k2")
        assert again.store_now(wall()) > wall() + timedelta(minutes=59)
    finally:
        again.close()


def test_sqlite_keeps_its_clock_at_most_every_keep_clock_every_s(tmp_path: Path) -> None:
    store = SqliteModelStore(tmp_path / "m.db")
    store.keep_clock_every_s = 3600.0  # the default 1 s, made long enough for a loaded host

    def kept() -> list[tuple[str, str]]:
        with store._tx(write=False) as tx:
            return [(str(r[0]), str(r[1])) for r in
                    tx.rows("SELECT reading, wall FROM store_clock")]

    try:
        assert kept() == []
        store.enqueue(work("k1", datetime.now(UTC)))
        first = kept()
        assert len(first) == 1
        store.enqueue(work("k2", datetime.now(UTC)))  # within the period: not kept again
        assert kept() == first
        store.keep_clock_every_s = 0.0
        store.enqueue(work("k3", datetime.now(UTC)))
        (again,) = kept()
        assert again[0] > first[0][0]
    finally:
        store.close()


def test_sqlite_a_step_back_inside_the_keep_period_is_kept_by_the_next_write(
        tmp_path: Path) -> None:
    """rev16's doubt: the clock's reading is kept at most once a period, so a step back
    that came after the last reading kept and before a restart was not in the store: the
    new process resumed from the reading before the step, as if no time had passed since
    (the step hides it), and held back work that was due at the stop by that much. Here
    the wall clock goes 10 minutes forward (the clock follows) then an hour back, inside
    one keep period, and work handed back after it is due at once on the store's clock.
    Before, the restart resumed 10 minutes behind and claimed nothing; now the write after
    the step keeps its reading."""
    step = [timedelta(0)]

    def wall() -> datetime:
        return datetime.now(UTC) + step[0]

    store = SqliteModelStore(tmp_path / "m.db", wall_clock=wall)
    store.keep_clock_every_s = 3600.0  # the default 1 s, made long enough for a loaded host
    store.enqueue(work("k0", wall()))
    assert [i.key for i in store.claim("w0", wall(), 60)] == ["k0"]
    step[0] = timedelta(minutes=10)
    store.store_now(wall())  # a reading follows the step forward
    step[0] = timedelta(minutes=10) - timedelta(hours=1)
    at = wall()
    store.release("k0", "w0", "retry at once", at, 9, now=at)  # due now, store's clock
    store.close()
    again = SqliteModelStore(tmp_path / "m.db", wall_clock=wall)
    try:
        assert [i.key for i in again.claim("w1", wall(), 60)] == ["k0"]
    finally:
        again.close()
