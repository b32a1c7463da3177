"""The reference simulated agent: query semantics, sampling, drift, counting, acting."""

from __future__ import annotations

import itertools
import math
import random
import threading

import pytest

from capwatch.adapters.sim.agent import Episode, QueryRecord, SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.assess.search import Goal, ground_operators
from capwatch.contracts.agent_protocol import InvalidQuery
from capwatch.model.consistency import Verdict, check
from capwatch.model.domain import Domain, LiftedAtom, Outcome, Problem
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import parse_domain, parse_plan, read_domain, read_problem
from capwatch.model.simulate import step
from tests.paths import DOMAINS, IPC, STOCHASTIC

GRIPPER = DOMAINS / "gripper"

COIN = """
(define (domain coin) (:requirements :probabilistic-effects)
  (:predicates (heads) (tails) (ready))
  (:action toss :parameters ()
    :precondition (and (ready))
    :effect (probabilistic 0.7 (and (heads) (not (tails)))
                           0.3 (and (tails) (not (heads))))))
"""


def gripper() -> tuple[Domain, frozenset[tuple[str, ...]]]:
    return read_domain(GRIPPER / "domain.pddl"), read_problem(GRIPPER / "problem.pddl").init


def test_is_an_agent_query() -> None:
    agent: AgentQuery = SimulatedAgent(gripper()[0], seed=1)
    assert agent.query(frozenset(), [], 1)[0].executed == 0


def test_full_plan_executes_and_reaches_the_goal() -> None:
    domain, init = gripper()
    problem = read_problem(GRIPPER / "problem.pddl")
    plan = parse_plan((GRIPPER / "optimal-plan.txt").read_text())
    [result] = SimulatedAgent(domain, seed=0).query(init, plan)
    assert result.executed == len(plan)
    assert problem.goal_pos <= result.state


def test_stops_at_first_inapplicable_step_and_returns_the_prefix_state() -> None:
    domain, init = gripper()
    plan = [("pick", "ball1", "rooma", "left"),
            ("pick", "ball2", "rooma", "left"),   # left gripper is no longer free
            ("move", "rooma", "roomb")]           # never reached, although applicable
    [result] = SimulatedAgent(domain, seed=0).query(init, plan)
    assert result.executed == 1
    assert ("carry", "ball1", "left") in result.state
    assert ("at", "ball1", "rooma") not in result.state
    assert ("free", "left") not in result.state
    assert ("at_robby", "rooma") in result.state  # the move was not executed


def test_first_step_inapplicable_leaves_state_unchanged() -> None:
    domain, init = gripper()
    [result] = SimulatedAgent(domain).query(init, [("drop", "ball1", "rooma", "left")])
    assert result.executed == 0
    assert result.state == init


def test_stochastic_sampling_matches_probabilities() -> None:
    agent = SimulatedAgent(parse_domain(COIN), seed=42)
    n = 4000
    results = agent.query(frozenset({("ready",)}), [("toss",)], samples=n)
    assert len(results) == n
    heads = sum(("heads",) in r.state for r in results)
    assert all(r.executed == 1 for r in results)
    assert all((("heads",) in r.state) != (("tails",) in r.state) for r in results)
    sigma = math.sqrt(n * 0.7 * 0.3)
    assert abs(heads - 0.7 * n) < 4 * sigma


def test_seed_makes_answers_reproducible() -> None:
    state, plan = frozenset({("ready",)}), [("toss",)]
    a = [r.state for r in SimulatedAgent(parse_domain(COIN), seed=7).query(state, plan, 50)]
    b = [r.state for r in SimulatedAgent(parse_domain(COIN), seed=7).query(state, plan, 50)]
    c = [r.state for r in SimulatedAgent(parse_domain(COIN), seed=8).query(state, plan, 50)]
    assert a == b
    assert a != c


def drifted_gripper(domain: Domain) -> Domain:
    """``move`` no longer takes the robot out of the room it leaves."""
    move = domain.action("move")
    outcome = move.outcomes[0]
    stuck = Outcome(outcome.add, outcome.delete - {LiftedAtom("at_robby", ("?from",))})
    return domain.replace_action(move.replace(outcomes=(stuck,)))


def test_switch_model_changes_answers_and_version() -> None:
    domain, init = gripper()
    agent = SimulatedAgent(domain, seed=0)
    plan = [("move", "rooma", "roomb")]
    [before] = agent.query(init, plan)
    assert ("at_robby", "rooma") not in before.state
    assert agent.switch_model(drifted_gripper(domain)) == 2
    [after] = agent.query(init, plan)
    assert {("at_robby", "rooma"), ("at_robby", "roomb")} <= after.state
    assert [r.model_version for r in agent.history] == [1, 2]
    assert agent.stats.model_version == 2


def test_switch_during_concurrent_queries_never_mixes_models() -> None:
    domain, init = gripper()
    drifted = drifted_gripper(domain)
    agent = SimulatedAgent(domain, seed=0)
    plan = [("move", "rooma", "roomb"), ("move", "roomb", "rooma")] * 20
    old_final = agent.query(init, plan)[0].state
    new_agent = SimulatedAgent(drifted, seed=0)
    new_final = new_agent.query(init, plan)[0].state
    assert old_final != new_final
    seen: list[frozenset[tuple[str, ...]]] = []
    errors: list[BaseException] = []

    def ask() -> None:
        try:
            for _ in range(50):
                seen.append(agent.query(init, plan)[0].state)
        except BaseException as e:  # surfaced below: a thread cannot fail the test itself
            errors.append(e)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    agent.switch_model(drifted)
    for t in threads:
        t.join()
    assert not errors
    assert set(seen) <= {old_final, new_final}
    assert agent.query(init, plan)[0].state == new_final


def test_queries_are_counted_logged_and_reported() -> None:
    domain, init = gripper()
    records: list[QueryRecord] = []
    agent = SimulatedAgent(domain, seed=0, history=2, on_query=records.append)
    agent.query(init, [("move", "rooma", "roomb")], samples=3)
    agent.query(init, [], samples=1)
    agent.query(init, [("drop", "ball1", "rooma", "left")], samples=2)
    stats = agent.stats
    assert (stats.queries, stats.samples) == (3, 6)
    assert [r.number for r in records] == [1, 2, 3]
    assert records[0].executed == (1, 1, 1)
    assert records[2].executed == (0, 0)
    assert [r.number for r in agent.history] == [2, 3]  # bounded history


@pytest.mark.parametrize(("plan", "state", "samples", "message"), [
    ([("fly", "rooma")], set(), 1, "unknown action 'fly'"),
    ([("move", "rooma")], set(), 1, "takes 2 arguments, found 1"),
    ([], {("teleported", "ball1")}, 1, "unknown predicate 'teleported'"),
    ([], {("free", "left", "right")}, 1, "takes 1 arguments, found 2"),
    ([], set(), 0, "samples must be a positive integer"),
])
def test_invalid_queries_raise_and_are_not_counted(
        plan: list[tuple[str, ...]], state: set[tuple[str, ...]], samples: int,
        message: str) -> None:
    agent = SimulatedAgent(gripper()[0], seed=0)
    with pytest.raises(InvalidQuery, match=message):
        agent.query(frozenset(state), plan, samples)
    assert agent.stats.queries == 0


def _assert_consistent(domain: Domain, trace_transitions: list[tuple[
        frozenset[tuple[str, ...]], tuple[str, ...], frozenset[tuple[str, ...]]]]) -> None:
    g = Grounder(domain)
    for s, a, s2 in trace_transitions:
        verdict, _ = check(g.operator(a), g.index.encode(s), g.index.encode(s2))
        assert verdict is not Verdict.INCONSISTENT, (s, a, s2)


def test_optimal_mode_executes_an_optimal_plan() -> None:
    domain, _ = gripper()
    problem = read_problem(GRIPPER / "problem.pddl")
    reference = parse_plan((GRIPPER / "optimal-plan.txt").read_text())
    trace = SimulatedAgent(domain, seed=0, problem=problem).run_optimal()
    assert trace.goal_reached and trace.optimal
    assert len(trace.actions) == len(reference)
    assert trace.states[0] == problem.init
    assert problem.goal_pos <= trace.states[-1]
    _assert_consistent(domain, list(trace.transitions()))


def test_optimal_mode_in_a_probabilistic_domain_replans_and_is_not_marked_optimal() -> None:
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()
    problem = read_problem(STOCHASTIC / "tireworld" / "problem-1.pddl")
    outcomes = set()
    for seed in range(20):
        trace = SimulatedAgent(domain, seed=seed).run_optimal(problem)
        _assert_consistent(domain, list(trace.transitions()))
        assert not trace.optimal
        assert trace.goal_reached == (problem.goal_pos <= trace.states[-1])
        outcomes.add(trace.goal_reached)
    assert True in outcomes  # the car gets there at least sometimes


def test_random_walk_produces_model_consistent_transitions() -> None:
    domain, _ = gripper()
    problem = read_problem(GRIPPER / "problem.pddl")
    agent = SimulatedAgent(domain, seed=3, problem=problem)
    trace = agent.random_walk(60, p_inapplicable=0.3)
    assert len(trace.actions) == 60
    assert len(trace.states) == 61
    _assert_consistent(domain, list(trace.transitions()))
    refused = [i for i, ok in enumerate(trace.executed) if not ok]
    assert refused and len(refused) < 60
    for i in refused:
        assert trace.states[i] == trace.states[i + 1]
    again = SimulatedAgent(domain, seed=3, problem=problem).random_walk(60, p_inapplicable=0.3)
    assert again == trace


def test_emit_trace_yields_transitions_and_needs_a_problem() -> None:
    domain, _ = gripper()
    problem = read_problem(GRIPPER / "problem.pddl")
    transitions = list(SimulatedAgent(domain, seed=1).emit_trace(problem, optimal=True))
    assert transitions[0][0] == problem.init
    assert all(t[2] == u[0] for t, u in itertools.pairwise(transitions))
    with pytest.raises(ValueError, match="no problem"):
        SimulatedAgent(domain).random_walk(3)


def _reference_walk(agent_domain: Domain, problem: Problem, seed: int, steps: int,
                    p_inapplicable: float, episodes: int) -> list[Episode]:
    """The random walk as first written: everything grounded afresh each episode and
    each step's applicable operators found by testing all of them."""
    rng = random.Random(seed)
    grounder = Grounder(agent_domain)
    out = []
    for _ in range(episodes):
        ops = ground_operators(grounder, problem.objects_by_type(agent_domain), problem.init)
        mask = grounder.index.encode(problem.init)
        states, actions, executed = [mask], [], []
        for _ in range(steps):
            applicable = [op for op in ops if op.applicable(mask)]
            if p_inapplicable and rng.random() < p_inapplicable:
                blocked = [op for op in ops if not op.applicable(mask)]
                if blocked:
                    op = rng.choice(blocked)
                    actions.append((op.action.name, *op.args))
                    executed.append(False)
                    states.append(mask)
                    continue
            if not applicable:
                break
            op = rng.choice(applicable)
            _, mask = step(op, mask, rng)
            actions.append((op.action.name, *op.args))
            executed.append(True)
            states.append(mask)
        goal = Goal.of(grounder, problem.goal_pos, problem.goal_neg)
        out.append(Episode(tuple(grounder.index.decode(s) for s in states), tuple(actions),
                           tuple(executed), optimal=False, goal_reached=goal.satisfied(mask)))
    return out


@pytest.mark.parametrize("name", ["ferry", "hiking", "tpp", "grid"])
def test_random_walks_are_what_the_seed_always_gave(name: str) -> None:
    """The walk's speed-ups (operators grounded once per model, applicable ones found
    through an index) change nothing a seed produces: pinned fleets stay as they were."""
    domain = read_domain(IPC / name / "domain.pddl")
    problem = read_problem(IPC / name / "problem.pddl")
    for seed in (1, 2):
        agent = SimulatedAgent(domain, seed=seed, problem=problem)
        walks = [agent.random_walk(15, p_inapplicable=0.3) for _ in range(4)]
        assert walks == _reference_walk(domain, problem, seed, 15, 0.3, 4)
