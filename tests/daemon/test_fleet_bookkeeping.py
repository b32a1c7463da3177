"""Per-agent activity in the store (what the operator console lists) adds up to what the
agents sent, whether agents stay loaded or are evicted and restored between batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.models_store import open_store
from capwatch.models_store.actions import action_store
from tests.daemon.helpers import run, simulated


@pytest.mark.parametrize("held", [None, 1])
def test_activity_counts_every_transition_once(tmp_path: Path, held: int | None) -> None:
    cfg = simulated(tmp_path, agents=3, rounds=120).model_copy(deep=True)
    if held is not None:
        cfg.limits.max_agents_in_memory = held
    service, _ = run(cfg)
    p = service.pipeline
    assert p.dead_letters == 0
    if held is not None:
        assert p.checkpoints.evictions > 10
    store = open_store(cfg.store.url)
    try:
        activity = action_store(store).activity()
    finally:
        store.close()
    assert len(activity) == 6
    assert {a.transitions for a in activity} == {120}
    assert sum(a.transitions for a in activity) == p.processed
