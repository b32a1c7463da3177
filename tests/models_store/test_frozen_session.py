"""A replica frozen inside a store transaction (SIGSTOP, a stalled VM) must not hold the
other replicas up for as long as it stays frozen.

Every replica's alert router takes one PostgreSQL advisory lock per pass, and each
replica's store runs all its threads' transactions on one connection, one at a time. A
replica frozen between two statements of a routing pass kept the lock: the next replica's
router waited for it while holding its store, so that replica's main loop and workers
waited too, and the fleet stopped until the frozen one was resumed. The server now ends
such a session after the store's idle-in-transaction timeout, which frees its locks.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime

import psycopg
import pytest

from capwatch.contracts.store import OutboxAlert, RoutingPlan, StoreError
from capwatch.models_store.postgres import PostgresModelStore
from tests.models_store.test_alert_outbox import at, deliver_each, row

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_replica_frozen_in_a_routing_pass_does_not_stop_the_others(store_url: str) -> None:
    frozen = PostgresModelStore(store_url, idle_in_transaction_timeout_s=1)
    other = PostgresModelStore(store_url, idle_in_transaction_timeout_s=1)
    resume = threading.Event()
    inside = threading.Event()
    failed: list[BaseException] = []
    try:
        other.add_alerts([row("a1")])

        def stalls(pending: Sequence[OutboxAlert], sent: Mapping[str, datetime]
                   ) -> RoutingPlan:
            inside.set()  # the routing lock is held from here until the pass commits
            resume.wait(60)
            return RoutingPlan()

        def frozen_pass() -> None:
            try:
                frozen.route_alerts(stalls, at(30))
            except (StoreError, psycopg.Error) as e:
                failed.append(e)

        zombie = threading.Thread(target=frozen_pass, daemon=True)
        zombie.start()
        assert inside.wait(30)
        routed = threading.Thread(target=other.route_alerts, args=(deliver_each(), at(31)),
                                  daemon=True)
        routed.start()
        routed.join(30)
        assert not routed.is_alive(), "a frozen replica's routing pass held the others up"
        assert [d.key for d in other.deliveries("pending")] == ["d-a1"]
    finally:
        resume.set()
    zombie.join(30)
    # Resumed, the frozen replica finds its pass undone (nothing of it was written) and
    # its next transaction works on a new connection.
    assert failed, "the frozen pass committed after its session was ended"
    assert [d.key for d in frozen.deliveries("pending")] == ["d-a1"]
    frozen.close()
    other.close()
