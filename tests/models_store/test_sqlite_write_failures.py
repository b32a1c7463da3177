"""SQLite: a version write that only waited out ``busy_timeout`` for another writer (an
operator's command holding the file) is not the database refusing writes, so /readyz's
report of failing writes (``write_failures``) stays empty; a refusal is still reported.
PostgreSQL's counterpart: tests/daemon/test_write_failures.py."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, build_version
from capwatch.models_store.sqlite import SqliteModelStore
from tests.support.small_disk import fill, small_tmpfs

EXAMPLES = Path(__file__).resolve().parents[2] / "capwatch" / "examples"


def test_a_version_write_that_waited_out_another_writer_is_not_a_refusal(
        tmp_path: Path) -> None:
    path = tmp_path / "models.db"
    store = SqliteModelStore(path, busy_timeout_ms=50)
    v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                      datetime.now(UTC))
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the file
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            store.put(v)
        assert store.write_failures() == {}
        other.execute("ROLLBACK")
        assert store.put(v) == v
    finally:
        other.close()
        store.close()


def test_a_read_only_database_is_still_reported(tmp_path: Path) -> None:
    path = tmp_path / "models.db"
    store = SqliteModelStore(path)
    v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                      datetime.now(UTC))
    store._conn.execute("PRAGMA query_only = ON")  # the connection refuses every write
    try:
        with pytest.raises(sqlite3.OperationalError):
            store.put(v)
        assert set(store.write_failures()) == {"model_versions"}
    finally:
        store.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root)."""
    with small_tmpfs(tmp_path / "disk", "1m") as path:
        yield path


def test_a_full_disk_is_reported_until_the_store_takes_a_write_again(
        small_disk: Path) -> None:
    """/readyz's probe (``unreachable``) tries a write of each refused kind: the report
    lasts while the disk is full and ends once there is room, before any version is
    written (it waited for one, or 300 s)."""
    store = SqliteModelStore(small_disk / "models.db")
    v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                      datetime.now(UTC), evidence={"filler": "x" * 200_000})
    filler = small_disk / "filler"
    try:
        fill(filler)
        with pytest.raises(sqlite3.OperationalError, match="full"):
            store.put(v)
        assert set(store.write_failures()) == {"model_versions"}
        assert store.unreachable(1.5) is None  # a select still answers
        assert "full" in store.write_failures()["model_versions"]  # the probe was refused
        filler.unlink()
        assert store.unreachable(1.5) is None
        assert store.write_failures() == {}
        assert store.history("rover") == []  # the probe left nothing
        assert store.put(v) == v
    finally:
        store.close()


def test_a_read_only_connection_is_reported_until_it_takes_writes_again(
        tmp_path: Path) -> None:
    store = SqliteModelStore(tmp_path / "models.db")
    v = build_version(ModelRef("rover", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                      datetime.now(UTC))
    store._conn.execute("PRAGMA query_only = ON")
    try:
        with pytest.raises(sqlite3.OperationalError):
            store.put(v)
        assert store.unreachable(1.5) is None
        assert set(store.write_failures()) == {"model_versions"}
        store._conn.execute("PRAGMA query_only = OFF")
        assert store.unreachable(1.5) is None
        assert store.write_failures() == {}
        assert store.history("rover") == []
    finally:
        store.close()
