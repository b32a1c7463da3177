"""A work item's JSON writes each state's atoms sorted, whatever sets it shares between
its transitions (daemon.work._StatesJson against sorting each state alone)."""

from __future__ import annotations

import json
import random

from capwatch.contracts.versions import ModelRef
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.work import DriftProbe, WorkItem


def _sorted_alone(atoms: frozenset[tuple[str, ...]]) -> list[list[str]]:
    return sorted(list(a) for a in atoms)


def test_each_state_is_written_as_its_atoms_sorted_alone() -> None:
    rng = random.Random(3)
    names = ["a", "ab", "a-b", "b", "é", "a b", "A", ""]
    pool = [(p, *(rng.choice(names) for _ in range(k)))
            for p in ("at", "at-x", "on", "a") for k in range(3) for _ in range(6)]
    for _ in range(30):
        states = [frozenset(rng.sample(pool, rng.randrange(0, 25))) for _ in range(8)]

        def chain(n: int, offset: int, states: list[frozenset[tuple[str, ...]]] = states
                  ) -> tuple[AgentTransition, ...]:
            # Consecutive transitions share their set (s_{t+1} = s'_t), as the decoder
            # and the monitor hand them over, and some states repeat.
            picks = [rng.choice(states) for _ in range(n + 1)]
            return tuple(AgentTransition("a1", "f", None, i, None, picks[i], ("go", "x"),
                                         picks[i + 1], False, None, 0, offset + i)
                         for i in range(n))

        item = WorkItem(key="k", agent_id="a1", family="f", partition=0,
                        base=ModelRef("f", None, 1), inconsistent=chain(3, 0),
                        executed=chain(rng.randrange(0, 12), 10),
                        probes={"go": DriftProbe(("go", "x"), rng.choice(states))})
        got = item.to_json()
        for o, t in zip(got["inconsistent"], item.inconsistent, strict=True):
            assert o["state"] == _sorted_alone(t.state)
            assert o["next_state"] == _sorted_alone(t.next_state)
        for o, t in zip(got["executed"], item.executed, strict=True):
            assert o["state"] == _sorted_alone(t.state)
            assert o["next_state"] == _sorted_alone(t.next_state)
        assert got["drift_probes"]["go"]["state"] == _sorted_alone(item.probes["go"].state)
        # Read back, it is the same work.
        back = WorkItem.from_json("k", json.loads(json.dumps(got)))
        assert back.inconsistent == item.inconsistent
        assert [(t.state, t.action, t.next_state) for t in back.executed] \
            == [(t.state, t.action, t.next_state) for t in item.executed]
        assert back.probes == item.probes


def test_an_item_without_floats_is_stored_with_the_faster_encoder_and_reads_back_the_same(
        tmp_path: object) -> None:
    import math
    from datetime import UTC, datetime
    from pathlib import Path

    from capwatch.contracts.store import PendingAssessment
    from capwatch.models_store.sqlite import SqliteModelStore

    names = ['q"uote', "back\\slash", "tab\there", "nl\nx", "\x01ctl", "é", "雪", "💡", "a/b"]
    state = frozenset(("at", n, m) for n in names for m in names[:3])
    t = AgentTransition("a1", "f", "ep", 1, None, state, ("go", names[0]),
                        state | {("at", "x", "y")}, False, None, 0, 7)
    plain = WorkItem(key="k1", agent_id="a1", family="f", partition=0,
                     base=ModelRef("f", None, 1), inconsistent=(t,), executed=(t,),
                     kinds=("go|x",))
    drifted = WorkItem(key="k2", agent_id="a1", family="f", partition=0,
                       base=ModelRef("f", None, 1), drift={"go": {"p": math.nan, "q": 0.1}})
    assert plain.floatless and not drifted.floatless
    store = SqliteModelStore(Path(str(tmp_path)) / "m.db")
    now = datetime(2026, 1, 1, tzinfo=UTC)
    store.enqueue_many([(PendingAssessment(i.key, i.agent_id, i.family, i.to_json(), now,
                                           finite=i.floatless), ()) for i in (plain, drifted)])
    back = {i.key: i for i in store.queue_items("pending")}
    assert back["k1"].payload == json.loads(json.dumps(plain.to_json()))
    assert WorkItem.from_pending(back["k1"]).inconsistent == plain.inconsistent
    # An item with drift evidence goes through json, which keeps a NaN (the faster
    # encoder would write null).
    assert math.isnan(back["k2"].payload["drift"]["go"]["p"])
    store.close()
