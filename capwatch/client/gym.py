"""Gymnasium integration: record an environment's steps for capwatch and answer its queries.

Needs the optional extra ``capwatch[gym]`` (Gymnasium 1.x).

- :class:`CapwatchWrapper` wraps the environment the agent acts in. Every ``step`` goes
  through the team's :class:`~capwatch.client.vocabulary.Abstraction` and is emitted as a
  transition; a step whose action has no model counterpart (the hook returns None) is
  counted in :attr:`CapwatchWrapper.skipped` and not reported.
- :class:`GymExecutor` answers plan-outcome queries on an environment that can be put
  into a given state (``set_state(env, atoms) -> observation``, written by the team, for
  example by setting ``env.unwrapped.s`` of a toy-text environment). Use a separate
  instance of the environment, built like the agent's (same wrappers), so that queries
  never disturb the agent's episode: :func:`query_server` builds one per worker.
- :class:`ActionBlocker` makes an action fail in some states: how a lost capability looks
  from outside (a jammed actuator, a rule the agent now enforces). Tests and demos use it
  to inject drift.

Wrappers that remember the last observation may implement
``capwatch_set_observation(obs)``: :class:`GymExecutor` calls it on every wrapper of the
stack after ``set_state``, so that they see the state the query put the environment in.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any, Generic, SupportsFloat, TypeVar

import gymnasium as gym

from capwatch.client.emitter import TransitionEmitter
from capwatch.client.query_server import InvalidQuery, QueryServer
from capwatch.client.vocabulary import Abstraction, VocabularyError
from capwatch.model.domain import GroundAction, GroundAtom

__all__ = ["ActionBlocker", "CapwatchWrapper", "GymExecutor", "query_server"]

ObsT = TypeVar("ObsT")
ActT = TypeVar("ActT")

ExecutedHook = Callable[[Any, Any, Any, dict[str, Any]], bool | None]
"""``executed(obs, action, next_obs, info)``: whether the action was executed (None: unknown)."""


def _state_changed(abstraction: Abstraction[Any, Any]) -> ExecutedHook:
    def executed(obs: Any, action: Any, next_obs: Any, info: dict[str, Any]) -> bool | None:
        return abstraction.state(obs) != abstraction.state(next_obs)
    return executed


def _check_action_space(env: gym.Env[Any, Any], abstraction: Abstraction[Any, Any]) -> None:
    """Every discrete action must have a model action, or fail now, naming the gaps."""
    names = abstraction.action_names
    space = env.action_space
    if names is None or not isinstance(space, gym.spaces.Discrete):
        return
    actions = range(int(space.start), int(space.start + space.n))
    missing = [a for a in actions if a not in names]
    if missing:
        raise VocabularyError(f"action mapping: raw action(s) {missing} of"
                              f" {space} have no model action")


class CapwatchWrapper(gym.Wrapper[ObsT, ActT, ObsT, ActT], Generic[ObsT, ActT]):
    """Emits ⟨abstract state, ground action, abstract next state⟩ for every step.

    ``executed`` tells capwatch whether a step was executed; the default says True when
    the abstract state changed and leaves it unknown otherwise. Pass a hook when the
    environment knows better (e.g. an ``action_mask`` in ``info``).
    The abstraction is checked against the action space here and on the first
    observation at ``reset``; a vocabulary error stops the agent at once.
    """

    def __init__(self, env: gym.Env[ObsT, ActT], abstraction: Abstraction[ObsT, ActT],
                 emitter: TransitionEmitter, *, executed: ExecutedHook | None = None,
                 optimal: bool = False) -> None:
        super().__init__(env)
        _check_action_space(env, abstraction)
        self.abstraction = abstraction
        self.emitter = emitter
        self._executed = executed
        self.optimal = optimal
        self._obs: ObsT | None = None
        self._state: frozenset[GroundAtom] | None = None
        self.emitted = 0
        self.skipped = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[ObsT, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._obs = obs
        self._state = self.abstraction.state(obs)
        self.emitter.begin_episode()
        return obs, info

    def step(self, action: ActT) -> tuple[ObsT, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._obs is None or self._state is None:
            raise RuntimeError("call reset() before step()")
        ground = self.abstraction.action(self._obs, action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        state = self.abstraction.state(obs)
        if ground is None:
            self.skipped += 1
        else:
            if self._executed is not None:
                executed = self._executed(self._obs, action, obs, info)
            else:
                executed = True if state != self._state else None
            self.emitter.emit(self._state, ground, state, executed=executed,
                              optimal=self.optimal)
            self.emitted += 1
        self._obs, self._state = obs, state
        return obs, reward, terminated, truncated, info


class GymExecutor(Generic[ObsT, ActT]):
    """The query side over one environment instance (see the module docstring).

    A ground action is executed only if it is the one the agent's raw action would be in
    the current state (same name and arguments); otherwise it cannot be executed there.
    ``executed`` decides whether a step happened (default: the abstract state changed,
    right for environments in which every executed action changes something).
    """

    def __init__(self, env: gym.Env[ObsT, ActT], abstraction: Abstraction[ObsT, ActT],
                 set_state: Callable[[gym.Env[ObsT, ActT], frozenset[GroundAtom]], ObsT], *,
                 executed: ExecutedHook | None = None, seed: int | None = None) -> None:
        if abstraction.action_names is None:
            raise ValueError("answering queries needs the abstraction's action_names"
                             " (ground action name → raw actions)")
        _check_action_space(env, abstraction)
        self.env = env
        self.abstraction = abstraction
        self._set_state = set_state
        self._executed = executed or _state_changed(abstraction)
        self._by_name: dict[str, list[ActT]] = {}
        for raw, name in abstraction.action_names.items():
            self._by_name.setdefault(name, []).append(raw)
        # Seeds the environment's random generator (stochastic outcomes of queries).
        self.env.reset(seed=seed)
        self._obs: ObsT | None = None

    def set_state(self, atoms: frozenset[GroundAtom]) -> None:
        try:
            obs = self._set_state(self.env, atoms)
        except ValueError as e:
            # The environment has no such state (two taxis, a cell that is not on the
            # map): capwatch gets a 400 saying so rather than an answer about another state.
            raise InvalidQuery(f"this environment cannot be put in that state: {e}") from None
        wrapper: Any = self.env
        while isinstance(wrapper, gym.Wrapper):
            hook = getattr(wrapper, "capwatch_set_observation", None)
            if hook is not None:
                hook(obs)
            wrapper = wrapper.env
        self._obs = obs

    def execute(self, action: GroundAction) -> bool:
        if self._obs is None:
            raise RuntimeError("set_state() first")
        for raw in self._by_name.get(action[0], ()):
            if self.abstraction.action(self._obs, raw) == tuple(action):
                break
        else:
            return False
        obs, _, _, _, info = self.env.step(raw)
        if not self._executed(self._obs, raw, obs, info):
            return False
        self._obs = obs
        return True

    def observe(self) -> Iterable[GroundAtom]:
        if self._obs is None:
            raise RuntimeError("set_state() first")
        return self.abstraction.state(self._obs)


def query_server(make_env: Callable[[], gym.Env[ObsT, ActT]],
                 abstraction: Callable[[gym.Env[ObsT, ActT]], Abstraction[ObsT, ActT]],
                 set_state: Callable[[gym.Env[ObsT, ActT], frozenset[GroundAtom]], ObsT], *,
                 token: str | None, executed: ExecutedHook | None = None,
                 seed: int | None = None, **options: Any) -> QueryServer:
    """A :class:`QueryServer` whose workers each own an environment from ``make_env``.

    ``abstraction(env)`` builds the hooks for that instance; ``seed`` seeds the first
    worker's environment (``seed + i`` the i-th). Call ``start()`` on the result.
    """
    probe = abstraction(make_env())
    made = itertools.count()

    def factory() -> GymExecutor[ObsT, ActT]:
        env = make_env()
        i = next(made)
        return GymExecutor(env, abstraction(env), set_state, executed=executed,
                           seed=None if seed is None else seed + i)

    options.setdefault("vocabulary", probe.vocabulary)
    return QueryServer(factory, token=token, **options)


class ActionBlocker(gym.Wrapper[ObsT, ActT, ObsT, ActT], Generic[ObsT, ActT]):
    """``action`` fails (the state stays as it was) whenever ``blocked(obs)`` holds.

    The blocked step returns the last observation, ``reward`` and ``info`` with
    ``"blocked": True``; the inner environment is not stepped.
    """

    def __init__(self, env: gym.Env[ObsT, ActT], action: ActT,
                 blocked: Callable[[ObsT], bool], *, reward: float = 0.0) -> None:
        super().__init__(env)
        self.blocked_action = action
        self.blocked = blocked
        self.blocked_reward = reward
        self._obs: ObsT | None = None
        self.blocks = 0

    def capwatch_set_observation(self, obs: ObsT) -> None:
        self._obs = obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[ObsT, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._obs = obs
        return obs, info

    def step(self, action: ActT) -> tuple[ObsT, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._obs is not None and action == self.blocked_action and self.blocked(self._obs):
            self.blocks += 1
            return self._obs, self.blocked_reward, False, False, {"blocked": True}
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._obs = obs
        return obs, reward, terminated, truncated, info
