"""The scheduled checkpoint's time on the main loop (docs/performance.md, "The drift
snapshots and activity rows off the main loop").

Simulated agents of the two example families are handled a batch at a time; after each
batch ``Pipeline.checkpoint(background=True)`` is timed (wall, and the main thread's CPU),
then its writes and flush are waited for and its commit made before the next batch. Prints
medians and the p90 over the run. ``--tree`` runs another checkout's capwatch (an A/B: run
the trees alternately, in separate processes, several pairs).

    .venv/bin/python benchmarks/bench_checkpoint.py [--tree DIR] [--agents 100] [--dsn URL]

Run it from outside the trees (``cd /tmp``) so that ``--tree`` decides which capwatch is
imported. ``--dsn``: a store URL (PostgreSQL, say) instead of a SQLite file.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--agents", type=int, default=100, help="per family (two families)")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--batch", type=int, default=400)
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    from capwatch.adapters.io.streams import MemoryPublisher
    from capwatch.daemon.service import build_service
    from tests.daemon.helpers import simulated

    with tempfile.TemporaryDirectory() as tmp:
        over: dict[str, Any] = {"scheduler": {"checkpoint_s": 3600.0}}
        if args.dsn:
            over["store"] = {"url": args.dsn}
        cfg = simulated(Path(tmp), agents=args.agents, rounds=args.rounds, **over)
        d = build_service(cfg, publisher=MemoryPublisher()).pipeline
        d.seed_families()
        d.source.start(d.assign, d.revoke, {})
        records = []
        while got := d.source.poll(1.0):
            records += got
        wall, cpu, whole = [], [], []
        for i in range(0, len(records) - args.batch, args.batch):
            d.handle_batch(records[i:i + args.batch])
            t0, c0 = time.perf_counter(), time.thread_time()
            d.checkpoint(background=True)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            pending = d.checkpoints._pending
            if pending is not None:
                pending.done.wait()
            d.commit_flushed()
            whole.append(time.perf_counter() - t0)
        wall.sort()
        print(f"{args.tree}: {len(wall)} checkpoints; main loop median "
              f"{statistics.median(wall) * 1e3:.1f} ms, p90 {wall[int(len(wall) * .9)] * 1e3:.1f}"
              f" ms; main thread CPU median {statistics.median(cpu) * 1e3:.1f} ms; to the "
              f"commit median {statistics.median(whole) * 1e3:.1f} ms; load "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        d.source.close()
        d.store.close()


if __name__ == "__main__":
    main()
