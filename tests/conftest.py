"""Shared pytest fixtures.

Real servers for integration tests (mark such tests ``@pytest.mark.integration``). Each server
is session-scoped and started only when a test first asks for it:

- ``kafka_bootstrap``: ``host:port`` of a real Kafka broker (tests/support/kafka_broker.py;
  ``KAFKA_BOOTSTRAP_SERVERS`` uses an existing cluster instead).
- ``postgres_dsn``: a psycopg 3 DSN of a real PostgreSQL database
  (tests/support/postgres_server.py; ``CAPWATCH_TEST_POSTGRES_DSN`` uses an existing server).
- ``kafka_topic``: a topic name unique to the test (not created: auto-creation is on, or create
  it with the admin client when the test needs several partitions).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from capwatch import native
from capwatch.daemon.logs import reset_logging
from tests.support import fuzzing
from tests.support.kafka_broker import KafkaBroker, start_kafka_broker
from tests.support.postgres_server import PostgresServer, start_postgres_server

fuzzing.register()  # deterministic property tests unless CAPWATCH_HYPOTHESIS=fuzz

# "what: seconds" of each real server started in this session, shown in the terminal summary.
_SERVER_STARTS: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0 loads its protocol schemas with importlib.resources' legacy API.
    config.addinivalue_line(
        "filterwarnings", "ignore:(read|open)_text is deprecated:DeprecationWarning"
    )


def pytest_report_header() -> str:
    # Which build ran: `make test` requires the compiled one (CAPWATCH_REQUIRE_COMPILED)
    # and runs the parity tests again with CAPWATCH_PURE_PYTHON=1.
    return f"capwatch: {native.describe()}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"capwatch: {native.describe()}")  # -q shows no header
    if _SERVER_STARTS:
        terminalreporter.write_line("test servers: " + "; ".join(_SERVER_STARTS))


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    broker = start_kafka_broker()
    where = "external " if broker.external else ""
    _SERVER_STARTS.append(f"{where}Kafka {broker.bootstrap} ready in {broker.start_seconds:.1f}s")
    try:
        yield broker
    finally:
        # Throw-away: no graceful shutdown (docs/performance.md, "Suite time").
        broker.stop(graceful=False)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    return kafka_broker.bootstrap


@pytest.fixture
def kafka_topic(request: pytest.FixtureRequest) -> str:
    # Only '-' as separator: Kafka warns that '.' and '_' collide in metric names.
    base = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")[:80]
    return f"test-{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = start_postgres_server()
    where = "external " if server.external else ""
    _SERVER_STARTS.append(f"{where}PostgreSQL ready in {server.start_seconds:.1f}s")
    try:
        yield server
    finally:
        server.stop(graceful=False)


@pytest.fixture(scope="session")
def postgres_dsn(postgres_server: PostgresServer) -> str:
    return postgres_server.dsn


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Each test starts from structlog's defaults: a daemon test that configured a level
    filter must not hide log lines from a later test that captures them."""
    yield
    reset_logging()
