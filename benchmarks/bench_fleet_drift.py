"""The drift gauges' store read (``capwatch.daemon.fleet_drift``) on a large store.

Every replica runs ``ModelStore.lineages()`` (the newest version of every lineage) every
15 s; this builds a store of ``--agents`` agents with ``--versions`` versions each (rover's
rows, cloned in SQL so building takes seconds, not an hour of ``put``), then prints the
plan and time of the query (PostgreSQL: ``EXPLAIN (ANALYZE, BUFFERS)``; SQLite: ``EXPLAIN
QUERY PLAN``) of the query the gauges ran until session 17 (``lineages()``) and the one
they run now (``newest_versions()``), both through the store (alternating), and
``FleetDrift.figures()`` cold (a restarted replica's first refresh: a model load per agent
not sharing its model with one already compared) and warm (the 15 s refresh).

    .venv/bin/python benchmarks/bench_fleet_drift.py [--agents 50000] [--versions 4]
        [--backend postgresql|sqlite|both] [--dsn postgresql://...]

Without ``--dsn`` a throwaway PostgreSQL server is started (tests/support, Debian's
binaries).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from capwatch.daemon.fleet_drift import FleetDrift  # noqa: E402
from capwatch.daemon.metrics import DaemonMetrics  # noqa: E402
from capwatch.model.pddl_reader import read_domain  # noqa: E402
from capwatch.models_store import (  # noqa: E402
    ModelRef,
    ModelStore,
    build_version,
    open_store,
    record_new_model,
)

EXAMPLES = ROOT / "capwatch" / "examples"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
FAMILY = "rover-v3"
LINEAGES_SQL = (
    "SELECT m.family, m.agent_id, m.version, m.created_at, m.delta_to_baseline "
    "FROM model_versions m JOIN (SELECT family, agent_id, MAX(version) AS v "
    "FROM model_versions GROUP BY family, agent_id) l ON m.family = l.family "
    "AND m.agent_id = l.agent_id AND m.version = l.v ORDER BY m.family, m.agent_id")
"""``lineages()``'s query, which the gauges ran until session 17."""
NEWEST_SQL = ("SELECT family, agent_id, MAX(version) FROM model_versions "
              "GROUP BY family, agent_id ORDER BY family, agent_id")
"""``newest_versions()``'s, which they run now."""


def seed(store: ModelStore) -> None:
    """The baseline and agent a0's version 1, written through the store (the rows the
    clones copy)."""
    rover = read_domain(EXAMPLES / "rover.pddl")
    drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    base = record_new_model(store, FAMILY, None, rover, T0)
    store.put(build_version(ModelRef(FAMILY, "a0", 1), drifted, T0, parent=base))


CLONE_COLUMNS = (
    "parent_family, parent_agent_id, parent_version, delta_to_parent, delta_to_baseline, "
    "changed_pal_tuples, summary, evidence, model_json, pddl, content_key")
FROM_SEED = ", ".join(f"m.{c}" for c in CLONE_COLUMNS.split(", "))
# --distinct: each agent's model named after it, so no two agents share a model (the
# gauges' cache per model content then saves nothing: every comparison is paid).
MODEL_PG = FROM_SEED.replace("m.model_json", "jsonb_set(m.model_json, '{name}', "
                             "to_jsonb('d' || a))")
MODEL_SQLITE = FROM_SEED.replace("m.model_json",
                                 "json_set(m.model_json, '$.name', 'd' || a.n)")


def build_postgres(dsn: str, agents: int, versions: int, distinct: bool) -> None:
    import psycopg

    store = open_store(dsn)
    seed(store)
    store.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO model_versions (family, agent_id, version, {CLONE_COLUMNS}, "
            f"created_at) SELECT m.family, 'a' || a, v, {MODEL_PG if distinct else FROM_SEED}"
            ", m.created_at + make_interval(secs => a + v) FROM model_versions m, "
            "generate_series(0, %s) a, generate_series(1, %s) v "
            "WHERE m.agent_id = 'a0' AND m.version = 1 AND NOT (a = 0 AND v = 1)",
            (agents - 1, versions))
        # What autovacuum would have done by the time such a store exists.
        conn.execute("VACUUM ANALYZE model_versions")


def build_sqlite(path: Path, agents: int, versions: int, distinct: bool) -> None:
    import sqlite3

    store = open_store(str(path))
    seed(store)
    store.close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            f"WITH RECURSIVE a(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM a WHERE n < ?), "
            f"v(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM v WHERE n < ?) "
            f"INSERT INTO model_versions (family, agent_id, version, {CLONE_COLUMNS}, "
            f"created_at) SELECT m.family, 'a' || a.n, v.n, "
            f"{MODEL_SQLITE if distinct else FROM_SEED}"
            ", m.created_at FROM model_versions m, a, v "
            "WHERE m.agent_id = 'a0' AND m.version = 1 AND NOT (a.n = 0 AND v.n = 1)",
            (agents - 1, versions))
    conn.execute("ANALYZE")
    conn.close()


def timed(fn: Callable[[], object], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def report(label: str, secs: list[float]) -> None:
    print(f"  {label:<44} median {statistics.median(secs) * 1e3:9.1f} ms  "
          f"(min {min(secs) * 1e3:.1f}, max {max(secs) * 1e3:.1f}, n={len(secs)})")


def measure(name: str, url: str, explain: Callable[[str], str], rounds: int,
            figures: bool) -> None:
    store = open_store(url)
    print(f"{name}:")
    for label, sql in (("lineages()", LINEAGES_SQL), ("newest_versions()", NEWEST_SQL)):
        print(f"  plan of {label}:")
        for line in explain(sql).splitlines():
            print(f"    {line}")
    old: list[float] = []
    new: list[float] = []
    for _ in range(rounds):  # alternating, one pair a round
        old += timed(store.lineages, 1)
        new += timed(store.newest_versions, 1)
    report("lineages() (query + rows to objects)", old)
    report("newest_versions() (the same)", new)
    if figures:
        drift = FleetDrift(store, DaemonMetrics())
        report("FleetDrift.figures() cold (a model per agent)", timed(drift.figures, 1))
        report("FleetDrift.figures() warm (the 15 s refresh)", timed(drift.figures, rounds))
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=50_000)
    ap.add_argument("--versions", type=int, default=4)
    ap.add_argument("--backend", choices=("postgresql", "sqlite", "both"), default="both")
    ap.add_argument("--dsn", help="an empty PostgreSQL database (default: start one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--distinct", action="store_true",
                    help="no two agents share a model (the gauges' worst case)")
    ap.add_argument("--no-figures", action="store_true",
                    help="only the query, not FleetDrift (its cold pass loads every model)")
    args = ap.parse_args()
    rows = args.agents * args.versions + 1
    print(f"{args.agents} agents x {args.versions} versions + a baseline = {rows} rows")
    if args.backend in ("postgresql", "both"):
        server = None
        dsn = args.dsn
        if dsn is None:
            from tests.support.postgres_server import start_postgres_server
            server = start_postgres_server()
            dsn = server.dsn
        try:
            t = time.perf_counter()
            build_postgres(dsn, args.agents, args.versions, args.distinct)
            print(f"postgresql store built in {time.perf_counter() - t:.1f} s")

            def pg_explain(sql: str) -> str:
                import psycopg
                with psycopg.connect(dsn) as conn:
                    size = conn.execute(
                        "SELECT pg_size_pretty(pg_total_relation_size('model_versions')), "
                        "pg_size_pretty(pg_relation_size('model_versions'))").fetchone()
                    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                    text = "\n".join(r[0] for r in plan.fetchall())
                return f"table total {size[0]} (heap {size[1]})\n{text}" if size else text

            measure("postgresql", dsn, pg_explain, args.rounds, not args.no_figures)
        finally:
            if server is not None:
                server.stop(graceful=False)
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "models.db"
            t = time.perf_counter()
            build_sqlite(path, args.agents, args.versions, args.distinct)
            print(f"sqlite store built in {time.perf_counter() - t:.1f} s "
                  f"({path.stat().st_size / 2**20:.0f} MB)")

            def sqlite_explain(sql: str) -> str:
                import sqlite3
                conn = sqlite3.connect(path)
                plan = conn.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
                t = time.perf_counter()
                n = len(conn.execute(sql).fetchall())
                took = time.perf_counter() - t
                conn.close()
                return "\n".join(str(r[-1]) for r in plan) + \
                    f"\nquery alone: {n} rows in {took * 1e3:.1f} ms"

            measure("sqlite", str(path), sqlite_explain, args.rounds, not args.no_figures)


if __name__ == "__main__":
    main()
