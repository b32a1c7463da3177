"""Model store throughput: version writes, idempotent retries, model-at-time reads, and
queue claim/complete, on SQLite (a temp file) and, if CAPWATCH_BENCH_POSTGRES_DSN is set,
PostgreSQL. Prints one line per backend and operation.

    .venv/bin/python benchmarks/bench_store.py [--versions 200]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import (
    ModelRef,
    ModelStore,
    PendingAssessment,
    build_version,
    open_store,
    record_new_model,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "capwatch" / "examples"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


def bench(name: str, store: ModelStore, n: int) -> None:
    rover = read_domain(EXAMPLES / "rover.pddl")
    drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    base = record_new_model(store, "rover-v3", None, rover, T0)
    versions = [build_version(ModelRef("rover-v3", f"r{i}", 1), drifted,
                              T0 + timedelta(seconds=i), parent=base) for i in range(n)]
    t = time.perf_counter()
    for v in versions:
        store.put(v)
    write = time.perf_counter() - t
    t = time.perf_counter()
    for v in versions:
        store.put(v)
    retry = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(n):
        store.model_at(f"r{i}", T0 + timedelta(hours=1), "rover-v3")
    read = time.perf_counter() - t
    for i in range(n):
        store.enqueue(PendingAssessment(f"k{i}", f"r{i}", "rover-v3", {}, T0))
    t = time.perf_counter()
    for _ in range(n):
        (item,) = store.claim("w", T0, 60)
        store.complete(item.key, "w")
    queue = time.perf_counter() - t
    for op, secs in [("put new version", write), ("put identical retry", retry),
                     ("model_at", read), ("claim+complete", queue)]:
        print(f"{name:<10} {op:<20} {n / secs:8.0f}/s  ({secs / n * 1e3:.2f} ms each)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        store = open_store(str(Path(d) / "bench.db"))
        bench("sqlite", store, args.versions)
        store.close()
    dsn = os.environ.get("CAPWATCH_BENCH_POSTGRES_DSN")
    if dsn:
        store = open_store(dsn)
        bench("postgresql", store, args.versions)
        store.close()


if __name__ == "__main__":
    main()
