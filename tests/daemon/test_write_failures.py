"""A replica whose model-version writes the database refuses says so on /readyz and in
its metrics while its store still answers a probe, and recovers as soon as the database
takes such a write again: /readyz's probe tries one (rolled back) for each failing kind,
so no real write has to come first (before session 17 an idle replica stayed at 503 for up
to 300 s) (docs/operations.md, "Readiness").

The faults are real: the INSERT privilege on model_versions revoked from the replica's
PostgreSQL role, and the disk under model_versions full (its own tablespace on a small
tmpfs) while the rest of the database has room, as rev14 saw it: /readyz stayed 200."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from capwatch.contracts.store import Held
from capwatch.daemon.http import ApiServer, RecentAlerts
from capwatch.daemon.metrics import StoreWrites
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, PendingAssessment, build_version, open_store
from capwatch.models_store.sql import SqlModelStore
from tests.support.postgres_server import SERVICE_USER, PostgresServer

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "capwatch" / "examples"


def readyz(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ready_soon(url: str, timeout_s: float = 15.0) -> bool:
    """/readyz says ready within ``timeout_s`` (it reuses its store probe's answer for a
    second: store_probe.FRESH_S)."""
    deadline = time.monotonic() + timeout_s
    while readyz(url) != (200, {"ready": True, "problems": []}):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def failing_gauge(registry: CollectorRegistry, kind: str) -> float | None:
    return registry.get_sample_value("capwatch_store_writes_failing", {"kind": kind})


@pytest.fixture
def role_url(postgres_dsn: str) -> Iterator[tuple[str, str, str]]:
    """(the replica's store URL under a role of its own, the admin DSN, schema)."""
    tag = uuid.uuid4().hex[:10]
    schema, role = f"t_{tag}", f"replica_{tag}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"CREATE SCHEMA {schema} AUTHORIZATION {role}")
    parts = urlsplit(postgres_dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    url = parts._replace(netloc=f"{role}@{host}").geturl()
    sep = "&" if "?" in url else "?"
    yield f"{url}{sep}options={quote(f'-csearch_path={schema}')}", postgres_dsn, schema
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.execute(f"DROP ROLE {role}")


def test_refused_version_writes_fail_readiness_until_one_lands(
        role_url: tuple[str, str, str]) -> None:
    url, admin, schema = role_url
    role = urlsplit(url).netloc.split("@")[0]
    store = open_store(url)
    assert isinstance(store, SqlModelStore)
    registry = CollectorRegistry()
    registry.register(StoreWrites(store.write_failures, store.write_failure_count))
    server = ApiServer(store, registry, ready=lambda: True, families_of=lambda a: None,
                       alerts=RecentAlerts()).start()
    try:
        assert readyz(server.url) == (200, {"ready": True, "problems": []})
        now = datetime.now(UTC)
        store.enqueue(PendingAssessment("k", "a1", "rover", {"n": 1}, now))
        (item,) = store.claim("r/w0", now, 60)
        v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                          now, evidence={"assessment_key": item.key})

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"REVOKE INSERT ON {schema}.model_versions FROM {role}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            store.put(v, (), Held("k", "r/w0", now, 60))
        # Other writes still land, and the probe's select answers: before, /readyz said
        # ready here.
        store.renew("k", "r/w0", now, 60)
        assert store.unreachable(1.5) is None
        status, body = readyz(server.url)
        assert status == 503 and not body["ready"]
        (problem,) = body["problems"]
        assert problem.startswith("store writes failing (model_versions): ")
        assert "permission denied" in problem
        assert failing_gauge(registry, "model_versions") == 1.0
        assert failing_gauge(registry, "other") == 0.0
        assert registry.get_sample_value("capwatch_store_write_failures_total",
                                         {"kind": "model_versions"}) == 1.0
        assert store.history("rover") == []  # nothing half written

        # Still refused: the probe's write (/readyz's, run here at once) is refused too.
        assert store.unreachable(1.5) is None
        assert "permission denied" in store.write_failures()["model_versions"]
        assert readyz(server.url)[0] == 503
        assert failing_gauge(registry, "model_versions") == 1.0

        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"GRANT INSERT ON {schema}.model_versions TO {role}")
        # Ready again with no version written: the probe's write was taken.
        assert store.unreachable(1.5) is None and store.write_failures() == {}
        assert ready_soon(server.url)
        assert failing_gauge(registry, "model_versions") == 0.0
        assert store.history("rover") == []  # the probe left nothing
        assert registry.get_sample_value("capwatch_store_write_failures_total",
                                         {"kind": "model_versions"}) == 1.0
        assert store.put(v, (), Held("k", "r/w0", now, 60)) == v
        assert [h.key for h in store.history("rover")] == [v.key]
    finally:
        server.close()
        store.close()


def test_a_failure_no_later_write_retries_is_reported_for_a_while_only(
        role_url: tuple[str, str, str]) -> None:
    """Work another replica took over leaves no version write to retry here: the report
    ends after its hold rather than keep the replica out of rotation for good."""
    url, admin, schema = role_url
    role = urlsplit(url).netloc.split("@")[0]
    store = open_store(url)
    assert isinstance(store, SqlModelStore)
    now = datetime.now(UTC)
    v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"), now)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"REVOKE INSERT ON {schema}.model_versions FROM {role}")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            store.put(v)
        assert set(store.write_failures()) == {"model_versions"}
        assert store.write_failures(hold_s=0.0) == {}
    finally:
        store.close()


@pytest.fixture
def small_disk(postgres_server: PostgresServer) -> Iterator[Path]:
    """A 2 MiB tmpfs the test server's user owns (needs root and the local server)."""
    if postgres_server.external or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for the server needs root and a local server")
    path = Path(tempfile.mkdtemp(prefix="capwatch-ts-", dir="/tmp"))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)],
                       check=False, capture_output=True)
    if r.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    pw = pwd.getpwnam(SERVICE_USER)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)
        path.rmdir()


def fill(disk: Path) -> Path:
    """Write zeros to ``disk`` until it is full; the filler file."""
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_under_the_versions_only_fails_readiness_until_a_version_lands(
        role_url: tuple[str, str, str], small_disk: Path) -> None:
    url, admin, schema = role_url
    store = open_store(url)
    assert isinstance(store, SqlModelStore)
    space = f"ts_{schema}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE TABLESPACE {space} LOCATION '{small_disk}'")
        conn.execute(f"ALTER TABLE {schema}.model_versions SET TABLESPACE {space}")
    registry = CollectorRegistry()
    registry.register(StoreWrites(store.write_failures, store.write_failure_count))
    server = ApiServer(store, registry, ready=lambda: True, families_of=lambda a: None,
                       alerts=RecentAlerts()).start()
    try:
        now = datetime.now(UTC)
        store.enqueue(PendingAssessment("k", "a1", "rover", {"n": 1}, now))
        (item,) = store.claim("r/w0", now, 60)
        v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                          now, evidence={"assessment_key": item.key})
        filler = fill(small_disk)
        with pytest.raises(psycopg.errors.DiskFull):
            store.put(v, (), Held("k", "r/w0", now, 60))
        store.renew("k", "r/w0", now, 60)  # the rest of the database has room
        assert store.unreachable(1.5) is None
        status, body = readyz(server.url)
        assert status == 503, body
        (problem,) = body["problems"]
        assert problem.startswith("store writes failing (model_versions): DiskFull")
        assert failing_gauge(registry, "model_versions") == 1.0
        assert store.history("rover") == []

        # The probe's write needs room as the version did, and is refused too.
        assert store.unreachable(1.5) is None
        assert store.write_failures()["model_versions"].startswith("DiskFull")
        assert readyz(server.url)[0] == 503
        filler.unlink()
        assert store.unreachable(1.5) is None and store.write_failures() == {}
        assert ready_soon(server.url)
        assert failing_gauge(registry, "model_versions") == 0.0
        assert store.history("rover") == []
        assert store.put(v, (), Held("k", "r/w0", now, 60)) == v
    finally:
        server.close()
        store.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.execute(f"CREATE SCHEMA {schema}")  # the fixture drops it again
            conn.execute(f"DROP TABLESPACE {space}")


@pytest.mark.parametrize("timeout", ["the store's deadline", "statement_timeout",
                                     "lock_timeout"])
def test_a_version_write_that_timed_out_does_not_fail_readiness(
        role_url: tuple[str, str, str], timeout: str) -> None:
    """A write that only did not finish (it waited on a lock another session held) is
    not the database refusing writes: before, it marked version writes failing, and a
    replica with no version left to write (idle, its work taken over) answered 503 for
    the whole hold (300 s) while every write would have landed."""
    url, admin, schema = role_url
    options = {"the store's deadline": None, "statement_timeout": "statement_timeout=500",
               "lock_timeout": "lock_timeout=500"}[timeout]
    if options is not None:
        url += quote(f" -c{options}")
    store = open_store(url, statement_timeout_s=1.0 if options is None else 10.0)
    assert isinstance(store, SqlModelStore)
    server = ApiServer(store, CollectorRegistry(), ready=lambda: True,
                       families_of=lambda a: None, alerts=RecentAlerts()).start()
    try:
        now = datetime.now(UTC)
        store.enqueue(PendingAssessment("k", "a1", "rover", {"n": 1}, now))
        (item,) = store.claim("r/w0", now, 60)
        v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                          now, evidence={"assessment_key": item.key})
        with psycopg.connect(admin) as locker:
            locker.execute(f"LOCK TABLE {schema}.model_versions IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(psycopg.OperationalError):
                store.put(v, (), Held("k", "r/w0", now, 60))
            locker.rollback()
        assert store.write_failures() == {}
        assert readyz(server.url) == (200, {"ready": True, "problems": []})
        assert store.put(v, (), Held("k", "r/w0", now, 60)) == v  # it would have landed
    finally:
        server.close()
        store.close()
