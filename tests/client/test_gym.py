"""The Gymnasium wrapper and query executor on the real Taxi and FrozenLake environments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import pytest

from capwatch.client import InvalidQuery, TransitionEmitter, Vocabulary, VocabularyError
from capwatch.client.gym import ActionBlocker, CapwatchWrapper, GymExecutor
from capwatch.client.query_server import answer_query
from capwatch.contracts.wire import AgentTransition, decode
from capwatch.examples.gym import frozenlake, taxi
from capwatch.model.consistency import Verdict, check
from capwatch.model.grounding import AtomIndex, Grounder
from capwatch.model.pddl_reader import read_domain


class Collect:
    retry_safe = True

    def __init__(self) -> None:
        self.values: list[bytes] = []

    def send(self, batch: Sequence[tuple[str, bytes]], timeout_s: float) -> None:
        self.values.extend(v for _, v in batch)

    def close(self) -> None:
        pass

    def transitions(self) -> list[AgentTransition]:
        out: list[AgentTransition] = []
        for v in self.values:
            d = decode(v)
            assert isinstance(d, list)
            out.extend(d)
        return out


def _record(env: gym.Env[Any, Any], abstraction: Any, steps: int, executed: Any = None
            ) -> tuple[CapwatchWrapper[Any, Any], list[AgentTransition]]:
    sink = Collect()
    emitter = TransitionEmitter(sink, agent_id="a", family="f",
                                vocabulary=abstraction.vocabulary)
    wrapped = CapwatchWrapper(env, abstraction, emitter, executed=executed)
    wrapped.reset(seed=3)
    for _ in range(steps):
        _, _, term, trunc, _ = wrapped.step(wrapped.action_space.sample())
        if term or trunc:
            wrapped.reset()
    emitter.close()
    return wrapped, sink.transitions()


def test_shipped_problem_files_match_the_environments_maps() -> None:
    assert taxi.problem_path().read_text() == taxi.problem_pddl(gym.make(taxi.ENV_ID))
    env = gym.make(frozenlake.ENV_ID, desc=frozenlake.MAP)
    assert frozenlake.problem_path().read_text() == frozenlake.problem_pddl(env)


@pytest.mark.parametrize("name", ["taxi", "frozenlake"])
def test_every_recorded_step_is_consistent_with_the_shipped_model(name: str) -> None:
    if name == "taxi":
        env = gym.make(taxi.ENV_ID)
        abstraction, domain, executed = taxi.abstraction(env), taxi.domain_path(), taxi.executed
    else:
        env = gym.make(frozenlake.ENV_ID, desc=frozenlake.MAP, is_slippery=False)
        abstraction = frozenlake.abstraction(env, slippery=False)
        domain, executed = frozenlake.domain_path(), None
    env.action_space.seed(5)
    wrapped, transitions = _record(env, abstraction, 600, executed)
    assert len(transitions) == wrapped.emitted > 100
    assert wrapped.emitted + wrapped.skipped == 600
    index = AtomIndex()
    grounder = Grounder(read_domain(domain), index)
    verdicts = []
    for t in transitions:
        verdict, _ = check(grounder.operator(t.action), index.encode(t.state),
                           index.encode(t.next_state))
        verdicts.append(verdict)
        if t.executed is not None:
            assert (verdict == Verdict.APPLIED) == t.executed, t
    assert Verdict.INCONSISTENT not in verdicts
    assert Verdict.APPLIED in verdicts


def test_an_action_space_the_mapping_does_not_cover_fails_at_construction() -> None:
    env = gym.make(taxi.ENV_ID)
    vocab = Vocabulary.from_file(taxi.domain_path())
    from capwatch.client import Abstraction

    partial: Abstraction[int, int] = Abstraction(
        vocab, atoms=lambda o: [], action=lambda o, a: None,
        action_names={a: n for a, n in taxi.ACTIONS.items() if a < 4})
    with pytest.raises(VocabularyError, match=r"raw action\(s\) \[4, 5\]"):
        CapwatchWrapper(env, partial, TransitionEmitter(Collect(), agent_id="a", family="f"))


def _taxi_executor(blocked: bool = False) -> GymExecutor[Any, Any]:
    env: gym.Env[Any, Any] = gym.make(taxi.ENV_ID)
    if blocked:
        env = ActionBlocker(env, 4, lambda obs: True)
    return GymExecutor(env, taxi.abstraction(env), taxi.TaxiAbstraction(env).set_state,
                       executed=taxi.executed)


def _taxi_state(at: str, passenger: str | None, dest: str) -> frozenset[tuple[str, ...]]:
    env = gym.make(taxi.ENV_ID)
    dynamic = {("taxi-at", at), ("destination", dest),
               ("in-taxi",) if passenger is None else ("passenger-at", passenger)}
    return taxi.static_atoms(env) | dynamic


def test_the_executor_runs_a_plan_in_the_environment_and_stops_at_a_failure() -> None:
    start = _taxi_state("r1c0", "r0c0", "r4c3")
    plan = [("move-north", "r1c0", "r0c0"), ("pickup", "r0c0"),
            ("move-east", "r0c0", "r0c1"), ("move-east", "r0c1", "r0c2")]  # a wall: fails
    [result] = answer_query(_taxi_executor(), start, plan, 1)
    assert result["executed"] == 3
    assert {tuple(a) for a in result["state"]} == _taxi_state("r0c1", None, "r4c3")


def test_a_step_other_than_the_agents_own_action_is_not_executed() -> None:
    start = _taxi_state("r1c0", "r0c0", "r4c3")
    # move-south from r1c0 goes to r2c0, never to r3c0: that ground action cannot run here.
    [result] = answer_query(_taxi_executor(), start, [("move-south", "r1c0", "r3c0")], 1)
    assert result["executed"] == 0


def test_blocked_actions_fail_in_queries_too() -> None:
    start = _taxi_state("r0c0", "r0c0", "r4c3")
    assert answer_query(_taxi_executor(), start, [("pickup", "r0c0")], 1)[0]["executed"] == 1
    assert answer_query(_taxi_executor(blocked=True), start, [("pickup", "r0c0")],
                        1)[0]["executed"] == 0


def test_states_the_environment_cannot_take_are_refused() -> None:
    two_taxis = _taxi_state("r0c0", "r0c0", "r4c3") | {("taxi-at", "r1c1")}
    with pytest.raises(InvalidQuery, match=r"cannot be put in that state: .*2 taxi-at"):
        answer_query(_taxi_executor(), two_taxis, [], 1)
    with pytest.raises(InvalidQuery, match="'q1' is not a cell of the map"):
        answer_query(_taxi_executor(), frozenset({("taxi-at", "q1"), ("destination", "r0c0"),
                                                  ("in-taxi",)}), [], 1)


def test_action_blocker_leaves_the_state_unchanged_and_says_so() -> None:
    env = ActionBlocker(gym.make(frozenlake.ENV_ID, desc=frozenlake.MAP, is_slippery=False),
                        2, lambda obs: int(obs) == 0)
    obs, _ = env.reset(seed=0)
    obs2, _, _, _, info = env.step(2)
    assert (obs2, info, env.blocks) == (obs, {"blocked": True}, 1)
    obs3, _, _, _, _ = env.step(1)
    assert obs3 == 5
