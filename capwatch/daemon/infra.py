"""What the daemon stands on: its clock, and which failures are the infrastructure's
(the store, the disk) rather than the message being handled."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from capwatch.contracts.errors import error_text
from capwatch.contracts.ports import DeliveryError
from capwatch.contracts.store import StoreError

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def _infrastructure_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [StoreError, sqlite3.Error, OSError]
    try:
        import psycopg

        errors.append(psycopg.Error)
    except ImportError:  # pragma: no cover - psycopg is a dependency
        pass
    try:
        from kafka.errors import KafkaError

        errors.append(KafkaError)
    except ImportError:  # pragma: no cover - kafka-python is a dependency
        pass
    try:
        from confluent_kafka import KafkaException

        errors.append(KafkaException)
    except ImportError:  # the optional backend (the confluent extra)
        pass
    errors.append(DeliveryError)
    return tuple(errors)


INFRASTRUCTURE_ERRORS = _infrastructure_errors()
"""Failures of what the daemon stands on rather than of the message it was handling: the
record that met one is not committed past, and the daemon retries until it answers."""

OUTAGE_ERRORS = tuple(e for e in INFRASTRUCTURE_ERRORS if not issubclass(e, StoreError))
"""The infrastructure errors that say a dependency is down (a database's, the disk's, the
broker's), not that the store refused a request (StoreError: a missing row, a conflict)."""


def component_of(error: BaseException) -> str:
    """Which dependency an infrastructure error is about, for logs and /readyz."""
    module = type(error).__module__
    # confluent-kafka's exceptions live in its C module, "cimpl".
    if module.startswith(("kafka", "confluent_kafka", "cimpl", "capwatch.adapters.io.kafka")):
        return "Kafka"
    if isinstance(error, OSError) and not module.startswith(("sqlite3", "psycopg")):
        return "disk or network"
    return "models store"


def describe_outage(error: BaseException) -> str:
    """The problem as logs and /readyz say it: ``<component> unavailable: <error>``."""
    return f"{component_of(error)} unavailable: {error_text(error)}"[:500]


class OutageLog:
    """Logs the failures of a loop that runs off the main loop (assessment workers, alert
    routing) and retries by itself: a dependency that is down fails it every turn, and a
    traceback per turn would bury the one line that says what is down. This logs that
    line (naming the component) when the failure starts or changes, and once when the
    loop works again; the main loop's own log and /readyz carry the outage meanwhile."""

    def __init__(self, logger: Any, what: str) -> None:
        self.log = logger
        self.what = what
        self._failing: tuple[str, str] | None = None

    def failed(self, error: BaseException) -> None:
        key = (component_of(error), type(error).__name__)
        if key != self._failing:
            self.log.error(f"{self.what} failed; retrying", component=key[0],
                           problem=describe_outage(error))
        self._failing = key

    def ok(self) -> None:
        if self._failing is not None:
            self.log.info(f"{self.what} works again", component=self._failing[0])
            self._failing = None
