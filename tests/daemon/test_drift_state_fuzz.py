"""Property test: checkpoints, evictions and partition moves at random points leave every
agent's drift tables, and the work they queue, exactly as in a daemon that kept every
agent in memory all along (simulated fleet, SQLite store)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.daemon.service import build_service
from capwatch.monitor.snapshot import encode_action_state
from tests.daemon.helpers import EXAMPLES, simulated

DRIFTING = "courier-v1-002"


def _started(path: Path) -> Any:
    path.mkdir()
    drifts = [{"agent_id": DRIFTING, "at_step": 20,
               "domain": str(EXAMPLES / "courier-pick-wear.pddl")}]
    cfg = simulated(path, agents=3, rounds=300, drifts=drifts,
                    scheduler={"checkpoint_s": 3600.0})
    d = build_service(cfg, publisher=MemoryPublisher()).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    return d


def _tables(d: Any) -> dict[str, str]:
    """Every agent's tables, encoded afresh (not through the snapshot's cache)."""
    return {w.agent_id: json.dumps(
        {n: encode_action_state(s) for n, s in
         d.drift.agent_states(w.agent_id, values_array=True).items()}, sort_keys=True)
        for w in d.registry}


def _queued(d: Any) -> list[tuple[str, str, str]]:
    return sorted((i.agent_id, i.key, json.dumps(i.payload, sort_keys=True, default=str))
                  for i in d.store.queue_items())


@pytest.mark.parametrize("seed", range(6))
def test_random_checkpoints_evictions_and_moves_change_nothing(tmp_path: Path,
                                                                 seed: int) -> None:
    rng = random.Random(seed)
    d, ref = _started(tmp_path / "subject"), _started(tmp_path / "reference")
    records: list[Any] = []
    while len(records) < 1800:
        records += d.source.poll(1.0)
    at = 0
    evicted = moved = packed = 0
    now = 0.0
    while at < len(records):
        n = rng.randrange(1, 60)
        d.handle_batch(records[at:at + n])
        ref.handle_batch(records[at:at + n])
        at += n
        what = rng.random()
        if what < 0.3:
            d.checkpoints.checkpoint()
        elif what < 0.7:
            evicted += d.checkpoints.evict(rng.randrange(0, len(d.registry) + 1))
        elif what < 0.8:
            # The partition moves away and comes back: records since the commit again.
            d.revoke({0})
            d.assign({0})
            committed = d.checkpoints._committed.get(0, 0)
            d.handle_batch([r for r in records[:at] if r.offset >= committed])
            moved += 1
        elif what < 0.9:
            # Idle agents trimmed, then frozen: their tables packed (shared when alike).
            now += 1.0
            d.registry.compact_idle(now, 0.0)
            d.registry.compact_idle(now, 0.0)
            packed += sum(d.drift.packed(w.agent_id) for w in d.registry)
        # Agents still held count exactly as the reference's.
        ref_tables = _tables(ref)
        for agent, tables in _tables(d).items():
            assert tables == ref_tables[agent], (seed, at, agent)
    assert evicted > 10 and moved and packed
    # Every idle agent evicted: the store holds each one's tables exactly as the
    # reference's (an agent awaiting work stays, and was compared above).
    d.checkpoints.evict(0)
    saved = {s.agent_id: json.dumps(s.state["actions"], sort_keys=True)
             for s in d.store.load_drift_snapshots("capwatch", "simulated")}
    ref_tables = _tables(ref)
    assert len(ref_tables) == 6 and len(d.registry) < 6
    for agent, tables in ref_tables.items():
        if d.registry.get(agent) is None:
            assert saved[agent] == tables, (seed, agent)
    queued = _queued(d)
    assert any(a == DRIFTING for a, _, _ in queued) and queued == _queued(ref)
    for p in (d, ref):
        p.source.close()
        p.store.close()
