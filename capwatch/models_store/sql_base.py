"""The connection layer every SQL store part builds on; each backend supplies the hooks.

Kept apart from :mod:`capwatch.models_store.sql` so the drift-state and alert-outbox
mixins can declare what they need from a backend without importing the store that mixes
them in.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import datetime, timedelta
from typing import Any, TypeVar

from capwatch.contracts.errors import error_text
from capwatch.contracts.store import OutboxAlert
from capwatch.contracts.versions import as_utc

Row = tuple[Any, ...]
_T = TypeVar("_T")


class Tx(abc.ABC):
    """One open transaction."""

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

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._failure: str | None = None
        """Why the last transaction could not reach the database, None once one did."""

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

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator[Tx]:
        with self._lock, self._transaction(write) as tx:
            yield tx

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
            with self._probing(wait_s), self._transaction(write=False) as tx:
                tx.rows("SELECT 1")
        except Exception as e:
            return error_text(e)
        finally:
            self._lock.release()
        return None

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


def validate_alerts(alerts: Sequence[OutboxAlert]) -> None:
    for a in alerts:
        if not a.key or not a.dedup_key or not a.family:
            raise ValueError("an outbox alert needs a key, a dedup key and a family")


def lease_until(now: datetime, lease_seconds: float, limit: int) -> datetime:
    if lease_seconds <= 0 or limit < 1:
        raise ValueError("lease_seconds must be positive and limit at least 1")
    return as_utc(now) + timedelta(seconds=lease_seconds)
