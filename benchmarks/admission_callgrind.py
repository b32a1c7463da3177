"""The admission rows' work alone under callgrind (docs/performance.md, "Admission on the
outside producer's fleet: session 18"): the fleet's stream fed once (or its first
``--warm`` records), then ``--agents`` new agents of one record each
(``bench_fleet.new_agents``) and a checkpoint, with callgrind's instrumentation switched
on only around the latter (``callgrind_control -i on``)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no \\
        .venv/bin/python benchmarks/admission_callgrind.py --fleet DIR --agents 2000

Without ``--fleet``, the simulated fleet of ``bench_daemon.py`` (the rows' "default"),
its stream once (250 rounds of 200 agents, or its first ``--warm`` records), then new
agents as ``bench_admission.py`` makes them (``bench_daemon.renamed``). Without valgrind
the two ``callgrind_control`` calls are skipped and the CPU time of the admission is
printed.

``--max-agents N`` (``limits.max_agents_in_memory``) below twice the agents held puts the
run in the rows' second phase (past half of the limit every agent idle at a checkpoint is
frozen, ~1.4 freezes an admitted agent at 20,000 -> 50,000): a second checkpoint then
freezes the new agents themselves, which the first only trims.

``--no-wall-time`` (with ``--fleet``): no work falls due by wall time (checkpoints, the
drift audit, results' polls, idle agents frozen or evicted by their idle time, evidence
ripe by ``detection.debounce_s``). Under callgrind a run is ~50 times slower, so that work
came ~50 times as often an agent and differed between an A and a B by when it fell
(admit18-admit21's tables compared ``Batches.handle`` for that reason); without it, the
two explicit checkpoints still freeze and trim as above, the same agents on both sides.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_daemon
import bench_fleet
import fleets
from bench_daemon import feed

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.ports import Record
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.heap import settle_heap
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service


def _instrument(on: bool) -> None:
    tool = shutil.which("callgrind_control")
    if tool is not None and "valgrind" in os.environ.get("LD_PRELOAD", ""):
        subprocess.run([tool, "-i", "on" if on else "off", str(os.getpid())], check=True,
                       capture_output=True)


_NEVER = 1e9


def _timeless(tmp: str, families: dict[str, Path], max_agents: int | None) -> Pipeline:
    """``bench_fleet.pipeline`` with nothing due by wall time (``--no-wall-time``)."""
    limits: dict[str, float] = {"freeze_idle_after_s": _NEVER, "evict_idle_after_s": _NEVER}
    if max_agents:
        limits["max_agents_in_memory"] = max_agents
    cfg = DaemonConfig(**cast("dict[str, Any]", {
        "replica_id": "bench", "store": {"url": f"sqlite:///{Path(tmp) / 'm.db'}"},
        "families": {f: {"domain": str(d)} for f, d in families.items()},
        "output": {"kind": "log"}, "http": {"enabled": False}, "limits": limits,
        "detection": {"debounce_s": _NEVER},
        "scheduler": {"checkpoint_s": _NEVER, "drift_audit_s": _NEVER,
                      "results_poll_s": _NEVER},
    }))
    svc = build_service(cfg, publisher=MemoryPublisher(), source=bench_daemon.Replay([]),
                        agents=bench_fleet.NoAgents())
    settle_heap()
    svc.pipeline.open()
    return svc.pipeline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, help="a fleet directory (default: simulated)")
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--warm", type=int, help="records of the stream fed first (all)")
    parser.add_argument("--max-agents", type=int,
                        help="limits.max_agents_in_memory (default: the config's); below "
                             "twice the agents held, every agent idle at a checkpoint is "
                             "frozen, as in the rows' second phase past 25,000 agents; "
                             "a second checkpoint then freezes the new agents")
    parser.add_argument("--no-wall-time", action="store_true",
                        help="no work by wall time (with --fleet): the same on an A and a B")
    args = parser.parse_args()
    configure_logging("error", "json")
    with tempfile.TemporaryDirectory() as tmp:
        if args.fleet is None:
            f = bench_daemon.fleet(100)
            events = list(f.events(250))
            raw = [e.value for e in events]
            stream = [Record("bench", 0, i, e.agent_id.encode(), e.value)
                      for i, e in enumerate(events)]
            p = bench_daemon.service(tmp, f, stream, args.max_agents).pipeline
            settle_heap()
            p.open()
        else:
            fleet = fleets.load(args.fleet)
            p = (_timeless(tmp, fleet.families, args.max_agents) if args.no_wall_time
                 else bench_fleet.pipeline(tmp, fleet.families, args.max_agents))
            stream = bench_fleet.records(fleet.events, fleet.agent_ids, 0)
        feed(p, stream[:args.warm] if args.warm else stream)
        news = (bench_daemon.renamed(raw, 0, args.agents, len(stream)) if args.fleet is None
                else bench_fleet.new_agents(fleet, 0, args.agents, len(stream)))
        gc.collect()
        _instrument(True)
        t0 = time.process_time()
        feed(p, news)
        p.checkpoint()
        if args.max_agents:
            # The agents fed since the last checkpoint are idle at the next (trimmed at
            # the first, frozen at the second, as in the rows' second phase).
            p.checkpoint()
        spent = time.process_time() - t0
        _instrument(False)
        print(f"{args.agents:,} new agents: {spent / args.agents * 1e6:.1f} us CPU an agent "
              f"(load {os.getloadavg()[0]:.1f}); {len(p.registry):,} held, "
              f"{sum(bool(w.frozen) for w in p.registry):,} frozen")
        p.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
