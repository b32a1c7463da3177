"""Issue 12, row 7 over Kafka (bounded, part of ``make test``): PostgreSQL is killed under
a daemon consuming a live Kafka stream and started again 10 s later. The daemon retries,
says not ready naming the store (not Kafka), does not exit, and ends as an uninterrupted
run does: the same model versions, published, the same alerts, every record committed
(``make chaos`` runs more of these: tests/chaos/long_run.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.chaos.harness import FleetInput, Outcome, compare
from tests.chaos.pg_kafka import KillablePostgres, postgres_killed
from tests.support._proc import free_port
from tests.support.postgres_server import PostgresServer

pytestmark = pytest.mark.integration


@pytest.fixture
def killable_postgres(own_postgres: PostgresServer) -> KillablePostgres:
    return KillablePostgres(own_postgres)


def test_postgres_killed_under_a_kafka_daemon_is_ridden_out(
        drift_fleet: FleetInput, drift_reference: Outcome, kafka_bootstrap: str,
        killable_postgres: KillablePostgres, tmp_path: Path) -> None:
    run = postgres_killed(drift_fleet, killable_postgres, kafka_bootstrap, free_port(),
                          tmp_path / "run", random.Random(7), hold_s=10.0)
    print(f"\npostgres killed over Kafka: fault at {run.fault_at_s:.1f} s, /readyz 503 after"
          f" {run.noticed_s} s, 200 again {run.ready_again_s} s after the restart,"
          f" {run.store_failures_logged} store failures logged")
    assert run.exited_during_fault is None
    assert run.noticed_s is not None, run.readyz_during_fault
    assert run.store_failures_logged > 0
    assert run.blamed_other == []
    assert run.ready_again_s is not None
    assert run.finished
    assert compare(drift_reference, run.outcome, len(drift_fleet.lines)) == []
    assert run.outcome.exits == [0]
    # Every failure is one line naming the store, not a traceback per retry.
    assert run.outcome.tracebacks == 0
