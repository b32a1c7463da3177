"""``capwatch_agents_drifted`` and ``capwatch_model_delta_from_baseline`` tell the truth
after a restart, a rollback, a promotion and with several replicas: each replica reads the
fleet's figures from the store (fleet_drift.py). Before session 16 they were set only by
the worker that published a version, so a restarted daemon reported nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.versions import JSON, ModelRef, ModelVersion
from capwatch.daemon import fleet_drift
from capwatch.daemon.fleet_drift import FamilyDrift, FleetDrift
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.service import Service, build_service
from capwatch.model.diff import model_changes
from capwatch.model.domain import Domain
from capwatch.model.serialize import domain_from_json
from capwatch.models_store import open_store
from capwatch.models_store.actions import action_store, promote, request_assessment, rollback
from capwatch.models_store.lineage import record_new_model
from capwatch.models_store.sqlite import SqliteModelStore
from tests.daemon.helpers import Drifted, config, example, good_sample

T0 = datetime(2026, 11, 27, 12, tzinfo=UTC)


def _run(tmp_path: Path, lines: list[str]) -> Service:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 assessment={"method": "daaisy"})
    service = build_service(cfg, publisher=MemoryPublisher(), agents=Drifted(),
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    return service


def _gauges(registry: CollectorRegistry, family: str) -> tuple[float | None, float | None]:
    return (registry.get_sample_value("capwatch_agents_drifted", {"family": family}),
            registry.get_sample_value("capwatch_model_delta_from_baseline",
                                      {"family": family}))


def test_a_restarted_daemon_reports_the_drift_its_store_holds(tmp_path: Path) -> None:
    """The operator's repro: drift an agent, restart, the gauge must still say 1."""
    _run(tmp_path, [good_sample(step=0)])
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        request_assessment(store, "rover-v1", "rover-a", "verify", "alice", "spot check",
                           datetime.now(UTC), key="a1")
    finally:
        store.close()
    first = _run(tmp_path, [])
    drifted, worst = _gauges(first.pipeline.metrics.registry, "rover-v1")
    assert drifted == 1 and worst is not None and worst > 0
    # A new process over the same store, which publishes nothing itself (before: absent).
    again = _run(tmp_path, [])
    assert _gauges(again.pipeline.metrics.registry, "rover-v1") == (drifted, worst)
    # A family without drift reads 0, not absent: "no drift" and "no figure" differ.
    assert _gauges(again.pipeline.metrics.registry, "courier-v1") == (0, 0)
    # A rollback to the baseline (the CLI writes the store; the daemon's next run
    # publishes it) ends the drift on a replica that did not publish the rollback.
    store = action_store(open_store(str(tmp_path / "models.db")))
    try:
        rollback(store, "rover-v1", "rover-a", ModelRef("rover-v1", None, 1), "bob",
                 "reverted", datetime.now(UTC) + timedelta(seconds=1), key="r1")
    finally:
        store.close()
    assert _gauges(_run(tmp_path, []).pipeline.metrics.registry, "rover-v1") == (0, 0)


def _fleet(tmp_path: Path) -> SqliteModelStore:
    """rover-v1's baseline, rover-a and rover-b on the drifted model, rover-c back on the
    baseline's after a drift."""
    store = SqliteModelStore(str(tmp_path / "fleet.db"))
    rover, drifted = example("rover.pddl"), example("rover-sample-drift.pddl")
    record_new_model(store, "rover-v1", None, rover, T0)
    for i, agent in enumerate(("rover-a", "rover-b", "rover-c")):
        record_new_model(store, "rover-v1", agent, drifted, T0 + timedelta(seconds=i + 1))
    record_new_model(store, "rover-v1", "rover-c", rover, T0 + timedelta(seconds=10))
    return store


def test_every_replica_reports_the_whole_fleet_whatever_it_holds(tmp_path: Path) -> None:
    """Three replicas over one store: the same figures on each (the dashboard and rules
    take max across replicas), none of them depending on which agents a replica holds or
    has published for."""
    store = _fleet(tmp_path)
    try:
        registries = []
        for _ in range(3):
            metrics = DaemonMetrics()
            FleetDrift(store, metrics, ["rover-v1"]).refresh()
            registries.append(metrics.registry)
        figures = {_gauges(r, "rover-v1") for r in registries}
        assert len(figures) == 1
        ((drifted, worst),) = figures
        assert drifted == 2 and worst is not None and worst > 0
    finally:
        store.close()


def test_rollback_and_promotion_move_the_figures(tmp_path: Path) -> None:
    store = _fleet(tmp_path)
    actions = action_store(store)
    try:
        metrics = DaemonMetrics()
        gauges = FleetDrift(store, metrics, ["rover-v1"])
        gauges.refresh()
        worst = _gauges(metrics.registry, "rover-v1")[1]
        assert _gauges(metrics.registry, "rover-v1")[0] == 2
        # Read as soon as the action is in the store, before any daemon published it.
        rollback(actions, "rover-v1", "rover-a", ModelRef("rover-v1", None, 1), "bob",
                 "reverted", T0 + timedelta(minutes=1))
        gauges.refresh()
        assert _gauges(metrics.registry, "rover-v1") == (1, worst)
        # The drifted model becomes the baseline: rover-b runs the baseline's model now,
        # rover-a and rover-c (on the old baseline's) differ from it.
        promote(actions, ModelRef("rover-v1", "rover-b", 1), "carol", "firmware 2.1",
                T0 + timedelta(minutes=2))
        gauges.refresh()
        assert _gauges(metrics.registry, "rover-v1") == (2, worst)
        assert gauges.figures() == {"rover-v1": FamilyDrift(int(worst or 0), 2)}
    finally:
        store.close()


def test_a_probability_only_change_counts_as_drifted_with_delta_0(tmp_path: Path) -> None:
    """Δ counts modes: an agent whose outcome probabilities changed has Δ 0 but drifted."""
    store = SqliteModelStore(str(tmp_path / "fleet.db"))
    try:
        courier = example("courier.pddl")
        record_new_model(store, "courier-v1", None, courier, T0)
        record_new_model(store, "courier-v1", "c7", example("courier-pick-wear.pddl"),
                         T0 + timedelta(seconds=1))
        metrics = DaemonMetrics()
        FleetDrift(store, metrics).refresh()
        assert _gauges(metrics.registry, "courier-v1") == (1, 0)
    finally:
        store.close()


def test_agents_that_learned_the_same_model_cost_one_comparison(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted replica's first read compares every agent with its baseline (a model
    load and its pal-tuple modes each, ~3-4 ms): the models come in one batch (not one
    store round trip per agent), the comparison is kept per model content, so the agents
    that learned the same model (one drift across a fleet) cost one, and a different model
    still gets its own figures. The next read fetches no model."""
    store = SqliteModelStore(str(tmp_path / "fleet.db"))
    batches: list[list[ModelRef]] = []
    gets: list[ModelRef] = []
    loads: list[JSON] = []

    class Counting:
        def newest_versions(self) -> list[ModelRef]:
            return store.newest_versions()

        def model_texts(self, refs: Sequence[ModelRef]) -> dict[ModelRef, str]:
            batches.append(list(refs))
            return store.model_texts(refs)

        def get(self, ref: ModelRef) -> ModelVersion | None:
            gets.append(ref)
            return store.get(ref)

    def counted(data: JSON) -> Domain:
        loads.append(data)
        return domain_from_json(data)

    monkeypatch.setattr(fleet_drift, "domain_from_json", counted)
    try:
        record_new_model(store, "rover-v1", None, example("rover.pddl"), T0)
        for i in range(5):
            record_new_model(store, "rover-v1", f"rover-{i}", example("rover-sample-drift.pddl"),
                             T0 + timedelta(seconds=1 + i))
        record_new_model(store, "rover-v1", "rover-p", example("rover.pddl"),
                         T0 + timedelta(seconds=9))
        gauges = FleetDrift(Counting(), DaemonMetrics())
        figures = gauges.figures()
        worst = len(model_changes(example("rover.pddl"), example("rover-sample-drift.pddl")))
        assert worst > 0 and figures == {"rover-v1": FamilyDrift(worst, 5)}
        assert [len(b) for b in batches] == [6] and gets == [ModelRef("rover-v1", None, 1)]
        # One of the five drifted agents and rover-p (the baseline's model under an
        # agent's lineage: a model not compared yet); the baseline came through get().
        assert len(loads) == 2
        assert gauges.figures() == figures
        assert len(batches) == 1 and len(gets) == 1 and len(loads) == 2
    finally:
        store.close()


def _until(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_the_thread_reads_at_start_and_again_when_woken(tmp_path: Path) -> None:
    """A running daemon's figures: read when the thread starts (a restart seeds them
    without publishing anything) and at a wake (a worker published), long before the
    interval is up (an hour here, so only the wake can explain the second read)."""
    store = _fleet(tmp_path)
    metrics = DaemonMetrics()
    gauges = FleetDrift(store, metrics, ["rover-v1"], interval_s=3600)
    try:
        gauges.start()
        assert _until(lambda: _gauges(metrics.registry, "rover-v1")[0] == 2)
        record_new_model(store, "rover-v1", "rover-b", example("rover.pddl"),
                         T0 + timedelta(minutes=1))
        gauges.wake()
        assert _until(lambda: _gauges(metrics.registry, "rover-v1")[0] == 1)
    finally:
        gauges.close()
        store.close()


def test_an_agent_back_within_its_intervals_of_the_baseline_is_not_counted(
        tmp_path: Path) -> None:
    """The console's rule (oper20's hslip: drifted, then reverted to what its intervals
    cannot tell from the baseline): the gauge counts c1 (0.8 [0.77, 0.83] against 0.9) and
    c2 (no estimate), not c0 (0.88 [0.85, 0.91])."""
    from tests.daemon.helpers import reverted_pick

    store = open_store(str(tmp_path / "m.db"))
    try:
        reverted_pick(store, T0)
        figures = FleetDrift(store, DaemonMetrics(CollectorRegistry())).figures()
        assert figures["courier-v1"] == FamilyDrift(0, 2)
    finally:
        store.close()
