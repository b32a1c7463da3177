"""Idle agents held in memory as bytes (AgentWatch.freeze, DriftMonitor.pack, from
Registry.compact_idle with ``limits.freeze_idle_after_s``) continue exactly as agents
never frozen: the same findings, work, drift statistics, alarms, versions and alerts."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.ports import Record
from capwatch.contracts.versions import ModelRef, build_version
from capwatch.daemon import registry as registry_module
from capwatch.daemon.agent_watch import AgentWatch, WatchSettings
from capwatch.daemon.checkpoint import Checkpointer
from capwatch.daemon.config import LimitsConfig
from capwatch.daemon.eviction import Eviction
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.registry import Registry, seed_baselines
from capwatch.daemon.service import build_service
from capwatch.daemon.watch_freezing import idle_state
from capwatch.model.grounding import SharedGrounding
from capwatch.models_store import open_store
from capwatch.models_store.actions import action_store
from capwatch.monitor.drift import DriftMonitor
from capwatch.monitor.snapshot import snapshot_agent
from capwatch.monitor.transition_monitor import MonitorLimits
from tests.daemon.helpers import EXAMPLES, example, simulated
from tests.daemon.test_compaction import _stream
from tests.daemon.test_drift_state import AGENT, _alarm


def _watch_state(w: AgentWatch, drift: DriftMonitor) -> Any:
    m = w.monitor
    return (w.transitions, w.inconsistent, w.last_offset, w.last_state, dict(w.last_executed),
            m.transitions, {k: list(v) for k, v in m.executed.items()},
            list(m.inconsistencies), w.evidence, w.alarms, w.backoff, w.held_back,
            snapshot_agent(drift, w.agent_id), m.shares_index,
            None if m.shares_index else (m.index.atoms, m.index.full))


# The family's index as usual; full from the start (every agent on an index of its own);
# filling up midway; none at all (an agent on a lineage of its own); and an own index so
# small that the agent moves to a new one again and again (keeping no execution).
_INDEXES = {"family": (1024, None), "own": (0, None), "fills": (5, None),
            "no-family": (None, None), "own-moves": (0, MonitorLimits(max_state_atoms=4,
                                                                      own_index_room=0))}


@pytest.mark.parametrize("kind", list(_INDEXES))
def test_a_watch_frozen_whenever_it_is_idle_does_exactly_what_it_would_have(
        kind: str) -> None:
    domain = example("rover.pddl")
    version = build_version(ModelRef("rover-v1", None, 1), domain,
                            datetime(2026, 1, 1, tzinfo=UTC))
    atoms, limits = _INDEXES[kind]
    settings = WatchSettings(monitor=limits or MonitorLimits())
    plain_drift, frozen_drift = DriftMonitor(), DriftMonitor()
    # Each its own family grounding, so that neither interns atoms for the other.
    plain = AgentWatch("a", "rover-v1", 0, version, plain_drift, settings, lambda: 0.0,
                       domain=domain,
                       shared=None if atoms is None else SharedGrounding(domain, atoms))
    frozen = AgentWatch("a", "rover-v1", 0, version, frozen_drift, settings, lambda: 0.0,
                        domain=domain,
                        shared=None if atoms is None else SharedGrounding(domain, atoms))
    items = freezes = own = 0
    raw = [0, 0]  # frozen compressed, as plain bytes
    for i, t in enumerate(_stream(600)):
        want, got = plain.observe(t), frozen.observe(t)
        assert got == want, i
        if not frozen.evidence and not plain.evidence:
            # Both trimmed (what freezing needs first), only one frozen: trimmed as
            # compact does alone (the last state's set let go, encoded again for the
            # bytes) or as the registry does before freezing (its mask kept for them).
            plain.compact()
            frozen.compact(keep_last=i % 2 == 0)
            on_own = not frozen.monitor.shares_index
            if frozen.freeze():
                freezes += 1
                raw[frozen._frozen is not None and frozen._frozen[0] != 0x28] += 1
                own += on_own
                assert frozen.frozen and frozen_drift.pack("a") in (True, False)
                # What others read of a frozen watch, without thawing it.
                assert frozen.last_state == plain.last_state
                assert frozen.last_executed == plain.last_executed
                assert frozen.frozen
                if i % 5 == 0:
                    assert _watch_state(frozen, frozen_drift) == \
                        _watch_state(plain, plain_drift)
                    assert not frozen.frozen  # reading its monitor thawed it
        if plain.ripe():
            a, b = plain.work_item(), frozen.work_item()
            assert (b.key, b.inconsistent, b.executed, b.probes, b.drift, b.kinds) == \
                (a.key, a.inconsistent, a.executed, a.probes, a.drift, a.kinds)
            items += 1
            plain.queued(a.key)
            frozen.queued(b.key)
            plain.settle(a.key)
            frozen.settle(b.key)
    assert items >= 1 and freezes > 100
    assert (own > 100) == (kind != "family")
    # Both forms of the bytes were thawed (see the next test).
    assert raw[0] > 100 and (raw[1] > 0 or kind != "family")
    assert _watch_state(frozen, frozen_drift) == _watch_state(plain, plain_drift)


@pytest.mark.parametrize("keep_last", [True, False])
def test_small_bytes_are_held_plain_and_an_own_index_is_compressed(keep_last: bool) -> None:
    domain = example("rover.pddl")
    version = build_version(ModelRef("rover-v1", None, 1), domain,
                            datetime(2026, 1, 1, tzinfo=UTC))
    held = {}
    # One transition on the family's index; an index of the agent's own, with every atom
    # of a few dozen transitions.
    for kind, atoms, n in (("family", 1024, 1), ("own", 0, 40)):
        w = AgentWatch("a", "rover-v1", 0, version, DriftMonitor(), clock=lambda: 5.0,
                       domain=domain, shared=SharedGrounding(domain, atoms))
        for t in _stream(n):
            w.observe(t)
        assert not w.evidence
        w.compact(keep_last=keep_last)
        before = _watch_state(w, DriftMonitor())
        assert w.freeze()
        assert w._frozen is not None
        held[kind] = w._frozen[0] == 0x28
        assert w.last_state == t.next_state  # read from the bytes
        assert _watch_state(w, DriftMonitor()) == before
        assert w.observe(t) == AgentWatch(
            "b", "rover-v1", 0, version, DriftMonitor(), domain=domain,
            shared=SharedGrounding(domain, atoms)).observe(t)
    # A zstd frame's first byte is 0x28, a marshal of the bytes' 4-tuple's ``)`` (0x29).
    assert held == {"family": False, "own": True}


@pytest.mark.parametrize("atoms", [1024, 0])
def test_a_watch_compacted_before_it_is_frozen_keeps_its_monitors_mask_for_its_tuple(
        atoms: int) -> None:
    """Compacted at one checkpoint (its last state held as a tuple), frozen at the next:
    the bytes hold the monitor's mask of that state (not the state encoded again), and
    the watch thaws to the same last state. A last state set anew is encoded for itself."""
    domain = example("rover.pddl")
    version = build_version(ModelRef("rover-v1", None, 1), domain,
                            datetime(2026, 1, 1, tzinfo=UTC))
    w = AgentWatch("a", "rover-v1", 0, version, DriftMonitor(), clock=lambda: 5.0,
                   domain=domain, shared=SharedGrounding(domain, atoms))
    stream = _stream(12)
    for t in stream:
        w.observe(t)
    assert not w.evidence
    w.compact()
    assert type(w._last_state) is tuple
    assert w.freeze() and w._frozen is not None
    assert idle_state(w._frozen)[2] is True  # the monitor's own mask
    assert w.last_state == stream[-1].next_state
    w.last_state = stream[0].state  # thaws; the monitor saw another last state
    w.compact()
    assert w.freeze() and w._frozen is not None
    assert idle_state(w._frozen)[2] is not True
    assert w.last_state == stream[0].state


def test_a_frozen_watch_thaws_for_anything_that_changes_it() -> None:
    domain = example("rover.pddl")
    version = build_version(ModelRef("rover-v1", None, 1), domain,
                            datetime(2026, 1, 1, tzinfo=UTC))
    w = AgentWatch("a", "rover-v1", 0, version, DriftMonitor(), clock=lambda: 5.0,
                   domain=domain, shared=SharedGrounding(domain))
    for t in _stream(20):
        w.observe(t)
    assert not w.evidence
    w.compact()
    assert w.freeze() and not w.freeze()
    with pytest.raises(TypeError, match="read-only"):
        w.evidence.append(w.evidence)  # type: ignore[arg-type]  # shared and read-only
    with pytest.raises(TypeError, match="read-only"):
        w.alarms["x"] = w.alarms  # type: ignore[assignment]
    w.back_off(["kind"])
    assert not w.frozen and w.backoff == {"kind": (605.0, 1)}
    w.compact()
    assert w.freeze() and w.backoff == {"kind": (605.0, 1)}  # its own, kept as it was
    w.install(version, domain)
    assert not w.frozen and w.evidence == [] and w.backoff == {}
    assert type(w.evidence) is list and type(w.alarms) is dict  # its own again


def _registry_of(tmp_path: Path, agents: tuple[str, ...], stream: list[Any]
                 ) -> tuple[Any, Registry]:
    """A store with rover's baseline and a registry whose ``agents`` each ran ``stream``."""
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    seed_baselines(store, {"rover-v1": example("rover.pddl")}, datetime.now(UTC))
    registry = Registry(store)
    for agent in agents:
        w = registry.load(agent, "rover-v1", 0)
        assert w is not None
        for t in stream:
            w.observe(t)
    return store, registry


def test_the_registry_freezes_only_watches_idle_for_the_setting(tmp_path: Path) -> None:
    store, registry = _registry_of(tmp_path, ("busy", "idle"), _stream(100)[:30])
    registry.compact_idle(100.0, 60.0)  # first round: both were handed out since
    registry.load("busy", "rover-v1", 0)
    registry.compact_idle(130.0, 60.0)
    assert not any(w.frozen for w in registry)  # "idle": trimmed, idle for 30 s only
    registry.load("busy", "rover-v1", 0)
    registry.compact_idle(170.0, 60.0)  # "idle": no record since the mark at t=100
    assert {w.agent_id for w in registry if w.frozen} == {"idle"}
    assert registry.drift.packed("idle") == registry.drift.has("idle")
    registry.compact_idle(171.0, None)  # nothing more without the setting
    assert {w.agent_id for w in registry if w.frozen} == {"idle"}
    store.close()


def _chunked_run(tmp_path: Path, freeze: bool) -> tuple[Any, MemoryPublisher, int]:
    """The drift fleet of test_drift_state in batches of 7 records; with ``freeze``, every
    agent is frozen after every batch (two rounds: the second finds all idle)."""
    drifts = [{"agent_id": AGENT, "at_step": 20,
               "domain": str(EXAMPLES / "courier-pick-wear.pddl")}]
    cfg = simulated(tmp_path, agents=3, rounds=300, drifts=drifts,
                    scheduler={"checkpoint_s": 3600.0})
    memory = MemoryPublisher()
    service = build_service(cfg, publisher=memory)
    p = service.pipeline
    handle = p.handle_batch
    thawed = 0

    def chunked(records: Sequence[Record]) -> None:
        nonlocal thawed
        for i in range(0, len(records), 7):
            before = {w.agent_id for w in p.registry if w.frozen}
            handle(records[i:i + 7])
            thawed += len(before - {w.agent_id for w in p.registry if w.frozen})
            if freeze:
                p.registry.compact_idle(time.monotonic(), 0.0)
                p.registry.compact_idle(time.monotonic(), 0.0)

    p.handle_batch = chunked  # type: ignore[method-assign]
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    return service, memory, thawed


@pytest.mark.parametrize("family_index", [True, False], ids=["family-index", "own-index"])
def test_agents_frozen_after_every_batch_alarm_and_learn_as_if_never_frozen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family_index: bool) -> None:
    if not family_index:
        # A family index with no room: every agent numbers its atoms in an index of its
        # own, as agents that each name objects of their own end up doing.
        monkeypatch.setattr(registry_module, "SharedGrounding",
                            lambda domain: SharedGrounding(domain, 0))
    reference_dir = tmp_path / "reference"
    reference_dir.mkdir()
    ref, ref_out, _ = _chunked_run(reference_dir, freeze=False)
    ref_alarm = _alarm(reference_dir)
    service, out, thawed = _chunked_run(tmp_path, freeze=True)
    assert thawed > 1000  # six agents, ~250 batches
    if not family_index:
        assert not any(w.monitor.shares_index for w in service.pipeline.registry)
    assert _alarm(tmp_path) == ref_alarm
    assert [(m.agent_id, m.version, m.changes) for m in out.models] == \
        [(m.agent_id, m.version, m.changes) for m in ref_out.models] != []
    # (The alerts' re-estimated probabilities come from the simulated agent's answers to
    # the assessment, which vary from run to run with or without freezing.)
    assert [(a.agent_id, a.alert_type) for a in out.alerts] == \
        [(a.agent_id, a.alert_type) for a in ref_out.alerts] != []
    agents = sorted(w.agent_id for w in ref.pipeline.registry)
    assert sorted(w.agent_id for w in service.pipeline.registry) == agents
    # The drifted agent's tables after its new version depend on when the assessment's
    # result arrived (worker threads), in the reference too: the others must be equal.
    for agent in set(agents) - {AGENT}:
        assert snapshot_agent(service.pipeline.drift, agent) == \
            snapshot_agent(ref.pipeline.drift, agent)
    stores = [open_store(f"sqlite:///{d / 'models.db'}") for d in (reference_dir, tmp_path)]
    try:
        activity = [sorted((a.agent_id, a.transitions, a.inconsistent)
                           for a in action_store(s).activity()) for s in stores]
        assert activity[0] == activity[1] != []
    finally:
        for s in stores:
            s.close()


def test_past_half_the_agent_limit_idle_agents_are_held_as_bytes_at_once(
        tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    seed_baselines(store, {"rover-v1": example("rover.pddl")}, datetime.now(UTC))
    registry = Registry(store)
    limits = LimitsConfig(max_agents_in_memory=6, freeze_idle_after_s=3600.0)
    # Only the registry and the limits decide when (the rest is the eviction's).
    eviction = Eviction(limits=limits, registry=registry,
                        checkpoints=cast(Checkpointer, None), metrics=DaemonMetrics())
    stream = _stream(30)

    def admit(agents: list[str]) -> None:
        for agent in agents:
            w = registry.load(agent, "rover-v1", 0)
            assert w is not None
            for t in stream:
                w.observe(t)

    admit(["a", "b", "c"])  # half the limit: frozen after the setting's hour only
    assert eviction.freeze_after_s() == 3600.0
    registry.compact_idle(100.0, eviction.freeze_after_s())
    registry.compact_idle(200.0, eviction.freeze_after_s())
    assert not any(w.frozen for w in registry)
    admit(["d"])  # past half: idle since the last checkpoint is enough
    assert eviction.freeze_after_s() == 0.0
    registry.compact_idle(300.0, eviction.freeze_after_s())
    assert {w.agent_id for w in registry if w.frozen} == {"a", "b", "c"}
    registry.compact_idle(400.0, eviction.freeze_after_s())
    assert all(w.frozen for w in registry)
    never = Eviction(limits=LimitsConfig(max_agents_in_memory=6, freeze_idle_after_s=None),
                     registry=registry, checkpoints=cast(Checkpointer, None),
                     metrics=DaemonMetrics())
    assert never.freeze_after_s() is None  # never held as bytes means never
    store.close()


def test_at_a_checkpoint_a_watch_not_frozen_is_trimmed_as_before(tmp_path: Path) -> None:
    stream = _stream(30)
    store, registry = _registry_of(tmp_path, ("free", "awaiting"), stream)
    held = registry.get("awaiting")
    assert held is not None
    held.awaiting = "work-key"  # holds queued work: never frozen
    last = {w.agent_id: w.last_state for w in registry}
    registry.compact_idle(100.0, 0.0)
    registry.compact_idle(200.0, 0.0)
    free = registry.get("free")
    assert free is not None and free.frozen and not held.frozen
    # The frozen one's last state was held as the monitor's own bitset of that very set
    # (kept through the trim for it); the other let its set go, as a trim alone does: the
    # watch and its monitor hold the same tuple instead (no set).
    assert free._frozen is not None and idle_state(free._frozen)[2] is True
    assert type(held._last_state) is tuple
    assert held.monitor._last_lists is held._last_state
    assert {w.agent_id: w.last_state for w in registry} == last
    assert free.observe(stream[0]) == held.observe(stream[0])
    store.close()
