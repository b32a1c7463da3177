"""The model registry's contract, run against SQLite and a real PostgreSQL server alike."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from capwatch.contracts.store import Held, LeaseLost, OutboxAlert
from capwatch.model.domain import Domain
from capwatch.model.pal import Location, Mode
from capwatch.model.pddl_reader import parse_domain, read_domain
from capwatch.models_store import (
    ModelRef,
    ModelStore,
    PendingAssessment,
    StoreError,
    UnknownVersion,
    VersionConflict,
    build_version,
    diff_versions,
    lineage_chain,
    open_store,
    record_new_model,
)
from capwatch.models_store.sql import SqlModelStore, load_migrations
from tests.models_store.conftest import EXAMPLES, T0, StoreFactory


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


@pytest.fixture(scope="module")
def courier() -> Domain:
    return read_domain(EXAMPLES / "courier.pddl")


def test_baseline_round_trips_model_pddl_and_evidence(store: ModelStore, rover: Domain) -> None:
    v = record_new_model(store, "rover-v3", None, rover, T0, evidence={"source": "deploy"})
    got = store.get(ModelRef("rover-v3", None, 1))
    assert got is not None
    assert got == v
    assert got.domain() == rover
    assert parse_domain(got.pddl) == rover
    assert got.evidence == {"source": "deploy"}
    assert got.parent is None and got.delta_to_parent == 0 and got.delta_to_baseline == 0
    assert got.created_at == T0


def test_retried_write_of_same_version_is_a_no_op(store: ModelStore, rover: Domain) -> None:
    v = build_version(ModelRef("rover-v3", None, 1), rover, T0, evidence={"n": 1})
    first = store.put(v)
    again = store.put(build_version(ModelRef("rover-v3", None, 1), rover, T0,
                                    evidence={"n": 1}))
    assert again == first
    assert len(store.history("rover-v3")) == 1


def test_conflicting_write_is_an_error_and_changes_nothing(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    store.put(build_version(ModelRef("rover-v3", None, 1), rover, T0))
    with pytest.raises(VersionConflict, match="already holds a different model"):
        store.put(build_version(ModelRef("rover-v3", None, 1), drifted, T0))
    with pytest.raises(VersionConflict, match="is at version 1; cannot write 3"):
        store.put(build_version(ModelRef("rover-v3", None, 3), drifted, T0))
    assert [v.domain() for v in store.history("rover-v3")] == [rover]


def test_parent_must_exist(store: ModelStore, rover: Domain, drifted: Domain) -> None:
    ghost = build_version(ModelRef("rover-v3", None, 1), rover, T0)
    orphan = build_version(ModelRef("rover-v3", "rover-17", 1), drifted, T0, parent=ghost)
    with pytest.raises(UnknownVersion, match="does not exist"):
        store.put(orphan)
    assert store.history("rover-v3", "rover-17") == []


def test_agent_lineage_forks_from_baseline_with_delta_and_summary(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    base = record_new_model(store, "rover-v3", None, rover, T0)
    v1 = record_new_model(store, "rover-v3", "rover-17", drifted, hours(1),
                          evidence={"offsets": [12, 40], "queries": 3})
    assert v1.ref == ModelRef("rover-v3", "rover-17", 1)
    assert v1.parent == base.ref
    assert v1.delta_to_parent == 5 and v1.delta_to_baseline == 5
    (line,) = v1.summary
    assert line.startswith("sample_rock(?r ?s ?w) ")
    assert "now requires (battery_full ?r)" in line
    assert "no longer requires (battery_half ?r)" in line
    changed = {(c[0].atom.predicate, c[0].location, c[1], c[2]) for c in v1.changed_pal_tuples}
    assert ("battery_full", Location.PRE, Mode.ABSENT, Mode.POS) in changed

    # Drifting back: Δ to its parent is 5 again but Δ to the baseline is now 0.
    v2 = record_new_model(store, "rover-v3", "rover-17", rover, hours(2))
    assert v2.parent == v1.ref
    assert (v2.delta_to_parent, v2.delta_to_baseline) == (5, 0)
    assert [v.ref for v in lineage_chain(store, v2.ref)] == [base.ref, v1.ref, v2.ref]


def test_probability_only_change_is_a_new_version_with_a_summary(
        store: ModelStore, courier: Domain) -> None:
    record_new_model(store, "courier", None, courier, T0)
    pick = courier.action("pick")
    (o, noop) = pick.outcomes
    slipped = courier.replace_action(pick.replace(outcomes=(
        o.__class__(o.add, o.delete, 0.6), noop.__class__(noop.add, noop.delete, 0.4))))
    v = record_new_model(store, "courier", "courier-2", slipped, hours(1))
    assert v.delta_to_parent == 0
    assert v.summary == ("pick(?r ?p ?x) outcome probabilities changed: 0.9→0.6, 0.1→0.4",)
    assert store.latest("courier", "courier-2") == v


def test_model_of_agent_at_time(store: ModelStore, rover: Domain, drifted: Domain) -> None:
    b1 = record_new_model(store, "rover-v3", None, rover, hours(0))
    a1 = record_new_model(store, "rover-v3", "rover-17", drifted, hours(2))
    b2 = record_new_model(store, "rover-v3", None, drifted, hours(4))

    def at(agent: str, h: float, family: str | None = None) -> ModelRef | None:
        v = store.model_at(agent, hours(h), family)
        return v.ref if v else None

    assert at("rover-17", -1) is None  # before the family existed
    assert at("rover-17", 1) == b1.ref  # still on the baseline; family found from lineage
    assert at("rover-17", 2) == a1.ref  # inclusive at the creation instant
    assert at("rover-17", 5) == a1.ref  # its own lineage wins over a newer baseline
    assert at("rover-3", 3, "rover-v3") == b1.ref
    assert at("rover-3", 5, "rover-v3") == b2.ref
    assert at("rover-3", 5) is None  # never seen, family unknown


def test_history_lineages_and_diff(store: ModelStore, rover: Domain, drifted: Domain) -> None:
    record_new_model(store, "rover-v3", None, rover, hours(0))
    for i, agent in enumerate(["rover-2", "rover-1"]):
        record_new_model(store, "rover-v3", agent, drifted, hours(1 + i))
    record_new_model(store, "rover-v3", "rover-1", rover, hours(3))
    assert [v.version for v in store.history("rover-v3", "rover-1")] == [1, 2]
    summaries = {(s.agent_id, s.latest_version, s.delta_to_baseline)
                 for s in store.lineages("rover-v3")}
    assert summaries == {(None, 1, 0), ("rover-1", 2, 0), ("rover-2", 1, 5)}
    assert store.lineages("no-such-family") == []
    # The drift gauges' read: the same lineages, their newest versions, from the key.
    assert store.newest_versions() == [ModelRef("rover-v3", None, 1),
                                       ModelRef("rover-v3", "rover-1", 2),
                                       ModelRef("rover-v3", "rover-2", 1)]
    wanted = [*store.newest_versions(), ModelRef("rover-v3", "rover-9", 1)]
    models = store.model_texts(wanted)
    assert set(models) == set(wanted[:3])  # what is not stored is left out
    for ref, model in models.items():
        stored = store.get(ref)
        assert stored is not None and json.loads(model) == stored.model_json
    # rover-2@1 and rover-1@1 hold one model: the same text.
    both = store.model_texts([ModelRef("rover-v3", a, 1) for a in ("rover-1", "rover-2")])
    assert len(set(both.values())) == 1

    a = store.get(ModelRef("rover-v3", "rover-2", 1))
    b = store.get(ModelRef("rover-v3", None, 1))
    assert a is not None and b is not None
    d = diff_versions(a, b)
    assert d.delta == 5
    assert {(c[1], c[2]) for c in d.changes} == {
        (new, old) for _, old, new in a.changed_pal_tuples}


def test_writes_survive_reopening(open_new: StoreFactory, rover: Domain) -> None:
    first = open_new()
    v = record_new_model(first, "rover-v3", None, rover, T0)
    first.enqueue(PendingAssessment("k1", "rover-17", "rover-v3", {"action": "sample_rock"}, T0))
    first.save_offsets("capwatch", {("capwatch.transitions", 0): 41}, T0)
    first.close()
    second = open_new()
    assert second.latest("rover-v3") == v
    assert [i.key for i in second.queue_items("pending")] == ["k1"]
    assert second.load_offsets("capwatch") == {("capwatch.transitions", 0): 41}


def test_racing_writers_of_one_version_one_wins(
        open_new: StoreFactory, rover: Domain, drifted: Domain) -> None:
    a, b = open_new(), open_new()
    base = record_new_model(a, "rover-v3", None, rover, T0)
    offers = {
        "same-1": build_version(ModelRef("rover-v3", "r1", 1), drifted, T0, parent=base),
        "same-2": build_version(ModelRef("rover-v3", "r1", 1), drifted, T0, parent=base),
        "other": build_version(ModelRef("rover-v3", "r1", 1), rover, T0, parent=base),
    }
    outcomes: dict[str, str] = {}
    barrier = threading.Barrier(3)

    def write(name: str, s: ModelStore) -> None:
        barrier.wait()
        try:
            s.put(offers[name])
            outcomes[name] = "ok"
        except VersionConflict:
            outcomes[name] = "conflict"

    stores = {"same-1": a, "same-2": b, "other": open_new()}
    threads = [threading.Thread(target=write, args=(n, s)) for n, s in stores.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = a.history("rover-v3", "r1")
    assert len(history) == 1
    winner_is_same = history[0].key == offers["same-1"].key
    if winner_is_same:
        assert outcomes == {"same-1": "ok", "same-2": "ok", "other": "conflict"}
    else:
        assert outcomes == {"same-1": "conflict", "same-2": "conflict", "other": "ok"}


def test_queue_enqueue_is_idempotent(store: ModelStore) -> None:
    item = PendingAssessment("rover-17/sample_rock/12", "rover-17", "rover-v3",
                             {"offsets": [12]}, T0)
    assert store.enqueue(item) is True
    assert store.enqueue(item) is False
    (stored,) = store.queue_items()
    assert (stored.status, stored.attempts, stored.payload) == ("pending", 0, {"offsets": [12]})


def test_queue_claims_are_exclusive_and_leases_expire(store: ModelStore) -> None:
    for i in range(3):
        store.enqueue(PendingAssessment(f"k{i}", "a", "f", {"i": i}, hours(i / 10)))
    got_a = store.claim("replica-a", hours(1), lease_seconds=60, limit=2)
    got_b = store.claim("replica-b", hours(1), lease_seconds=60, limit=2)
    assert [i.key for i in got_a] == ["k0", "k1"]
    assert [i.key for i in got_b] == ["k2"]
    assert store.claim("replica-c", hours(1), lease_seconds=60) == []
    # replica-a dies: after its lease runs out its work goes to someone else.
    later = hours(1) + timedelta(seconds=61)
    retaken = store.claim("replica-c", later, lease_seconds=60, limit=5)
    assert sorted(i.key for i in retaken) == ["k0", "k1", "k2"]
    assert {i.attempts for i in retaken} == {2}
    with pytest.raises(StoreError, match="lease was lost"):
        store.complete("k0", "replica-a")
    store.complete("k0", "replica-c")
    assert [i.key for i in store.queue_items("done")] == ["k0"]
    with pytest.raises(StoreError, match="no pending assessment"):
        store.complete("nope", "replica-c")


def test_queue_release_retries_then_fails(store: ModelStore) -> None:
    store.enqueue(PendingAssessment("k", "a", "f", {}, T0))
    now = T0
    for attempt in range(1, 4):
        (item,) = store.claim("w", now, lease_seconds=30)
        assert item.attempts == attempt
        store.release("k", "w", f"agent unreachable #{attempt}", now + timedelta(minutes=5),
                      max_attempts=3)
        assert store.claim("w", now + timedelta(minutes=1), lease_seconds=30) == []
        now += timedelta(minutes=10)
    (failed,) = store.queue_items("failed")
    assert failed.last_error == "agent unreachable #3"
    assert store.claim("w", now + timedelta(days=1), lease_seconds=30) == []


def test_queue_items_by_key_reads_any_status(store: ModelStore) -> None:
    """How a work seen leaving the live queue ended (docs/daemon.md, "No loops")."""
    for key in ("done", "failed", "pending"):
        store.enqueue(PendingAssessment(key, "a", "f", {"k": key}, T0))
    store.claim("w", T0, lease_seconds=30, limit=2)
    store.complete("done", "w")
    store.release("failed", "w", "agent unavailable: refused", T0, max_attempts=0)
    got = store.queue_items_by_key(["done", "failed", "pending", "never", "done"])
    assert {k: (i.status, i.last_error, i.payload) for k, i in got.items()} == {
        "done": ("done", None, {"k": "done"}),
        "failed": ("failed", "agent unavailable: refused", {"k": "failed"}),
        "pending": ("pending", None, {"k": "pending"})}
    assert store.queue_items_by_key([]) == {}
    many = [f"m{i}" for i in range(1200)]  # more than one statement's worth of keys
    for key in many:
        store.enqueue(PendingAssessment(key, "a", "f", {}, T0))
    assert set(store.queue_items_by_key(many)) == set(many)


def test_a_work_keeps_when_it_ended(store: ModelStore) -> None:
    """The transaction that ends a work (done, or failed for good) writes when, on the
    store's clock: a replica that learns of the end later backs off from it
    (docs/daemon.md, "No loops"). A work given back for a retry has not ended."""
    for key in ("done", "failed", "retried"):
        store.enqueue(PendingAssessment(key, "a", "f", {}, T0))
    store.claim("w", T0, lease_seconds=30, limit=3)
    store.complete("done", "w", now=hours(1))
    store.release("failed", "w", "refused", hours(3), max_attempts=0, now=hours(2))
    store.release("retried", "w", "unreachable", hours(3), max_attempts=5, now=hours(2))
    got = store.queue_items_by_key(["done", "failed", "retried"])
    assert {k: (i.status, i.ended_at) for k, i in got.items()} == {
        "done": ("done", hours(1)), "failed": ("failed", hours(2)),
        "retried": ("pending", None)}
    assert [i.ended_at for i in store.queue_items("done")] == [hours(1)]
    assert store.store_now(hours(4)) == hours(4)  # the caller's clock, these tests'


def test_works_ended_before_the_store_kept_when_read_without_it(store: ModelStore) -> None:
    """A store written by the release before (schema 7) gets the column by migration;
    the works that ended before it read with no end time, and their readers fall back
    to the earliest time they know."""
    assert isinstance(store, SqlModelStore)
    store.enqueue(PendingAssessment("old", "a", "f", {}, T0))
    store.claim("w", T0, lease_seconds=30)
    store.complete("old", "w", now=hours(1))
    with store._tx() as tx:  # back to schema 7, the work ended there
        tx.run("ALTER TABLE activity_positions DROP COLUMN topic_id")  # migration 0009
        tx.run("ALTER TABLE drift_state DROP COLUMN topic_id")
        tx.run("ALTER TABLE pending_assessments DROP COLUMN ended_at")
        tx.run("DELETE FROM schema_version WHERE version >= 8")
    newest = len(load_migrations(store.dialect))
    assert store.migrate() == newest >= 8
    store.enqueue(PendingAssessment("new", "a", "f", {}, T0))
    store.claim("w", hours(2), lease_seconds=30)
    store.complete("new", "w", now=hours(3))
    got = store.queue_items_by_key(["old", "new"])
    assert {k: (i.status, i.ended_at) for k, i in got.items()} == {
        "old": ("done", None), "new": ("done", hours(3))}


def test_offsets_upsert_and_bad_offsets_write_nothing(store: ModelStore) -> None:
    store.save_offsets("g", {("t", 0): 10, ("t", 1): 5}, T0)
    store.save_offsets("g", {("t", 0): 11}, hours(1))
    assert store.load_offsets("g") == {("t", 0): 11, ("t", 1): 5}
    assert store.load_offsets("other") == {}
    with pytest.raises(ValueError, match="bad checkpoint"):
        store.save_offsets("g", {("t", 1): 6, ("t", 2): -1}, hours(2))
    assert store.load_offsets("g") == {("t", 0): 11, ("t", 1): 5}


def test_migrations_are_idempotent_and_refuse_a_newer_schema(store: ModelStore) -> None:
    assert isinstance(store, SqlModelStore)
    newest = len(load_migrations(store.dialect))
    assert store.schema_version() == newest
    assert store.migrate() == newest
    with store._tx() as tx:
        tx.run("INSERT INTO schema_version (version, name, applied_at) "
               "VALUES (99, 'future', CURRENT_TIMESTAMP)")
    with pytest.raises(StoreError, match="upgrade capwatch"):
        store.migrate()


def test_naive_timestamps_are_refused(store: ModelStore, rover: Domain) -> None:
    with pytest.raises(ValueError, match="no time zone"):
        record_new_model(store, "rover-v3", None, rover, datetime(2026, 1, 1))
    assert store.history("rover-v3") == []


def test_open_store_refuses_unknown_schemes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported store URL"):
        open_store("mysql://x")
    with pytest.raises(FileNotFoundError):
        open_store(str(tmp_path / "missing-dir" / "m.db"))
    s = open_store(f"sqlite://{tmp_path}/m.db")
    s.close()
    assert (tmp_path / "m.db").exists()


def test_own_lineages_names_the_agents_with_versions_of_their_own(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    base = store.put(build_version(ModelRef("rover-v1", None, 1), rover, hours(0)))
    store.put(build_version(ModelRef("rover-v1", "rover-a", 1), drifted, hours(1), parent=base))
    many = [f"rover-{i}" for i in range(1200)]  # more than one statement's chunk
    assert store.own_lineages([*many, "rover-a", "rover-a"]) == {("rover-v1", "rover-a")}
    assert store.own_lineages([]) == set()


def test_a_version_for_claimed_work_is_written_only_while_its_lease_is_held(
        store: ModelStore, open_new: StoreFactory, rover: Domain, drifted: Domain) -> None:
    """The lease is checked and renewed in the version's own transaction: a worker whose
    lease another took writes neither the version nor its alerts, and once the holder's
    version is in, no one can claim the work until the renewed lease runs out."""
    baseline = record_new_model(store, "rover-v1", None, rover, T0)
    store.enqueue(PendingAssessment("k", "rover-a", "rover-v1", {}, T0))
    assert [i.key for i in store.claim("a/w0", T0, lease_seconds=60)] == ["k"]
    other = open_new()  # a second replica
    assert [i.key for i in other.claim("b/w0", hours(0) + timedelta(seconds=61),
                                       lease_seconds=60)] == ["k"]
    v = build_version(ModelRef("rover-v1", "rover-a", 1), drifted, T0, parent=baseline,
                      baseline=rover, evidence={"assessment_key": "k"})
    alert = OutboxAlert(key="version:k", dedup_key="d", group_key="g", family="rover-v1",
                        alert_type="capability_reduced", alert={"summary": "s"},
                        created_at=T0)
    at = T0 + timedelta(seconds=62)
    with pytest.raises(LeaseLost, match="held by 'b/w0'"):
        store.put(v, [alert], Held("k", "a/w0", at, 60))
    assert store.history("rover-v1", "rover-a") == []
    assert store.outbox() == []
    assert other.put(v, [alert], Held("k", "b/w0", at, 60)) == v
    assert store.history("rover-v1", "rover-a") == [v]
    assert [a.key for a in store.outbox()] == ["version:k"]
    # b/w0's claim leased the work until T0 + 121 s; the write renewed it to T0 + 122 s.
    assert store.claim("c/w0", T0 + timedelta(seconds=121.5), lease_seconds=60) == []
    # What ends the work is written with its completion, by its holder only.
    ending = OutboxAlert(key="ended:k", dedup_key="d", group_key="g", family="rover-v1",
                         alert_type="unexplained_inconsistency", alert={"summary": "e"},
                         created_at=T0)
    with pytest.raises(LeaseLost):
        store.complete("k", "a/w0", [ending])
    assert [a.key for a in store.outbox()] == ["version:k"]
    other.complete("k", "b/w0", [ending])
    assert sorted(a.key for a in store.outbox()) == ["ended:k", "version:k"]
    assert [i.key for i in store.queue_items("done")] == ["k"]


def test_a_claim_racing_a_version_write_does_not_take_the_work(
        store: ModelStore, open_new: StoreFactory, rover: Domain, drifted: Domain,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: the write renews the lease before it inserts the version, so the row
    stays locked until the commit; a claim meanwhile skips it (its lease looks run out
    from the claimer's clock), and finds it renewed afterwards."""
    assert isinstance(store, SqlModelStore)
    if store.dialect != "postgresql":
        pytest.skip("SQLite runs one write transaction at a time (BEGIN IMMEDIATE)")
    baseline = record_new_model(store, "rover-v1", None, rover, T0)
    store.enqueue(PendingAssessment("k", "rover-a", "rover-v1", {}, T0))
    store.claim("a/w0", T0, lease_seconds=60)
    v = build_version(ModelRef("rover-v1", "rover-a", 1), drifted, T0, parent=baseline,
                      baseline=rover, evidence={"assessment_key": "k"})
    inside, go = threading.Event(), threading.Event()
    real = store._put

    def held_open(tx: object, version: object) -> object:
        inside.set()
        assert go.wait(30)
        return real(tx, version)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "_put", held_open)
    written: list[object] = []
    writer = threading.Thread(target=lambda: written.append(
        store.put(v, (), Held("k", "a/w0", T0 + timedelta(seconds=59), 60))))
    writer.start()
    try:
        assert inside.wait(30)
        other = open_new()
        assert other.claim("b/w0", T0 + timedelta(seconds=61), lease_seconds=60) == []
    finally:
        go.set()
        writer.join(30)
    assert written == [v]
    assert other.claim("b/w0", T0 + timedelta(seconds=61), lease_seconds=60) == []
    assert other.claim("b/w0", T0 + timedelta(seconds=120), lease_seconds=60) != []
