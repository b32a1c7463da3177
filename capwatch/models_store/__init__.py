"""The versioned model registry: SQLite (embedded default) or PostgreSQL, one interface."""

from __future__ import annotations

from pathlib import Path

from capwatch.contracts.store import (
    AlertDelivery,
    ModelStore,
    OutboxAlert,
    PendingAssessment,
    RoutingPlan,
    StoreError,
    UnknownVersion,
    VersionConflict,
)
from capwatch.contracts.versions import (
    LineageSummary,
    ModelRef,
    ModelVersion,
    VersionDiff,
    build_version,
    diff_versions,
)
from capwatch.models_store.lineage import lineage_chain, record_new_model


def open_store(url: str, *, migrate: bool = True,
               statement_timeout_s: float | None = None,
               clock: str | None = None) -> ModelStore:
    """``postgresql://...`` (or ``postgres://``) opens PostgreSQL; ``sqlite:///path``, a plain
    path or ``:memory:`` opens SQLite. ``statement_timeout_s`` bounds each round trip to a
    PostgreSQL server (default :data:`~capwatch.models_store.postgres.STATEMENT_TIMEOUT_S`).
    ``clock`` (see ``SqlBase.clock``): by default the server's (``"database"``) for
    PostgreSQL and ``"monotonic"`` for SQLite (one replica); ``"caller"`` for either."""
    if url.startswith(("postgresql://", "postgres://")):
        from capwatch.models_store.postgres import STATEMENT_TIMEOUT_S, PostgresModelStore

        return PostgresModelStore(url, migrate=migrate, statement_timeout_s=(
            STATEMENT_TIMEOUT_S if statement_timeout_s is None else statement_timeout_s),
            clock=clock or "database")
    if url.startswith("sqlite://"):
        url = url.removeprefix("sqlite://") or ":memory:"
    elif "://" in url:
        raise ValueError(f"unsupported store URL {url!r}: use a SQLite path or postgresql://")
    from capwatch.models_store.sqlite import SqliteModelStore

    return SqliteModelStore(Path(url) if url != ":memory:" else url, migrate=migrate,
                            clock=clock or "monotonic")


__all__ = [
    "AlertDelivery", "LineageSummary", "ModelRef", "ModelStore", "ModelVersion",
    "OutboxAlert", "PendingAssessment", "RoutingPlan", "StoreError", "UnknownVersion",
    "VersionConflict", "VersionDiff", "build_version", "diff_versions", "lineage_chain",
    "open_store", "record_new_model",
]
