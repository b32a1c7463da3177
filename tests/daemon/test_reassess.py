"""Scheduled re-assessment (assessment.reassess_every_s): a capability widened on an action
the agent never uses shows in no transition; the periodic verify finds it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.daemon.reassess import Reassessment, phase
from capwatch.daemon.registry import seed_baselines
from capwatch.daemon.service import build_service
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import parse_domain
from capwatch.models_store import open_store
from capwatch.models_store.actions import action_store
from tests.daemon.helpers import EXAMPLES, config, example, good_sample, run_queued

T0 = datetime(2026, 11, 27, tzinfo=UTC)
DAY = 86400.0


def _store(tmp_path: Path) -> Any:
    store = open_store(str(tmp_path / "models.db"))
    seed_baselines(store, {"rover-v1": example("rover.pddl")}, T0)
    return store


def _watches(*agents: str, awaiting: str | None = None) -> list[Any]:
    return [SimpleNamespace(agent_id=a, family="rover-v1", awaiting=awaiting) for a in agents]


def test_each_agent_is_queued_once_per_period_at_its_own_phase(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        agents = [f"rover-{i:02d}" for i in range(40)]
        watches = _watches(*agents)
        r = Reassessment(DAY, store, T0)
        queued: dict[str, list[int]] = {a: [] for a in agents}
        for hour in range(1, 49):  # two days, a round an hour
            for a in r.run(watches, T0 + timedelta(hours=hour)):
                queued[a].append(hour)
        for a, hours in queued.items():
            # Once a day, in the hour its phase falls in: spread, not all at once.
            first = int(phase("rover-v1", a, DAY) // 3600) + 1
            assert hours == [first, first + 24], (a, hours)
        assert len({h[0] for h in queued.values()}) > 10
        keys = {i.key for i in store.queue_items()}
        assert len(keys) == 80
        # Another replica (a partition move) or a restart in the same periods adds none.
        again = Reassessment(DAY, store, T0)
        for hour in range(1, 49):
            again.run(watches, T0 + timedelta(hours=hour))
        assert {i.key for i in store.queue_items()} == keys
        actions = action_store(store).actions("rover-v1", "rover-00")
        assert [(x.kind, x.actor) for x in actions] == [("assess", "capwatch")] * 2
    finally:
        store.close()


def test_an_agent_awaiting_an_assessment_is_not_queued_again(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        r = Reassessment(DAY, store, T0)
        assert r.run(_watches("rover-a", awaiting="some/work"), T0 + timedelta(days=1)) == []
        assert store.queue_items() == []
    finally:
        store.close()


class _Widened:
    """The agent can now recharge without a battery reserve; it never recharges."""

    def __init__(self) -> None:
        text = (EXAMPLES / "rover.pddl").read_text()
        widened = text.replace(":precondition (and (battery_reserve ?r))\n", "")
        assert widened != text
        self.domain = parse_domain(widened)
        self.sim = SimulatedAgent(self.domain, seed=1)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


def test_a_scheduled_verify_finds_a_precondition_removed_on_an_unused_action(
        tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(good_sample(step=i) + "\n" for i in range(5)))
    now = [T0]
    agents = _Widened()
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 assessment={"reassess_every_s": DAY})
    memory = MemoryPublisher()
    d = build_service(cfg, publisher=memory, agents=agents, source=JsonlSource(str(path)),
                      clock=lambda: now[0]).pipeline
    try:
        d.seed_families()
        d.source.start(lambda p: None, lambda p: None, {})
        d.handle_batch(d.source.poll(1.0))
        assert run_queued(d) == 0 and memory.models == []  # the stream shows nothing
        d.reassess()
        assert d.store.queue_items() == []  # its phase has not come yet
        now[0] = T0 + timedelta(days=1)
        d.reassess()
        assert run_queued(d) == 1
        (event,) = memory.models
        assert event.agent_id == "rover-a"
        v1 = d.store.latest("rover-v1", "rover-a")
        assert v1 is not None and delta(v1.domain(), agents.domain) == 0
        d.route_alerts(force=True)
        assert [a.alert_type for a in memory.alerts] == ["capability_expanded"]
        d.reassess()  # the same period: nothing more
        assert run_queued(d) == 0
    finally:
        d.source.close()
        d.store.close()


def test_a_wall_clock_stepped_back_holds_no_phase_back(tmp_path: Path) -> None:
    """The round's time goes on from the last round's by the monotonic clock: a wall clock
    stepped back an hour held every agent's phase back for the hour."""
    store = _store(tmp_path)
    try:
        agents = [f"rover-{i:02d}" for i in range(40)]
        elapsed = [0.0]
        r = Reassessment(3600.0, store, T0, monotonic=lambda: elapsed[0])
        stepped = T0 - timedelta(hours=1)  # the step, right after the start
        queued: set[str] = set()
        for minute in range(1, 61):
            elapsed[0] = minute * 60.0
            queued.update(r.run(_watches(*agents), stepped + timedelta(minutes=minute)))
        # Each agent's phase passed once in the hour the monotonic clock counted.
        assert queued == set(agents)
        # The same hour on a replica whose clock was right queues nothing more.
        again = Reassessment(3600.0, store, T0)
        keys = {i.key for i in store.queue_items()}
        for minute in range(1, 61):
            again.run(_watches(*agents), T0 + timedelta(minutes=minute))
        assert {i.key for i in store.queue_items()} == keys
    finally:
        store.close()
