"""One store fixture, parametrised over both backends, so every store test runs on both.

PostgreSQL tests each get a fresh schema (selected through the DSN's ``options``) in the
session's real server, so they neither see nor clean up after one another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.model.domain import Domain
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelStore, open_store
from tests.support.pg_schema import scratch_schema

StoreFactory = Callable[[], ModelStore]

EXAMPLES = Path(__file__).resolve().parents[2] / "capwatch" / "examples"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
"""The time the store tests' histories start at."""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "models.db")
        return
    with scratch_schema(request.getfixturevalue("postgres_dsn")) as url:
        yield url


@pytest.fixture
def open_new(store_url: str) -> Iterator[StoreFactory]:
    """Opens another handle on the same database, as a restarted daemon or a second
    replica would; all are closed at the end.

    On the caller's clock, both backends: these tests say what time it is at each call
    (a lease run out an hour later, without waiting an hour). PostgreSQL's own clock,
    what a replica uses by default, is tested in test_database_clock."""
    opened: list[ModelStore] = []

    def factory() -> ModelStore:
        s = open_store(store_url, clock="caller")
        opened.append(s)
        return s

    yield factory
    for s in opened:
        s.close()


@pytest.fixture
def store(open_new: StoreFactory) -> ModelStore:
    return open_new()


@pytest.fixture(scope="module")
def rover() -> Domain:
    return read_domain(EXAMPLES / "rover.pddl")


@pytest.fixture(scope="module")
def drifted() -> Domain:
    """rover.pddl after the paper's sample_rock update."""
    return read_domain(EXAMPLES / "rover-sample-drift.pddl")
