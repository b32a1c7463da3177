"""A probability drift under way when the daemon is killed still alarms after the
restart as if nothing happened: real Kafka broker, ``capwatch run`` in a subprocess.

An early inconsistent transition of another agent, still being debounced, holds the
commit of the drifted agent's partition at its start while the drift state is saved
further on; so after the kill the whole partition is replayed, and only skipping what
the saved state already counted gives the right counts.

The reference is the same fleet's stream run in-process without a restart (JSONL
source). Every agent's records keep their order in Kafka, so the drift detector sees
the same executions in both runs and, with its saved state restored and the replayed
records skipped, must raise the very same alarm (same executions, same evidence).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.partitioner.default import murmur2

from capwatch.adapters.agent_http import AgentServer
from capwatch.adapters.fleet import DriftSpec, FamilySpec, SimulatedFleet
from capwatch.adapters.kafka_io import ensure_topics
from capwatch.adapters.streams import JsonlSource, MemoryPublisher
from capwatch.assess.agent import AgentQuery
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.service import build_service
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import REPO_ROOT
from tests.support._proc import free_port

pytestmark = pytest.mark.integration

EXAMPLES = REPO_ROOT / "capwatch" / "examples"
AGENT = "courier-v1-002"
AGENTS = 4
PARTITIONS = 2
SEED = 5
GHOST = "courier-v1-ghost"
HALL = [["at_robot", "robot1", "hall"], ["carrying", "robot1", "parcel1"]]


def _partition(agent_id: str) -> int:
    """Where Kafka's default partitioner puts an agent's records."""
    return (murmur2(agent_id.encode()) & 0x7FFFFFFF) % PARTITIONS


def _send_ghost(bootstrap: str, topic: str) -> None:
    """A refused drop the model cannot explain, in the drifted agent's partition."""
    event = {"type": "transition", "agent_id": GHOST, "family": "courier-v1",
             "episode_id": "ghost", "step": 0, "state": HALL,
             "action": ["drop", "robot1", "parcel1", "hall"], "next_state": HALL,
             "executed": False}
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    producer.send(topic, key=GHOST.encode(), value=json.dumps(event).encode(),
                  partition=_partition(AGENT))
    producer.flush(30)
    producer.close()


def _saved_position(db: Path) -> int:
    """The position of the drifted agent's saved drift state (-1: none yet)."""
    if not db.exists():
        return -1
    with contextlib.closing(sqlite3.connect(db, timeout=10)) as conn:
        try:
            row = conn.execute("SELECT next_offset FROM drift_state WHERE agent_id = ?",
                               (AGENT,)).fetchone()
        except sqlite3.OperationalError:
            return -1  # not migrated yet
    return -1 if row is None else int(row[0])


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = consumer.end_offsets(tps)
    consumer.close()
    return {tp.partition: int(o) for tp, o in ends.items()}


def _fleet() -> SimulatedFleet:
    spec = FamilySpec("courier-v1", read_domain(EXAMPLES / "courier.pddl"),
                      read_problem(EXAMPLES / "courier-problem.pddl"))
    wear = DriftSpec(read_domain(EXAMPLES / "courier-pick-wear.pddl"), 20, agent_id=AGENT)
    return SimulatedFleet.build({"courier-v1": spec}, AGENTS, [wear], seed=SEED)


def _families() -> dict[str, Any]:
    return {"courier-v1": {"domain": str(EXAMPLES / "courier.pddl"),
                           "problem": str(EXAMPLES / "courier-problem.pddl")}}


class _Agents:
    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.fleet.agent(agent_id)


def _reference(tmp: Path, rounds: int) -> tuple[int, dict[str, Any]]:
    """(round of the alarm, its evidence) without any restart."""
    fleet = _fleet()
    path = tmp / "reference.jsonl"
    path.write_bytes(b"".join(e.value + b"\n" for e in fleet.events(rounds)))
    cfg = DaemonConfig(replica_id="reference", source={"kind": "jsonl", "path": str(path)},
                       store={"url": f"sqlite:///{tmp / 'reference.db'}"},
                       families=_families(), output={"kind": "log"},
                       http={"enabled": False}, log={"level": "error"})
    out = MemoryPublisher()
    service = build_service(cfg, publisher=out, agents=_Agents(fleet),
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    (model,) = out.models
    assert model.agent_id == AGENT
    key = model.evidence["assessment_key"]
    return int(key.rsplit("#", 1)[1]) // AGENTS, model.evidence["drift"]["pick"]


def _produce(bootstrap: str, topic: str, fleet: SimulatedFleet, rounds: int) -> int:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
    n = 0
    for event in fleet.events(rounds):
        producer.send(topic, key=event.agent_id.encode(), value=event.value)
        n += 1
    producer.flush(30)
    producer.close()
    return n


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = admin.list_group_offsets(group)
    except Exception:
        return {}
    finally:
        admin.close()
    offsets = answer.get(group, answer)
    return {tp.partition: int(o.offset) for tp, o in offsets.items() if tp.topic == topic}


def _read(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    ends = consumer.end_offsets(tps)
    consumer.seek_to_beginning(*tps)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=300).values():
            out.extend(json.loads(r.value) for r in records)
    consumer.close()
    return out


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


class _Daemon:
    def __init__(self, config: dict[str, Any], tmp: Path, name: str) -> None:
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log_path = tmp / f"{name}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "capwatch"), "run", "--config", str(path)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT)

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}: "
                                 f"{self.log_path.read_text(errors='replace')[-3000:]}")
        return True

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(30)
        finally:
            self.log.close()

    def kill_quietly(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


def test_a_drift_under_way_at_a_hard_kill_alarms_as_without_the_restart(
        kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> None:
    total = 400
    alarm_round, reference = _reference(tmp_path, total)
    # Kill while the drift is under way: well after it began, well before it alarms.
    first_rounds = 20 + (alarm_round - 20) * 2 // 3
    assert 40 < first_rounds < alarm_round - 10, (first_rounds, alarm_round)

    topics = {t: f"{kafka_topic}-{t}" for t in ("tr", "models", "alerts", "dlq")}
    group = f"{kafka_topic}-group"
    ensure_topics(kafka_bootstrap, transitions=topics["tr"], models=topics["models"],
                  alerts=topics["alerts"], dead_letter=topics["dlq"], partitions=PARTITIONS)
    fleet = _fleet()
    servers = [AgentServer(fleet.simulated_agent(a)).start() for a in fleet.agent_ids]
    config = {
        "replica_id": "drift-restart",
        "source": {"kind": "kafka"}, "output": {"kind": "kafka"},
        "kafka": {"bootstrap_servers": kafka_bootstrap, "transitions_topic": topics["tr"],
                  "models_topic": topics["models"], "alerts_topic": topics["alerts"],
                  "dead_letter_topic": topics["dlq"], "group_id": group,
                  "partitions": PARTITIONS, "session_timeout_ms": 6000},
        "store": {"url": f"sqlite:///{tmp_path / 'models.db'}"},
        "families": _families(),
        "agents": {"urls": {a: s.url for a, s in zip(fleet.agent_ids, servers, strict=True)},
                   "timeout_s": 5.0},
        "scheduler": {"checkpoint_s": 0.3},
        # First run: the ghost's lone inconsistency stays in the debounce buffer.
        "detection": {"debounce_transitions": 1000, "debounce_s": 3600},
        "http": {"enabled": True, "port": free_port()},
        "log": {"level": "info", "format": "json"},
        "alerts": {"group_wait_seconds": 0},
    }
    held = _partition(AGENT)
    try:
        _send_ghost(kafka_bootstrap, topics["tr"])
        first_n = _produce(kafka_bootstrap, topics["tr"], fleet, first_rounds)
        end = _ends(kafka_bootstrap, topics["tr"])[held]
        daemon = _Daemon(config, tmp_path, "first")
        try:
            # Everything handled and the drift state saved at the partition's end, while
            # the commit is held at the ghost (offset 0); then a hard kill.
            _wait(lambda: daemon.alive() and _saved_position(tmp_path / "models.db") == end,
                  90, "the drift state to be saved at the end of the first part")
            assert _committed(kafka_bootstrap, group, topics["tr"]).get(held, 0) == 0
            daemon.stop(signal.SIGKILL)
        finally:
            daemon.kill_quietly()
        assert _read(kafka_bootstrap, topics["models"]) == []

        rest = _produce(kafka_bootstrap, topics["tr"], fleet, total - first_rounds)
        assert first_n + rest == total * AGENTS
        config["http"]["port"] = free_port()
        # Second run: the ghost is assessed at once; nobody answers for it.
        config["detection"] = {"debounce_transitions": 1, "debounce_s": 0}
        config["agents"]["urls"][GHOST] = "http://127.0.0.1:9"
        config["assessment"] = {"agent_retry": {"attempts": 1}}
        again = _Daemon(config, tmp_path, "second")
        try:
            _wait(lambda: again.alive() and sum(_committed(
                kafka_bootstrap, group, topics["tr"]).values()) == total * AGENTS + 1, 120,
                "every transition to be committed")
            _wait(lambda: any(a["agent_id"] == AGENT
                              for a in _read(kafka_bootstrap, topics["alerts"])), 30,
                  "the drift alert")
            time.sleep(1.0)  # a duplicate would show up now
            assert again.stop(signal.SIGTERM) == 0
        finally:
            again.kill_quietly()
    finally:
        for s in servers:
            s.close()
    models = _read(kafka_bootstrap, topics["models"])
    alerts = [a for a in _read(kafka_bootstrap, topics["alerts"]) if a["agent_id"] != GHOST]
    assert [(m["agent_id"], m["version"]) for m in models] == [(AGENT, 1)]
    assert [(a["agent_id"], a["alert_type"]) for a in alerts] == [
        (AGENT, "effect_distribution_drift")]
    evidence = models[0]["evidence"]["drift"]["pick"]
    # The same executions raised the alarm: the restart cost no detection delay.
    assert evidence["window"] == reference["window"]
    assert evidence["counts"] == reference["counts"]
    assert evidence["log_statistic"] == pytest.approx(reference["log_statistic"], rel=1e-12)
    log = (tmp_path / "second.log").read_text()
    assert "drift state restored" in log
