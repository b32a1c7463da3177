"""The embedded default store: one SQLite file in WAL mode, no server.

WAL lets readers (the CLI, the read API) run while the daemon writes; writers serialise
on ``BEGIN IMMEDIATE`` and wait up to ``busy_timeout`` for one another instead of failing.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capwatch.models_store.sql import Row, SqlModelStore, Tx, dumps, dumps_finite

_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
"""Fixed width, so text order is time order and ``created_at <= ?`` compares correctly."""


_UNFINISHED_WRITE_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT)
"""Primary result codes of a write that did not finish but was not refused."""


class _SqliteTx(Tx):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self._conn.execute(sql, tuple(params)).fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        n: int = self._conn.execute(sql, tuple(params)).rowcount
        if n > 0:
            self.wrote = True
        return n

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        # The cursor's rowcount after executemany is the sum over the rows (sqlite3).
        n: int = self._conn.executemany(sql, rows).rowcount
        if n > 0:
            self.wrote = True
        return n


class SqliteModelStore(SqlModelStore):
    dialect = "sqlite"

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000,
                 migrate: bool = True, clock: str = "monotonic",
                 wall_clock: Callable[[], datetime] | None = None) -> None:
        """``clock`` (``SqlBase.clock``): ``"monotonic"`` or ``"caller"``; SQLite's own
        time would be the host's wall clock, which a step moves."""
        if clock == "database":
            raise ValueError("a SQLite store has no clock of its own: use 'monotonic' "
                             "(one process) or 'caller'")
        super().__init__(clock, wall_clock)
        self.path = str(path)
        if self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise FileNotFoundError(f"directory {parent} for the model store does not exist")
        # isolation_level=None: we issue BEGIN ourselves, so DDL in migrations is
        # transactional too (the sqlite3 module would otherwise commit before it).
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._conn.execute("PRAGMA foreign_keys = ON")
        if migrate:
            self.migrate()

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]:
        self._conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        try:
            yield _SqliteTx(self._conn)
        except BaseException:
            # SQLite ends the transaction itself on some errors (a full disk while a
            # statement spilled pages): a ROLLBACK then fails and would hide the error.
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _lock_migrations(self, tx: Tx) -> None:
        """BEGIN IMMEDIATE already excludes every other writer."""

    def _lock_alert_routing(self, tx: Tx) -> None:
        """BEGIN IMMEDIATE already excludes every other router."""

    def _ts_in(self, t: datetime) -> Any:
        return t.astimezone(UTC).strftime(_TS_FORMAT)

    def _ts_out(self, v: Any) -> datetime:
        # fromisoformat reads our fixed format (with its Z) about 20 times faster than
        # strptime, which dominated listing a 10,000-agent fleet.
        t = datetime.fromisoformat(str(v))
        return t if t.tzinfo is not None else t.replace(tzinfo=UTC)

    def _json_in(self, obj: Any) -> Any:
        return dumps(obj)

    def _json_in_finite(self, obj: Any) -> Any:
        return dumps_finite(obj)

    def _json_out(self, v: Any) -> Any:
        return json.loads(v)

    def _is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError)

    def _probe_write(self, tx: Tx, kind: str) -> bool:
        # Uncommitted pages stay in the page cache (2 MiB by default) until the commit,
        # which a probe never reaches: its write never met the disk, and a full disk
        # took it. With a cache of a few pages the write spills into the write-ahead log
        # as it goes, and needs the room a real write does.
        size = int(self._conn.execute("PRAGMA cache_size").fetchone()[0])
        self._conn.execute("PRAGMA cache_size = 8")
        try:
            return super()._probe_write(tx, kind)
        finally:
            self._conn.execute(f"PRAGMA cache_size = {size}")

    def _write_fault(self, exc: BaseException) -> bool:
        """The database refused the write (a full disk, a read-only file), not a conflict
        and not a write that only waited out ``busy_timeout`` for another writer (an
        operator's command holding the file, SQLITE_BUSY or SQLITE_LOCKED) or was
        interrupted: taken as a refusal, that kept a replica with no version left to
        write at /readyz 503 for the whole 300 s hold (as PostgreSQL's timeouts did)."""
        if not isinstance(exc, sqlite3.Error) or isinstance(exc, sqlite3.IntegrityError):
            return False
        code = getattr(exc, "sqlite_errorcode", None)
        return code is None or code & 0xFF not in _UNFINISHED_WRITE_CODES

    def close(self) -> None:
        with self._lock:
            self._conn.close()
