"""The main loop's time per canary call, for a fleet of N agents (canary22).

Fake watches (the parts of an AgentWatch the prober reads: a rover model, a recent state
of a few atoms, every action last run long ago, so every action is due), the prober's
real round; no agent is asked (the probes are dropped, or held to keep the backlog full).
Prints, per scenario, the calls a round took, the largest call and the round's total, in
milliseconds of the main thread's CPU time (``time.thread_time``). A tree whose prober
has no ``round_slice`` (before canary22) runs each round whole, in one call.

    PYTHONPATH=. python benchmarks/canary_round.py --agents 2000 5000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import capwatch.daemon.canary as canary
from capwatch.daemon.canary import CanaryProber
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.model.pddl_reader import read_domain

EXAMPLES = Path(__file__).resolve().parent.parent / "capwatch" / "examples"


class Clock:
    """The watches' monotonic clock, moved by the rounds."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Dropped(Executor):
    """Takes each agent's probes and never runs them (``held``: how many, per agent)."""

    def __init__(self) -> None:
        self.held: list[int] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.held.append(len(args[3]))
        return Future()


def _fleet(n: int, clock: Callable[[], float]) -> list[SimpleNamespace]:
    rover = read_domain(EXAMPLES / "rover.pddl")
    state = frozenset({("at", "rover1", "waypoint1"), ("equipped_rock_analysis", "rover1"),
                       ("battery_half", "rover1"), ("empty", "store1")})
    return [SimpleNamespace(agent_id=f"agent-{i:06}", family="rover-v1", awaiting=None,
                            clock=clock, last_state=state, domain=rover,
                            last_executed=dict.fromkeys((a.name for a in rover.actions), 0.0))
            for i in range(n)]


def _round(prober: CanaryProber, fleet: list[SimpleNamespace], objects: Any,
           budget_s: float) -> tuple[int, float, float]:
    """Calls, largest call and total (ms of thread CPU) of one round."""
    calls: list[float] = []
    sliced = hasattr(prober, "round_slice")
    t = time.thread_time()
    if sliced:
        prober.start_round(fleet, {}, objects)  # type: ignore[arg-type]
        going = prober.round_slice(budget_s)
    else:
        prober.probe_idle(fleet, {}, objects)  # type: ignore[arg-type]
        going = False
    calls.append(time.thread_time() - t)
    while going:
        t = time.thread_time()
        going = prober.round_slice(budget_s)
        calls.append(time.thread_time() - t)
    return len(calls), 1e3 * max(calls), 1e3 * sum(calls)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--agents", type=int, nargs="+", default=[2000, 5000])
    p.add_argument("--budget-ms", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    objects = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                            "waypoint": ("waypoint1", "waypoint2")}}
    limit = canary.MAX_BACKLOG
    for n in args.agents:
        for scenario in ("every probe sent", "backlog full"):
            clock = Clock()
            fleet = _fleet(n, clock)
            dropped = Dropped()
            canary.MAX_BACKLOG = limit if scenario == "backlog full" else 10**9
            prober = CanaryProber(agents=None, metrics=DaemonMetrics(),  # type: ignore[arg-type]
                                  idle_s=1.0, clock=lambda: None,  # type: ignore[arg-type,return-value]
                                  post=lambda r: None, executor=dropped)
            for r in range(args.rounds):
                clock.now += 600.0  # every action due again
                if scenario == "every probe sent":
                    # Answered between rounds: the backlog starts empty.
                    for k in dropped.held:
                        for _ in range(k):
                            prober._done()
                    dropped.held.clear()
                calls, largest, total = _round(prober, fleet, objects, args.budget_ms / 1e3)
                print(f"agents {n:>6}  {scenario:<16}  round {r + 1}: {calls:>5} calls, "
                      f"largest {largest:8.2f} ms, total {total:9.1f} ms "
                      f"({1e3 * total / n:6.1f} µs an agent)")
    canary.MAX_BACKLOG = limit


if __name__ == "__main__":
    main()
