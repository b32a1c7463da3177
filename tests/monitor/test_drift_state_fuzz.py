"""Property test: an agent's drift tables packed, shared, snapshotted, forgotten and
restored at random points count on exactly as tables kept live all along.

A reference DriftMonitor only observes; the subject sees the same executions and, in
between, packs agents (whose identical tables then share one blob), snapshots them
through JSON and restores them (as eviction and a restart do). Alarms, audits and the
final state must be identical to the bit, for several domains' probabilistic actions,
both window kinds, and agents whose histories coincide (the shared blobs and encoded
snapshots) or diverge after a common prefix (one agent's update must never reach
another's shared table).
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from capwatch.model.domain import Action
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.drift import DriftConfig, DriftMonitor
from capwatch.monitor.snapshot import encode_action_state, restore_agent, snapshot_agent
from tests.paths import STOCHASTIC, STOCHASTIC_NAMES


def _actions() -> list[Action]:
    """Probabilistic actions of every stochastic test domain, plus a deterministic one."""
    out: list[Action] = []
    for name in STOCHASTIC_NAMES:
        dom = read_domain(STOCHASTIC / name / "domain.pddl")
        out += [a for a in dom.actions if len(a.outcomes) >= 2]
        out += [a for a in dom.actions if len(a.outcomes) == 1][:1]
    # Action names differ across domains only by luck: keep one action per name.
    return list({a.name: a for a in out}.values())


ACTIONS = _actions()


def _state(drift: DriftMonitor, agent: str) -> str:
    """The agent's tables, encoded afresh (never through the snapshot's cache)."""
    return json.dumps({name: encode_action_state(state) for name, state in
                       drift.agent_states(agent, values_array=True).items()}, sort_keys=True)


def _alarm(alarm: Any) -> str:
    return "" if alarm is None else repr(alarm)


def _run(seed: int, config: DriftConfig) -> int:
    rng = random.Random(seed)
    ref, sub = DriftMonitor(config), DriftMonitor(config)
    agents = [f"a{i}" for i in range(10)]
    # Drifted probabilities per (agent, action), so alarms and confirmations happen;
    # agents in one twin group share a generator state until a random divergence step.
    twin_of = {a: agents[i % 4] for i, a in enumerate(agents)}
    diverge = {a: rng.randrange(0, 400) for a in agents}
    used = rng.sample(ACTIONS, k=min(4, len(ACTIONS)))
    skew = {(a, act.name): [rng.random() ** 3 for _ in act.outcomes]
            for a in agents for act in used}
    streams = {a: random.Random(f"{seed}/{twin_of[a]}") for a in agents}
    records = alarms = packs = 0
    for step in range(600):
        for agent in agents:
            if step == diverge[agent]:
                streams[agent] = random.Random(f"{seed}/{agent}/{step}")
            gen = streams[agent]
            if gen.random() < 0.3:
                continue
            act = used[gen.randrange(len(used))]
            weights = skew[(twin_of[agent] if step < diverge[agent] else agent, act.name)]
            outcome = -1 if gen.random() < 0.05 else \
                gen.choices(range(len(act.outcomes)), weights=weights)[0]
            wanted = gen.random() < 0.8
            got = ref.observe(agent, act, outcome, wanted), sub.observe(agent, act, outcome,
                                                                         wanted)
            assert _alarm(got[0]) == _alarm(got[1]), (seed, step, agent)
            records += 1
            alarms += got[0] is not None
        # Between records, what eviction, packing and restarts do to the subject only.
        for agent in rng.sample(agents, k=rng.randrange(0, 4)):
            what = rng.random()
            if what < 0.5:
                packs += sub.pack(agent)
            elif what < 0.8 and sub.has(agent):
                saved = json.loads(json.dumps(snapshot_agent(sub, agent)))
                sub.forget(agent)
                restore_agent(sub, agent, {a.name: a for a in used}, saved)
            elif what < 0.85:
                # A new model version for the agent: both start afresh.
                ref.forget(agent)
                sub.forget(agent)
        if rng.random() < 0.05:
            a, b = ref.audit(), sub.audit()
            assert sorted(map(repr, a)) == sorted(map(repr, b)), (seed, step)
    for agent in agents:
        assert _state(sub, agent) == _state(ref, agent), (seed, agent)
        # The snapshot, through its cache of encoded tables, is the state encoded afresh.
        assert json.dumps(snapshot_agent(sub, agent)["actions"], sort_keys=True) \
            == _state(ref, agent)
    # Alarms and confirmations happened, and packed tables were shared.
    assert alarms > 5 and len(sub._blobs) < packs, (alarms, len(sub._blobs), packs)
    return records


@pytest.mark.parametrize("kind", ["sliding", "tumbling"])
def test_packed_shared_and_restored_tables_count_on_as_live_ones(kind: str) -> None:
    config = DriftConfig(window=120, min_samples=40, false_alarm_rate=1e-3,
                         window_kind=kind)  # type: ignore[arg-type]
    records = sum(_run(seed, config) for seed in range(3))
    assert records > 8_000
