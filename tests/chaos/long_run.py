"""``make chaos``: the long chaos run of issue 12, printing its figures.

- 20 scenarios with SIGKILL at a random moment of a live JSONL stream, then a restart;
- 20 with the store's file system running full for 2-6 s at a random moment;
- each compared with an uninterrupted run on the same input (same versions in content and
  count, same alerts after dedup, every record processed, same dead letters);
- 10 with the daemon over Kafka and PostgreSQL killed at a random moment for 5-20 s
  (tests/chaos/pg_kafka.py; a broker and a server of the run's own);
- at least 100,000 generated hostile messages through ``capwatch run`` (JSONL).

Usage: ``python -m tests.chaos.long_run [--kills 20] [--outages 20] [--pg-kafka 10]
[--hostile 100000] [--json figures.json]``. Exits 1 if any scenario differs from the
reference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.chaos.harness import compare, fleet, lost_records
from tests.chaos.hostile import generate
from tests.chaos.scenarios import can_mount, disk_full, hostile_jsonl, reference, sigkill


def _pg_kafka(n: int, inp: Any, ref: Any, work: Path, seed: int) -> dict[str, Any]:
    """PostgreSQL killed under a daemon consuming Kafka, ``n`` runs on one broker and one
    server (a fresh database and fresh topics per run)."""
    from tests.chaos.pg_kafka import KillablePostgres, postgres_killed
    from tests.support._proc import free_port
    from tests.support.kafka_broker import start_kafka_broker
    from tests.support.postgres_server import start_postgres_server

    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    with start_kafka_broker() as broker, start_postgres_server() as server:
        pg = KillablePostgres(server)
        for i in range(n):
            t0 = time.monotonic()
            run = postgres_killed(inp, pg, broker.bootstrap, free_port(),
                                  work / f"pg-kafka-{i:02d}", rng, rng.uniform(5.0, 20.0))
            problems = compare(ref, run.outcome, len(inp.lines))
            if run.exited_during_fault is not None:
                problems.append(f"exited {run.exited_during_fault} during the fault")
            if run.blamed_other:
                problems.append(f"blamed another component: {run.blamed_other[:2]}")
            rows.append({
                "run": i, "fault_at_s": round(run.fault_at_s, 2), "hold_s": round(run.hold_s, 1),
                "versions": len(run.outcome.versions), "published": run.outcome.published_raw,
                "alerts": len(run.outcome.alerts),
                "lost": lost_records(ref, run.outcome, len(inp.lines)),
                "exits": run.outcome.exits, "exited_during_fault": run.exited_during_fault,
                "readyz_503_during_fault": 503 in run.readyz_during_fault,
                "noticed_s": run.noticed_s, "ready_again_s": run.ready_again_s,
                "store_failures_logged": run.store_failures_logged,
                "blamed_other": len(run.blamed_other),
                "tracebacks": run.outcome.tracebacks,
                "equal": not problems, "problems": problems[:3],
                "seconds": round(time.monotonic() - t0, 1)})
            r = rows[-1]
            print(f"  pg_kafka {i:2d}: fault at {r['fault_at_s']:5.2f}s for {r['hold_s']:4.1f}s"
                  f"  503 after {r['noticed_s']}s, 200 {r['ready_again_s']}s after the"
                  f" restart  versions {r['versions']:2d}  lost {r['lost']}"
                  f"  exits {r['exits']}"
                  f"  {'equal' if r['equal'] else 'DIFFERS: ' + '; '.join(problems)[:160]}",
                  flush=True)
    return {"runs": n, "equal": sum(r["equal"] for r in rows),
            "versions_compared": len(ref.versions) * n,
            "versions_seen": sum(r["versions"] for r in rows),
            "records_lost": sum(r["lost"] for r in rows),
            "unexpected_exits": sum(1 for r in rows for c in r["exits"] if c != 0)
            + sum(r["exited_during_fault"] is not None for r in rows),
            "readyz_503_during_fault": sum(r["readyz_503_during_fault"] for r in rows),
            "blamed_other": sum(r["blamed_other"] for r in rows),
            "tracebacks": sum(r["tracebacks"] for r in rows), "rows": rows}


def _scenarios(kind: str, n: int, inp: Any, ref: Any, work: Path, seed: int
               ) -> dict[str, Any]:
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        t0 = time.monotonic()
        run = work / f"{kind}-{i:02d}"
        observed = sigkill(inp, run, rng) if kind == "sigkill" else disk_full(inp, run, rng)
        problems = compare(ref, observed.outcome, len(inp.lines))
        rows.append({
            "run": i, "fault_at_s": round(observed.kill_at_s or 0.0, 2),
            "versions": len(observed.outcome.versions),
            "published": observed.outcome.published_raw,
            "alerts": len(observed.outcome.alerts),
            "lost": lost_records(ref, observed.outcome, len(inp.lines)),
            "exits": observed.outcome.exits,
            "exited_during_fault": observed.exited_during_fault,
            "readyz_503_during_fault": 503 in observed.readyz_during_fault,
            "tracebacks": observed.outcome.tracebacks,
            "equal": not problems, "problems": problems[:3],
            "seconds": round(time.monotonic() - t0, 1)})
        r = rows[-1]
        print(f"  {kind} {i:2d}: fault at {r['fault_at_s']:5.2f}s  versions {r['versions']:2d}"
              f"  alerts {r['alerts']}  lost {r['lost']}  exits {r['exits']}"
              f"  {'equal' if r['equal'] else 'DIFFERS: ' + '; '.join(problems)[:160]}",
              flush=True)
    unexpected_exits = sum(1 for r in rows for c in r["exits"][1:] if c != 0) + sum(
        1 for r in rows if kind != "sigkill" and r["exits"] and r["exits"][0] != 0)
    return {"runs": n, "equal": sum(r["equal"] for r in rows),
            "versions_compared": sum(len(ref.versions) for _ in rows),
            "versions_seen": sum(r["versions"] for r in rows),
            "records_lost": sum(r["lost"] for r in rows),
            "unexpected_exits": unexpected_exits,
            "readyz_503_during_fault": sum(r["readyz_503_during_fault"] for r in rows),
            "tracebacks": sum(r["tracebacks"] for r in rows), "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--outages", type=int, default=20)
    p.add_argument("--pg-kafka", type=int, default=10)
    p.add_argument("--hostile", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=12)
    p.add_argument("--json", help="write the figures to this file")
    p.add_argument("--keep", action="store_true",
                   help="keep the runs' directories (logs, stores) and say where")
    args = p.parse_args(argv)
    figures: dict[str, Any] = {}
    kept = tempfile.mkdtemp(prefix="capwatch-chaos-") if args.keep else None
    with (contextlib.nullcontext(kept) if kept is not None
          else tempfile.TemporaryDirectory(prefix="capwatch-chaos-")) as tmp:
        if kept is not None:
            print(f"runs kept in {tmp}", flush=True)
        work = Path(tmp)
        (work / "fleet").mkdir()
        (work / "valid").mkdir()
        with fleet(work / "fleet", agents=12, drifted=4, episodes=60, drift_at=20,
                   seed=args.seed) as inp:
            ref = reference(inp, work / "reference")
            print(f"input: {len(inp.lines)} transition events of {len(inp.urls)} agents,"
                  f" {len(inp.drifted)} drifted; reference: {ref.summary()}", flush=True)
            figures["input"] = {"records": len(inp.lines), "agents": len(inp.urls),
                                "drifted": len(inp.drifted), "reference": ref.summary()}
            if args.kills:
                print(f"SIGKILL at a random moment, {args.kills} runs:", flush=True)
                figures["sigkill"] = _scenarios("sigkill", args.kills, inp, ref, work,
                                                args.seed)
            if args.outages:
                if can_mount():
                    print(f"store disk full, {args.outages} runs:", flush=True)
                    figures["disk_full"] = _scenarios("disk_full", args.outages, inp, ref,
                                                      work, args.seed + 1)
                else:
                    print("store disk full: skipped (mounting a tmpfs needs root)")
            if args.pg_kafka:
                print(f"PostgreSQL killed under a daemon over Kafka, {args.pg_kafka} runs:",
                      flush=True)
                figures["pg_kafka"] = _pg_kafka(args.pg_kafka, inp, ref, work,
                                                args.seed + 3)
        if args.hostile:
            with fleet(work / "valid", agents=2, drifted=0, episodes=5, drift_at=99,
                       seed=args.seed + 2) as v:
                valid, families = v.lines, v.families
            messages = list(generate(valid, args.hostile, seed=args.seed))
            report = hostile_jsonl(messages, work / "hostile", families)
            figures["hostile"] = {
                "sent": report.sent, "exit": report.exit_code,
                "tracebacks": report.tracebacks, "committed": report.committed,
                "lost": report.lost(), "internal_errors": report.internal_errors,
                "largest_dead_letter_bytes": report.largest_dead_letter,
                "wrong_fate": report.wrong, "seconds": round(report.seconds, 1),
                "by_kind": report.by_kind}
            print(f"hostile: {report.sent} messages in {report.seconds:.0f}s, exit"
                  f" {report.exit_code}, lost {report.lost()}, internal errors"
                  f" {report.internal_errors}, largest dead letter"
                  f" {report.largest_dead_letter} bytes; wrong fate by kind: {report.wrong}")
    print("\nsummary:")
    failed = False
    for kind in ("sigkill", "disk_full", "pg_kafka"):
        f = figures.get(kind)
        if f:
            print(f"  {kind}: {f['equal']}/{f['runs']} equal to the reference; versions"
                  f" {f['versions_seen']} seen for {f['versions_compared']} expected;"
                  f" records lost {f['records_lost']}; unexpected exits"
                  f" {f['unexpected_exits']}; /readyz 503 during the fault in"
                  f" {f['readyz_503_during_fault']} runs; tracebacks {f['tracebacks']}")
            failed |= f["equal"] != f["runs"] or f["unexpected_exits"] > 0
    h = figures.get("hostile")
    if h:
        wrong = sum(h["wrong_fate"].values())
        print(f"  hostile: {h['sent']} messages, {wrong} with the wrong fate, lost"
              f" {h['lost']}, exit {h['exit']}, internal errors {h['internal_errors']}")
        failed |= wrong > 0 or h["lost"] > 0 or h["exit"] != 0
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
