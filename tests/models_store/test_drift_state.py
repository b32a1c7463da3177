"""Saved drift state in the store, on SQLite and a real PostgreSQL server alike."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from capwatch.contracts.store import DriftSnapshot
from capwatch.models_store import ModelRef, ModelStore
from tests.models_store.conftest import T0, StoreFactory

V1 = ModelRef("courier-v1", None, 1)
V2 = ModelRef("courier-v1", "courier-7", 1)


def snap(agent: str, partition: int, offset: int, model: ModelRef = V1,
         source: str = "capwatch.transitions", seen: int = 0) -> DriftSnapshot:
    state = {"format": "capwatch.drift-state", "version": 1, "model": model.to_json(),
             "actions": {"pick": {"seen": seen, "values": "eJwDAAAAAAE=", "r": [0.5, 1e-300]}}}
    return DriftSnapshot(agent, model, source, partition, offset, state,
                         T0 + timedelta(seconds=offset))


def test_snapshots_round_trip_per_partition_and_survive_reopening(
        open_new: StoreFactory) -> None:
    store = open_new()
    written = [snap("courier-1", 0, 10), snap("courier-2", 1, 7, V2, seen=3),
               snap("courier-3", 1, 9)]
    assert store.save_drift_snapshots("g", written) == 3
    again = open_new()  # a restarted replica, or the one a partition moved to
    assert again.load_drift_snapshots("g", "capwatch.transitions") == written
    assert again.load_drift_snapshots("g", "capwatch.transitions", [1]) == written[1:]
    assert again.load_drift_snapshots("g", "capwatch.transitions", []) == []
    assert again.load_drift_snapshots("other-group", "capwatch.transitions") == []
    assert again.load_drift_snapshots("g", "another-topic") == []
    got = again.load_drift_snapshots("g", "capwatch.transitions", [1])[0]
    assert got.model == V2 and got.family == "courier-v1"
    assert got.state["actions"]["pick"]["r"] == [0.5, 1e-300]


def test_a_newer_snapshot_replaces_an_older_one_but_never_goes_back(store: ModelStore) -> None:
    store.save_drift_snapshots("g", [snap("courier-1", 0, 10)])
    newer = snap("courier-1", 0, 25, V2, seen=9)
    assert store.save_drift_snapshots("g", [newer]) == 1
    # A replica that lost the partition writes late, with an older position: ignored.
    assert store.save_drift_snapshots("g", [snap("courier-1", 0, 20)]) == 0
    assert store.load_drift_snapshots("g", "capwatch.transitions") == [newer]
    # Another partition (the topic was repartitioned) is a new position, not an older one.
    moved = snap("courier-1", 3, 2)
    assert store.save_drift_snapshots("g", [moved]) == 1
    assert store.load_drift_snapshots("g", "capwatch.transitions") == [moved]


def test_bad_snapshots_write_nothing(store: ModelStore) -> None:
    with pytest.raises(ValueError, match="bad drift snapshot"):
        store.save_drift_snapshots("g", [snap("courier-1", 0, 5), snap("courier-2", 0, -1)])
    with pytest.raises(ValueError, match="no time zone"):
        store.save_drift_snapshots("g", [DriftSnapshot("a", V1, "t", 0, 1, {},
                                                       datetime(2026, 1, 1))])
    assert store.load_drift_snapshots("g", "capwatch.transitions") == []


def test_snapshot_text_reads_back_as_the_values_written() -> None:
    # Drift snapshots are written by the faster encoder; its text reads back as the same
    # values (floats included) as the general one's, keys in the same order.
    import json

    from capwatch.models_store.sql import dumps, dumps_finite
    state = snap("courier-1", 0, 10).state | {"p0": [1e-05, 0.1, 1 / 3, 1e16, 5e-324],
                                               "log_threshold": 11.512925464970229,
                                               "name": "é", "none": None, "flag": True}
    assert json.loads(dumps_finite(state)) == json.loads(dumps(state)) == state
    assert list(json.loads(dumps_finite(state))) == sorted(state)


def test_a_snapshot_on_a_topic_created_again_replaces_one_of_the_topic_before(
        store: ModelStore) -> None:
    """The topic deleted and created again under its name (Kafka gives it another id):
    its offsets start from 0 again, so its snapshots' positions are lower than the last
    of the topic before, and are not a late write of a replica that lost the partition.
    Before migration 0009 they were refused until the new topic's offsets passed the old
    position, and a restart restored tables weeks old."""
    old = replace(snap("courier-1", 0, 500), topic_id="id-1")
    assert store.save_drift_snapshots("g", [old]) == 1
    assert store.load_drift_snapshots("g", "capwatch.transitions") == [old]
    # The same topic, an older position: a late write, ignored as before.
    assert store.save_drift_snapshots("g", [replace(snap("courier-1", 0, 20),
                                                    topic_id="id-1")]) == 0
    new = replace(snap("courier-1", 0, 20, seen=2), topic_id="id-2")
    assert store.save_drift_snapshots("g", [new]) == 1
    assert store.load_drift_snapshots("g", "capwatch.transitions") == [new]
    # A source that knows no id tells nothing apart: positions as before.
    assert store.save_drift_snapshots("g", [snap("courier-1", 0, 10)]) == 0
