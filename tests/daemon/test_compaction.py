"""Idle watches are trimmed (TransitionMonitor.compact via Registry.compact_idle) without
changing anything the daemon does: the same work items, evidence and drift probes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from capwatch.contracts.versions import ModelRef, build_version
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.registry import Registry, seed_baselines
from capwatch.models_store import open_store
from capwatch.monitor.drift import DriftMonitor
from tests.daemon.helpers import example, one_agent_stream


def _stream(rounds: int) -> list[AgentTransition]:
    return one_agent_stream("rover", "rover-sample-drift.pddl", at_step=40, seed=5,
                            rounds=rounds)


def test_a_watch_trimmed_whenever_it_holds_no_evidence_makes_the_same_work() -> None:
    version = build_version(ModelRef("rover-v1", None, 1), example("rover.pddl"),
                            datetime(2026, 1, 1, tzinfo=UTC))
    plain = AgentWatch("a", "rover-v1", 0, version, DriftMonitor(), clock=lambda: 0.0)
    trimmed = AgentWatch("a", "rover-v1", 0, version, DriftMonitor(), clock=lambda: 0.0)
    items = executed = 0
    for t in _stream(600):
        want, got = plain.observe(t), trimmed.observe(t)
        assert got == want
        if not trimmed.evidence:
            trimmed.compact()
            assert all(len(buf) <= 1 for buf in trimmed.monitor.executed.values())
        if plain.ripe():
            a, b = plain.work_item(), trimmed.work_item()
            assert (b.inconsistent, b.executed, b.probes, b.drift, b.kinds) == \
                (a.inconsistent, a.executed, a.probes, a.drift, a.kinds)
            items += 1
            executed += len(a.executed)
            plain.queued(a.key)
            trimmed.queued(b.key)
            plain.settle(a.key)
            trimmed.settle(b.key)
    assert items >= 1 and executed >= 1  # executions an assessment gets survived the trims


def test_the_registry_trims_only_watches_idle_since_its_last_round(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    seed_baselines(store, {"rover-v1": example("rover.pddl")}, datetime.now(UTC))
    registry = Registry(store)
    stream = _stream(400)
    watches = [registry.load(agent, "rover-v1", 0) for agent in ("busy", "idle", "holding")]
    busy, idle, holding = (w for w in watches if w is not None)
    for t in stream[:30]:
        for w in (busy, idle, holding):
            w.observe(t)
    inconsistent = next(t for t in stream if holding.observe(t).verdict.name == "INCONSISTENT")
    assert holding.evidence and holding.evidence[0].transition is inconsistent
    assert registry.compact_idle() == 0  # first round: every watch was handed out since
    registry.load("busy", "rover-v1", 0)
    assert registry.compact_idle() == 1  # "idle"; "holding" keeps what its evidence needs
    assert all(len(buf) <= 1 for buf in idle.monitor.executed.values())
    assert max(len(buf) for buf in busy.monitor.executed.values()) > 1
    assert max(len(buf) for buf in holding.monitor.executed.values()) > 1
    assert registry.compact_idle() == 1  # now "busy" too; "idle" has nothing more to drop
    store.close()
