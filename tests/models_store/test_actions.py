"""Operator actions and the console's reads, against SQLite and a real PostgreSQL alike."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from capwatch.model.domain import Domain
from capwatch.models_store import ModelRef, ModelStore, OutboxAlert, record_new_model
from capwatch.models_store.actions import (
    ActionRefused,
    AgentActivity,
    action_store,
    promote,
    request_assessment,
    review,
    reviews,
    rollback,
)
from capwatch.models_store.sql import SqlModelStore
from tests.models_store.conftest import T0


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


def _drifted_agent(store: ModelStore, rover: Domain, drifted: Domain) -> None:
    record_new_model(store, "rover-v3", None, rover, T0)
    record_new_model(store, "rover-v3", "rover-17", drifted, hours(1),
                     evidence={"queries": 7})


def test_reviews_are_recorded_with_who_and_why_newest_first(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    s = action_store(store)
    _drifted_agent(store, rover, drifted)
    ref = ModelRef("rover-v3", "rover-17", 1)
    review(s, "reject", ref, "alice", "the battery report says otherwise", hours(2))
    review(s, "approve", ref, "bob", "confirmed with the vendor", hours(3))
    got = s.actions("rover-v3", "rover-17")
    assert [(a.kind, a.actor, a.target) for a in got] == [("approve", "bob", ref),
                                                          ("reject", "alice", ref)]
    assert reviews(got)[ref].kind == "approve"
    assert got[0].describe() == ("bob approved rover-v3/rover-17@1: confirmed with the "
                                 "vendor")
    with pytest.raises(ActionRefused, match="family baseline"):
        review(s, "approve", ModelRef("rover-v3", None, 1), "bob", "x", hours(4))
    with pytest.raises(ActionRefused, match="no model version"):
        review(s, "approve", ModelRef("rover-v3", "rover-17", 9), "bob", "x", hours(4))
    with pytest.raises(ActionRefused, match="say why"):
        review(s, "approve", ref, "bob", "  ", hours(4))
    with pytest.raises(ActionRefused, match="say who"):
        review(s, "approve", ref, "", "because", hours(4))
    assert len(s.actions()) == 2  # refused actions wrote nothing


def test_rollback_appends_the_earlier_model_and_queues_its_installation(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    s = action_store(store)
    _drifted_agent(store, rover, drifted)
    base = ModelRef("rover-v3", None, 1)
    action = rollback(s, "rover-v3", "rover-17", base, "carol", "false alarm", hours(2),
                      key="k1")
    v2 = store.latest("rover-v3", "rover-17")
    assert v2 is not None and v2.version == 2
    assert v2.parent == ModelRef("rover-v3", "rover-17", 1)
    assert v2.domain() == rover and v2.delta_to_baseline == 0 and v2.delta_to_parent == 5
    assert v2.evidence["operator_action"] == "k1"
    assert v2.evidence["restores"] == base.to_json()
    assert action.result == {"version": v2.ref.to_json(), "work": "operator/k1"}
    (item,) = store.queue_items("pending")
    assert item.key == "operator/k1" and v2.evidence["assessment_key"] == item.key
    assert item.payload["base"] == ModelRef("rover-v3", "rover-17", 1).to_json()
    # A retry with the same key records nothing more.
    again = rollback(s, "rover-v3", "rover-17", base, "carol", "false alarm", hours(2.5),
                     key="k1")
    assert again == action
    assert [v.version for v in store.history("rover-v3", "rover-17")] == [1, 2]
    assert len(store.queue_items()) == 1
    with pytest.raises(ActionRefused, match="already holds the model"):
        rollback(s, "rover-v3", "rover-17", base, "carol", "again", hours(3))
    with pytest.raises(ActionRefused, match="not in the ancestry"):
        rollback(s, "rover-v3", "rover-17", ModelRef("rover-v3", "rover-99", 1), "carol",
                 "x", hours(3))
    with pytest.raises(ActionRefused, match="nothing to roll back"):
        rollback(s, "rover-v3", "rover-99", base, "carol", "x", hours(3))


def test_promote_makes_a_new_baseline_version(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    s = action_store(store)
    _drifted_agent(store, rover, drifted)
    promote(s, ModelRef("rover-v3", "rover-17", 1), "dana", "fleet firmware 2.1", hours(2))
    b2 = store.latest("rover-v3", None)
    assert b2 is not None and b2.version == 2 and b2.domain() == drifted
    assert b2.evidence["promoted_from"] == {"family": "rover-v3", "agent_id": "rover-17",
                                            "version": 1}
    (a,) = s.actions("rover-v3", None, any_agent=False)
    assert a.kind == "promote" and a.result["version"]["version"] == 2
    with pytest.raises(ActionRefused, match="already holds"):
        promote(s, ModelRef("rover-v3", "rover-17", 1), "dana", "again", hours(3))


def test_assess_now_queues_work_naming_the_method_and_current_model(
        store: ModelStore, rover: Domain, drifted: Domain) -> None:
    s = action_store(store)
    _drifted_agent(store, rover, drifted)
    request_assessment(s, "rover-v3", "rover-17", "verify", "erin", "spot check", hours(2),
                       key="a1")
    request_assessment(s, "rover-v3", "rover-02", "daaisy", "erin", "spot check", hours(2),
                       key="a2")
    items = {i.key: i for i in store.queue_items("pending")}
    assert items["operator/a1"].payload["base"] == ModelRef("rover-v3", "rover-17",
                                                            1).to_json()
    assert items["operator/a1"].payload["operator"] == {"action": "a1", "method": "verify"}
    # An agent without a lineage of its own is assessed against the family baseline.
    assert items["operator/a2"].payload["base"] == ModelRef("rover-v3", None, 1).to_json()
    with pytest.raises(ActionRefused, match="unknown method"):
        request_assessment(s, "rover-v3", "rover-17", "guess", "erin", "x", hours(2))
    assert ("rover-v3", "rover-02") in s.known_agents()


def test_alert_history_filters_by_agent_and_pages_by_time(store: ModelStore) -> None:
    s = action_store(store)

    def alert(key: str, agent: str, h: float) -> OutboxAlert:
        return OutboxAlert(key, f"capability_reduced|rover-v3|{agent}|sample_rock|f",
                           "g", "rover-v3", "capability_reduced",
                           {"agent_id": agent, "summary": key}, hours(h))

    # rover_1 would match rover-1's LIKE pattern if "_" were not escaped.
    store.add_alerts([alert("a", "rover-1", 1), alert("b", "rover-2", 2),
                      alert("c", "rover-1", 3), alert("d", "rover_1", 4)])
    assert [a.key for a in s.alert_history()] == ["d", "c", "b", "a"]
    assert [a.key for a in s.alert_history("rover-v3", "rover-1")] == ["c", "a"]
    assert [a.key for a in s.alert_history(agent_id="rover-1")] == ["c", "a"]
    assert [a.key for a in s.alert_history(limit=2, before=hours(3.5))] == ["c", "b"]
    assert s.alert_history("courier-v1") == []


def test_activity_adds_up_across_saves_and_keeps_the_newest_time(store: ModelStore) -> None:
    s = action_store(store)
    s.save_activity([AgentActivity("rover-v3", "rover-1", 10, 1, hours(2), "r1")])
    s.save_activity([AgentActivity("rover-v3", "rover-1", 5, 0, hours(1), "r2"),
                     AgentActivity("rover-v3", "rover-2", 3, 0, hours(1), "r2")])
    one, two = s.activity("rover-v3")
    assert (one.agent_id, one.transitions, one.inconsistent) == ("rover-1", 15, 1)
    assert one.last_seen == hours(2)
    assert (two.agent_id, two.transitions) == ("rover-2", 3)
    assert s.known_agents() == [("rover-v3", "rover-1"), ("rover-v3", "rover-2")]


def test_activity_positions_are_saved_with_the_counts_in_a_table_of_their_own(
        store: ModelStore) -> None:
    s = action_store(store)
    s.save_activity([AgentActivity("rover-v3", "rover-1", 10, 1, hours(2), "r1")],
                    "g", {("t", 0): 11, ("t", 1): 5})
    s.save_activity([AgentActivity("rover-v3", "rover-1", 2, 0, hours(3), "r1")],
                    "g", {("t", 0): 13})
    s.save_activity([AgentActivity("rover-v3", "rover-2", 1, 0, hours(3), "r2")],
                    "other", {("t", 0): 3})
    assert s.activity_positions("g") == {("t", 0): 13, ("t", 1): 5}
    assert s.activity_positions("other") == {("t", 0): 3}
    assert s.activity_positions("none") == {}
    # Not consumer offsets: whoever sums that table reads the commits alone (session 20's
    # rows there under '<group>#activity' doubled the chaos harness's checkpoint).
    assert store.load_offsets("g") == {} and store.load_offsets("g#activity") == {}
    s.save_activity([AgentActivity("rover-v3", "rover-1", 1, 0, hours(4), "r1")])
    assert s.activity_positions("g") == {("t", 0): 13, ("t", 1): 5}  # no group: unchanged
    with pytest.raises(ValueError, match="bad activity position"):
        s.save_activity([], "g", {("t", -1): 1})


def test_counts_and_positions_are_one_transaction(store: ModelStore) -> None:
    """A position the database refuses (past BIGINT) takes the counts written before it in
    the same call back with it: a replay skips only what the counts hold."""
    s = action_store(store)
    s.save_activity([AgentActivity("rover-v3", "rover-1", 10, 0, hours(1), "r1")],
                    "g", {("t", 0): 10})
    with pytest.raises(Exception):  # noqa: B017 - the driver's own error, per backend
        s.save_activity([AgentActivity("rover-v3", "rover-1", 5, 0, hours(2), "r1")],
                        "g", {("t", 0): 2**63})
    (one,) = s.activity()
    assert (one.transitions, one.last_seen) == (10, hours(1))
    assert s.activity_positions("g") == {("t", 0): 10}


def test_activity_rows_are_indexed_by_their_key_alone(store: ModelStore) -> None:
    # Every checkpoint upserts a row per agent that ran: an index on last_seen, which no
    # query reads, cost a third of that (migration 0005 drops it).
    s = action_store(store)
    s.save_activity([AgentActivity("rover-v3", "rover-1", 1, 0, hours(1), "r1")])
    assert isinstance(store, SqlModelStore)
    sql = ("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
           if store.dialect == "sqlite" else
           "SELECT indexname FROM pg_indexes WHERE tablename = ? "
           "AND schemaname = current_schema()")
    with store._tx(write=False) as tx:
        names = {str(r[0]) for r in tx.rows(sql, ("agent_activity",))}
    assert "agent_activity_seen" not in names
    assert len(names) == 1  # the primary key's
