"""The connection layer every SQL store part builds on; each backend supplies the hooks.

Kept apart from :mod:`capwatch.models_store.sql` so the drift-state mixin can declare
what it needs from a backend without importing the store that mixes it in.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

Row = tuple[Any, ...]


class Tx(abc.ABC):
    """One open transaction."""

    @abc.abstractmethod
    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    @abc.abstractmethod
    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute and return the number of rows affected."""


class SqlBase(abc.ABC):
    """Transactions and value conversion over one DB-API connection."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    @abc.abstractmethod
    def _transaction(self, write: bool) -> Any:
        """A context manager yielding a :class:`Tx`; commits on success."""

    @abc.abstractmethod
    def _ts_in(self, t: datetime) -> Any: ...

    @abc.abstractmethod
    def _ts_out(self, v: Any) -> datetime: ...

    @abc.abstractmethod
    def _json_in(self, obj: Any) -> Any: ...

    @abc.abstractmethod
    def _json_out(self, v: Any) -> Any: ...

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator[Tx]:
        with self._lock, self._transaction(write) as tx:
            yield tx
