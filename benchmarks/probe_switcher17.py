"""The per-answer switcher of a removed outcome (assess17's constructed case, session 17).

The courier's pick loses its (free ?r) precondition and its 0.1 slip; the agent answers a
random 30% of the queries (seeded) as the old shares (0.9 / 0.1, the new precondition) and
the rest as the truth. The daemon's path: ``verify`` with budget 500, the replay, and the
64 queries asked again. Prints per seed: right / failed / WRONG (published with the slip),
the engine's queries, and per query the pick steps it ran (the rows of the homogeneity
test's table, docs/assessment.md "What a per-answer switcher of a removed outcome leaves
in the answers").

    PYTHONPATH=. python benchmarks/probe_switcher17.py 0 12
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import confirm, replay
from capwatch.model.domain import Domain, GroundAction, GroundAtom, Outcome
from tests.assess.test_outcome_shares import _loose_pick
from tests.assess.test_outcomes import FREE, _effects, _known, _with


class ByAnswer:
    """The old model in a random 30% of the answers (seeded), the new one in the rest."""

    def __init__(self, old: SimulatedAgent, new: SimulatedAgent, seed: int) -> None:
        self.old, self.new, self.rng = old, new, random.Random(seed)

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        return (self.old if self.rng.random() < 0.3 else self.new).query(state, plan, samples)


def run(seed: int) -> tuple[str, int, list[int]]:
    known = _known()
    pick = known.action("pick")
    truth: Domain = _with(known, "pick", pre_pos=pick.pre_pos - {FREE}, outcomes=tuple(
        Outcome(o.add, o.delete, 1.0) for o in pick.outcomes if o.add))
    before = frozenset({("at_robot", "r1", "hall"), ("at", "p1", "hall")})
    after = frozenset({("at_robot", "r1", "hall"), ("carrying", "r1", "p1")})
    evidence = [Transition(before, ("pick", "r1", "p1", "hall"), after, executed=True)]
    agent = ByAnswer(SimulatedAgent(_loose_pick(known, 0.9), seed=seed),
                     SimulatedAgent(truth, seed=seed), seed)
    result = assess(known, evidence, agent, method="verify", budget=500)
    steps = [sum(1 for a in q.plan[:q.executed] if a[0] == "pick") for q in result.queries]
    if result.undecided_outcomes:
        return "failed", len(result.queries), steps
    model = result.domain()
    if replay(model, evidence, result.queries) or \
            confirm(model, agent, result.queries, 64)[0]:
        return "failed", len(result.queries), steps
    right = _effects(model.action("pick")) == _effects(truth.action("pick"))
    return ("right" if right else "WRONG"), len(result.queries), steps


def main(argv: list[str]) -> None:
    first, last = int(argv[1]), int(argv[2])
    tally: dict[str, int] = {}
    for seed in range(first, last):
        verdict, queries, steps = run(seed)
        tally[verdict] = tally.get(verdict, 0) + 1
        print(seed, verdict, queries, steps, flush=True)
    print(tally)


if __name__ == "__main__":
    main(sys.argv)
