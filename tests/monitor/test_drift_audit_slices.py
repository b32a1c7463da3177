"""The fleet audit done in slices between batches (DriftMonitor.start_audit, audit_step):
with nothing changing during its round its findings are a whole audit's; with tables
changing between slices, each table is judged on its counts when its agent was visited,
BH runs once over the round, a rejected table's evidence describes the counts it was
tested on, and a table replaced or forgotten after its visit raises nothing.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from capwatch.monitor.action_drift import ActionMonitor
from capwatch.monitor.drift import DriftConfig, DriftMonitor, with_probabilities
from capwatch.monitor.stats import benjamini_hochberg
from tests.monitor.test_drift_audit_incremental import _findings, _full_audit, _reference
from tests.monitor.test_drift_state_fuzz import ACTIONS

CONFIG = DriftConfig(window=150, min_samples=40, false_alarm_rate=1e-3)


def _setup(rng: random.Random) -> tuple[DriftMonitor, list[str], list[Any], dict[Any, Any],
                                         dict[Any, Any]]:
    drift = DriftMonitor(CONFIG)
    agents = [f"a{i}" for i in range(14)]
    used = rng.sample(ACTIONS, k=min(4, len(ACTIONS)))
    current = {(a, act.name): act for a in agents for act in used}
    skew = {(a, act.name): ([rng.random() ** 3 for _ in act.outcomes] if i % 3 == 0
                            else [o.probability for o in act.outcomes])
            for i, a in enumerate(agents) for act in used}
    return drift, agents, used, current, skew


def _run_some(rng: random.Random, drift: DriftMonitor, agents: list[str], used: list[Any],
              current: dict[Any, Any], skew: dict[Any, Any], most: int) -> None:
    for agent in rng.sample(agents, k=rng.randrange(0, most + 1)):
        for _ in range(rng.randrange(1, 30)):
            act = used[rng.randrange(len(used))]
            action = current[(agent, act.name)]
            outcome = -1 if rng.random() < 0.05 else rng.choices(
                range(len(action.outcomes)), weights=skew[(agent, act.name)])[0]
            drift.observe(agent, action, outcome, rng.random() < 0.8)


def _other(rng: random.Random, drift: DriftMonitor, agents: list[str], used: list[Any],
           current: dict[Any, Any]) -> None:
    agent = rng.choice(agents)
    what = rng.random()
    if what < 0.5:
        drift.pack(agent)
    elif what < 0.65:
        drift.forget(agent)
    else:
        act = used[rng.randrange(len(used))]
        old = current[(agent, act.name)]
        if len(old.outcomes) >= 2:
            current[(agent, act.name)] = with_probabilities(
                old, [rng.random() + 0.05 for _ in old.outcomes])


def _sliced(drift: DriftMonitor, rng: random.Random) -> Any:
    assert drift.start_audit()
    assert not drift.start_audit()  # one under way is left to finish
    while True:
        got = drift.audit_step(rng.randrange(1, 6))
        if got is not None:
            assert not drift.auditing
            return got


@pytest.mark.parametrize("seed", range(3))
def test_a_sliced_audit_over_unchanged_tables_finds_what_a_whole_audit_finds(seed: int) -> None:
    rng = random.Random(seed)
    drift, agents, used, current, skew = _setup(rng)
    rejected = 0
    for _ in range(60):
        _run_some(rng, drift, agents, used, current, skew, len(agents))
        for _ in range(rng.randrange(0, 4)):
            _other(rng, drift, agents, used, current)
        # Whole audits and sliced ones share what they keep between rounds.
        got = _sliced(drift, rng) if rng.random() < 0.7 else drift.audit()
        assert _findings(got) == _reference(_full_audit(drift))
        rejected += sum(f.rejected for f in got)
    assert rejected > 5


def _copy(mon: ActionMonitor) -> ActionMonitor:
    return ActionMonitor.unpack(mon.action, mon.config, mon.pack())[0]


@pytest.mark.parametrize("seed", range(4))
def test_tables_changed_during_a_round_are_judged_as_they_were_when_visited(seed: int) -> None:
    rng = random.Random(100 + seed)
    drift, agents, used, current, skew = _setup(rng)
    changed_rejected = dropped = 0
    for _ in range(25):
        _run_some(rng, drift, agents, used, current, skew, len(agents))
        assert drift.start_audit()
        round_ = drift._round
        assert round_ is not None
        order = list(round_.agents)
        # Each agent's tables as its visit saw them (nothing changes during a step).
        seen: dict[str, list[ActionMonitor]] = {}
        got = None
        while got is None:
            at = round_.at
            got = drift.audit_step(rng.randrange(1, 4))
            for agent in order[at:round_.at]:
                seen[agent] = [_copy(m) for m in drift.tables(agent).values()]
            if got is not None:
                break
            # Between slices: executions (of agents visited and not), packing, forgetting,
            # new model versions.
            _run_some(rng, drift, agents, used, current, skew, 4)
            if rng.random() < 0.3:
                _other(rng, drift, agents, used, current)
        assert set(seen) == set(order)
        tested = [(agent, mon, mon.test()) for agent in order for mon in seen[agent]
                  if mon.stochastic]
        tested = [t for t in tested if t[2].tested]
        expected = []
        if tested:
            rejected, q = benjamini_hochberg([g.p_value for _, _, g in tested], CONFIG.fdr)
            for (agent, mon, gof), rej, qv in zip(tested, rejected, q, strict=True):
                evidence = None
                if rej and drift._current_action(agent, mon.action):
                    evidence = mon.evidence().to_dict()
                    live = {m.action.name: m for m in drift.tables(agent).values()}
                    if live[mon.action.name].window.tested_counts() != gof.counts:
                        changed_rejected += 1
                elif rej:
                    dropped += 1
                expected.append((agent, mon.action.name, mon.action.header(), gof, float(qv),
                                 bool(rej), evidence))
        assert _findings(got) == _reference(sorted(expected))
    # Not vacuous: rejected tables ran on after their visit.
    assert changed_rejected > 0, (changed_rejected, dropped)


def test_a_step_tests_at_most_its_share_and_agents_admitted_later_wait() -> None:
    action = next(a for a in ACTIONS if len(a.outcomes) == 2)
    drift = DriftMonitor(DriftConfig(window=200, min_samples=50))
    for agent in ("a", "b", "c"):
        for i in range(120):
            drift.observe(agent, action, i % 2)
    assert drift.start_audit()
    assert drift.audit_step(1) is None and drift.audit_step(1) is None
    for i in range(120):
        drift.observe("d", action, i % 2)  # admitted during the round
    got = drift.audit_step(1)
    assert got is not None and {f.agent_id for f in got} == {"a", "b", "c"}
    assert drift.audit_step(1) is None  # nothing under way
    assert {f.agent_id for f in drift.audit()} == {"a", "b", "c", "d"}
