"""The daemon against a real Kafka broker, querying simulated agents over HTTP.

A fleet of 20 simulated agents over two families publishes transitions to Kafka; three
agents drift (a precondition change, the paper's sample_rock example; an effect change;
a probability change). Each agent answers plan-outcome queries through its own
reference HTTP server. The daemon must publish, for every drifted agent, one model
version equal to the agent's true model and one alert, and nothing for the others,
including across a graceful (SIGTERM) and a hard (SIGKILL) restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from capwatch.adapters.agent_http import AgentServer
from capwatch.adapters.fleet import DriftSpec, FamilySpec, SimulatedFleet
from capwatch.adapters.kafka_io import ensure_topics
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.model.serialize import domain_from_json
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "capwatch" / "examples"
PARTITIONS = 4
AGENTS_PER_FAMILY = 10
DRIFTS = {
    "rover-v1-003": ("rover-sample-drift.pddl", "capability_reduced"),
    "courier-v1-001": ("courier-drop-jam.pddl", "capability_reduced"),
    "courier-v1-005": ("courier-pick-wear.pddl", "effect_distribution_drift"),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Topics:
    transitions: str
    models: str
    alerts: str
    dead_letter: str
    group: str


@dataclass
class Setup:
    bootstrap: str
    topics: Topics
    fleet: SimulatedFleet
    urls: dict[str, str]
    tmp: Path


@pytest.fixture
def setup(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    topics = Topics(f"{kafka_topic}-tr", f"{kafka_topic}-models", f"{kafka_topic}-alerts",
                    f"{kafka_topic}-dlq", f"{kafka_topic}-group")
    ensure_topics(kafka_bootstrap, transitions=topics.transitions, models=topics.models,
                  alerts=topics.alerts, dead_letter=topics.dead_letter, partitions=PARTITIONS)
    families = {
        "rover-v1": FamilySpec("rover-v1", read_domain(EXAMPLES / "rover.pddl"),
                               read_problem(EXAMPLES / "rover-problem.pddl")),
        "courier-v1": FamilySpec("courier-v1", read_domain(EXAMPLES / "courier.pddl"),
                                 read_problem(EXAMPLES / "courier-problem.pddl")),
    }
    drifts = [DriftSpec(read_domain(EXAMPLES / f), 25, agent_id=a)
              for a, (f, _) in DRIFTS.items()]
    fleet = SimulatedFleet.build(families, AGENTS_PER_FAMILY, drifts, seed=11)
    servers = [AgentServer(fleet.simulated_agent(a)).start() for a in fleet.agent_ids]
    try:
        yield Setup(kafka_bootstrap, topics, fleet,
                    {a: s.url for a, s in zip(fleet.agent_ids, servers, strict=True)}, tmp_path)
    finally:
        for s in servers:
            s.close()


def _config(s: Setup, http_port: int) -> dict[str, Any]:
    return {
        "replica_id": "it-replica",
        "source": {"kind": "kafka"},
        "output": {"kind": "kafka"},
        "kafka": {"bootstrap_servers": s.bootstrap, "transitions_topic": s.topics.transitions,
                  "models_topic": s.topics.models, "alerts_topic": s.topics.alerts,
                  "dead_letter_topic": s.topics.dead_letter, "group_id": s.topics.group,
                  "partitions": PARTITIONS, "session_timeout_ms": 6000},
        "store": {"url": f"sqlite:///{s.tmp / 'models.db'}"},
        "families": {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl"),
                                  "problem": str(EXAMPLES / "rover-problem.pddl")},
                     "courier-v1": {"domain": str(EXAMPLES / "courier.pddl"),
                                    "problem": str(EXAMPLES / "courier-problem.pddl")}},
        "agents": {"urls": s.urls, "timeout_s": 5.0},
        "detection": {"debounce_transitions": 3, "debounce_s": 0.5},
        "assessment": {"workers": 2, "lease_s": 5.0},
        "scheduler": {"checkpoint_s": 0.5},
        "http": {"enabled": True, "port": http_port},
        # Different drifts never share a group here, so a short wait keeps the test fast.
        "alerts": {"group_wait_seconds": 0.5, "route_s": 0.2},
        "log": {"level": "info", "format": "json"},
        "shutdown_grace_s": 10.0,
    }


def _produce(s: Setup, rounds: int, pause_every: int = 0) -> int:
    """Send ``rounds`` transitions of every agent; ``pause_every`` paces the stream so a
    daemon can be stopped while records are still arriving."""
    producer = KafkaProducer(bootstrap_servers=s.bootstrap, linger_ms=20, acks="all")
    n = 0
    for event in s.fleet.events(rounds):
        producer.send(s.topics.transitions, key=event.agent_id.encode(), value=event.value)
        n += 1
        if pause_every and n % pause_every == 0:
            producer.flush(10)
            time.sleep(0.05)
    producer.flush(30)
    producer.close()
    return n


def _read_all(bootstrap: str, topic: str, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=int(timeout_s * 1000))
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    consumer.seek_to_beginning(*tps)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=300).values():
            out.extend(json.loads(r.value) for r in records)
    consumer.close()
    return out


def _lag(s: Setup) -> int:
    """Records of the transitions topic the group has not committed (a large number while
    the group coordinator is still being set up)."""
    admin = KafkaAdminClient(bootstrap_servers=s.bootstrap)
    try:
        answer = admin.list_group_offsets(s.topics.group)
    except Exception:
        return sys.maxsize
    finally:
        admin.close()
    # kafka-python 3 answers {group: {partition: offset}}.
    committed = answer.get(s.topics.group, answer)
    consumer = KafkaConsumer(bootstrap_servers=s.bootstrap)
    tps = [TopicPartition(s.topics.transitions, p) for p in range(PARTITIONS)]
    ends = consumer.end_offsets(tps)
    consumer.close()
    return sum(ends[tp] - (committed[tp].offset if tp in committed else 0) for tp in tps)


def _committed(s: Setup) -> int:
    admin = KafkaAdminClient(bootstrap_servers=s.bootstrap)
    try:
        answer = admin.list_group_offsets(s.topics.group)
    except Exception:
        return 0
    finally:
        admin.close()
    return sum(o.offset for o in answer.get(s.topics.group, answer).values())


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _change_alerts(s: Setup) -> list[dict[str, Any]]:
    """Alerts about model changes (not "awaiting assessment")."""
    return [a for a in _read_all(s.bootstrap, s.topics.alerts)
            if a["alert_type"] != "unexplained_inconsistency"]


def _check_outputs(s: Setup) -> None:
    models = _read_all(s.bootstrap, s.topics.models)
    alerts = _read_all(s.bootstrap, s.topics.alerts)
    keys = [(m["agent_id"], m["version"]) for m in models]
    assert len(keys) == len(set(keys)), f"duplicated model versions: {keys}"
    assert sorted(m["agent_id"] for m in models) == sorted(DRIFTS), keys
    for m in models:
        learned = domain_from_json(m["model"]["json"])
        assert delta(learned, s.fleet.true_model(m["agent_id"])) == 0, m["summary"]
        assert m["version"] == 1 and m["parent_agent_id"] is None
    dedup = [a["dedup_key"] for a in alerts]
    assert len(dedup) == len(set(dedup)), f"duplicated alerts: {dedup}"
    waiting = [a for a in alerts if a["alert_type"] == "unexplained_inconsistency"]
    changes = [a for a in alerts if a not in waiting]
    assert {a["agent_id"]: a["alert_type"] for a in changes} == {
        a: kind for a, (_, kind) in DRIFTS.items()}
    assert len(changes) == len(DRIFTS)
    # Drifts seen as inconsistent transitions were announced once, when their assessment
    # was queued; the probability drift never contradicts the model.
    assert sorted(a["agent_id"] for a in waiting) == sorted(
        a for a, (_, kind) in DRIFTS.items() if kind == "capability_reduced")
    wear = next(m for m in models if m["agent_id"] == "courier-v1-005")
    pick = domain_from_json(wear["model"]["json"]).action("pick")
    assert pick.outcomes[0].probability == pytest.approx(0.5, abs=0.1)


class DaemonProcess:
    """``capwatch run`` in a subprocess, as an operator would start it."""

    def __init__(self, s: Setup, name: str) -> None:
        self.port = _free_port()
        self.path = s.tmp / f"{name}.yaml"
        self.path.write_text(yaml.safe_dump(_config(s, self.port)))
        self.log = open(s.tmp / f"{name}.log", "wb")  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "capwatch"), "run", "--config", str(self.path)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}: {self.tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self.log.close()

    def kill_quietly(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


def test_fleet_drift_end_to_end_over_kafka_and_http(setup: Setup) -> None:
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    n = _produce(setup, rounds=300)
    assert n == 300 * 2 * AGENTS_PER_FAMILY
    assert set(setup.fleet.drifted_agents()) == set(DRIFTS)
    configure_logging("warning", "json")
    service = build_service(DaemonConfig(**_config(setup, 0)))
    import threading

    runner = threading.Thread(target=service.run, kwargs={"install_signals": False})
    runner.start()
    try:
        _wait(lambda: _lag(setup) == 0 and service.daemon.processed >= n
              and not service.daemon._awaiting_keys, 60, "the stream to be consumed")
        _wait(lambda: len(_change_alerts(setup)) >= len(DRIFTS), 30,
              "the alerts")
    finally:
        service.daemon.stop()
        runner.join(30)
    assert not runner.is_alive()
    _check_outputs(setup)
    assert service.daemon.dead_letters == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_restart_mid_stream_loses_and_duplicates_nothing(setup: Setup, sig: int) -> None:
    import threading

    daemon = DaemonProcess(setup, "first")
    produced: list[int] = []
    try:
        _wait(daemon.ready, 60, "the daemon to be ready")
        # Stop it while the first half is still arriving and some of it is committed.
        producer = threading.Thread(target=lambda: produced.append(
            _produce(setup, rounds=150, pause_every=100)))
        producer.start()
        _wait(lambda: _lag(setup) < sys.maxsize and _committed(setup) > 0, 60,
              "the first commits")
        assert producer.is_alive(), "the stream ended before the daemon was stopped"
        code = daemon.stop(sig)
        producer.join(60)
    finally:
        daemon.kill_quietly()
    first_half = produced[0]
    if sig == signal.SIGTERM:
        assert code == 0, daemon.tail()
    second_half = _produce(setup, rounds=150)
    again = DaemonProcess(setup, "second")
    try:
        _wait(again.ready, 60, "the restarted daemon to be ready")
        _wait(lambda: _lag(setup) == 0, 90, "every transition to be committed")
        _wait(lambda: len(_change_alerts(setup)) >= len(DRIFTS), 60,
              "an alert per drift")
        time.sleep(1.0)  # anything duplicated would show up now
        assert again.stop(signal.SIGTERM) == 0, again.tail()
    finally:
        again.kill_quietly()
    assert first_half + second_half == 300 * 2 * AGENTS_PER_FAMILY
    _check_outputs(setup)


def test_hostile_messages_land_in_the_dead_letter_topic(setup: Setup) -> None:
    import base64
    import threading

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    samples: list[bytes] = []

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=200) | st.text(max_size=50).map(str.encode))
    def collect(raw: bytes) -> None:
        samples.append(raw)

    collect()
    good = [e.value for e in setup.fleet.events(3)]
    wrong_key = good[0]
    producer = KafkaProducer(bootstrap_servers=setup.bootstrap, acks="all")
    for raw in samples:
        producer.send(setup.topics.transitions, key=b"fuzz", value=raw)
    producer.send(setup.topics.transitions, key=b"someone-else", value=wrong_key)
    for event_raw in good:
        agent = json.loads(event_raw)["agent_id"]
        producer.send(setup.topics.transitions, key=agent.encode(), value=event_raw)
    producer.flush(30)
    producer.close()
    bad = len(samples) + 1
    configure_logging("error", "json")
    service = build_service(DaemonConfig(**_config(setup, 0)))
    runner = threading.Thread(target=service.run, kwargs={"install_signals": False})
    runner.start()
    try:
        _wait(lambda: service.daemon.processed >= bad + len(good) and _lag(setup) == 0, 60,
              "every message to be handled")
    finally:
        service.daemon.stop()
        runner.join(30)
    dead = _read_all(setup.bootstrap, setup.topics.dead_letter)
    assert len(dead) == bad == service.daemon.dead_letters
    assert all(d["reason"] and d["source"] == setup.topics.transitions for d in dead)
    assert sorted(base64.b64decode(d["raw_base64"]) for d in dead) == sorted(
        [*samples, wrong_key])
    assert any("does not match agent_id" in d["reason"] for d in dead)
    assert len({(d["partition"], d["offset"]) for d in dead}) == bad


def test_two_replicas_share_the_fleet_through_the_consumer_group(
        setup: Setup, postgres_dsn: str) -> None:
    """Scale-out: two replicas in one consumer group with a shared PostgreSQL store split
    the partitions between them; each drift still yields exactly one version and alert."""
    import threading
    import uuid
    from urllib.parse import quote

    import psycopg

    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    schema = f"daemon_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_dsn else "?"
    dsn = f"{postgres_dsn}{sep}options={quote(f'-csearch_path={schema}')}"
    n = _produce(setup, rounds=300)
    configure_logging("error", "json")
    services, runners = [], []
    for i in range(2):
        cfg = _config(setup, 0)
        cfg["replica_id"] = f"replica-{i}"
        cfg["store"] = {"url": dsn}
        cfg["scheduler"]["results_poll_s"] = 0.5
        service = build_service(DaemonConfig(**cfg))
        services.append(service)
        runners.append(threading.Thread(target=service.run, kwargs={"install_signals": False}))
    for r in runners:
        r.start()
    try:
        _wait(lambda: _lag(setup) == 0
              and sum(s.daemon.processed for s in services) >= n
              and not any(s.daemon._awaiting_keys for s in services), 90,
              "both replicas to consume the stream")
        _wait(lambda: len(_change_alerts(setup)) >= len(DRIFTS), 30,
              "the alerts")
    finally:
        for s in services:
            s.daemon.stop()
        for r in runners:
            r.join(30)
    assert all(s.daemon.processed > 0 for s in services), "one replica got no partition"
    _check_outputs(setup)
