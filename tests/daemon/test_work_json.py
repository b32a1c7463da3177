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

