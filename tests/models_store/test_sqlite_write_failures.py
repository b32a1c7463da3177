"""SQLite: a version write that only waited out ``busy_timeout`` for another writer (an
operator's command holding the file) is not the database refusing writes, so /readyz's
report of failing writes (``write_failures``) stays empty; a refusal is still reported.
PostgreSQL's counterpart: tests/daemon/test_write_failures.py."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, build_version
from capwatch.models_store.sqlite import SqliteModelStore

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
