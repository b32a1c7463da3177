"""The fleet drift audit's time on the main loop as the fleet grows (docs/performance.md,
"The drift audit on the main loop").

Feeds N new agents of a generated fleet (each replaying STEPS records of one of the fleet's
agents) into an in-process pipeline, then times ``DriftMonitor.audit`` (wall, and the main
thread's CPU): on the fleet as fed, again with nothing changed, after a tenth of the agents
ran 20 more records, with every agent packed, and again. For an A/B, run it from each tree's
root with that tree's interpreter, alternately, several pairs (``TAG`` labels the lines).
With ``SLICE=N`` set, then: every agent runs 20 more records (every table changed, as
between two audits of a busy fleet) and the audit runs in slices of N tests
(``DriftMonitor.start_audit``/``audit_step``: the steps, the longest and their sum), then
every agent runs 20 more and the whole audit is timed for comparison.

    .venv/bin/python benchmarks/audit_scale.py /tmp/lead/fleets/stochastic 200 500 2000
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fleets
from bench_daemon import feed
from bench_fleet import pipeline, replays

from capwatch.daemon.logs import configure_logging


def _timed(f: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    out = f()
    return out, time.perf_counter() - wall, time.thread_time() - cpu


def main() -> None:
    configure_logging("error", "json")
    fleet = fleets.load(Path(sys.argv[1]))
    own = list(fleet.by_agent().values())
    steps = int(sys.argv[2])
    tag = os.environ.get("TAG", "")
    with tempfile.TemporaryDirectory() as tmp:
        p = pipeline(tmp, fleet.families, max_agents=200_000, freeze_idle_after_s=1e9)
        done = offset = 0
        for n in (int(x) for x in sys.argv[3:]):
            records = replays(own, range(done, n), steps, offset)
            feed(p, records)
            offset += len(records)
            done = n
            del records
            gc.collect()
            stochastic = sum(1 for _, m in p.drift if m.stochastic)
            found, *first = _timed(p.drift.audit)
            _, *again = _timed(p.drift.audit)
            records = replays(own, range(0, max(1, n // 10)), 20, offset)
            offset += len(records)
            feed(p, records)
            del records
            _, *tenth = _timed(p.drift.audit)
            for agent_id in [a for a in {k[0] for k, _ in p.drift} if not p.drift.packed(a)]:
                p.drift.pack(agent_id)
            _, *packed = _timed(p.drift.audit)
            _, *packed_again = _timed(p.drift.audit)
            cells = "; ".join(f"{what} {w:.4f} s ({c:.4f} CPU)" for what, (w, c) in (
                ("first", first), ("again", again), ("after a tenth ran", tenth),
                ("all packed", packed), ("again", packed_again)))
            print(f"{tag} agents {n:,}: stochastic tables {stochastic:,}, {len(found)} tested,"
                  f" {sum(f.rejected for f in found)} rejected; audit {cells}", flush=True)
            if os.environ.get("SLICE"):
                sliced(p, own, n, steps, offset + 20 * n, int(os.environ["SLICE"]), tag)
                offset += 40 * n + 20 * n


def sliced(p: Any, own: Any, n: int, steps: int, offset: int, size: int, tag: str) -> None:
    del steps
    records = replays(own, range(0, n), 20, offset)
    feed(p, records)
    del records
    p.drift.start_audit()
    times = []
    while True:
        found, *t = _timed(lambda: p.drift.audit_step(size))
        times.append(t)
        if found is not None:
            break
    records = replays(own, range(0, n), 20, offset + 20 * n)
    feed(p, records)
    del records
    whole, *w = _timed(p.drift.audit)
    longest = max(times, key=lambda t: t[1])
    print(f"{tag} agents {n:,}, every table changed: sliced ({size} tests a step) "
          f"{len(times)} steps, longest {longest[0]:.4f} s ({longest[1]:.4f} CPU), "
          f"sum {sum(t[0] for t in times):.4f} s ({sum(t[1] for t in times):.4f} CPU), "
          f"{len(found)} tested; whole {w[0]:.4f} s ({w[1]:.4f} CPU), {len(whole)} tested",
          flush=True)


if __name__ == "__main__":
    main()
