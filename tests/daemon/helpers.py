"""Building daemons over the example fleet for tests (no servers: SQLite in tmp_path)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.adapters.sim.fleet import DriftSpec, FamilySpec, SimulatedFleet
from capwatch.assess.agent import AgentQuery
from capwatch.contracts import wire_fast
from capwatch.contracts.store import ModelRegistry
from capwatch.contracts.wire import AgentTransition, DeadLetter
from capwatch.daemon.assessor import Assessor
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import Service, build_service
from capwatch.model.domain import Domain
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.models_store import record_new_model
from tests.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "capwatch" / "examples"


def example(name: str) -> Domain:
    return read_domain(EXAMPLES / name)


def one_agent_stream(name: str, drift: str, *, at_step: int, seed: int,
                     rounds: int) -> list[AgentTransition]:
    """The transitions of one simulated agent of family ``{name}-v1`` (the example domain
    and problem ``name``) whose model becomes the example ``drift`` at ``at_step``, decoded
    as the daemon decodes them."""
    family = f"{name}-v1"
    spec = FamilySpec(family, example(f"{name}.pddl"),
                      read_problem(EXAMPLES / f"{name}-problem.pddl"))
    fleet = SimulatedFleet.build({family: spec}, 1, [DriftSpec(
        example(drift), at_step=at_step, family=family)], seed=seed)
    out: list[AgentTransition] = []
    for offset, e in enumerate(fleet.events(rounds)):
        decoded = wire_fast.decode(e.value, partition=0, offset=offset)
        assert not isinstance(decoded, DeadLetter)
        out.extend(decoded)
    return out


def config(tmp_path: Path, **overrides: Any) -> DaemonConfig:
    base: dict[str, Any] = {
        "replica_id": "test",
        # The tests drive time through the daemon's clock (a lease run out an hour
        # later without waiting an hour); the store's own clocks: test_clock_steps.
        "store": {"url": f"sqlite:///{tmp_path / 'models.db'}", "clock": "caller"},
        "families": {
            "rover-v1": {"domain": str(EXAMPLES / "rover.pddl"),
                         "problem": str(EXAMPLES / "rover-problem.pddl")},
            "courier-v1": {"domain": str(EXAMPLES / "courier.pddl"),
                           "problem": str(EXAMPLES / "courier-problem.pddl")},
        },
        "output": {"kind": "log"},
        "http": {"enabled": False},
        "log": {"level": "error"},
        "detection": {"debounce_transitions": 3, "debounce_s": 0.5},
        "scheduler": {"checkpoint_s": 0.2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return DaemonConfig(**base)


def simulated(tmp_path: Path, agents: int = 3, rounds: int = 200,
              drifts: list[dict[str, Any]] | None = None, **overrides: Any) -> DaemonConfig:
    return config(tmp_path, source={"kind": "simulated", "simulated": {
        "families": {"rover-v1": {"agents": agents}, "courier-v1": {"agents": agents}},
        "rounds": rounds, "seed": 3, "drifts": drifts or []}}, **overrides)


def run(cfg: DaemonConfig, **kwargs: Any) -> tuple[Service, MemoryPublisher]:
    memory = MemoryPublisher()
    service = build_service(cfg, publisher=memory, **kwargs)
    code = service.run(exit_when_idle=True, install_signals=False)
    assert code == 0
    return service, memory


def transition(agent: str, family: str, state: list[list[str]], action: list[str],
               next_state: list[list[str]], step: int = 0, **extra: Any) -> str:
    return json.dumps({"type": "transition", "agent_id": agent, "family": family,
                       "episode_id": "ep", "step": step, "state": state, "action": action,
                       "next_state": next_state, **extra})


HALF = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
        ["battery_half", "rover1"]]
SAMPLE = ["sample_rock", "rover1", "store1", "waypoint1"]
SAMPLED = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
           ["battery_reserve", "rover1"], ["rock_sample_taken", "rover1"],
           ["store_full", "rover1", "store1"]]


def refused_sample(agent: str = "rover-a", step: int = 0) -> str:
    """The drifted rover refusing to sample on a half battery: inconsistent with rover.pddl."""
    return transition(agent, "rover-v1", HALF, SAMPLE, HALF, step, executed=False)


def good_sample(agent: str = "rover-a", step: int = 0) -> str:
    return transition(agent, "rover-v1", HALF, SAMPLE, SAMPLED, step, executed=True)


def run_queued(d: Pipeline) -> int:
    """Run every claimable work item on this thread (the workers' own code), then apply
    the results on the main loop; the number of items run."""
    n = 0
    while items := d.store.claim("test/w0", d.clock(), 60.0, 1):
        d.workers.run_claimed("test/w0", items[0])
        n += 1
    d.drain()
    return n


class OneAgent:
    """An agent directory that answers for every agent id with the one ``agent``."""

    def __init__(self, agent: AgentQuery) -> None:
        self.only = agent

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.only


def queued_refusal(tmp_path: Path, agent: AgentQuery, clock: Callable[[], datetime],
                   assessment: dict[str, Any], assessor: Assessor | None = None
                   ) -> tuple[Pipeline, MemoryPublisher]:
    """A pipeline whose workers are not started, fed three refused samples by hand: one
    assessment of them pending, to be run under ``assessment`` settings with ``agent``
    answering every agent id and time given by ``clock`` (``assessor``: instead of the
    configured one)."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(refused_sample(step=i) for i in range(3)) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 assessment=assessment)
    out = MemoryPublisher()
    d = build_service(cfg, publisher=out, agents=OneAgent(agent),
                      source=JsonlSource(str(path)), clock=clock,
                      assessor=assessor).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    for r in d.source.poll(1.0):
        d.handle(r)
    assert len(d.store.queue_items("pending")) == 1
    return d, out


class Drifted:
    """Every agent follows the DAAISy example's drifted rover."""

    def __init__(self) -> None:
        self.sim = SimulatedAgent(example("rover-sample-drift.pddl"), seed=1)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


def reverted_pick(store: ModelRegistry, t0: datetime) -> None:
    """courier-v1 (pick succeeds 0.9) and three agents whose pick wore to 0.5 (version 1)
    and came back (version 2): c0 estimated 0.88 [0.85, 0.91], holding the baseline's 0.9;
    c1 0.8 [0.77, 0.83], not holding it; c2 0.88 with no estimate recorded (oper20's
    hslip: 0.8 -> 0.5, then 0.792 [0.775, 0.809])."""
    base = example("courier.pddl")
    worn = example("courier-pick-wear.pddl")
    record_new_model(store, "courier-v1", None, base, t0)

    def with_pick(p: float) -> Domain:
        outcomes = tuple(dataclasses.replace(o, probability=p if o.add else round(1 - p, 6))
                         for o in worn.action_map["pick"].outcomes)
        return dataclasses.replace(worn, actions=tuple(
            dataclasses.replace(a, outcomes=outcomes) if a.name == "pick" else a
            for a in worn.actions))

    def estimate(p: float, half: float | None) -> dict[str, Any]:
        if half is None:
            return {"queries": 3}
        # In the order of the action it sampled (the model before: the worn one).
        ps = [p if o.add else 1 - p for o in worn.action_map["pick"].outcomes]
        return {"assessment": {"estimates": {"pick": {
            "samples": 900, "converged": True, "probabilities": ps,
            "low": [x - half for x in ps], "high": [x + half for x in ps]}}}}

    for i, (p, half) in enumerate([(0.88, 0.03), (0.8, 0.03), (0.88, None)]):
        agent = f"c{i}"
        record_new_model(store, "courier-v1", agent, worn, t0 + timedelta(hours=1),
                         evidence=estimate(0.5, 0.03))
        record_new_model(store, "courier-v1", agent, with_pick(p), t0 + timedelta(hours=2),
                         evidence=estimate(p, half))


class EndlessSourceTail:
    """The parts of a fake source that never ends and commits nothing: a scripted or stuck
    source of a test inherits them and writes only its own start and poll."""

    def commit(self, offsets: Mapping[int, int]) -> None:
        pass

    def exhausted(self) -> bool:
        return False

    def lag(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        pass
