"""The steady state's work alone under callgrind (docs/performance.md, "Steady state on the
outside producer's fleet: session 19"): the first ``--records`` records of a fleet fed once
(every agent admitted), then the same records again at new offsets (the steady pass of
``bench_fleet``), with callgrind's instrumentation switched on only around the latter::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no \\
        .venv/bin/python benchmarks/steady_callgrind.py --fleet DIR --records 3000

Idle agents are never frozen nor evicted and no checkpoint falls due (session 18,
steady18: under callgrind a run is ~50 times slower, so the main loop's work by wall time
would come ~50 times as often a record and differ between an A and a B by when it fell).
Without valgrind the two ``callgrind_control`` calls are skipped and the CPU time of the
steady pass is printed.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fleet
import fleets
from admission_callgrind import _instrument
from bench_daemon import Replay, feed

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.heap import settle_heap
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service

_NEVER = 1e9


def pipeline(tmp: str, families: dict[str, Path]) -> Pipeline:
    cfg = DaemonConfig(**cast("dict[str, Any]", {
        "replica_id": "bench", "store": {"url": f"sqlite:///{Path(tmp) / 'm.db'}"},
        "families": {f: {"domain": str(d)} for f, d in families.items()},
        "output": {"kind": "log"}, "http": {"enabled": False},
        "limits": {"freeze_idle_after_s": _NEVER, "evict_idle_after_s": _NEVER},
        "scheduler": {"checkpoint_s": _NEVER},
    }))
    svc = build_service(cfg, publisher=MemoryPublisher(), source=Replay([]),
                        agents=bench_fleet.NoAgents())
    p = svc.pipeline
    settle_heap()
    p.open()
    return p


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, required=True)
    parser.add_argument("--records", type=int, default=3000)
    args = parser.parse_args()
    configure_logging("error", "json")
    fleet = fleets.load(args.fleet)
    n = min(args.records, len(fleet.events))
    values, ids = fleet.events[:n], fleet.agent_ids[:n]
    with tempfile.TemporaryDirectory() as tmp:
        p = pipeline(tmp, fleet.families)
        feed(p, bench_fleet.records(values, ids, 0))
        again = bench_fleet.records(values, ids, n)
        gc.collect()
        _instrument(True)
        t0 = time.process_time()
        feed(p, again)
        spent = time.process_time() - t0
        _instrument(False)
        print(f"steady pass of {n:,} records: {spent / n * 1e6:.1f} us CPU a record "
              f"({len(p.registry):,} agents, {p.dead_letters:,} dead letters; "
              f"load {os.getloadavg()[0]:.1f})")
        p.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
