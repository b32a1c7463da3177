"""The daemon's steady-state cost per transition on every IPC domain the tests carry.

``make bench-daemon`` measures the pipeline on the simulated rover/courier fleet, whose
states hold 6-15 atoms. Real fleets send bigger states, and most of the per-transition
cost grows with the number of atoms, so this prints the same pipeline figure (decode,
vocabulary check, monitor, drift statistics, checkpoints; CPU seconds of this process)
for each domain in tests/data/domains/ipc, with its state size and cost per atom.

The traces are each domain's optimal plan, replayed by many agents (no simulator in the
loop, so the figure is the pipeline's alone; the simulated fleet, which once grounded every
action at every step, now costs 0.06-0.8 ms of CPU per event on these domains).
Messages are written as Python's ``json.dumps`` writes them, with spaces after ``,`` and
``:``, which is what most producers send.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_daemon import Replay, feed

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.assess.agent import AgentQuery, AgentUnavailable
from capwatch.contracts.ports import Record
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.service import build_service
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import parse_plan, read_domain, read_problem
from capwatch.model.simulate import execute_plan
from tests.paths import IPC


class NoAgents:
    """Nobody to query: no transition here is inconsistent, so no assessment runs."""

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        raise AgentUnavailable(f"{agent_id} ({family}): the benchmark queries no agent")


def plan_events(name: str, agents: int, rounds: int) -> tuple[list[bytes], float]:
    """Transition events of ``agents`` agents each replaying the domain's optimal plan
    ``rounds`` times, interleaved as a fleet's stream is; and the mean atoms per state."""
    base = IPC / name
    domain = read_domain(base / "domain.pddl")
    problem = read_problem(base / "problem.pddl")
    plan = [tuple(s) for s in parse_plan((base / "optimal-plan.txt").read_text())]
    grounder = Grounder(domain)
    states = [problem.init]
    for step in plan:
        executed, after = execute_plan(grounder, states[-1], [step])
        if executed != 1:
            raise SystemExit(f"{name}: the optimal plan does not run at {step}")
        states.append(after)
    lists = [sorted([list(a) for a in s]) for s in states]
    out = []
    for r in range(rounds):
        for i, action in enumerate(plan):
            for a in range(agents):
                out.append(json.dumps({
                    "type": "transition", "agent_id": f"{name}-{a:04d}", "family": name,
                    "episode_id": f"{name}-{a:04d}-{r}", "step": i, "state": lists[i],
                    "action": list(action), "next_state": lists[i + 1]}).encode())
    return out, sum(map(len, states)) / len(states)


def measure(name: str, agents: int, rounds: int) -> None:
    # The previous domains' services are garbage held in reference cycles: collected
    # now, or a full collection over all of them lands in one domain's timed feed
    # (visitall, last, measured at 14 or at 21 us per transition by where it fell).
    gc.collect()
    raw, atoms = plan_events(name, agents, rounds)
    records = [Record("bench", 0, i, json.loads(v)["agent_id"].encode(), v)
               for i, v in enumerate(raw)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = DaemonConfig(**cast("dict[str, Any]", {
            "replica_id": "bench", "store": {"url": f"sqlite:///{Path(tmp) / 'm.db'}"},
            "families": {name: {"domain": str(IPC / name / "domain.pddl")}},
            "output": {"kind": "log"}, "http": {"enabled": False}}))
        service = build_service(cfg, publisher=MemoryPublisher(), source=Replay(records),
                                agents=NoAgents())
        p = service.pipeline
        p.open()
        warm = min(len(records) // 4, 2 * agents)
        feed(p, records[:warm])
        steady = records[warm:]
        s = feed(p, steady) / len(steady)
        if p.dead_letters or p.processed != len(records):
            raise SystemExit(f"{name}: {p.dead_letters} dead letters, "
                             f"{p.processed} of {len(records)} processed")
        size = sum(map(len, raw)) // len(raw)
        print(f"  {name:12} {atoms:6.0f} {size:8,} {s * 1e6:9.1f} {1 / s:11,.0f} "
              f"{s * 1e9 / (2 * atoms):9.0f}", flush=True)
        p.source.close()
        p.store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--transitions", type=int, default=20_000,
                        help="about this many transitions per domain")
    parser.add_argument("domains", nargs="*", help="default: every IPC domain with a plan")
    args = parser.parse_args()
    configure_logging("error", "json")
    names = args.domains or sorted(
        d.name for d in IPC.iterdir() if (d / "optimal-plan.txt").is_file())
    print(f"daemon pipeline per domain: {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}; {args.agents} agents replaying each optimal plan")
    print(f"  {'domain':12} {'atoms':>6} {'bytes':>8} {'us/trans':>9} {'trans/s':>11} "
          f"{'ns/atom':>9}")
    t0 = time.monotonic()
    for name in names:
        plan_len = len(parse_plan((IPC / name / "optimal-plan.txt").read_text()))
        rounds = max(1, args.transitions // max(1, plan_len * args.agents))
        measure(name, args.agents, rounds)
    print(f"  ({time.monotonic() - t0:.0f} s; ns/atom: CPU per atom of state and next "
          "state together)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
