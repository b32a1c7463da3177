"""What the daemon-over-Kafka integration tests share: topics, a fleet of agent servers,
the daemon's configuration, and reading the broker back.

Every helper reads the broker as a client would; none stands in for a server.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from capwatch.adapters.io.kafka import ensure_topics
from capwatch.adapters.sim.agent_server import AgentServer
from capwatch.adapters.sim.fleet import FamilySpec, SimulatedFleet
from capwatch.daemon.service import Service
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import REPO_ROOT
from tests.support import kafka_offsets

EXAMPLES = REPO_ROOT / "capwatch" / "examples"


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
    partitions: int
    fleet: SimulatedFleet
    urls: dict[str, str]
    tmp: Path


def make_topics(bootstrap: str, prefix: str, partitions: int) -> Topics:
    """Fresh topics (and a consumer group name) for one test."""
    topics = Topics(f"{prefix}-tr", f"{prefix}-models", f"{prefix}-alerts", f"{prefix}-dlq",
                    f"{prefix}-group")
    ensure_topics(bootstrap, transitions=topics.transitions, models=topics.models,
                  alerts=topics.alerts, dead_letter=topics.dead_letter, partitions=partitions)
    return topics


def family_specs(*families: str) -> dict[str, FamilySpec]:
    """The example families by name (``rover-v1``, ``courier-v1``), as the fleet builds them."""
    return {f: FamilySpec(f, read_domain(EXAMPLES / f"{_stem(f)}.pddl"),
                          read_problem(EXAMPLES / f"{_stem(f)}-problem.pddl"))
            for f in families}


def families_config(*families: str) -> dict[str, Any]:
    """The same families as the daemon's ``families`` configuration section."""
    return {f: {"domain": str(EXAMPLES / f"{_stem(f)}.pddl"),
                "problem": str(EXAMPLES / f"{_stem(f)}-problem.pddl")} for f in families}


def _stem(family: str) -> str:
    return family.removesuffix("-v1")


@contextlib.contextmanager
def serve_fleet(fleet: SimulatedFleet) -> Iterator[dict[str, str]]:
    """One reference HTTP agent server per agent; yields agent id → URL."""
    servers = [AgentServer(fleet.simulated_agent(a)).start() for a in fleet.agent_ids]
    try:
        yield {a: s.url for a, s in zip(fleet.agent_ids, servers, strict=True)}
    finally:
        for s in servers:
            s.close()


CLIENTS = ["kafka-python", "confluent-kafka"]
"""The Kafka backends (``kafka.client``) the daemon tests run over."""


def kafka_config(s: Setup, client: str = "kafka-python") -> dict[str, Any]:
    """The daemon's ``kafka`` configuration section for these topics. ``client``
    kafka-python-process: kafka-python with ``consumer_process``."""
    if client == "kafka-python-process":
        return {**kafka_config(s), "consumer_process": True}
    return {"client": client, "bootstrap_servers": s.bootstrap,
            "transitions_topic": s.topics.transitions,
            "models_topic": s.topics.models, "alerts_topic": s.topics.alerts,
            "dead_letter_topic": s.topics.dead_letter, "group_id": s.topics.group,
            "partitions": s.partitions, "session_timeout_ms": 6000}


def daemon_config(s: Setup, http_port: int, client: str = "kafka-python") -> dict[str, Any]:
    """Both example families, queried over HTTP, Kafka in and out (through ``client``), a
    SQLite store."""
    return {
        "replica_id": "it-replica",
        "source": {"kind": "kafka"},
        "output": {"kind": "kafka"},
        "kafka": kafka_config(s, client),
        "store": {"url": f"sqlite:///{s.tmp / 'models.db'}"},
        "families": families_config("rover-v1", "courier-v1"),
        "agents": {"urls": s.urls, "timeout_s": 5.0},
        "detection": {"debounce_transitions": 3, "debounce_s": 0.5},
        "assessment": {"workers": 2, "lease_s": 5.0},
        "scheduler": {"checkpoint_s": 0.5},
        "http": {"enabled": True, "port": http_port},
        # Different drifts never share a group in test_daemon_kafka, so a short wait keeps
        # it fast; test_alert_grouping_kafka sets its own. A killed daemon's deliveries are
        # sent by the others (or its successor) once its hold runs out: 10 s, not 60.
        "alerts": {"group_wait_seconds": 0.5, "route_s": 0.2, "delivery_lease_s": 10.0},
        "log": {"level": "info", "format": "json"},
        "shutdown_grace_s": 10.0,
    }


def produce(s: Setup, rounds: int, pause_every: int = 0) -> int:
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


def read_all(s: Setup, topic: str, timeout_s: float = 5.0) -> list[dict[str, Any]]:
    """Every JSON record of ``topic`` from the beginning."""
    consumer = KafkaConsumer(bootstrap_servers=s.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=int(timeout_s * 1000))
    tps = [TopicPartition(topic, p) for p in range(s.partitions)]
    consumer.assign(tps)
    ends = kafka_offsets.end_offsets(s.bootstrap, tps)
    consumer.seek_to_beginning(*tps)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=300).values():
            out.extend(json.loads(r.value) for r in records)
    consumer.close()
    return out


def end_offsets(s: Setup, topic: str) -> dict[TopicPartition, int]:
    return kafka_offsets.end_offsets(
        s.bootstrap, [TopicPartition(topic, p) for p in range(s.partitions)])


def committed(s: Setup) -> dict[TopicPartition, int] | None:
    """The consumer group's committed offsets; None while its coordinator is not set up."""
    admin = KafkaAdminClient(bootstrap_servers=s.bootstrap)
    try:
        answer = admin.list_group_offsets(s.topics.group)
    except Exception:
        return None
    finally:
        admin.close()
    # kafka-python 3 answers {group: {partition: offset}}.
    offsets = answer.get(s.topics.group, answer)
    return {tp: int(o.offset) for tp, o in offsets.items()}


def lag(s: Setup) -> int:
    """Records of the transitions topic the group has not committed (a large number while
    the group coordinator is still being set up)."""
    done = committed(s)
    if done is None:
        return sys.maxsize
    ends = end_offsets(s, s.topics.transitions)
    return sum(end - done.get(tp, 0) for tp, end in ends.items())


def wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


@contextlib.contextmanager
def running(*services: Service) -> Iterator[list[threading.Thread]]:
    """The services' run loops in threads, stopped and joined on the way out."""
    runners = [threading.Thread(target=s.run, kwargs={"install_signals": False})
               for s in services]
    for r in runners:
        r.start()
    try:
        yield runners
    finally:
        for s in services:
            s.pipeline.stop()
        for r in runners:
            r.join(30)


class CapwatchProcess:
    """``capwatch run`` in a subprocess, as an operator would start it."""

    def __init__(self, config: dict[str, Any], tmp: Path, name: str,
                 command: Callable[[Path], list[str]] | None = None) -> None:
        """``command``: the command line for the configuration file, if not ``capwatch
        run --config FILE`` (a daemon with a fault injected)."""
        http = config.get("http", {})
        self.http_port: int | None = http.get("port") if http.get("enabled", True) else None
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log_path = tmp / f"{name}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        argv = command(path) if command is not None else [
            str(Path(sys.executable).parent / "capwatch"), "run", "--config", str(path)]
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)

    def alive(self) -> bool:
        """True while running; a daemon that exited fails the test with its log."""
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}: {self.tail()}")
        return True

    def metric(self, name: str) -> float | None:
        """The value of an unlabelled metric on /metrics (None while unreachable)."""
        if self.http_port is None:
            raise AssertionError("this daemon runs without its HTTP port")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/metrics",
                                        timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def settled(self, lag: Callable[[], int]) -> bool:
        """Nothing left that could still publish: every record committed (so no evidence
        is buffered: the commit never passes it), no assessment queued or running, and
        every alert in the store delivered (a killed replica may have held some).

        The lag is read first: the gauge is refreshed before each commit, so a commit
        that follows a newly queued assessment is seen with that assessment counted.
        """
        self.alive()
        return lag() == 0 and self.metric("capwatch_agents_awaiting_assessment") == 0 \
            and self.metric("capwatch_alerts_undelivered") == 0

    def tail(self) -> str:
        # Also asked for after stop(), which closes the log, to explain a bad exit code.
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self, sig: int, timeout_s: float = 30.0) -> int:
        """Signal and wait; a daemon that does not stop in time fails the caller (the
        wait's TimeoutExpired) and is killed, not left running after the test."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self.kill_quietly()
            self.log.close()

    def children(self, running: str) -> set[int]:
        """The daemon's child processes whose command line has ``running`` in it (Linux
        /proc), while it runs."""
        out = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.proc.pid \
                        and running in (stat.parent / "cmdline").read_text():
                    out.add(int(stat.parent.name))
        return out

    def kill_quietly(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
