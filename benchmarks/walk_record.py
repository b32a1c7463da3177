"""One record's way through the daemon, counted: the files it runs in and the calls
between them (the figures in docs/architecture.md).

One inconsistent transition (the rover refusing to sample on a half battery, against
capwatch/examples/rover.pddl) is handled, its assessment run, the new version published
and installed, and the offsets committed; a profile hook records every call into a
capwatch function on the way. The worker's part runs on this thread, so the per-thread
split is by phase, not by thread.

    .venv/bin/python benchmarks/walk_record.py
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, cast

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.service import build_service
from capwatch.model.pddl_reader import read_domain

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = str(ROOT / "capwatch") + "/"
EXAMPLES = ROOT / "capwatch" / "examples"
CORE = ("model/", "monitor/", "assess/")
HALF = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
        ["battery_half", "rover1"]]


class Drifted:
    sim = SimulatedAgent(read_domain(EXAMPLES / "rover-sample-drift.pddl"), seed=1)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


def main() -> int:
    configure_logging("error", "json")
    tmp = Path(tempfile.mkdtemp())
    path = tmp / "in.jsonl"
    path.write_text(json.dumps({
        "type": "transition", "agent_id": "rover-a", "family": "rover-v1", "step": 0,
        "state": HALF, "action": ["sample_rock", "rover1", "store1", "waypoint1"],
        "next_state": HALF, "executed": False}) + "\n")
    cfg = DaemonConfig(**cast("dict[str, Any]", {
        "replica_id": "walk", "store": {"url": f"sqlite:///{tmp / 'm.db'}"},
        "families": {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl")}},
        "output": {"kind": "log"}, "http": {"enabled": False}, "log": {"level": "error"},
        "source": {"kind": "jsonl", "path": str(path)},
        "detection": {"debounce_transitions": 1, "debounce_s": 3600}}))
    service = build_service(cfg, publisher=MemoryPublisher(), agents=Drifted(),
                            source=JsonlSource(str(path)))
    p = service.pipeline
    p.open()
    (record,) = p.source.poll(1.0)

    calls: list[tuple[str, str]] = []

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(PACKAGE):
            return
        back = frame.f_back
        while back is not None and not back.f_code.co_filename.startswith(PACKAGE):
            back = back.f_back
        caller = back.f_code.co_filename[len(PACKAGE):] if back is not None else ""
        calls.append((caller, frame.f_code.co_filename[len(PACKAGE):]))

    def adopt_and_checkpoint() -> None:
        p.drain()
        p.checkpoint()

    phases: list[tuple[str, Callable[[], None]]] = [
        ("main: decode, observe, queue", lambda: p.handle(record)),
        ("worker: claim, assess, store, publish",
         lambda: p.workers.run_claimed("walk/w0", p.store.claim("walk/w0", p.clock(), 60, 1)[0])),
        ("main: adopt the version, checkpoint", adopt_and_checkpoint),
    ]
    marks = []
    sys.setprofile(hook)
    threading.setprofile(hook)
    try:
        for name, step in phases:
            marks.append((name, len(calls)))
            step()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    marks.append(("end", len(calls)))
    assert p.store.latest("rover-v1", "rover-a") is not None, "no version was published"

    def core(f: str) -> bool:
        return f.startswith(CORE)

    files = {c for _, c in calls}
    outside = {f for f in files if not core(f)}
    hops = [(a, c) for a, c in calls if a and a != c and not core(a) and not core(c)]
    print(f"one record: {len(files)} capwatch files, {len(outside)} outside the core; "
          f"{len(hops)} calls from one file to another outside the core, "
          f"{sum(1 for a, _ in hops if a == 'daemon/pipeline.py')} of them by "
          f"daemon/pipeline.py")
    for (name, start), (_, end) in itertools.pairwise(marks):
        seen = list(dict.fromkeys(c for _, c in calls[start:end] if not core(c)))
        print(f"  {name} ({len(seen)} files): {' > '.join(seen)}")
    service.store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
