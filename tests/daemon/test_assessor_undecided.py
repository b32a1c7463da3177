"""The assessor publishes no model of a probabilistic action whose outcomes the steps left
undecided (an added outcome beside a known one never shown, not yet retired): such a model
allows every answer, so replaying the evidence and asking again cannot refuse it."""

from __future__ import annotations

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor
from capwatch.model.pddl_reader import parse_domain, read_problem
from tests.assess.test_outcomes import GRIPPER_SLIP
from tests.paths import DOMAINS


def test_an_undecided_outcome_set_ends_unexplained_with_its_reason() -> None:
    known = parse_domain(GRIPPER_SLIP)
    truth = parse_domain(GRIPPER_SLIP.replace(
        "(probabilistic 0.8 (and (at_robby ?to) (not (at_robby ?from))))",
        "(not (at_robby ?from)) (probabilistic 0.8 (and (at_robby ?to)))"))
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    undecided = 0
    for seed in range(16):
        agent = SimulatedAgent(truth, seed=seed, problem=problem)
        good, bad = [], []
        for _ in range(10):
            ep = agent.random_walk(15, p_inapplicable=0.1)
            for i, a in enumerate(ep.actions):
                t = AgentTransition("g-1", "gripper", "ep", i, None, ep.states[i], a,
                                    ep.states[i + 1], False, ep.executed[i])
                seen = Transition(t.state, t.action, t.next_state, executed=t.executed)
                (bad if replay(known, [seen]) else good).append(t)
        if not bad:
            continue
        outcome = EngineAssessor().assess(AssessmentRequest(
            "g-1", "gripper", known, agent, inconsistent=bad[:1], executed=good[-40:],
            confirm_queries=16))
        reasons = [u for u in outcome.unexplained if u.source == "outcomes of move"]
        if outcome.details.get("undecided_outcomes"):
            undecided += 1
            assert reasons and "changed or added" in reasons[0].reason
        elif not outcome.unexplained:
            move = outcome.model.action("move")
            assert {(o.add, o.delete) for o in move.outcomes} == {
                (o.add, o.delete) for o in truth.action("move").outcomes}, seed
    assert undecided > 0
