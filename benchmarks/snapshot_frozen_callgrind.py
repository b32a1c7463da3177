"""The checkpoint writer's encoding of frozen agents' drift tables alone under callgrind
(docs/performance.md, "The checkpoint writer's snapshots of packed tables"): ``--agents``
agents of one to three executions of one action (some of a second), packed, their tables
taken as ``DriftMonitor.frozen`` takes them, then ``snapshot_frozen`` of each with
callgrind's instrumentation switched on only around the latter::

    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no \\
        .venv/bin/python benchmarks/snapshot_frozen_callgrind.py --agents 2000
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.drift import DriftConfig, DriftMonitor
from capwatch.monitor.snapshot import snapshot_frozen
from tests.paths import STOCHASTIC


def _instrument(on: bool) -> None:
    tool = shutil.which("callgrind_control")
    if tool is not None and "valgrind" in os.environ.get("LD_PRELOAD", ""):
        subprocess.run([tool, "-i", "on" if on else "off", str(os.getpid())], check=True,
                       capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=2000)
    args = parser.parse_args()
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()
    move, change = domain.action("move-car"), domain.action("changetire")
    drift = DriftMonitor(DriftConfig())
    rng = random.Random(1)
    agents = [f"a{i}" for i in range(args.agents)]
    for agent in agents:
        for _ in range(rng.choice((1, 1, 2, 3))):
            drift.observe(agent, move, int(rng.random() < 0.4))
        if rng.random() < 0.3:
            drift.observe(agent, change, 0)
        drift.pack(agent)
    frozen = [drift.frozen(agent) for agent in agents]
    _instrument(True)
    snaps = [snapshot_frozen(f, {"v": 1}) for f in frozen]
    _instrument(False)
    print(f"{len(snaps)} agents, {sum(len(s['actions']) for s in snaps)} tables")


if __name__ == "__main__":
    main()
