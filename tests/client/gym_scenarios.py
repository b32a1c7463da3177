"""Gymnasium agents for the end-to-end scenarios: the policy, drift injection, emission.

The agent is a random policy over the actions Gymnasium's ``action_mask`` allows (Taxi)
or over all actions (FrozenLake), seeded, so every run sends the same transitions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from capwatch.client import JsonlTransport, TransitionEmitter
from capwatch.client.gym import ActionBlocker, CapwatchWrapper, query_server
from capwatch.client.query_server import QueryServer
from capwatch.examples.gym import frozenlake, taxi

TOKEN = "test-token-for-queries"


def make_taxi(drifted: bool) -> gym.Env[Any, Any]:
    env: gym.Env[Any, Any] = gym.make(taxi.ENV_ID, disable_env_checker=True)
    if drifted:
        # The taxi can no longer drop its passenger anywhere but at the destination.
        base = env.unwrapped

        def elsewhere(obs: int) -> bool:
            row, col, passenger, dest = base.decode(int(obs))  # type: ignore[attr-defined]
            return passenger == 4 and (row, col) != tuple(base.locs[dest])  # type: ignore[attr-defined]

        env = ActionBlocker(env, 5, elsewhere)
    return env


def make_frozenlake(slippery: bool, success_rate: float = 1 / 3) -> gym.Env[Any, Any]:
    return gym.make(frozenlake.ENV_ID, desc=frozenlake.MAP, is_slippery=slippery,
                    success_rate=success_rate, disable_env_checker=True)


def run_agent(env: CapwatchWrapper[Any, Any], steps: int, seed: int,
              use_mask: bool) -> None:
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    for _ in range(steps):
        if use_mask and "action_mask" in info:
            allowed = np.flatnonzero(info["action_mask"])
            action = int(rng.choice(allowed)) if len(allowed) else int(rng.integers(6))
        else:
            action = int(rng.integers(int(env.action_space.n)))  # type: ignore[attr-defined]
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            _, info = env.reset(seed=int(rng.integers(1 << 30)))


def emit_phase(path: Path, agent_id: str, family: str, env: gym.Env[Any, Any],
               abstraction: Any, steps: int, seed: int, use_mask: bool,
               executed: Any = None) -> int:
    """Run the agent for ``steps`` steps, appending its transitions to ``path``."""
    emitter = TransitionEmitter(JsonlTransport(path), agent_id=agent_id, family=family,
                                vocabulary=abstraction.vocabulary)
    wrapped = CapwatchWrapper(env, abstraction, emitter, executed=executed)
    run_agent(wrapped, steps, seed, use_mask)
    emitter.close()
    return wrapped.emitted


def taxi_server(drifted: bool) -> QueryServer:
    return query_server(lambda: make_taxi(drifted), taxi.abstraction,
                        lambda env, atoms: taxi.TaxiAbstraction(env).set_state(env, atoms),
                        token=TOKEN, workers=2, executed=taxi.executed, seed=7)


def frozenlake_server(make: Callable[[], gym.Env[Any, Any]], slippery_model: bool
                      ) -> QueryServer:
    return query_server(make, lambda env: frozenlake.abstraction(env, slippery_model),
                        lambda env, atoms: frozenlake.FrozenLakeAbstraction(env).set_state(
                            env, atoms),
                        token=TOKEN, workers=2, seed=7)
