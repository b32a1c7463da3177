"""Fixtures of the chaos suite, and where its failing reproductions live.

tests/chaos/reproductions/ reproduces each row of issue 12's table as a test. Those that
still fail are not hidden behind xfail: the whole directory runs only under ``make
chaos`` (``CAPWATCH_CHAOS=1``), and docs/reliability.md lists which fail. A row moves
into the bounded suite (this directory) once it is fixed.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from tests.chaos.fake_agent import Recorder
from tests.chaos.harness import FleetInput, Outcome, fleet
from tests.chaos.scenarios import reference
from tests.support.kafka_broker import KafkaBroker, start_kafka_broker
from tests.support.postgres_server import PostgresServer, start_postgres_server

collect_ignore = [] if os.environ.get("CAPWATCH_CHAOS") else ["reproductions"]


@pytest.fixture(scope="session")
def drift_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetInput]:
    """12 rover agents, 4 of which drift a third of the way in: 8,640 transition events."""
    with fleet(tmp_path_factory.mktemp("fleet"), agents=12, drifted=4, episodes=60,
               drift_at=20, seed=1) as inp:
        yield inp


@pytest.fixture(scope="session")
def drift_reference(drift_fleet: FleetInput, tmp_path_factory: pytest.TempPathFactory
                    ) -> Outcome:
    return reference(drift_fleet, tmp_path_factory.mktemp("ref") / "run")


@pytest.fixture(scope="session")
def valid_events(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[bytes],
                                                                    dict[str, dict[str, str]]]:
    """Valid transition events of two undrifted agents (seeds of hostile messages)."""
    with fleet(tmp_path_factory.mktemp("valid"), agents=2, drifted=0, episodes=5,
               drift_at=99, seed=2) as inp:
        return inp.lines, inp.families


@pytest.fixture
def recorder(request: pytest.FixtureRequest) -> Iterator[Recorder]:
    server = Recorder(getattr(request, "param", "empty"))
    t = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    t.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()




@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this test's own: it is killed, which others must not see."""
    server = start_postgres_server()
    if server.external:
        pytest.skip("needs a server this test starts and kills itself")
    try:
        yield server
    finally:
        server.stop(graceful=False)  # throw-away


@pytest.fixture
def own_broker() -> Iterator[KafkaBroker]:
    """A broker of this test's own: it is frozen or killed, which others must not see."""
    broker = start_kafka_broker()
    if broker.external or broker.process is None:
        broker.stop()
        pytest.skip("needs a broker this test starts itself")
    try:
        yield broker
    finally:
        if broker.process is not None and broker.process.poll() is None:
            broker.process.send_signal(signal.SIGCONT)
        broker.stop(graceful=False)  # throw-away
