"""Answers that are each valid but do not hold together (red-team rerun of issue 12): an
agent answering some queries as one model and some as another. The engine learns a model
that explains every answer it got once but is not the agent's; asking the queries again
(:func:`capwatch.assess.replay.confirm`) exposes it, and honest agents, deterministic or
stochastic, pass."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult, State
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import confirm, replay
from capwatch.assess.result import QueryLog
from capwatch.model.domain import Domain, GroundAction
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import parse_domain, read_domain, read_problem
from tests.assess.walks import split_walks
from tests.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "capwatch" / "examples"


class TwoFaced:
    """Answers each query as one of two models, chosen from the query's content, and as the
    other one when the same query comes again."""

    def __init__(self, first: Domain, second: Domain, salt: int = 0) -> None:
        self.salt = salt
        self.agents = (SimulatedAgent(first), SimulatedAgent(second))
        self.asked: dict[str, int] = {}

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        key = repr((sorted(state), list(plan)))
        n = self.asked.get(key, 0)
        self.asked[key] = n + 1
        pick = (hashlib.sha256(f"{self.salt}{key}".encode()).digest()[0] + n) % 2
        return self.agents[pick].query(state, plan, samples)


def _evidence(truth: Domain, known: Domain, contradicting: int, explained: int
              ) -> list[Transition]:
    """Steps of the drifted agent's random walks, as the daemon hands them to an
    assessment: a few the known model contradicts, and recent ones it explains."""
    problem = read_problem(EXAMPLES / "rover-problem.pddl")
    agent = SimulatedAgent(truth, seed=3, problem=problem)
    good, bad = split_walks(agent, known, episodes=30, length=12, p_inapplicable=0.25)
    return bad[:contradicting] + good[:explained]


def test_a_two_faced_agent_is_caught_when_asked_again() -> None:
    known = read_domain(EXAMPLES / "rover.pddl")
    truth = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    evidence = _evidence(truth, known, 3, 60)
    slipped = 0
    for salt in range(30):
        liar = TwoFaced(truth, known, salt)
        result = assess(known, evidence, liar, method="verify", budget=500)
        learnt = result.domain()
        if delta(learnt, truth) == 0 or replay(learnt, evidence, result.queries):
            continue
        # A wrong model that explains every observation and every answer given once:
        # what the daemon published before.
        slipped += 1
        again, asked = confirm(learnt, liar, result.queries, limit=64)
        assert asked == max(len(result.queries), 64)
        assert again, f"salt {salt}: a wrong model passed the second asking"
        assert all("answered differently" in u.reason for u in again)
    assert slipped > 0, "no case where the replay alone let a wrong model through"


def test_honest_agents_pass_the_second_asking() -> None:
    known = read_domain(EXAMPLES / "rover.pddl")
    truth = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    evidence = _evidence(truth, known, 3, 60)
    agent = SimulatedAgent(truth)
    result = assess(known, evidence, agent, method="verify", budget=500)
    assert delta(result.domain(), truth) == 0
    again, asked = confirm(result.domain(), agent, result.queries, limit=3)
    assert again == [] and asked == 3


class LiesTwice:
    """Answers each query as ``first`` the first ``lies`` times it is asked, then as
    ``second``: asked a second time only, it repeats its lie."""

    def __init__(self, first: Domain, second: Domain, lies: int) -> None:
        self.agents = (SimulatedAgent(first), SimulatedAgent(second))
        self.lies = lies
        self.asked: dict[str, int] = {}

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        key = repr((sorted(state), list(plan)))
        n = self.asked[key] = self.asked.get(key, 0) + 1
        return self.agents[n > self.lies].query(state, plan, samples)


def test_with_fewer_queries_than_the_limit_each_is_asked_again_until_it_is_spent() -> None:
    """The answers the model was learnt from were the old model's, and the agent gives the
    same old answer once more: asked again once, nothing differs. The limit is spent
    asking the queries again round after round, and the third answer is the new one
    (before: a wrong model passed; an agent choosing at random per answer does the same
    by chance, benchmarks/fuzz_assess.py --case blocksworld pal 107 alternating)."""
    known = read_domain(EXAMPLES / "rover.pddl")
    truth = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    evidence = _evidence(truth, known, 3, 60)
    result = assess(known, evidence, SimulatedAgent(truth), method="verify", budget=500)
    assert 0 < len(result.queries) < 64
    # The known model replayed over its own answers to the same queries: what the
    # engine would have learnt had the agent given it the old answers.
    old = SimulatedAgent(known)
    logs = [QueryLog(q.number, q.state, q.plan, a.executed, a.state, ())
            for q in result.queries for a in old.query(q.state, list(q.plan))]
    assert delta(known, truth) > 0
    again, asked = confirm(known, LiesTwice(known, truth, lies=1), logs, limit=64)
    assert asked == 64
    assert again and all("answered differently" in u.reason for u in again)


COIN = """
(define (domain coin) (:requirements :probabilistic-effects)
  (:predicates (heads) (tails) (ready))
  (:action toss :parameters ()
    :precondition (and (ready))
    :effect (probabilistic 0.5 (and (heads) (not (tails)))
                           0.5 (and (tails) (not (heads))))))
"""


def test_a_stochastic_agent_is_not_taken_for_a_liar() -> None:
    model = parse_domain(COIN)
    agent = SimulatedAgent(model, seed=5)
    ready = frozenset({("ready",)})
    logs = []
    for i in range(40):
        [first] = agent.query(ready, [("toss",)])
        logs.append(QueryLog(i, ready, (("toss",),), first.executed, first.state, ()))
    again, asked = confirm(model, agent, logs, limit=64)
    # Asked once each: a query of chance steps only is not asked round after round.
    assert asked == 40 and again == []
    # Not vacuous: the second answers differ from the first ones (a coin).
    changed = sum(agent.query(q.state, q.plan)[0].state != q.final_state for q in logs)
    assert changed > 0
