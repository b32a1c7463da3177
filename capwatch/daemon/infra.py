"""What the daemon stands on: its clock, and which failures are the infrastructure's
(the store, the disk) rather than the message being handled."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime

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
