"""Issue 12, row 7: PostgreSQL killed under the daemon. It must not exit: it retries,
says not ready (naming the store, not Kafka) and resumes when the database returns."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest

from tests.chaos.harness import Daemon, FleetInput, PacedWriter, jsonl_config
from tests.support._proc import free_port
from tests.support.postgres_server import PostgresServer, _run_as_service_user

pytestmark = pytest.mark.integration


def _pg_ctl(server: PostgresServer, *args: str) -> None:
    assert server.bindir is not None and server.workdir is not None
    _run_as_service_user([str(server.bindir / "pg_ctl"), *args, "-D",
                          str(server.workdir / "data")], check=True)


def _readyz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return int(r.status), r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode(errors="replace")
    except OSError:
        return 0, ""


def _committed(dsn: str) -> int:
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            row = conn.execute("SELECT COALESCE(SUM(next_offset), 0) FROM consumer_offsets"
                               ).fetchone()
            return int(row[0]) if row else 0
    except psycopg.Error:
        return -1


def test_postgres_killed_and_back_is_ridden_out(
        drift_fleet: FleetInput, own_postgres: PostgresServer, tmp_path: Path) -> None:
    assert own_postgres.workdir is not None
    path = tmp_path / "in.jsonl"
    writer = PacedWriter(path, drift_fleet.lines, 2000)
    port = free_port()
    d = Daemon(jsonl_config(tmp_path, drift_fleet, path, own_postgres.dsn, follow=True,
                            http_port=port), tmp_path, "pg")
    try:
        deadline = time.monotonic() + 60
        while _committed(own_postgres.dsn) <= 0 and time.monotonic() < deadline:
            assert d.proc.poll() is None, d.tail()
            time.sleep(0.2)
        _pg_ctl(own_postgres, "stop", "-m", "immediate")
        answers = []
        end = time.monotonic() + 10
        while time.monotonic() < end:
            answers.append(_readyz(port))
            time.sleep(0.5)
        alive_during = d.proc.poll() is None
        opts = (f"-c port={own_postgres.port} -c listen_addresses=127.0.0.1 "
                f"-c unix_socket_directories={own_postgres.workdir} -c fsync=off")
        _pg_ctl(own_postgres, "start", "-w", "-l", str(own_postgres.workdir / "pg2.log"),
                "-o", opts)
        writer.finish()
        deadline = time.monotonic() + 90
        while (_committed(own_postgres.dsn) < len(drift_fleet.lines)
               and d.proc.poll() is None and time.monotonic() < deadline):
            time.sleep(0.5)
        committed = _committed(own_postgres.dsn)
    finally:
        writer.finish()
        code = d.kill(signal.SIGTERM)
    blamed_kafka = any("Kafka" in json.dumps(e) for e in d.log_events())
    assert alive_during, f"exited during the outage: {d.tail()}"
    assert any(status == 503 for status, _ in answers), answers
    assert not blamed_kafka
    assert committed == len(drift_fleet.lines)
    assert code == 0
