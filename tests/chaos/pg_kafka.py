"""The chaos scenario "PostgreSQL killed" with the daemon over Kafka (issue 12, row 7).

A live stream is produced to Kafka while ``capwatch run`` consumes it with its models
store in PostgreSQL; at a random moment the database is killed (``pg_ctl stop -m
immediate``: every backend dies, no shutdown checkpoint) and started again on the same
port after a while. The daemon must not exit, must answer ``/readyz`` 503 naming the
store (not Kafka), and must finish the stream afterwards as an uninterrupted run would.

The server is ours and runs with ``synchronous_commit`` on (tests/support starts it with
it off for speed, which lets an immediate stop lose transactions the daemon was told were
committed: a fault of the test bed, not of capwatch).
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.chaos.harness import (
    Daemon,
    FleetInput,
    Outcome,
    alert_pairs,
    readyz,
    wait_readyz,
)
from tests.chaos.kafka_harness import (
    KafkaTopics,
    committed_and_end,
    kafka_daemon_config,
    make_topics,
    produce,
    read_topic,
)
from tests.support._proc import wait_until
from tests.support.postgres_server import PostgresServer, _run_as_service_user


class KillablePostgres:
    """A PostgreSQL server this process started, killed and started again on its port."""

    def __init__(self, server: PostgresServer) -> None:
        if server.external or server.workdir is None or server.bindir is None:
            raise ValueError("needs a server this process started")
        self.server = server
        self.workdir = server.workdir
        self.bindir = server.bindir
        self.admin_dsn = server.dsn.rsplit("/", 1)[0] + "/postgres"
        self._pg_ctl("stop", "-m", "fast", "-w")
        self.start()

    def _pg_ctl(self, *args: str) -> None:
        _run_as_service_user([str(self.bindir / "pg_ctl"), *args, "-D",
                              str(self.workdir / "data")], check=True)

    def kill(self) -> None:
        self._pg_ctl("stop", "-m", "immediate")

    def start(self) -> None:
        # fsync off is harmless here (the machine does not crash, the OS keeps the
        # writes); synchronous_commit stays on, as in production.
        opts = (f"-c port={self.server.port} -c listen_addresses=127.0.0.1 "
                f"-c unix_socket_directories={self.workdir} -c fsync=off "
                f"-c max_connections=50")
        self._pg_ctl("start", "-w", "-l", str(self.workdir / "postgres.log"), "-o", opts)

    def fresh_database(self) -> str:
        name = f"chaos_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # the name is ours
        return self.admin_dsn.rsplit("/", 1)[0] + f"/{name}"


def read_pg_store(dsn: str) -> tuple[dict[tuple[str, int], dict[str, Any]], int]:
    """Agent versions and queued or running assessments, read as an operator would."""
    with psycopg.connect(dsn, connect_timeout=3) as conn:
        versions = {(r[0], int(r[1])): r[2] for r in conn.execute(
            "SELECT agent_id, version, model_json FROM model_versions WHERE agent_id != ''")}
        row = conn.execute("SELECT COUNT(*) FROM pending_assessments"
                           " WHERE status IN ('pending', 'claimed')").fetchone()
        return versions, int(row[0]) if row else 0


def store_done(topics: KafkaTopics, dsn: str) -> bool:
    committed, end = committed_and_end(topics)
    if not end or committed < end:
        return False
    try:
        return read_pg_store(dsn)[1] == 0
    except psycopg.Error:
        return False


def _blames_store(status: int, body: dict[str, Any]) -> bool:
    problems = body.get("problems", [])
    return status == 503 and any("store" in p for p in problems) \
        and not any("Kafka" in p for p in problems)


@dataclass
class PgKafkaRun:
    outcome: Outcome
    fault_at_s: float
    hold_s: float
    noticed_s: float | None = None
    """Seconds from the kill to /readyz 503 naming the store."""
    ready_again_s: float | None = None
    """Seconds from the restart to /readyz 200."""
    exited_during_fault: int | None = None
    readyz_during_fault: list[int] = field(default_factory=list)
    store_failures_logged: int = 0
    """'dependency failed' / 'still failing' lines, each naming the store."""
    blamed_other: list[str] = field(default_factory=list)
    """Problems logged or on /readyz during the fault that named something else."""
    finished: bool = False


def postgres_killed(inp: FleetInput, pg: KillablePostgres, bootstrap: str, port: int,
                    workdir: Path, rng: random.Random, hold_s: float) -> PgKafkaRun:
    """One scenario; the caller compares ``.outcome`` with an uninterrupted run."""
    workdir.mkdir(parents=True)
    dsn = pg.fresh_database()
    topics = make_topics(bootstrap)
    config = kafka_daemon_config(topics, workdir / "unused.db", inp.families, inp.urls,
                                 http_port=port)
    config["store"] = {"url": dsn, "connect_timeout_s": 60.0}
    d = Daemon(config, workdir, "daemon")
    chunks = [(inp.lines[i:i + 400], inp.keys[i:i + 400])
              for i in range(0, len(inp.lines), 400)]
    def send_chunks() -> None:
        for v, k in chunks:
            produce(topics, v, k)
            time.sleep(0.2)  # paces the stream: the fault lands while records arrive

    producer = threading.Thread(target=send_chunks)
    run = PgKafkaRun(Outcome({}, {}, 0, {}, set(), 0), 0.0, hold_s)
    code = -1
    killed = False
    try:
        d.wait_started()
        producer.start()
        run.fault_at_s = rng.uniform(0.5, 0.25 * len(chunks))
        deadline = d.started + run.fault_at_s
        while time.monotonic() < deadline and d.proc.poll() is None:
            time.sleep(0.05)
        t0 = time.monotonic()
        pg.kill()
        killed = True
        seen: list[tuple[float, int, dict[str, Any]]] = []
        if wait_readyz(port, d, _blames_store, hold_s, seen) is not None:
            run.noticed_s = round(seen[-1][0] - t0, 1)
        while time.monotonic() < t0 + hold_s and d.proc.poll() is None:
            seen.append((time.monotonic(), *readyz(port)))
            time.sleep(0.25)
        run.readyz_during_fault = [s for _, s, _ in seen]
        run.blamed_other = [p for _, _, b in seen for p in b.get("problems", [])
                            if "Kafka" in p]
        run.exited_during_fault = d.proc.poll()
        pg.start()
        killed = False
        t1 = time.monotonic()
        if wait_readyz(port, d, lambda s, b: s == 200, 120) is not None:
            run.ready_again_s = round(time.monotonic() - t1, 1)
        producer.join()
        run.finished = wait_until(
            lambda: d.proc.poll() is not None or store_done(topics, dsn), 300, 0.5) \
            and d.proc.poll() is None
    finally:
        if killed:
            pg.start()
        if producer.is_alive():
            producer.join()
        code = d.kill(signal.SIGTERM)
    versions, _ = read_pg_store(dsn)
    models = [json.loads(v) for v in read_topic(topics, topics.models)]
    alerts = [json.loads(v) for v in read_topic(topics, topics.alerts)]
    dead = [json.loads(v) for v in read_topic(topics, topics.dead_letter)]
    committed, _ = committed_and_end(topics)
    run.outcome = Outcome(
        versions=versions,
        published={(m["agent_id"], m["version"]): m["model"]["json"] for m in models},
        published_raw=len(models), alerts=alert_pairs(alerts),
        dead_letters={x["offset"] * 1000 + x["partition"] for x in dead},
        committed=committed, exits=[code], tracebacks=d.tracebacks())
    for e in d.log_events():
        if str(e.get("event", "")).endswith(("failed; retrying", "still failing; retrying")):
            problem = str(e.get("problem", ""))
            if problem.startswith("models store unavailable"):
                run.store_failures_logged += 1
            else:
                run.blamed_other.append(problem)
    return run
