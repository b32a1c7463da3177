"""The shared store for fleets with several daemon replicas: PostgreSQL through psycopg 3.

Pending assessments are claimed with ``FOR UPDATE SKIP LOCKED`` so replicas never take
the same item; migrations hold a transaction-scoped advisory lock so replicas starting
together apply them once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from capwatch.models_store.sql import Row, SqlModelStore, Tx, dumps_finite

_MIGRATION_LOCK_ID = 0x6361_7077  # "capw": any constant shared by all replicas
_ALERT_ROUTING_LOCK_ID = 0x6361_7061  # "capa"
_PLACEHOLDER = re.compile(r"\?")
IDLE_IN_TRANSACTION_TIMEOUT_S = 30.0
"""How long the server lets one of our sessions sit idle inside a transaction
(:meth:`PostgresModelStore._connect`)."""


def _pg(sql: str) -> str:
    # Our SQL never contains a literal "?" or "%", so a plain rewrite is safe.
    return _PLACEHOLDER.sub("%s", sql)


class _PgTx(Tx):
    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self._conn.cursor() as cur:
            cur.execute(_pg(sql), tuple(params))
            return list(cur.fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self._conn.cursor() as cur:
            cur.execute(_pg(sql), tuple(params))
            return cur.rowcount

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        with self._conn.cursor() as cur:
            cur.executemany(_pg(sql), [tuple(r) for r in rows])
            # psycopg 3 sums the rows affected over an executemany without RETURNING.
            return cur.rowcount


class PostgresModelStore(SqlModelStore):
    dialect = "postgresql"
    claim_lock_clause = " FOR UPDATE SKIP LOCKED"

    def __init__(self, dsn: str, *, connect_timeout_s: int = 10, migrate: bool = True,
                 idle_in_transaction_timeout_s: float = IDLE_IN_TRANSACTION_TIMEOUT_S
                 ) -> None:
        super().__init__()
        self.dsn = dsn
        self._connect_timeout_s = connect_timeout_s
        self._idle_timeout_ms = round(idle_in_transaction_timeout_s * 1000)
        self._conn = self._connect()
        if migrate:
            self.migrate()

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.dsn, connect_timeout=self._connect_timeout_s)
        if self._idle_timeout_ms > 0:
            # A replica frozen (SIGSTOP, a stalled VM) between two statements of a
            # transaction keeps its locks until it resumes: the alert routers' advisory
            # lock above all, which the next replica's router then waits for while holding
            # its store, and with it that replica's main loop and workers. The server ends
            # such a session after this long, which frees its locks (the frozen replica
            # finds its transaction undone and reconnects). None of our transactions waits
            # on anything but the database between its statements. A timeout the server,
            # the role or the URL's options already set is kept.
            row = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
            if row is not None and str(row[0]) == "0":
                conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s,"
                             " false)", (str(self._idle_timeout_ms),))
            conn.commit()
        return conn

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]:
        if self._conn.closed or self._conn.broken:
            # A restarted server or a dropped connection: reconnect once per transaction
            # rather than leave the daemon holding a dead handle.
            self._conn = self._connect()
        with self._conn.transaction():
            yield _PgTx(self._conn)

    def _lock_migrations(self, tx: Tx) -> None:
        tx.rows("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK_ID,))

    def _lock_alert_routing(self, tx: Tx) -> None:
        # One router at a time across replicas: a group must be closed by one pass that
        # sees all its members, and suppression must see the other pass's sends.
        tx.rows("SELECT pg_advisory_xact_lock(?)", (_ALERT_ROUTING_LOCK_ID,))

    def _ts_in(self, t: datetime) -> Any:
        return t.astimezone(UTC)

    def _ts_out(self, v: Any) -> datetime:
        if not isinstance(v, datetime):
            raise TypeError(f"expected a timestamp, got {type(v).__name__}")
        return v.astimezone(UTC)

    def _json_in(self, obj: Any) -> Any:
        return Jsonb(obj)

    def _json_in_finite(self, obj: Any) -> Any:
        # The faster encoder, as SQLite's store takes (sql.dumps_finite): drift snapshots
        # at every checkpoint, and work items without drift evidence.
        return Jsonb(obj, dumps=dumps_finite)

    def _json_out(self, v: Any) -> Any:
        return v

    def _is_unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, pg_errors.UniqueViolation)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
