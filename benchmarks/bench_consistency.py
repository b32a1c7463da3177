"""Consistency checks per second on one core (issue 2's performance figures).

Three ways of checking the same transitions, measured in the same run:
- interned: atoms already interned as bitsets (what the daemon holds per agent);
- from lists: states and action as a JSON decoder hands them over (lists of lists);
- naive baseline: evaluating the lifted formulas on frozenset states each time.

Transitions come from random walks of the true model over the problem's objects, on
blocksworld and on every stochastic domain (pddlgym action literals stripped).
"""

from __future__ import annotations

import itertools
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from capwatch.model import Domain, Grounder, Problem, Verdict, check
from capwatch.model.domain import GroundAction, GroundAtom
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.model.simulate import step
from capwatch.monitor.transition_monitor import TransitionMonitor

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "domains"
WALK = 20_000


def ground_actions(domain: Domain, problem: Problem) -> list[GroundAction]:
    by_type = problem.objects_by_type(domain)
    result: list[GroundAction] = []
    for a in domain.actions:
        pools = [by_type.get(p.type, ()) for p in a.parameters]
        result.extend((a.name, *args) for args in itertools.product(*pools))
    return result


def random_walk(domain: Domain, problem: Problem, n: int, seed: int
                ) -> list[tuple[frozenset[GroundAtom], GroundAction, frozenset[GroundAtom]]]:
    rng = random.Random(seed)
    g = Grounder(domain)
    actions = ground_actions(domain, problem)
    state = g.index.encode(problem.init)
    out = []
    for i in range(n):
        ops = [g.operator(a) for a in actions]
        applicable = [op for op in ops if op.applicable(state)]
        # Some failed attempts too: real traces contain refused actions.
        op = rng.choice(applicable if applicable and i % 10 else ops)
        _, nxt = step(op, state, rng)
        out.append((g.index.decode(state), (op.action.name, *op.args), g.index.decode(nxt)))
        state = nxt
        if rng.random() < 0.02:
            state = g.index.encode(problem.init)
    return out


def naive_check(domain: Domain, action: GroundAction, s: frozenset[GroundAtom],
                s2: frozenset[GroundAtom]) -> Verdict:
    a = domain.action_map[action[0]]
    binding = dict(zip(a.parameter_names, action[1:], strict=True))
    if not all(x.ground(binding) in s for x in a.pre_pos) or any(
            x.ground(binding) in s for x in a.pre_neg):
        return Verdict.NOT_APPLICABLE if s2 == s else Verdict.INCONSISTENT
    for o in a.outcomes:
        dels = {x.ground(binding) for x in o.delete}
        adds = {x.ground(binding) for x in o.add}
        if (s - dels) | adds == s2:
            return Verdict.APPLIED
    return Verdict.INCONSISTENT


def rate(fn: Callable[[], int], min_seconds: float = 1.0) -> float:
    """Checks per second of CPU time (robust to other load on the machine), best of three
    runs of at least ``min_seconds``."""
    best = 0.0
    for _ in range(3):
        done, start = 0, time.process_time()
        while True:
            done += fn()
            elapsed = time.process_time() - start
            if elapsed >= min_seconds:
                break
        best = max(best, done / elapsed)
    return best


def bench(name: str, domain: Domain, problem: Problem) -> dict[str, float]:
    walk = random_walk(domain, problem, WALK, seed=7)
    g = Grounder(domain)
    interned = [(g.operator(a), g.index.encode(s), g.index.encode(s2)) for s, a, s2 in walk]
    wire = [json.loads(json.dumps({"state": sorted(s), "action": a, "next_state": sorted(s2)}))
            for s, a, s2 in walk]
    sets = walk

    def run_interned() -> int:
        c = check
        for op, s, s2 in interned:
            c(op, s, s2)
        return len(interned)

    monitor = TransitionMonitor(domain)

    def run_lists() -> int:
        # Exactly the daemon's per-agent path: vocabulary checks, the shared-state
        # shortcut between consecutive steps, verdict counting and evidence.
        observe = monitor.observe_lists
        for m in wire:
            observe(m["state"], m["action"], m["next_state"])
        return len(wire)

    def run_naive() -> int:
        for s, a, s2 in sets:
            naive_check(domain, a, s, s2)
        return len(sets)

    # The three must agree before their speeds mean anything.
    for (op, s, s2), (fs, a, fs2) in zip(interned, sets, strict=True):
        assert check(op, s, s2)[0] is naive_check(domain, a, fs, fs2)
    verdicts = [check(op, s, s2)[0] for op, s, s2 in interned]
    atoms = sum(len(s) for s, _, _ in walk) / len(walk)
    r = {"interned": rate(run_interned), "lists": rate(run_lists), "naive": rate(run_naive)}
    print(f"{name:26s} atoms/state {atoms:5.1f}  applied {verdicts.count(Verdict.APPLIED):5d}"
          f"/{len(verdicts)}  interned {r['interned']:>11,.0f}/s  from lists "
          f"{r['lists']:>9,.0f}/s  naive {r['naive']:>9,.0f}/s  "
          f"ratio {r['interned'] / r['naive']:5.1f}x / {r['lists'] / r['naive']:4.1f}x")
    return r


def main(argv: Sequence[str] = ()) -> int:
    print(f"consistency checks per second, one core, python {sys.version.split()[0]}; "
          f"targets: interned >= 1,000,000/s, from lists >= 200,000/s")
    cases = [("blocksworld", DATA / "classic" / "blocksworld" / "domain.pddl",
              DATA / "classic" / "blocksworld" / "problem.pddl")]
    for d in sorted((DATA / "stochastic").iterdir()):
        cases.append((d.name, d / "domain.pddl", d / "problem-1.pddl"))
    for name, dpath, ppath in cases:
        domain = read_domain(dpath).without_action_literals()
        bench(name, domain, read_problem(ppath))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
