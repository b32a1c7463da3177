"""Issue 13's admission rows alone (docs/performance.md, "Admission: session 12"): the
pipeline of ``bench_daemon.py`` (``--fleet DIR``, or the default simulated fleet), the
fleet's stream once, then ``bench_fleet.run``'s admission loop: ``admit[0]`` agents never
seen before, one record each, and on to ``admit[1]``, with the checkpoint that writes
their activity rows. Without the decode, steady-state, Kafka and memory rows, so that
several runs of old and new code alternate in the minutes one full run takes.

``--gc``: the collector's time per generation over the rows (``gc.callbacks``).
``--first-observation N``: instead, a new agent's monitor, first observation and idle
state alone, from N decoded records of the fleet spread over its stream (median and min
of seven passes, µs per agent), after as many others filled the families' shared
indexes.

CPU seconds of this process (``time.process_time``), the load average printed with them.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_daemon
import bench_fleet
import fleets
import msgspec
from bench_daemon import feed

from capwatch import native
from capwatch.contracts import wire_fast
from capwatch.contracts.ports import Record
from capwatch.daemon.heap import settle_heap
from capwatch.daemon.logs import configure_logging
from capwatch.model.grounding import SharedGrounding
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.observations import MonitorLimits
from capwatch.monitor.transition_monitor import TransitionMonitor


class _Event(msgspec.Struct):
    agent_id: str
    family: str


def first_observation(fleet_dir: Path, n: int) -> None:
    families = {p.stem: read_domain(p) for p in fleet_dir.glob("*.pddl")}
    lines = []
    with open(fleet_dir / "events.jsonl", "rb") as f:
        for i, line in enumerate(f):
            if i % 10 == 0:
                lines.append(line.rstrip(b"\n"))
    head = msgspec.json.Decoder(_Event).decode
    decoded = []
    for line in lines:
        e = head(line)
        memo: list[Any] = [None, None]
        got = wire_fast.decode(line, key=e.agent_id.encode(), memo=memo)
        if isinstance(got, list) and len(got) == 1:
            decoded.append((e.family, got[0], memo[1]))
    # By family, as the daemon's registry holds them: not by Domain, a frozen dataclass
    # whose hash walks the whole model (~28 us for a planned family) and whose equality
    # gives two families with the same model each other's grounding (the monitor then
    # refuses one that is not its own model's and grounds in an index of its own).
    shared = {name: SharedGrounding(d) for name, d in families.items()}
    limits = MonitorLimits()
    own = 0

    def run(batch: list[Any]) -> float:
        nonlocal own
        own = 0
        t0 = time.process_time()
        for family, t, flipped in batch:
            m = TransitionMonitor(families[family], limits, shared[family])
            m.observe(t.state, t.action, t.next_state, 0, flipped)
            m.idle_state(t.next_state)
            own += not m.shares_index
        return (time.process_time() - t0) / len(batch)

    run(decoded[::2])
    test = decoded[1::2][:n]
    settle_heap()  # as the daemon's: the decoded records are no young objects to visit
    times = [run(test) for _ in range(7)]
    print(f"first observation: {statistics.median(times) * 1e6:.2f} us median, "
          f"{min(times) * 1e6:.2f} min per agent ({own / len(test):.0%} on an index of "
          f"their own; {native.describe()}; load {os.getloadavg()[0]:.1f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, help="a fleet directory (default: simulated)")
    parser.add_argument("--gc", action="store_true")
    parser.add_argument("--first-observation", type=int, metavar="N")
    args = parser.parse_args()
    configure_logging("error", "json")
    if args.first_observation:
        assert args.fleet is not None, "--first-observation needs --fleet"
        first_observation(args.fleet, args.first_observation)
        return 0
    admit = (20_000, 50_000)
    print(f"admission: {native.describe()}; load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        news: Callable[[int, int, int], list[Record]]
        if args.fleet is None:
            f = bench_daemon.fleet(100)
            events = list(f.events(250))
            raw = [e.value for e in events]
            stream = [Record("bench", 0, i, e.agent_id.encode(), e.value)
                      for i, e in enumerate(events)]
            p = bench_daemon.service(tmp, f, stream, max_agents=None).pipeline
            settle_heap()
            p.open()

            def news(seen: int, n: int, offset: int) -> list[Record]:
                return bench_daemon.renamed(raw, seen, n, offset)
        else:
            fleet = fleets.load(args.fleet)
            p = bench_fleet.pipeline(tmp, fleet.families)
            stream = bench_fleet.records(fleet.events, fleet.agent_ids, 0)

            def news(seen: int, n: int, offset: int) -> list[Record]:
                return bench_fleet.new_agents(fleet, seen, n, offset)
        feed(p, stream)
        offset = len(stream)
        spent = {0: 0.0, 1: 0.0, 2: 0.0}
        started = [0.0]

        def collected(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.process_time()
            else:
                spent[info["generation"]] += time.process_time() - started[0]

        seen = 0
        for n in admit:
            batch = news(seen, n - seen, offset)
            offset += len(batch)
            gc.collect()
            if args.gc:
                spent.update(dict.fromkeys(spent, 0.0))  # this row's collections only
                gc.callbacks.append(collected)
            step = feed(p, batch)
            t0 = time.process_time()
            p.checkpoint()
            step += time.process_time() - t0
            if args.gc:
                gc.callbacks.remove(collected)
            print(f"  admitting new agents, {seen:6,} -> {n:6,} {step / (n - seen) * 1e6:5.1f} "
                  f"us CPU/agent ({(n - seen) / step:8,.0f}/s; load {os.getloadavg()[0]:.1f})"
                  + (f"; collections {spent[0]:.2f} / {spent[1]:.2f} / {spent[2]:.2f} s "
                     "(young / middle / full)" if args.gc else ""), flush=True)
            seen = n
            del batch
        p.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
