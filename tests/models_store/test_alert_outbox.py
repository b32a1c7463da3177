"""The alert outbox's store contract, on SQLite and a real PostgreSQL server alike.

The store only keeps and hands over rows; what to suppress or group is decided by a
planner (capwatch.alerts.outbox.plan_routing in the daemon, simple stand-ins here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import pytest

from capwatch.contracts.store import RoutingPlanner
from capwatch.model.domain import Domain
from capwatch.models_store import (
    AlertDelivery,
    ModelRef,
    ModelStore,
    OutboxAlert,
    PendingAssessment,
    RoutingPlan,
    StoreError,
    VersionConflict,
    build_version,
)
from capwatch.models_store.sql import SqlModelStore, load_migrations
from tests.models_store.conftest import T0, StoreFactory


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def row(key: str, dedup: str = "d", t: datetime = T0, group: str = "g") -> OutboxAlert:
    return OutboxAlert(key=key, dedup_key=dedup, group_key=group, family="rover-v3",
                       alert_type="capability_reduced", alert={"summary": key, "n": [1, 2]},
                       created_at=t)


def deliver_each(sinks: Sequence[str] = ("kafka",)) -> RoutingPlanner:
    """A planner that lets every pending alert out alone."""
    def planner(pending: Sequence[OutboxAlert], last: Mapping[str, datetime]) -> RoutingPlan:
        return RoutingPlan(
            deliveries=tuple(AlertDelivery(f"d-{r.key}", r.alert, tuple(sinks), r.created_at,
                                           members=(r.key,)) for r in pending),
            sent={r.dedup_key: r.created_at for r in pending})
    return planner


def recorder(seen: list[Mapping[str, datetime]]) -> RoutingPlanner:
    """A planner that only notes the last-sent times it was shown."""
    def planner(pending: Sequence[OutboxAlert], last: Mapping[str, datetime]) -> RoutingPlan:
        seen.append(dict(last))
        return RoutingPlan()
    return planner


def test_alerts_are_written_with_their_version_and_a_retry_adds_nothing(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    base = store.put(build_version(ModelRef("rover-v3", None, 1), rover, T0))
    v = build_version(ModelRef("rover-v3", "rover-17", 1), drifted, at(5), parent=base)
    alerts = [row("v:rover-17@1|a", "a"), row("v:rover-17@1|b", "b")]
    store.put(v, alerts)
    store.put(v, alerts)  # the worker retried after a lost acknowledgement
    stored = store.outbox()
    assert [(r.key, r.status, r.alert) for r in stored] == [
        ("v:rover-17@1|a", "pending", {"summary": "v:rover-17@1|a", "n": [1, 2]}),
        ("v:rover-17@1|b", "pending", {"summary": "v:rover-17@1|b", "n": [1, 2]})]
    assert stored[0].created_at == T0


def test_a_refused_version_writes_none_of_its_alerts(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    store.put(build_version(ModelRef("rover-v3", None, 1), rover, T0))
    with pytest.raises(VersionConflict):
        store.put(build_version(ModelRef("rover-v3", None, 1), drifted, T0),
                  [row("lost-with-the-version")])
    assert store.outbox() == []


def test_queued_work_and_its_alert_are_one_write(store: ModelStore) -> None:
    item = PendingAssessment("rover-17#12", "rover-17", "rover-v3", {"i": 1}, T0)
    assert store.enqueue(item, [row("queued:rover-17#12")]) is True
    assert store.enqueue(item, [row("queued:rover-17#12")]) is False
    assert [r.key for r in store.outbox()] == ["queued:rover-17#12"]
    with pytest.raises(ValueError, match="needs a key"):
        store.enqueue(PendingAssessment("other", "a", "f", {}, T0), [row("")])
    assert [i.key for i in store.queue_items()] == ["rover-17#12"]


def test_work_queued_together_is_one_write(store: ModelStore,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def item(key: str) -> PendingAssessment:
        return PendingAssessment(key, key.split("#")[0], "rover-v3", {"k": key}, T0)

    assert store.enqueue(item("rover-1#1"), [row("queued:rover-1#1")]) is True
    # A bad item refuses the whole batch before anything is written.
    with pytest.raises(ValueError, match="needs a key"):
        store.enqueue_many([(item("rover-2#1"), [row("queued:rover-2#1")]),
                            (item("rover-3#1"), [row("")])])
    # A failure in the middle of the transaction writes none of it.
    add_alerts, calls = SqlModelStore._add_alerts, []

    def fail_second(self: SqlModelStore, tx: object, alerts: Sequence[OutboxAlert]) -> int:
        calls.append(len(alerts))
        if len(calls) == 2:
            raise StoreError("the store went away")
        return add_alerts(self, tx, alerts)  # type: ignore[arg-type]

    monkeypatch.setattr(SqlModelStore, "_add_alerts", fail_second)
    with pytest.raises(StoreError, match="went away"):
        store.enqueue_many([(item("rover-2#1"), [row("queued:rover-2#1")]),
                            (item("rover-3#1"), [row("queued:rover-3#1")])])
    monkeypatch.setattr(SqlModelStore, "_add_alerts", add_alerts)
    assert [i.key for i in store.queue_items()] == ["rover-1#1"]
    assert [r.key for r in store.outbox()] == ["queued:rover-1#1"]
    # Per item, whether it was new: the one queued before and a repeat within the batch
    # are not.
    assert store.enqueue_many([(item("rover-2#1"), [row("queued:rover-2#1")]),
                               (item("rover-1#1"), [row("queued:rover-1#1")]),
                               (item("rover-3#1"), []),
                               (item("rover-2#1"), [row("queued:rover-2#1")])]
                              ) == [True, False, True, False]
    assert store.enqueue_many([]) == []
    assert sorted(i.key for i in store.queue_items()) == ["rover-1#1", "rover-2#1",
                                                           "rover-3#1"]
    assert sorted(r.key for r in store.outbox()) == ["queued:rover-1#1", "queued:rover-2#1"]
    assert {i.key: i.payload for i in store.queue_items()}["rover-3#1"] == {"k": "rover-3#1"}


def test_failure_alerts_are_written_only_when_the_work_fails_for_good(
        store: ModelStore) -> None:
    store.enqueue(PendingAssessment("k", "a", "rover-v3", {}, T0))
    store.claim("w", T0, lease_seconds=30)
    assert store.release("k", "w", "agent unreachable", T0, max_attempts=2,
                         failure_alerts=[row("failed:k")]) is False
    assert store.outbox() == []
    store.claim("w", at(60), lease_seconds=30)
    assert store.release("k", "w", "agent unreachable", at(60), max_attempts=2,
                         failure_alerts=[row("failed:k")]) is True
    assert [r.key for r in store.outbox()] == ["failed:k"]


def test_routing_applies_the_plan_and_records_sent_times(store: ModelStore) -> None:
    store.add_alerts([row("a1", "a", at(0)), row("a2", "a", at(10)), row("b1", "b", at(20))])
    seen: list[tuple[list[str], dict[str, datetime]]] = []

    def planner(pending: Sequence[OutboxAlert], last: Mapping[str, datetime]) -> RoutingPlan:
        seen.append(([r.key for r in pending], dict(last)))
        return RoutingPlan(
            suppressed=("a2",),
            deliveries=(AlertDelivery("grp", {"merged": True}, ("kafka", "log"), at(30),
                                      members=("a1", "b1")),),
            sent={"a": at(0), "b": at(20)})

    store.route_alerts(planner, at(30))
    assert seen == [(["a1", "a2", "b1"], {})]
    assert {r.key: (r.status, r.delivery) for r in store.outbox()} == {
        "a1": ("routed", "grp"), "a2": ("suppressed", None), "b1": ("routed", "grp")}
    (d,) = store.deliveries("pending")
    assert (d.key, d.alert, d.sinks_pending, d.attempts) == (
        "grp", {"merged": True}, ("kafka", "log"), 0)
    # The next pass sees the sent times; nothing pending means the planner is not asked.
    store.add_alerts([row("a3", "a", at(40))])
    store.route_alerts(deliver_each(), at(41))
    assert [r.status for r in store.outbox() if r.key == "a3"] == ["routed"]

    def check_last(pending: Sequence[OutboxAlert], last: Mapping[str, datetime]) -> RoutingPlan:
        seen.append(([r.key for r in pending], dict(last)))
        return RoutingPlan()

    store.add_alerts([row("a4", "a", at(50))])
    store.route_alerts(check_last, at(51))
    assert seen[-1] == (["a4"], {"a": at(40)})


def test_the_delivery_that_carried_an_alert_and_its_members(store: ModelStore) -> None:
    store.add_alerts([row("a1", "a", at(0)), row("b1", "b", at(0)), row("c1", "c", at(0)),
                      row("x", "x", at(0))])

    def planner(pending: Sequence[OutboxAlert], last: Mapping[str, datetime]) -> RoutingPlan:
        return RoutingPlan(deliveries=(
            AlertDelivery("grp", {"merged": True}, ("am",), at(30), members=("a1", "b1")),
            AlertDelivery("solo", {"alone": True}, ("am",), at(30), members=("c1",))))

    store.route_alerts(planner, at(30))
    carried = store.carried_by(["a1", "c1", "x", "nowhere"])
    assert sorted(carried) == ["a1", "c1"]  # x is pending, "nowhere" does not exist
    assert (carried["a1"].key, carried["a1"].members, carried["a1"].alert) == (
        "grp", ("a1", "b1"), {"merged": True})
    assert carried["c1"].members == ("c1",)
    assert store.outbox_keys(["a1", "x", "nowhere"]) == {"a1", "x"}
    assert store.outbox_keys([]) == set() and store.carried_by([]) == {}


def test_sent_times_only_move_forward(store: ModelStore) -> None:
    store.add_alerts([row("late", "k", at(100))])
    store.route_alerts(deliver_each(), at(100))
    store.add_alerts([row("early", "k", at(5))])
    store.route_alerts(deliver_each(), at(101))
    seen: list[Mapping[str, datetime]] = []
    store.add_alerts([row("probe", "k", at(200))])
    store.route_alerts(recorder(seen), at(201))
    assert seen == [{"k": at(100)}]


def test_a_plan_naming_unknown_rows_changes_nothing(store: ModelStore) -> None:
    store.add_alerts([row("a1")])
    with pytest.raises(StoreError, match="not a pending alert"):
        store.route_alerts(lambda p, last: RoutingPlan(suppressed=("ghost",)), T0)
    with pytest.raises(StoreError, match="names no sink"):
        store.route_alerts(lambda p, last: RoutingPlan(deliveries=(
            AlertDelivery("d", {}, (), T0, members=("a1",)),)), T0)
    assert [r.status for r in store.outbox()] == ["pending"]
    assert store.deliveries() == []


def test_deliveries_are_leased_and_finished_per_sink(store: ModelStore) -> None:
    store.add_alerts([row("a1")])
    store.route_alerts(deliver_each(("kafka", "alertmanager")), T0)
    (d,) = store.claim_deliveries(at(1), lease_seconds=30)
    assert d.attempts == 1
    assert store.claim_deliveries(at(2), lease_seconds=30) == []  # held by the lease
    left = store.finish_delivery(d.key, ["kafka"], at(2), "alertmanager: HTTP 503", at(12))
    assert (left.status, left.sinks_pending, left.last_error) == (
        "pending", ("alertmanager",), "alertmanager: HTTP 503")
    assert store.claim_deliveries(at(11), lease_seconds=30) == []
    (again,) = store.claim_deliveries(at(12), lease_seconds=30)
    assert again.attempts == 2 and again.sinks_pending == ("alertmanager",)
    done = store.finish_delivery(d.key, ["alertmanager"], at(13))
    assert (done.status, done.sinks_pending) == ("sent", ())
    assert store.claim_deliveries(at(999), lease_seconds=30) == []
    with pytest.raises(StoreError, match="no alert delivery"):
        store.finish_delivery("nope", [], at(14))


def test_a_dead_deliverers_lease_runs_out(open_new: StoreFactory) -> None:
    a, b = open_new(), open_new()
    a.add_alerts([row("a1")])
    a.route_alerts(deliver_each(), T0)
    assert len(a.claim_deliveries(at(1), lease_seconds=30)) == 1
    # replica a dies before recording anything: b takes the delivery after the lease.
    assert b.claim_deliveries(at(20), lease_seconds=30) == []
    (d,) = b.claim_deliveries(at(32), lease_seconds=30)
    assert d.attempts == 2


def test_undelivered_counts_what_waits_and_what_is_owed_whoever_holds_it(
        store: ModelStore) -> None:
    assert store.undelivered() == (0, 0)
    store.add_alerts([row("a1"), row("a2")])
    assert store.undelivered() == (2, 0)
    store.route_alerts(deliver_each(), T0)
    assert store.undelivered() == (0, 2)
    # A claimed delivery is still owed: its holder may die before sending it.
    claimed = store.claim_deliveries(at(1), lease_seconds=30)
    assert store.undelivered() == (0, 2)
    store.finish_delivery(claimed[0].key, ["kafka"], at(2))
    assert store.undelivered() == (0, 1)


def test_outbox_survives_reopening(open_new: StoreFactory) -> None:
    first = open_new()
    first.add_alerts([row("a1", "a", at(0))])
    first.route_alerts(deliver_each(), at(1))
    first.add_alerts([row("a2", "a", at(2))])
    first.close()
    seen: list[Mapping[str, datetime]] = []
    second = open_new()
    second.route_alerts(recorder(seen), at(3))
    assert seen == [{"a": at(0)}]
    assert [r.key for r in second.outbox("pending")] == ["a2"]
    assert [d.key for d in second.deliveries("pending")] == ["d-a1"]


def test_prune_keeps_what_is_still_needed(store: ModelStore) -> None:
    store.add_alerts([row("old", "a", at(0)), row("stuck", "b", at(0))])
    store.route_alerts(deliver_each(), at(0))
    (d_old,) = [d for d in store.claim_deliveries(at(0), 30) if d.key == "d-old"]
    store.finish_delivery(d_old.key, ["kafka"], at(0))
    store.add_alerts([row("waiting", "c", at(0))])
    assert store.prune_alerts(at(3600)) == 4  # old's row and delivery, a's and b's sent times
    assert {r.key for r in store.outbox()} == {"stuck", "waiting"}
    assert [d.key for d in store.deliveries()] == ["d-stuck"]


def test_an_existing_store_gets_the_outbox_by_migration(store: ModelStore) -> None:
    assert isinstance(store, SqlModelStore)
    with store._tx() as tx:  # back to schema 1, as a store written by the previous release
        for table in ("alert_sent", "alert_deliveries", "alert_outbox"):
            tx.run(f"DROP TABLE {table}")
        tx.run("DELETE FROM schema_version WHERE version = 2")
    newest = len(load_migrations(store.dialect))
    with store._tx() as tx:
        assert {int(r[0]) for r in tx.rows("SELECT version FROM schema_version")} == set(
            range(1, newest + 1)) - {2}
    assert store.migrate() == newest
    store.add_alerts([row("a1")])
    assert [r.key for r in store.outbox()] == ["a1"]
