"""``capwatch assess offline``: run one assessment against a simulated black-box agent.

The truth model is simulated as the agent; the observations are the given plan executed
from the problem's initial state by that agent (marked optimal: the plan is expected to
be an optimal one, as in the DAAISy experiments); the initial model is what was known
before the drift. Prints what changed, or with ``--json`` one line of figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult, State
from capwatch.assess.engine import AssessmentResult, Method, assess
from capwatch.assess.observations import Trace
from capwatch.assess.planner import Planner
from capwatch.assess.replay import replay
from capwatch.cli._common import fail, load_domain, load_plan, load_problem
from capwatch.console.terminal import echo
from capwatch.model import AbstractModel, ModelError
from capwatch.model.domain import Domain, GroundAction, Problem
from capwatch.model.grounding import Grounder
from capwatch.model.pal import Mode
from capwatch.model.simulate import execute_plan


def register(sub: Any) -> None:
    cmd = sub.add_parser("assess", help="differential assessment of a drifted agent")
    asub = cmd.add_subparsers(dest="assess_command", required=True)
    off = asub.add_parser("offline", help="assess a simulated agent from PDDL files")
    off.add_argument("--truth", required=True, help="PDDL domain the simulated agent follows")
    off.add_argument("--initial", required=True, help="PDDL domain known before the drift")
    off.add_argument("--problem", required=True, help="PDDL problem (objects, initial state)")
    off.add_argument("--plan", required=True, help="plan the agent executes (observations)")
    off.add_argument("--method", choices=[m.value for m in Method], default="daaisy",
                     help="default daaisy (the daemon's assessment.method defaults to verify)")
    off.add_argument("--budget", type=int, default=200, help="maximum number of queries")
    off.add_argument("--planner", choices=["bfs", "fd"], default="bfs",
                     help="optimal planner for reduced-functionality detection")
    off.add_argument("--seed", type=int, default=0, help="seed of the simulated agent")
    off.add_argument("--json", action="store_true", help="one line of JSON figures")
    off.add_argument("--show-queries", action="store_true", help="print every query asked")
    off.set_defaults(handler=_offline)
    from capwatch.cli.actions_cmd import register_assess

    register_assess(asub)


def observed_trace(truth: Domain, problem: Problem, plan: list[GroundAction],
                   source: str = "plan", optimal: bool = True) -> Trace:
    """The plan run step by step on the truth model; stops with an error if a step fails."""
    grounder = Grounder(truth)
    states = [problem.init]
    state = problem.init
    for i, step in enumerate(plan):
        try:
            n, state = execute_plan(grounder, state, [step])
        except ModelError as e:
            raise fail(f"plan step {i + 1} {step}: {e}") from None
        if n != 1:
            raise fail(f"plan step {i + 1} ({' '.join(step)}) is not executable in the "
                       f"truth model; the observations must be something the agent "
                       f"actually did")
        states.append(state)
    return Trace(tuple(states), tuple(plan), optimal=optimal, source=source)


def run_offline(truth: Domain, initial: Domain, problem: Problem, plan: list[GroundAction],
                method: str, *, budget: int = 200, planner: Planner | None = None,
                seed: int = 0, optimal: bool = True) -> tuple[AssessmentResult, dict[str, Any]]:
    """One assessment and its figures (shared with benchmarks/bench_assess.py);
    ``optimal`` says whether the plan is an optimal one (enables the reduced-functionality
    check)."""
    trace = observed_trace(truth, problem, plan, optimal=optimal)
    agent = _TimedAgent(SimulatedAgent(truth, seed=seed))
    start = time.perf_counter()
    cpu = time.process_time()
    result = assess(initial, [trace], agent, method=method, budget=budget,
                    planner=planner,
                    objects=problem.objects_by_type(initial))
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu
    true_model = AbstractModel.from_domain(truth)
    learned = result.best_guess()
    if learned.modes.keys() != true_model.modes.keys():
        raise fail("truth and initial models have different vocabularies")
    figures = {
        "method": method,
        "queries": result.query_count,
        "accuracy": round(learned.accuracy(true_model), 4),
        "delta": learned.delta(true_model),
        "pal_tuples": len(true_model.modes),
        "drift": AbstractModel.from_domain(initial).delta(true_model),
        "unresolved": len(result.unresolved),
        # Decided pal-tuples that differ from the truth: an assessment may leave a
        # pal-tuple open (and say why), but must never get a decided one wrong.
        "wrong_decided": sum(1 for p, m, _ in result.model.diff(true_model)
                             if m is not Mode.UNKNOWN),
        "budget_exhausted": result.budget_exhausted,
        "seconds": round(seconds, 4),
        "agent_seconds": round(agent.seconds, 4),
        # CPU time of the engine alone (one core; other processes' load does not count).
        "engine_seconds": round(max(0.0, cpu - agent.cpu), 4),
        "open": [{"pal": str(p), "reason": r} for p, r in sorted(result.open_reasons.items())],
        # What the daemon checks before publishing: the observations and answers the
        # published (best-guess) model cannot explain; the daemon publishes only at 0.
        "unexplained": len(replay(result.domain(), trace.transitions(), result.queries)),
        "confirmed": len(result.confirmed),
        "carried_over": len(result.carried_over),
    }
    return result, figures


class _TimedAgent:
    """Counts the time the simulated agent spends answering: it stands in for a remote
    agent, so the engine's own cost is the total minus this."""

    def __init__(self, inner: SimulatedAgent) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.cpu = 0.0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        start = time.perf_counter()
        cpu = time.process_time()
        try:
            return self.inner.query(state, plan, samples)
        finally:
            self.seconds += time.perf_counter() - start
            self.cpu += time.process_time() - cpu


def _offline(args: argparse.Namespace) -> int:
    truth = load_domain(args.truth)
    initial = load_domain(args.initial)
    problem = load_problem(args.problem)
    plan = load_plan(args.plan)
    planner: Planner | None
    if args.planner == "fd":
        from capwatch.adapters.io.fast_downward import FastDownwardPlanner

        planner = FastDownwardPlanner()
    else:
        planner = None
    result, figures = run_offline(truth, initial, problem, plan, args.method,
                                  budget=args.budget, planner=planner, seed=args.seed)
    if args.json:
        print(json.dumps(figures))
        return 0
    echo(f"{figures['queries']} queries, accuracy {figures['accuracy']:.3f} "
          f"(Δ {figures['delta']} of {figures['pal_tuples']} pal-tuples), "
          f"{figures['seconds']:.3f} s")
    for line in result.summary():
        echo("  " + line)
    for note in result.notes:
        echo("  note: " + note, file=sys.stderr)
    if args.show_queries:
        for q in result.queries:
            steps = " ".join(f"({' '.join(a)})" for a in q.plan)
            echo(f"  query {q.number}: executed {q.executed}/{len(q.plan)}: {steps}")
    return 0
