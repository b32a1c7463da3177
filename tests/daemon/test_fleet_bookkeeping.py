"""Per-agent activity in the store (what the operator console lists) adds up to what the
agents sent, whether agents stay loaded or are evicted and restored between batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.daemon.service import build_service
from capwatch.models_store import open_store
from capwatch.models_store.actions import action_store
from tests.daemon.helpers import EXAMPLES, config, good_sample, run, simulated


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


def test_the_transition_counters_add_up_to_every_record_by_the_end_of_a_run(
        tmp_path: Path) -> None:
    """Batches tally verdicts and add them to the counters at most once a second (a
    Prometheus increment per series per batch cost ~1 µs a record): nothing tallied may
    be left out of them when the run ends."""
    service, _ = run(simulated(tmp_path, agents=3, rounds=120))
    p = service.pipeline
    total = sum(s.value for f in p.metrics.registry.collect()
                if f.name == "capwatch_transitions" for s in f.samples
                if s.name == "capwatch_transitions_total")
    assert total == p.processed == 720


def test_a_checkpoint_adds_what_the_batches_tallied(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(good_sample(step=i) + "\n" for i in range(4)))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    d = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    try:
        d.batches._tallied = float("inf")  # no batch adds them: only the checkpoint does
        d.handle_batch(d.source.poll(1.0))

        def applied() -> float | None:
            return d.metrics.registry.get_sample_value("capwatch_transitions_total", {
                "family": "rover-v1", "action": "sample_rock", "verdict": "applied"})

        assert applied() in (None, 0.0)
        d.checkpoint()
        assert applied() == 4.0
    finally:
        d.source.close()
        d.store.close()


def test_every_inconsistent_transition_is_counted_once_by_family_and_action(
        tmp_path: Path) -> None:
    """capwatch_inconsistencies_total is the inconsistent verdicts of
    capwatch_transitions_total (the one counted per record, the other tallied per batch)."""
    drift = {"family": "rover-v1", "at_step": 30,
             "domain": str(EXAMPLES / "rover-sample-drift.pddl")}
    service, _ = run(simulated(tmp_path, agents=1, rounds=60, drifts=[drift]))
    samples = [s for f in service.pipeline.metrics.registry.collect() for s in f.samples]
    inconsistent = {(s.labels["family"], s.labels["action"]): s.value for s in samples
                    if s.name == "capwatch_transitions_total"
                    and s.labels["verdict"] == "inconsistent"}
    counted = {(s.labels["family"], s.labels["action"]): s.value for s in samples
               if s.name == "capwatch_inconsistencies_total"}
    assert sum(counted.values()) > 0
    assert counted == inconsistent
