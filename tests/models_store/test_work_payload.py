"""A work item without floats is written with the store's faster encoder and reads back
the same on both backends; one with drift evidence still goes through json."""

from __future__ import annotations

import json
import math

import pytest

from capwatch.contracts.store import PendingAssessment
from capwatch.contracts.versions import ModelRef
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.work import WorkItem
from capwatch.models_store import ModelStore
from tests.models_store.conftest import T0


def test_an_item_without_floats_is_written_fast_and_reads_back_the_same(
        store: ModelStore) -> None:
    names = ['q"uote', "back\\slash", "tab\there", "nl\nx", "\x01ctl", "é", "雪", "💡", "a/b"]
    state = frozenset(("at", n, m) for n in names for m in names[:3])
    t = AgentTransition("a1", "f", "ep", 1, None, state, ("go", names[0]),
                        state | {("at", "x", "y")}, False, None, 0, 7)
    plain = WorkItem(key="k1", agent_id="a1", family="f", partition=0,
                     base=ModelRef("f", None, 1), inconsistent=(t,), executed=(t,),
                     kinds=("go|x",))
    drifted = WorkItem(key="k2", agent_id="a1", family="f", partition=0,
                       base=ModelRef("f", None, 1), drift={"go": {"p": 0.25, "q": 1e-05}})
    assert plain.floatless and not drifted.floatless
    assert store.enqueue_many([(PendingAssessment(i.key, i.agent_id, i.family, i.to_json(),
                                                  T0, finite=i.floatless), ())
                               for i in (plain, drifted)]) == [True, True]
    back = {i.key: i for i in store.queue_items("pending")}
    assert not back["k1"].finite  # not stored
    assert back["k1"].payload == json.loads(json.dumps(plain.to_json()))
    assert WorkItem.from_pending(back["k1"]).inconsistent == plain.inconsistent
    assert back["k2"].payload["drift"] == {"go": {"p": 0.25, "q": 1e-05}}


def test_drift_evidence_goes_through_json_which_keeps_a_nan(tmp_path: object) -> None:
    # SQLite only: PostgreSQL's jsonb takes no NaN whichever encoder writes it. The faster
    # encoder would write null.
    from pathlib import Path

    from capwatch.models_store.sqlite import SqliteModelStore

    store = SqliteModelStore(Path(str(tmp_path)) / "m.db")
    item = WorkItem(key="k", agent_id="a1", family="f", partition=0,
                    base=ModelRef("f", None, 1), drift={"go": {"p": math.nan}})
    store.enqueue_many([(PendingAssessment(item.key, item.agent_id, item.family,
                                           item.to_json(), T0, finite=item.floatless), ())])
    [back] = store.queue_items("pending")
    assert math.isnan(back.payload["drift"]["go"]["p"])
    store.close()


@pytest.mark.parametrize("finite", [True, False])
def test_the_flag_is_left_out_of_equality(finite: bool) -> None:
    a = PendingAssessment("k", "a", "f", {}, T0)
    assert PendingAssessment("k", "a", "f", {}, T0, finite=finite) == a
