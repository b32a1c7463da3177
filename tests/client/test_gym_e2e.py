"""End to end: Gymnasium agents emit through capwatch.client, a real ``capwatch run``
reads the stream, and asks the agents' own query endpoints; drift is injected the way a
deployment would see it.

Each scenario runs a baseline phase and a drifted phase of the same agent into one JSONL
stream and checks that capwatch says nothing about the baseline, detects the drift, and
publishes the right model. Each prints what was injected, what was detected and after how
many transitions and queries (``pytest -s`` shows it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capwatch.examples.gym import frozenlake, taxi
from capwatch.model.serialize import domain_from_json
from tests.client.daemon_run import DaemonRun, daemon_config, run_daemon
from tests.client.gym_scenarios import (
    TOKEN,
    emit_phase,
    frozenlake_server,
    make_frozenlake,
    make_taxi,
    taxi_server,
)


def _report(name: str, injected: str, run: DaemonRun, drift_from: int, event: str,
            queries: int, samples: int) -> int:
    first = run.first_offset(event)
    assert first is not None, f"{name}: no '{event}' in the daemon's log"
    after = first - drift_from + 1
    print(f"\n[{name}] injected: {injected}; detected: "
          f"{'; '.join(m['summary'][0] for m in run.models) or 'no model'}; "
          f"alerts: {sorted({a['alert_type'] for a in run.alerts})}; after {after} drifted "
          f"transitions (offset {first}); {queries} queries ({samples} samples)")
    return first


def test_taxi_losing_dropoff_away_from_the_destination(tmp_path: Path) -> None:
    stream = tmp_path / "transitions.jsonl"
    env = make_taxi(drifted=False)
    baseline = emit_phase(stream, "taxi-1", "taxi-v4", env, taxi.abstraction(env), 2000, 1,
                          True, taxi.executed)
    env = make_taxi(drifted=True)
    emit_phase(stream, "taxi-1", "taxi-v4", env, taxi.abstraction(env), 2000, 2, True,
               taxi.executed)
    with taxi_server(drifted=True).start() as server:
        run = run_daemon(tmp_path, daemon_config(
            tmp_path, "taxi-v4", taxi.domain_path(), taxi.problem_path(), stream,
            {"taxi-1": server.url}, TOKEN, assessment={"method": "daaisy"}))
        queries, samples = server.queries, server.samples
    first = _report("taxi", "dropoff blocked unless the taxi is at the destination", run,
                    baseline, "assessment queued", queries, samples)
    assert first >= baseline, "capwatch flagged the baseline phase"
    [model] = run.models
    assert model["agent_id"] == "taxi-1" and model["version"] == 1
    assert [(c["action"], c["atom"], c["location"], c["old"], c["new"])
            for c in model["changes"]] == [("dropoff", ["destination", "?c"], "pre", "0", "+")]
    assert "capability_reduced" in {a["alert_type"] for a in run.alerts}
    assert run.dead_letters == []


def _outcome_target(outcome: Any) -> str:
    [target] = [a.args[0] for a in outcome.add if a.predicate == "at"]
    return str(target)


def test_frozenlake_ice_getting_less_slippery(tmp_path: Path) -> None:
    """Deployed with the slippery model (success_rate 1/3); the ice changes to 0.8."""
    stream = tmp_path / "transitions.jsonl"
    truth = {"?to": 0.8, "?side1": 0.1, "?side2": 0.1}
    env = make_frozenlake(True, 1 / 3)
    baseline = emit_phase(stream, "lake-1", "frozenlake-v1", env,
                          frozenlake.abstraction(env, slippery=True), 3000, 1, False)
    env = make_frozenlake(True, truth["?to"])
    emit_phase(stream, "lake-1", "frozenlake-v1", env,
               frozenlake.abstraction(env, slippery=True), 4000, 2, False)
    with frozenlake_server(lambda: make_frozenlake(True, truth["?to"]),
                           slippery_model=True).start() as server:
        run = run_daemon(tmp_path, daemon_config(
            tmp_path, "frozenlake-v1", frozenlake.domain_path(slippery=True),
            frozenlake.problem_path(), stream, {"lake-1": server.url}, TOKEN))
        queries, samples = server.queries, server.samples
    first = _report("frozenlake success_rate", "success_rate 1/3 -> 0.8", run, baseline,
                    "drift alarm", queries, samples)
    assert first >= baseline, "capwatch flagged the baseline phase"
    assert run.models, "no model version published"
    assert {a["alert_type"] for a in run.alerts} == {"effect_distribution_drift"}
    for model in run.models:
        assert model["delta"] == 0 and model["changes"] == []  # probabilities only
        learned = domain_from_json(model["model"]["json"])
        estimates = model["evidence"]["assessment"]["estimates"]
        assert estimates
        for name, estimate in estimates.items():
            for outcome in learned.action(name).outcomes:
                i = min(range(len(estimate["probabilities"])), key=lambda j: abs(
                    estimate["probabilities"][j] - outcome.probability))
                assert estimate["probabilities"][i] == pytest.approx(outcome.probability)
                assert estimate["low"][i] <= truth[_outcome_target(outcome)] \
                    <= estimate["high"][i], (name, outcome, estimate)


def test_frozenlake_slippery_flag_turned_on_against_the_deterministic_model(
        tmp_path: Path) -> None:
    """is_slippery False → True under frozenlake.pddl: moves now end beside their target.

    No deterministic model explains that, and the engine's probes (fresh objects, several
    agents' worth of atoms in one state) are states a FrozenLake cannot be put in, so the
    agent refuses them: capwatch must say it saw the change and could not assess it.
    """
    stream = tmp_path / "transitions.jsonl"
    env = make_frozenlake(False)
    baseline = emit_phase(stream, "lake-2", "frozenlake-v1", env,
                          frozenlake.abstraction(env, slippery=False), 3000, 1, False)
    env = make_frozenlake(True, 1 / 3)
    emit_phase(stream, "lake-2", "frozenlake-v1", env,
               frozenlake.abstraction(env, slippery=False), 1000, 2, False)
    with frozenlake_server(lambda: make_frozenlake(True, 1 / 3),
                           slippery_model=False).start() as server:
        run = run_daemon(tmp_path, daemon_config(
            tmp_path, "frozenlake-v1", frozenlake.domain_path(slippery=False),
            frozenlake.problem_path(), stream, {"lake-2": server.url}, TOKEN,
            assessment={"max_attempts": 1, "agent_retry": {"attempts": 1}}))
        refused = dict(server.refused)
    first = _report("frozenlake slippery on", "is_slippery False -> True", run, baseline,
                    "assessment queued", 0, 0)
    assert first >= baseline, "capwatch flagged the baseline phase"
    assert run.models == []
    kinds = {a["alert_type"]: a for a in run.alerts}
    assert kinds["unexplained_inconsistency"]["action"].startswith("move-")
    assert "cannot be put in that state" in kinds["assessment_failed"]["summary"]
    assert refused.get("invalid_query", 0) >= 1
