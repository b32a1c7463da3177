"""The console with a large fleet: one fleet page, an agent page and a family page, on a
SQLite store of N agents of which some drifted (own lineages, alerts). Prints seconds per
page as a server answers it (store reads, state computation, HTML).

    .venv/bin/python benchmarks/bench_console.py [--agents 10000] [--drifted 200]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from capwatch.console.web import Console
from capwatch.contracts.store import OutboxAlert
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, build_version, open_store, record_new_model
from capwatch.models_store.actions import AgentActivity, action_store

EXAMPLES = Path(__file__).resolve().parent.parent / "capwatch" / "examples"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--drifted", type=int, default=200)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(str(Path(tmp) / "models.db"))
        rover = read_domain(EXAMPLES / "rover.pddl")
        drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
        base = record_new_model(store, "rover-v3", None, rover, T0)
        names = [f"rover-{i:05d}" for i in range(args.agents)]
        action_store(store).save_activity([AgentActivity("rover-v3", a, 400, 0, T0, "r")
                                           for a in names])
        for i, a in enumerate(names[:args.drifted]):
            t = T0 + timedelta(seconds=i)
            store.put(build_version(ModelRef("rover-v3", a, 1), drifted, t, parent=base))
            store.add_alerts([OutboxAlert(f"k{i}", f"capability_reduced|rover-v3|{a}|s|f",
                                          "g", "rover-v3", "capability_reduced",
                                          {"agent_id": a, "summary": "x"}, t)])
        console = Console(store)
        for label, path in (("fleet page", "/console/?sort=state"),
                            ("fleet page 100", "/console/?sort=agent&page=100"),
                            ("agent page", f"/console/agents/rover-v3/{names[0]}"),
                            ("family page", "/console/families/rover-v3")):
            t0 = time.perf_counter()
            r = console.handle("GET", path, {"Host": "bench"})
            dt = time.perf_counter() - t0
            print(f"{label:<16} {dt:6.3f} s  {len(r.body):>8,} bytes  "
                  f"({args.agents:,} agents, {args.drifted} drifted)")
        store.close()


if __name__ == "__main__":
    main()
