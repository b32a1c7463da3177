"""Operator actions reach a running daemon through the store's work queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.daemon.service import build_service
from capwatch.model.pal import delta
from capwatch.models_store import ModelRef, open_store
from capwatch.models_store.actions import (
    action_store,
    promote,
    request_assessment,
    rollback,
)
from tests.daemon.helpers import Drifted, config, example, good_sample


def _run(tmp_path: Path, lines: list[str]) -> MemoryPublisher:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 assessment={"method": "daaisy"})
    memory = MemoryPublisher()
    service = build_service(cfg, publisher=memory, agents=Drifted(),
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    return memory


def test_assess_now_and_rollback_are_run_by_the_daemon(tmp_path: Path) -> None:
    # The stream shows nothing wrong: without the operator nothing would be assessed.
    assert _run(tmp_path, [good_sample(step=0)]).models == []
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        now = datetime.now(UTC)
        request_assessment(store, "rover-v1", "rover-a", "verify", "alice", "spot check",
                           now, key="a1")
    finally:
        store.close()
    memory = _run(tmp_path, [])
    (event,) = memory.models
    assert event.agent_id == "rover-a" and event.version == 1
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        v1 = store.latest("rover-v1", "rover-a")
        assert v1 is not None
        # Verify (not the configured daaisy) found the drift with no evidence at all.
        assert delta(v1.domain(), example("rover-sample-drift.pddl")) == 0
        assert v1.evidence["operator"] == {"action": "a1", "method": "verify"}
        assert v1.evidence["assessment"]["method"] == "verify"
        assert v1.evidence["queries"] > 0
        assert store.queue_items("pending") == []
        rollback(store, "rover-v1", "rover-a", ModelRef("rover-v1", None, 1), "bob",
                 "the vendor says the update was reverted", now + timedelta(seconds=1),
                 key="r1")
    finally:
        store.close()
    memory = _run(tmp_path, [])
    # The replica that claims the rollback's work publishes the restored version.
    (event,) = memory.models
    assert (event.agent_id, event.version) == ("rover-a", 2)
    # Back to requiring a half battery: a new precondition, announced as a reduction.
    assert [a.alert_type for a in memory.alerts] == ["capability_reduced"]
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        assert {i.key: i.status for i in store.queue_items()} == {
            "operator/a1": "done", "operator/r1": "done"}
        assert [a.kind for a in store.actions("rover-v1", "rover-a")] == ["rollback",
                                                                          "assess"]
    finally:
        store.close()


def test_a_promoted_baseline_survives_a_restart_with_the_same_configuration(
        tmp_path: Path) -> None:
    _run(tmp_path, [good_sample(step=0)])
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        request_assessment(store, "rover-v1", "rover-a", "verify", "alice", "spot check",
                           datetime.now(UTC), key="a1")
    finally:
        store.close()
    _run(tmp_path, [])
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        promote(store, ModelRef("rover-v1", "rover-a", 1), "carol", "fleet firmware 2.1",
                datetime.now(UTC))
    finally:
        store.close()
    _run(tmp_path, [])  # seeds the configured (old) model again: must not undo it
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        baseline = store.latest("rover-v1", None)
        assert baseline is not None and baseline.version == 2
        assert delta(baseline.domain(), example("rover-sample-drift.pddl")) == 0
    finally:
        store.close()


def test_the_replica_holding_an_agent_adopts_a_rollback_another_replica_runs(
        tmp_path: Path) -> None:
    from capwatch.models_store import record_new_model

    path = tmp_path / "in.jsonl"
    path.write_text(good_sample(step=0) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    service = build_service(cfg, publisher=MemoryPublisher(), agents=Drifted(),
                            source=JsonlSource(str(path)))
    p = service.pipeline
    p.seed_families()
    drifted = record_new_model(p.store, "rover-v1", "rover-a",
                               example("rover-sample-drift.pddl"), datetime.now(UTC))
    p.open()
    for record in p.source.poll(1.0):
        p.handle(record)
    watch = p.registry.get("rover-a")
    assert watch is not None and watch.version.ref == drifted.ref
    # An operator rolls the agent back; the work item may be claimed by any replica,
    # and this one never claims it (no workers run here).
    rollback(action_store(p.store), "rover-v1", "rover-a", ModelRef("rover-v1", None, 1),
             "bob", "reverted", datetime.now(UTC))
    p.poll_results()
    p.drain()
    assert watch.version.ref == ModelRef("rover-v1", "rover-a", 2)
    p.source.close()
    p.store.close()


def test_agents_on_the_baseline_adopt_a_promotion_without_a_restart(tmp_path: Path) -> None:
    from capwatch.models_store import record_new_model

    path = tmp_path / "in.jsonl"
    path.write_text(good_sample(agent="rover-b", step=0) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    service = build_service(cfg, publisher=MemoryPublisher(), agents=Drifted(),
                            source=JsonlSource(str(path)))
    p = service.pipeline
    p.seed_families()
    learned = record_new_model(p.store, "rover-v1", "rover-a",
                               example("rover-sample-drift.pddl"), datetime.now(UTC))
    p.open()
    for record in p.source.poll(1.0):
        p.handle(record)
    watch = p.registry.get("rover-b")
    assert watch is not None and watch.version.ref == ModelRef("rover-v1", None, 1)
    promote(action_store(p.store), learned.ref, "carol", "fleet firmware 2.1",
            datetime.now(UTC))
    p.poll_results()
    assert watch.version.ref == ModelRef("rover-v1", None, 2)
    assert delta(watch.domain, example("rover-sample-drift.pddl")) == 0
    p.source.close()
    p.store.close()
