"""The connection layer every SQL store part builds on; each backend supplies the hooks.

Kept apart from :mod:`capwatch.models_store.sql` so the drift-state and alert-outbox
mixins can declare what they need from a backend without importing the store that mixes
them in.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from capwatch.contracts.errors import error_text
from capwatch.contracts.store import OutboxAlert
from capwatch.contracts.versions import as_utc

Row = tuple[Any, ...]
MODEL_VERSIONS = "model_versions"
OTHER_WRITES = "other"
WRITE_FAILURE_HOLD_S = 300.0
"""How long a failed write of a kind no later write of that kind has changed is reported
(:meth:`SqlBase.write_failures`): a retry of the work it was for comes within the
assessment lease (``assessment.lease_s``, 120 s by default) at the latest. /readyz's
probe (:meth:`SqlBase.unreachable`) tries a write of each failing kind, so the report
ends as soon as such a write would land, and lasts while it would not; the daemon runs the
same probe every 60 s while a kind is reported (``daemon.store_probe.RefusedWritesProbe``),
for when nothing requests /readyz."""
PROBE_WRITE_BYTES = 512 * 1024
"""The size of a probe write (:meth:`SqlBase._probe_write`), incompressible: a probe
smaller than the write that was refused fits in room that write left behind (SQLite's
write-ahead log keeps the frames of a rolled-back write: a 64 KiB probe was taken on a
full disk that had refused a 200 KB version) or in free space of existing pages. 512 KiB
is more than a version or queued work usually holds (a model and its bounded evidence:
tens to a few hundred KB); a larger write refused after the probe was taken marks its
kind again."""
CLOCKS = ("database", "monotonic", "caller")
KEEP_CLOCK_EVERY_S = 1.0
"""How often a write keeps the ``"monotonic"`` clock's reading (:meth:`SqlBase._keep_clock`):
keeping it in every write transaction cost ~17 us of CPU each (SQLite, an enqueue 62 ->
79 us). A step back of the wall clock seen by a reading makes the next write keep it
whatever the period (:data:`STEP_BACK_S`). What the period leaves: after a restart whose
step back came while the process was stopped, or after its last write, work waits up to
the time from the last reading kept to the stop (under this period) plus the downtime
longer (:meth:`SqlBase._resume_clock`)."""
STEP_BACK_S = 0.25
"""A reading whose lead over the wall clock grew by more than this since the one before
saw a step back of the wall clock (a slewing clock moves ~0.5 ms a second at most)."""
_T = TypeVar("_T")


class Tx(abc.ABC):
    """One open transaction."""

    wrote = False
    """A statement of it changed a row (set by the backend's :meth:`run`)."""

    @abc.abstractmethod
    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    @abc.abstractmethod
    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute and return the number of rows affected."""

    def run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Execute ``sql`` once per row of parameters (the driver's batch where it has
        one: a checkpoint writes a row per agent seen); the rows affected, in all."""
        return sum(self.run(sql, params) for params in rows)


class SqlBase(abc.ABC):
    """Transactions and value conversion over one DB-API connection."""

    def __init__(self, clock: str = "caller",
                 wall_clock: Callable[[], datetime] | None = None) -> None:
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, not {clock!r}")
        self.clock = clock
        """Whose clock decides when queued work and deliveries are due and when a lease
        runs out: ``"database"``, the database server's (one clock for every replica,
        which a replica's clock stepped back or running apart from the others' cannot
        move); ``"monotonic"``, this process's wall clock made never to go back (a
        store one process writes: a step back of the host's clock holds nothing back,
        a step forward is followed); or ``"caller"``, the ``now`` each call passes
        (tests and replays that drive time themselves)."""
        self._steady: tuple[datetime, float] | None = None
        """The ``"monotonic"`` clock's last reading and the monotonic time it was read."""
        self._keeps_clock = False
        """Writes keep the ``"monotonic"`` clock's reading in ``store_clock`` (set once
        the schema has that table and the reading kept there was resumed)."""
        self._kept_at: float | None = None
        """Monotonic time a write last kept the clock's reading (None: keep at the next)."""
        self._lead = timedelta(0)
        """How far the ``"monotonic"`` clock's last reading ran ahead of the wall clock."""
        self.keep_clock_every_s = KEEP_CLOCK_EVERY_S
        """:data:`KEEP_CLOCK_EVERY_S` for this store (a test keeps every reading)."""
        self._steady_lock = threading.Lock()
        self._wall = wall_clock if wall_clock is not None else _utc_now
        """The ``"monotonic"`` clock's wall clock (a test steps it)."""
        self._lock = threading.RLock()
        self._failure: str | None = None
        """Why the last transaction could not reach the database, None once one did."""
        self._write_failed: dict[str, tuple[float, str]] = {}
        """Kind of write → (monotonic time, why) of its last failure, until a write of
        that kind changed a row again (:meth:`write_failures`)."""
        self.write_failure_count: dict[str, int] = {}
        """Kind of write → failures since the store was opened."""

    def _database_now(self, tx: Tx) -> datetime:
        """The database's clock, read in ``tx``; only a backend with ``"database"`` among
        its clocks is asked."""
        raise NotImplementedError(f"{type(self).__name__} has no database clock")

    def _steady_now(self) -> datetime:
        """The wall clock, but never behind its last reading plus the monotonic time since
        (``"monotonic"``): after a step back by X it runs X ahead of the wall clock, on
        the time the rows already written were stamped with."""
        return self._steady_reading()[0]

    def _steady_reading(self) -> tuple[datetime, datetime]:
        """(:meth:`_steady_now`, the wall clock it was read beside)."""
        wall, mono = as_utc(self._wall()), time.monotonic()
        now = wall
        with self._steady_lock:
            if self._steady is not None:
                last, at = self._steady
                now = max(wall, last + timedelta(seconds=mono - at))
            self._steady = (now, mono)
            if now - wall > self._lead + timedelta(seconds=STEP_BACK_S):
                # The wall clock stepped back since the last reading: the reading kept
                # (up to keep_clock_every_s old) holds the wall clock from before the
                # step, and a restart would resume from it as if no time had passed
                # since (the step hides the time between). The next write keeps this.
                self._kept_at = None
            self._lead = now - wall
        return now, wall

    def _keep_clock(self, tx: Tx) -> None:
        """Keeps the ``"monotonic"`` clock's reading in the transaction of a write, at
        most every :data:`KEEP_CLOCK_EVERY_S`: what a restarted process resumes from
        (:meth:`_resume_clock`). Only a larger reading replaces the kept one (another
        process on the file may run ahead)."""
        mono = time.monotonic()
        if self._kept_at is not None and mono - self._kept_at < self.keep_clock_every_s:
            return
        self._kept_at = mono
        now, wall = self._steady_reading()
        tx.run("INSERT INTO store_clock (id, reading, wall) VALUES (1, ?, ?) "
               "ON CONFLICT (id) DO UPDATE SET reading = excluded.reading, "
               "wall = excluded.wall WHERE store_clock.reading < excluded.reading",
               (self._ts_in(now), self._ts_in(wall)))

    def _resume_clock(self) -> None:
        """Starts the ``"monotonic"`` clock from the reading the last write kept, plus the
        wall-clock time since if the wall clock went forward since (the downtime): the
        wall clock alone, stepped back by X before or during a restart, held work the
        old process had queued as due back by X (clock15). A step back during the
        downtime, or after the old process's last write, is not seen: the clock resumes
        from the kept reading, which is up to ``keep_clock_every_s`` older than the
        stop. What was due when that reading was kept stays due; what fell due after
        it, or was not due yet, waits up to the time from that reading to the stop plus
        the downtime longer (a delay, never work taken early). A step back the old
        process saw while it ran is kept by its next write (:meth:`_steady_reading`)."""
        with self._tx(write=False) as tx:
            rows = tx.rows("SELECT reading, wall FROM store_clock WHERE id = 1")
        self._keeps_clock = True
        if not rows:
            return
        reading, then = self._ts_out(rows[0][0]), self._ts_out(rows[0][1])
        wall = as_utc(self._wall())
        resumed = max(wall, reading + max(timedelta(0), wall - then))
        with self._steady_lock:
            if self._steady is None or self._steady[0] < resumed:
                self._steady = (resumed, time.monotonic())

    def _own_now(self, tx: Tx) -> datetime:
        return self._steady_now() if self.clock == "monotonic" else self._database_now(tx)

    def _store_now(self, tx: Tx, now: datetime) -> datetime:
        """What time it is for the store: its own clock, or the caller's ``now``."""
        return as_utc(now) if self.clock == "caller" else self._own_now(tx)

    def store_now(self, now: datetime) -> datetime:
        """What time it is on the clock that decides leases and due times (see
        :attr:`clock`; ``now``, the caller's, is the answer on the caller's clock): to
        compare with a lease or a ``not_before`` the store returned."""
        if self.clock == "caller":
            return as_utc(now)
        if self.clock == "monotonic":
            return self._steady_now()
        with self._tx(write=False) as tx:
            return self._database_now(tx)

    def _store_time(self, tx: Tx, at: datetime, now: datetime,
                    store_now: datetime | None = None) -> datetime:
        """The store's time for ``at``, which the caller reckoned on its own clock when
        that clock read ``now``: the same delay from the store's now (a retry due in 30 s
        is due in 30 s whichever clock counts them)."""
        if self.clock == "caller":
            return as_utc(at)
        base = store_now if store_now is not None else self._own_now(tx)
        return base + (as_utc(at) - as_utc(now))

    @abc.abstractmethod
    def _transaction(self, write: bool) -> Any:
        """A context manager yielding a :class:`Tx`; commits on success."""

    @abc.abstractmethod
    def _ts_in(self, t: datetime) -> Any: ...

    @abc.abstractmethod
    def _ts_out(self, v: Any) -> datetime: ...

    @abc.abstractmethod
    def _json_in(self, obj: Any) -> Any: ...

    def _json_in_finite(self, obj: Any) -> Any:
        """:meth:`_json_in` for a value whose floats are all finite (a drift snapshot: its
        float arrays are base64 text); a store may take a faster encoder for it."""
        return self._json_in(obj)

    @abc.abstractmethod
    def _json_out(self, v: Any) -> Any: ...

    def _write_fault(self, exc: BaseException) -> bool:
        """``exc`` is the database refusing a write (a full disk, a revoked privilege, a
        read-only server), not a conflict the caller handles (a unique key taken)."""
        return False

    @contextmanager
    def _tx(self, write: bool = True, kind: str = OTHER_WRITES) -> Iterator[Tx]:
        """One transaction; a write's failure or success is kept per ``kind`` of write
        (:meth:`write_failures`)."""
        with self._lock:
            try:
                with self._transaction(write) as tx:
                    yield tx
                    if tx.wrote and self._keeps_clock:
                        self._keep_clock(tx)
            except Exception as e:
                if write and self._write_fault(e):
                    self._write_failed[kind] = (time.monotonic(), error_text(e))
                    self.write_failure_count[kind] = self.write_failure_count.get(kind, 0) + 1
                raise
            if tx.wrote:
                self._write_failed.pop(kind, None)

    def write_failures(self, hold_s: float = WRITE_FAILURE_HOLD_S) -> dict[str, str]:
        """Kind of write → why its last attempt failed, for each kind whose last attempt
        failed less than ``hold_s`` ago and that has changed no row since.

        A select answers on a full disk, and so may a small update (free room in a page
        and in the write-ahead log): /readyz's ``SELECT 1`` said ready while every model
        version this replica learned failed to be stored. Kinds are kept apart so that
        a lease renewed between two failed version writes does not say writes work
        again; ``hold_s`` ends the report of a kind this replica stopped trying (its
        work taken over by another replica), since no success of that kind will."""
        now = time.monotonic()
        # Without the store's lock: /readyz asks while a call may hold it for as long as
        # a server that stopped answering takes.
        return {kind: why for kind, (at, why) in dict(self._write_failed).items()
                if now - at < hold_s}

    def _probing(self, wait_s: float) -> AbstractContextManager[object]:
        """Bounds the round trips of :meth:`unreachable`'s probe by ``wait_s``, where
        the backend can."""
        return nullcontext()

    def unreachable(self, wait_s: float) -> str | None:
        """Why the database cannot be reached now, or None; for /readyz, which must answer
        in a few seconds (about twice ``wait_s`` at most) even when the server froze
        while one of our threads waits on it.

        The probe needs the connection, which the store's other callers hold one at a
        time: if it does not come free within ``wait_s``, :meth:`_busy` answers."""
        if not self._lock.acquire(timeout=wait_s):
            return self._busy(wait_s)
        try:
            with self._probing(wait_s):
                with self._transaction(write=False) as tx:
                    tx.rows("SELECT 1")
                self._probe_failing_writes()
        except Exception as e:
            return error_text(e)
        finally:
            self._lock.release()
        return None

    def _probe_failing_writes(self) -> None:
        """For each kind of write whose last attempt the database refused: a write of
        that kind, rolled back (:meth:`_probe_write`). If it is taken, the kind is no
        longer reported: the store accepts such writes again, and waiting for a real
        one (a version to write) kept an idle replica at 503 for up to the whole hold.
        A refusal keeps reporting the kind (and restarts its hold: the store still
        refuses); a write that only did not finish (a timeout, the connection lost)
        changes nothing, and /readyz's ``SELECT 1`` reports a lost connection."""
        for kind in list(self._write_failed):
            try:
                with self._transaction(write=True) as tx:
                    if not self._probe_write(tx, kind):
                        continue
                    raise _ProbeTaken
            except _ProbeTaken:
                self._write_failed.pop(kind, None)
            except Exception as e:
                if self._write_fault(e):
                    self._write_failed[kind] = (time.monotonic(), error_text(e))

    def _probe_write(self, tx: Tx, kind: str) -> bool:
        """Writes a row of :data:`PROBE_WRITE_BYTES` where writes of ``kind`` go, in
        ``tx`` (which is rolled back); False when this store has no probe for it."""
        return False

    def _busy(self, wait_s: float) -> str | None:
        """:meth:`unreachable` while another caller holds the connection: the last
        transaction's outcome (the caller holding it fails within the store's deadline if
        the server stopped answering, and says so here from then on)."""
        return self._failure

    def _by_status(self, select: str, order: str, statuses: Sequence[str],
                      status: str | None, from_row: Callable[[Row], _T]) -> list[_T]:
        """Every row of ``select``, or those with ``status``, oldest first."""
        if status is not None and status not in statuses:
            raise ValueError(f"status must be one of {statuses}")
        params: tuple[Any, ...] = ()
        if status is not None:
            select += " WHERE status = ?"
            params = (status,)
        with self._tx(write=False) as tx:
            rows = tx.rows(f"{select} ORDER BY {order}, key", params)
        return [from_row(r) for r in rows]


class _ProbeTaken(Exception):
    """Rolls a probe write's transaction back once the database took it."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


def validate_alerts(alerts: Sequence[OutboxAlert]) -> None:
    for a in alerts:
        if not a.key or not a.dedup_key or not a.family:
            raise ValueError("an outbox alert needs a key, a dedup key and a family")


def lease_until(now: datetime, lease_seconds: float, limit: int) -> datetime:
    if lease_seconds <= 0 or limit < 1:
        raise ValueError("lease_seconds must be positive and limit at least 1")
    return as_utc(now) + timedelta(seconds=lease_seconds)
