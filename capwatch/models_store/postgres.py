"""The shared store for fleets with several daemon replicas: PostgreSQL through psycopg 3.

Pending assessments are claimed with ``FOR UPDATE SKIP LOCKED`` so replicas never take
the same item; migrations hold a transaction-scoped advisory lock so replicas starting
together apply them once.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.abc import RV, PQGen
from psycopg.types.json import Jsonb

from capwatch.contracts.errors import error_text
from capwatch.models_store.sql import Row, SqlModelStore, Tx, dumps_finite

_MIGRATION_LOCK_ID = 0x6361_7077  # "capw": any constant shared by all replicas
_ALERT_ROUTING_LOCK_ID = 0x6361_7061  # "capa"
_PLACEHOLDER = re.compile(r"\?")
IDLE_IN_TRANSACTION_TIMEOUT_S = 30.0
"""How long the server lets one of our sessions sit idle inside a transaction
(:meth:`PostgresModelStore._connect`)."""
STATEMENT_TIMEOUT_S = 15.0
"""How long one round trip to the server may take before the store gives up on it
(:class:`_DeadlineConnection`)."""


_UNFINISHED_WRITE_STATES = ("08", "40", "55P03", "57")
"""SQLSTATE classes and codes of a write that did not finish but was not refused: a
connection exception (08), a transaction rolled back for a deadlock or serialization
failure (40), a lock not available (55P03, ``lock_timeout``), operator intervention (57:
``statement_timeout``'s query_canceled 57014, the server shutting down)."""


class ServerNotAnswering(psycopg.OperationalError):
    """The server took a round trip's whole deadline without answering."""


class _DeadlineConnection(psycopg.Connection[Any]):
    """A connection whose every round trip (a statement, a fetch, a commit) ends within
    ``deadline_s``.

    A frozen server (SIGSTOP, a stalled VM) keeps its sockets open and its kernel keeps
    acknowledging what we send, so nothing at the TCP level ends the wait: keepalives
    and ``tcp_user_timeout`` are answered by the kernel, and ``statement_timeout`` is
    enforced by the very server that does not run. libpq has no client-side deadline for
    a query; psycopg waits for every round trip in :meth:`wait`, which takes one, so every
    wait gets ours. Past it the connection's state is unknown (a statement may be half
    sent): it is closed, the caller's transaction fails with an OperationalError (an
    outage for the daemon, which commits nothing and retries) and the store's next
    transaction reconnects."""

    deadline_s: float | None = None
    waiting_since: float | None = None
    """When the round trip in progress began (monotonic), None between round trips: read
    by /readyz's probe while this connection is busy (PostgresModelStore._busy)."""

    def wait(self, gen: PQGen[RV], interval: float = 0.1,
             timeout: float | None = None) -> RV:
        if timeout is None and self.deadline_s is not None:
            timeout = self.deadline_s
        self.waiting_since = time.monotonic()
        try:
            return super().wait(gen, interval=interval, timeout=timeout)
        except pg_errors._WaitTimeout:
            self.pgconn.finish()
            raise ServerNotAnswering(
                f"the PostgreSQL server did not answer within {timeout:g} s") from None
        finally:
            self.waiting_since = None


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
            if cur.rowcount > 0:
                self.wrote = True
            return cur.rowcount

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        with self._conn.cursor() as cur:
            cur.executemany(_pg(sql), [tuple(r) for r in rows])
            # psycopg 3 sums the rows affected over an executemany without RETURNING.
            if cur.rowcount > 0:
                self.wrote = True
            return cur.rowcount


class PostgresModelStore(SqlModelStore):
    dialect = "postgresql"
    claim_lock_clause = " FOR UPDATE SKIP LOCKED"

    def __init__(self, dsn: str, *, connect_timeout_s: int | None = None,
                 migrate: bool = True,
                 idle_in_transaction_timeout_s: float = IDLE_IN_TRANSACTION_TIMEOUT_S,
                 statement_timeout_s: float | None = STATEMENT_TIMEOUT_S,
                 clock: str = "database") -> None:
        """``statement_timeout_s`` bounds each round trip to the server (None: no bound);
        ``connect_timeout_s`` each (re)connection, by default the same (libpq counts
        whole seconds, at least 2). ``clock``: see :attr:`SqlBase.clock`; the server's
        by default, since several replicas share this store and their clocks may
        differ or be stepped."""
        super().__init__(clock)
        self.dsn = dsn
        if connect_timeout_s is None:
            connect_timeout_s = (10 if statement_timeout_s is None
                                 else max(2, math.ceil(statement_timeout_s)))
        self._connect_timeout_s = connect_timeout_s
        self._deadline_s = statement_timeout_s
        self._migrating = False
        self._probe_s: float | None = None
        self._idle_timeout_ms = round(idle_in_transaction_timeout_s * 1000)
        self._conn = self._connect()
        if migrate:
            self.migrate()

    def migrate(self) -> int:
        # A migration may rewrite a large table, and the replicas starting with this one
        # wait for it on the migration lock: neither is a server that stopped answering.
        self._migrating = True
        try:
            return super().migrate()
        finally:
            self._migrating = False

    def _connect(self) -> _DeadlineConnection:
        connect_s, deadline_s = self._connect_timeout_s, self._deadline_s
        if self._probe_s is not None:
            connect_s, deadline_s = max(2, math.ceil(self._probe_s)), self._probe_s
        conn = _DeadlineConnection.connect(self.dsn, connect_timeout=connect_s)
        conn.deadline_s = deadline_s
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

    def _busy(self, wait_s: float) -> str | None:
        """A round trip that has waited for the server's answer longer than ``wait_s`` is
        either slow (a large batch, a lock another session holds) or waiting on a server
        that stopped answering, which its deadline (``statement_timeout_s``, 15 s) would
        tell only when it runs out: a probe on a connection of its own (``wait_s`` for
        the answer, libpq's least connect timeout, 2 s) tells them apart now. A frozen
        server answered /readyz "ready" for those 15 s."""
        since = self._conn.waiting_since
        pending = time.monotonic() - since if since is not None else 0.0
        if pending < wait_s:
            return self._failure
        conn: _DeadlineConnection | None = None
        try:
            conn = _DeadlineConnection.connect(self.dsn,
                                               connect_timeout=max(2, math.ceil(wait_s)))
            conn.deadline_s = wait_s
            conn.execute("SELECT 1")
        except Exception as e:
            return (f"a call has waited {pending:.0f} s for the server's answer, and a "
                    f"probe of its own got none: {error_text(e)}")
        finally:
            if conn is not None:
                conn.close()
        return self._failure

    @contextmanager
    def _probing(self, wait_s: float) -> Iterator[None]:
        self._probe_s = wait_s
        try:
            yield
        finally:
            self._probe_s = None

    @contextmanager
    def _transaction(self, write: bool) -> Iterator[Tx]:
        try:
            if self._conn.closed or self._conn.broken:
                # A restarted server or a dropped connection: reconnect once per
                # transaction rather than leave the daemon holding a dead handle.
                self._conn = self._connect()
            self._conn.deadline_s = (None if self._migrating else self._probe_s
                                     if self._probe_s is not None else self._deadline_s)
            with self._conn.transaction():
                yield _PgTx(self._conn)
        except psycopg.OperationalError as e:
            self._failure = error_text(e)
            raise
        except BaseException:
            self._failure = None  # the server answered, if only to refuse
            raise
        self._failure = None

    def _database_now(self, tx: Tx) -> datetime:
        # clock_timestamp(), not now(): now() is when the transaction began, which a
        # claim that waited for a row lock would read as the past.
        return self._ts_out(tx.rows("SELECT clock_timestamp()")[0][0])

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

    def _write_fault(self, exc: BaseException) -> bool:
        """The server refused the write (a full disk, a revoked privilege, a read-only
        server), not a conflict, and not a write that only did not finish this time: a
        statement or lock timeout (a lock another session held), a deadlock or
        serialization failure, the connection lost or the server not answering within
        the store's deadline (no SQLSTATE: the client's own error). Those say nothing
        about the next write, and the connection's state is /readyz's own probe's to
        report; taken as refusals, one statement timeout kept an idle replica (no
        version to write, so no success to clear it) at 503 for the whole hold
        (:data:`~capwatch.models_store.sql_base.WRITE_FAILURE_HOLD_S`, 300 s)."""
        if not isinstance(exc, psycopg.Error) or isinstance(exc, psycopg.IntegrityError):
            return False
        state = exc.sqlstate
        return state is not None and not state.startswith(_UNFINISHED_WRITE_STATES)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
