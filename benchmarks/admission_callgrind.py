"""The admission rows' work alone under callgrind (docs/performance.md, "Admission on the
outside producer's fleet: session 18"): the fleet's stream fed once (or its first
``--warm`` records), then ``--agents`` new agents of one record each
(``bench_fleet.new_agents``) and a checkpoint, with callgrind's instrumentation switched
on only around the latter (``callgrind_control -i on``)::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no \\
        .venv/bin/python benchmarks/admission_callgrind.py --fleet DIR --agents 2000

Without valgrind the two ``callgrind_control`` calls are skipped and the CPU time of the
admission is printed.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fleet
import fleets
from bench_daemon import feed

from capwatch.daemon.logs import configure_logging


def _instrument(on: bool) -> None:
    tool = shutil.which("callgrind_control")
    if tool is not None and "valgrind" in os.environ.get("LD_PRELOAD", ""):
        subprocess.run([tool, "-i", "on" if on else "off", str(os.getpid())], check=True,
                       capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, required=True)
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--warm", type=int, help="records of the stream fed first (all)")
    args = parser.parse_args()
    configure_logging("error", "json")
    fleet = fleets.load(args.fleet)
    with tempfile.TemporaryDirectory() as tmp:
        p = bench_fleet.pipeline(tmp, fleet.families)
        stream = bench_fleet.records(fleet.events, fleet.agent_ids, 0)
        feed(p, stream[:args.warm] if args.warm else stream)
        news = bench_fleet.new_agents(fleet, 0, args.agents, len(stream))
        gc.collect()
        _instrument(True)
        t0 = time.process_time()
        feed(p, news)
        p.checkpoint()
        spent = time.process_time() - t0
        _instrument(False)
        print(f"{args.agents:,} new agents: {spent / args.agents * 1e6:.1f} us CPU an agent "
              f"(load {os.getloadavg()[0]:.1f})")
        p.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
