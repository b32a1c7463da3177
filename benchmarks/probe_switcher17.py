"""The per-answer switcher of a removed outcome (assess17's constructed case, session 17).

The courier's pick loses its (free ?r) precondition and its 0.1 slip; the agent answers a
random 30% of the queries (seeded) as the old shares (0.9 / 0.1, the new precondition) and
the rest as the truth. The daemon's path: ``verify`` with budget 500, the replay, and the
64 queries asked again. Prints per seed: right / failed / WRONG (published with the slip),
the engine's queries, and per query the pick steps it ran (the rows of the homogeneity
test's table, docs/assessment.md "What a per-answer switcher of a removed outcome leaves
in the answers").

    PYTHONPATH=. python benchmarks/probe_switcher17.py 0 12 [switcher|honest0.01|honest0.1]

Each line also gives the p-value a homogeneity test would have on 64 answers asked again
(the published queries round after round, as ``confirm`` asks them): pick's steps per
answer and its slips (a slipped pick leaves its parcel where it was), tested alone, fresh
data (docs/assessment.md, "the lead for next time"). A probe of that idea, not the
daemon's code. Since session 18 ``confirm`` runs the daemon's own test of that kind (the
answers asked again, attributed to the published model's outcomes, the likelihood ratio):
the verdicts include it (docs/assessment.md, "The answers asked again must be one
distribution's draws").
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.engine import assess
from capwatch.assess.homogeneity import heterogeneous
from capwatch.assess.observations import Transition
from capwatch.assess.replay import confirm, replay
from capwatch.assess.result import QueryLog
from capwatch.model.domain import Domain, Outcome
from tests.assess.publishing import ByAnswer
from tests.assess.test_outcome_shares import _loose_pick
from tests.assess.test_outcomes import FREE, _effects, _known, _with


def asked_again(agent: ByAnswer | SimulatedAgent, queries: Sequence[QueryLog],
                limit: int = 64) -> list[list[int]]:
    """Per answer of ``limit`` asked again (round after round): [picked, slipped]."""
    table: list[list[int]] = []
    asked = 0
    while asked < limit:
        for q in queries:
            if asked >= limit:
                break
            (answer,) = agent.query(q.state, q.plan)
            asked += 1
            picks = [a for a in q.plan[:answer.executed] if a[0] == "pick"]
            if picks:
                slipped = sum(1 for a in picks if ("at", a[2], a[3]) in answer.state)
                table.append([len(picks) - slipped, slipped])
    return table


def run(seed: int, kind: str = "switcher") -> tuple[str, int, list[int], float | None]:
    known = _known()
    pick = known.action("pick")
    truth: Domain = _with(known, "pick", pre_pos=pick.pre_pos - {FREE}, outcomes=tuple(
        Outcome(o.add, o.delete, 1.0) for o in pick.outcomes if o.add))
    before = frozenset({("at_robot", "r1", "hall"), ("at", "p1", "hall")})
    after = frozenset({("at_robot", "r1", "hall"), ("carrying", "r1", "p1")})
    evidence = [Transition(before, ("pick", "r1", "p1", "hall"), after, executed=True)]
    agent: ByAnswer | SimulatedAgent
    if kind == "switcher":
        agent = ByAnswer(SimulatedAgent(_loose_pick(known, 0.9), seed=seed),
                         SimulatedAgent(truth, seed=seed), seed)
    else:  # an honest agent whose slip is now 0.01 or still 0.1
        truth = _loose_pick(known, 1.0 - float(kind.removeprefix("honest")))
        agent = SimulatedAgent(truth, seed=seed)
    result = assess(known, evidence, agent, method="verify", budget=500)
    steps = [sum(1 for a in q.plan[:q.executed] if a[0] == "pick") for q in result.queries]
    verdict = "failed"
    if not result.undecided_outcomes:
        model = result.domain()
        if not (replay(model, evidence, result.queries)
                or confirm(model, agent, result.queries, 64)[0]):
            right = _effects(model.action("pick")) == _effects(truth.action("pick"))
            verdict = "right" if right else "WRONG"
    # After the daemon's own asking again, so the verdicts are the harness's without it.
    mixed = heterogeneous(asked_again(agent, result.queries), 0.001)
    return verdict, len(result.queries), steps, mixed[0][1] if mixed else None


def main(argv: list[str]) -> None:
    first, last = int(argv[1]), int(argv[2])
    kind = argv[3] if len(argv) > 3 else "switcher"
    tally: dict[str, int] = {}
    for seed in range(first, last):
        verdict, queries, steps, p = run(seed, kind)
        tally[verdict] = tally.get(verdict, 0) + 1
        rejected = "asked-again test: not one distribution" if p is not None else \
            "asked-again test: homogeneous"
        tally[rejected] = tally.get(rejected, 0) + 1
        print(seed, verdict, queries, steps, rejected, p, flush=True)
    print(tally)


if __name__ == "__main__":
    main(sys.argv)
