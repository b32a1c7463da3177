"""A throw-away PostgreSQL schema for one test: the store's tables of each test apart on
the one server the session shares (tests/support/postgres_server.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import psycopg


@contextmanager
def scratch_schema(dsn: str) -> Iterator[str]:
    """A DSN whose search path is a schema made for the test, dropped after it."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{sep}options={quote(f'-csearch_path={schema}')}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
