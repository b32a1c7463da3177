"""Faults while ``kafka.auto_offset_reset: latest`` replicas commit where partitions start,
over the real broker and PostgreSQL, each replica a ``capwatch run`` process of its own.

Every Kafka source commits each partition's resolved start for the group at its first
assignment, before it hands on any of its records (tests/chaos/test_kafka_latest.py: a
replica killed before its first checkpoint). Here the start is attacked: the store frozen
while the first records' outputs are in flight and the replica then killed; a second
replica joining, and the first killed, while the starts are committed under a stream that
goes on; the broker killed and started again while the first replica starts.

The rule each checks, with probes (tests/chaos/kafka_replicas.py) as the oracle of what
was handled: every record acknowledged at or after the group's first start of its
partition handled at least once, none before it; a partition's start committed once
(a second start would overwrite the first, skipping what lay between); no offset
committed past records whose outputs were not acknowledged; no (agent, version)
published with two models; duplicates only as the re-reads of at-least-once.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.chaos.harness import Daemon
from tests.chaos.kafka_harness import KafkaTopics, committed_and_end, make_topics, produce
from tests.chaos.kafka_replicas import (
    SOURCES,
    Probes,
    dead_lettered,
    group_committed,
    held,
    logged_starts,
    published_conflicts,
    replica_config,
    wait_holding,
    wait_read,
)
from tests.chaos.pg_kafka import store_done
from tests.chaos.selection import EVERY, cases
from tests.support._proc import free_port
from tests.support.kafka_broker import KafkaBroker
from tests.support.postgres_server import PostgresServer

pytestmark = pytest.mark.integration

PARTITIONS = 3
HISTORY = 12
"""Valid records on the topic before any replica starts (``latest``: never read)."""


def _begin(valid_events: tuple[list[bytes], dict[str, dict[str, str]]], bootstrap: str
           ) -> tuple[dict[str, dict[str, str]], list[tuple[bytes, str]], KafkaTopics, Probes]:
    """Fresh topics holding the history; the families, the valid records (value, key)
    and the probes' producer."""
    lines, families = valid_events
    valid = [(v, json.loads(v)["agent_id"]) for v in lines]
    topics = make_topics(bootstrap, partitions=PARTITIONS)
    history = valid[:HISTORY]
    produce(topics, [v for v, _ in history], [k for _, k in history])
    return families, valid, topics, Probes(topics)


@pytest.fixture
def pg_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A database of its own on the session's server (which the test freezes)."""
    if postgres_server.external:
        pytest.skip("freezing needs a server started by the tests")
    admin = postgres_server.dsn.rsplit("/", 1)[0] + "/postgres"
    name = f"start_{int(time.time() * 1000)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # the name is ours
    yield admin.rsplit("/", 1)[0] + f"/{name}"


def _holds(verdict: dict[str, Any]) -> None:
    """Nothing lost, nothing read from before a start, no start committed twice, no
    record handled more often than one re-read explains."""
    wrong = {k: verdict[k] for k in ("lost", "unstarted", "early", "starts_overwritten",
                                     "handled_more_than_twice")}
    assert not any(wrong.values()), verdict


def _until(what: str, condition: Any, daemons: list[Daemon], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        for d in daemons:
            assert d.proc.poll() is None, f"{what}: a replica exited: {d.tail()}"
        assert time.monotonic() < deadline, f"{what}: not in {timeout_s:.0f} s: " + \
            " | ".join(d.tail(2000) for d in daemons)
        time.sleep(0.3)


def _pg(config: dict[str, Any]) -> dict[str, Any]:
    # The frozen store is given up on after 3 s rather than 15: the same path, sooner.
    config["store"]["statement_timeout_s"] = 3.0
    return config


def _store_failed(d: Daemon) -> bool:
    return any("models store unavailable" in str(e.get("problem", ""))
               for e in d.log_events())


@pytest.mark.parametrize("source", cases(["kafka-python-process"], list(SOURCES)))
def test_store_frozen_under_the_first_records_then_killed(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], kafka_bootstrap: str,
        postgres_server: PostgresServer, pg_dsn: str, tmp_path: Path, source: str) -> None:
    """A's start is committed and A reads its first records; then the store freezes, more
    records come, and A is told to stop: its last checkpoint cannot have the first
    records' outputs acknowledged. A is SIGKILLed once it met the outage. Nothing past the
    start may have been committed; B handles every probe after it."""
    families, valid, topics, probes = _begin(valid_events, kafka_bootstrap)
    port_a, port_b = free_port(), free_port()
    a = Daemon(_pg(replica_config(topics, pg_dsn, families, "a", source, port_a, 3600.0)),
               tmp_path, "a")
    try:
        wait_holding([a], PARTITIONS, 120)
        at_start = group_committed(topics)
        probes.send(30, valid[12:42])
        wait_read(a, port_a, 60, 60)
        with postgres_server.frozen():
            probes.send(30, valid[42:72])
            a.proc.send_signal(signal.SIGTERM)
            _until("A meets the outage", lambda: _store_failed(a) or a.proc.poll() is not None,
                   [], 120)
            a.kill(signal.SIGKILL)
            at_kill = group_committed(topics)
    finally:
        a.kill(signal.SIGKILL)
    probes.send(30, valid[72:102])
    b = Daemon(_pg(replica_config(topics, pg_dsn, families, "b", source, port_b, 1.0)),
               tmp_path, "b")
    try:
        wait_holding([b], PARTITIONS, 120)
        probes.send(30, valid[102:120])
        _until("B commits every record", lambda: store_done(topics, pg_dsn), [b], 120)
    finally:
        code = b.kill(signal.SIGTERM)
        probes.close()
    assert code == 0, b.tail()
    # Nothing committed past the start while the first records' outputs were in flight.
    assert at_start == at_kill, (at_start, at_kill)
    assert sum(at_start.values()) == HISTORY and set(at_start) == set(range(PARTITIONS))
    verdict = probes.verdict(logged_starts([a, b]), dead_lettered(topics))
    print(f"\nstore frozen, then killed ({source}): {verdict}")
    assert verdict["probes"] == 120
    _holds(verdict)
    stopped = next(e for e in b.log_events() if e.get("event") == "daemon stopped")
    assert stopped["processed"] == 228, b.tail()  # B: each record after A's start once
    assert published_conflicts(topics) == []


@pytest.mark.parametrize(("source", "kill_at"), cases(
    [("kafka-python", "holding"), ("confluent-kafka", "starting")],
    [(s, k) for s in SOURCES for k in ("starting", "holding")]))
def test_a_second_replica_joins_while_the_starts_are_committed(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], kafka_bootstrap: str,
        tmp_path: Path, source: str, kill_at: str) -> None:
    """A and B start together under a stream that goes on (the group rebalances while
    the first starts are committed); A is SIGKILLed before its first checkpoint, either
    as soon as it says it started (it is joining the group, or committing its starts)
    or once the two hold every partition between them; B takes A's partitions over."""
    families, valid, topics, probes = _begin(valid_events, kafka_bootstrap)
    store = tmp_path / "store.db"
    port_a, port_b = free_port(), free_port()
    probes.paced(250, 25.0, valid[12:100])
    a = Daemon(replica_config(topics, store, families, "a", source, port_a, 3600.0),
               tmp_path, "a")
    b = Daemon(replica_config(topics, store, families, "b", source, port_b, 1.0),
               tmp_path, "b")
    try:
        try:
            if kill_at == "starting":
                a.wait_started(120)
            else:
                _until("A and B each hold partitions", lambda: bool(held(a) and held(b)),
                       [a, b], 120)
                wait_holding([a, b], PARTITIONS, 120)
        finally:
            a.kill(signal.SIGKILL)
        # A start A committed without living to log it is still the group's start.
        at_kill = group_committed(topics)
        probes.join()
        # Records come while A's partitions have no owner (the group notices A gone after
        # its session timeout): B must read them from A's starts, not from their end.
        probes.paced(100, 25.0)
        wait_holding([b], PARTITIONS, 120)
        probes.join()
        probes.send(20, valid[100:120])
        _until("B commits every record", lambda: _committed_all(topics), [b], 120)
    finally:
        code = b.kill(signal.SIGTERM)
        probes.close()
    assert code == 0, b.tail()
    starts = logged_starts([a, b])
    for p, o in at_kill.items():
        starts.setdefault(p, [o])
    verdict = probes.verdict(starts, dead_lettered(topics))
    print(f"\nsecond replica joining during the start ({source}, A killed {kill_at}):"
          f" {verdict}")
    assert verdict["probes"] == 370
    _holds(verdict)
    assert published_conflicts(topics) == []


def _committed_all(topics: KafkaTopics) -> bool:
    committed, end = committed_and_end(topics)
    return bool(end) and committed >= end


@pytest.mark.skipif(not EVERY, reason="make chaos: a broker of its own and 40-120 s")
@pytest.mark.parametrize("source", list(SOURCES))
def test_the_broker_restarted_while_the_replica_starts(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], own_broker: KafkaBroker,
        tmp_path: Path, source: str) -> None:
    """The broker is killed as soon as A says it started (it joins the group and commits
    its starts around the kill) and started again; a stream goes on throughout."""
    families, valid, topics, probes = _begin(valid_events, own_broker.bootstrap)
    store = tmp_path / "store.db"
    port = free_port()
    a = Daemon(replica_config(topics, store, families, "a", source, port, 1.0), tmp_path, "a")
    try:
        a.wait_started(120)
        own_broker.kill()
        probes.paced(100, 25.0, valid[12:92])
        own_broker.start_again()
        wait_holding([a], PARTITIONS, 180)
        probes.join()
        probes.send(20, valid[100:120])
        _until("A commits every record", lambda: _committed_all(topics), [a], 180)
    finally:
        code = a.kill(signal.SIGTERM)
        probes.close()
    assert code == 0, a.tail()
    verdict = probes.verdict(logged_starts([a]), dead_lettered(topics))
    print(f"\nbroker restarted during the start ({source}): {verdict}")
    assert verdict["probes"] >= 20
    _holds(verdict)
    assert published_conflicts(topics) == []
