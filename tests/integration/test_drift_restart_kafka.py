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
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.partitioner.default import murmur2

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.fleet import DriftSpec, FleetEvent, SimulatedFleet
from capwatch.assess.agent import AgentQuery
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.service import build_service
from capwatch.model.pddl_reader import read_domain
from tests.integration._daemon_setup import (
    EXAMPLES,
    CapwatchProcess,
    Setup,
    committed,
    end_offsets,
    families_config,
    family_specs,
    kafka_config,
    make_topics,
    read_all,
    serve_fleet,
    wait,
)
from tests.support._proc import free_port

pytestmark = pytest.mark.integration

AGENT = "courier-v1-002"
AGENTS = 4
PARTITIONS = 2
SEED = 5
GHOST = "courier-v1-ghost"
HALL = [["at_robot", "robot1", "hall"], ["carrying", "robot1", "parcel1"]]


def _partition(agent_id: str) -> int:
    """Where Kafka's default partitioner puts an agent's records."""
    return int(murmur2(agent_id.encode()) & 0x7FFFFFFF) % PARTITIONS


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


def _fleet() -> SimulatedFleet:
    wear = DriftSpec(read_domain(EXAMPLES / "courier-pick-wear.pddl"), 20, agent_id=AGENT)
    return SimulatedFleet.build(family_specs("courier-v1"), AGENTS, [wear], seed=SEED)


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
    cfg = DaemonConfig.model_validate({
        "replica_id": "reference", "source": {"kind": "jsonl", "path": str(path)},
        "store": {"url": f"sqlite:///{tmp / 'reference.db'}"},
        "families": families_config("courier-v1"), "output": {"kind": "log"},
        "http": {"enabled": False}, "log": {"level": "error"}})
    out = MemoryPublisher()
    service = build_service(cfg, publisher=out, agents=_Agents(fleet),
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    (model,) = out.models
    assert model.agent_id == AGENT
    key = model.evidence["assessment_key"]
    return int(key.rsplit("#", 1)[1]) // AGENTS, model.evidence["drift"]["pick"]


RETRY_EVERY = 7
"""Every 7th record is sent twice, as a producer's retry does (the first send's
acknowledgement lost): each must be observed once, or the counts differ from the
reference's."""


def _produce(s: Setup, rounds: int, first: FleetEvent | None = None
             ) -> tuple[int, FleetEvent]:
    """:func:`produce` with retries: every :data:`RETRY_EVERY`-th record again, and
    ``first`` (a record of an earlier part) before all; the records sent and the last
    record of :data:`AGENT`."""
    producer = KafkaProducer(bootstrap_servers=s.bootstrap, linger_ms=20, acks="all")
    n = 0
    last: FleetEvent | None = None
    events = s.fleet.events(rounds)
    for i, event in enumerate([first, *events] if first is not None else events):
        sends = 2 if i % RETRY_EVERY == RETRY_EVERY - 1 else 1
        for _ in range(sends):
            producer.send(s.topics.transitions, key=event.agent_id.encode(),
                          value=event.value)
        n += sends
        if event.agent_id == AGENT:
            last = event
    producer.flush(30)
    producer.close()
    assert last is not None
    return n, last


def _committed(s: Setup) -> dict[int, int]:
    """The group's committed offsets of the transitions topic, by partition."""
    return {tp.partition: o for tp, o in (committed(s) or {}).items()
            if tp.topic == s.topics.transitions}


def _read(s: Setup, topic: str) -> list[dict[str, Any]]:
    return read_all(s, topic, timeout_s=10)


def test_a_drift_under_way_at_a_hard_kill_alarms_as_without_the_restart(
        kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> None:
    total = 400
    alarm_round, reference = _reference(tmp_path, total)
    # Kill while the drift is under way: well after it began, well before it alarms.
    first_rounds = 20 + (alarm_round - 20) * 2 // 3
    assert 40 < first_rounds < alarm_round - 10, (first_rounds, alarm_round)

    fleet = _fleet()
    with serve_fleet(fleet) as urls:
        s = Setup(kafka_bootstrap, make_topics(kafka_bootstrap, kafka_topic, PARTITIONS),
                  PARTITIONS, fleet, urls, tmp_path)
        tr = s.topics.transitions
        config: dict[str, Any] = {
            "replica_id": "drift-restart",
            "source": {"kind": "kafka"}, "output": {"kind": "kafka"},
            "kafka": kafka_config(s),
            "store": {"url": f"sqlite:///{tmp_path / 'models.db'}"},
            "families": families_config("courier-v1"),
            "agents": {"urls": dict(urls), "timeout_s": 5.0},
            "scheduler": {"checkpoint_s": 0.3},
            # First run: the ghost's lone inconsistency stays in the debounce buffer.
            "detection": {"debounce_transitions": 1000, "debounce_s": 3600},
            "http": {"enabled": True, "port": free_port()},
            "log": {"level": "info", "format": "json"},
            "alerts": {"group_wait_seconds": 0, "delivery_lease_s": 10.0},
        }
        held = _partition(AGENT)
        _send_ghost(kafka_bootstrap, tr)
        first_n, last = _produce(s, first_rounds)
        end = end_offsets(s, tr)[TopicPartition(tr, held)]
        daemon = CapwatchProcess(config, tmp_path, "first")
        try:
            # Everything handled and the drift state saved at the partition's end, while
            # the commit is held at the ghost (offset 0); then a hard kill.
            wait(lambda: daemon.alive() and _saved_position(tmp_path / "models.db") == end,
                 90, "the drift state to be saved at the end of the first part")
            assert _committed(s).get(held, 0) == 0
            daemon.stop(signal.SIGKILL)
        finally:
            daemon.kill_quietly()
        assert _read(s, s.topics.models) == []

        # The drifted agent's last record of the first part sent again after the kill
        # (its producer's retry): the replay, from the ghost's commit, sees the first
        # send again before it (neither is counted again: the restored tables counted
        # it, and the retry is told by its step).
        rest, _ = _produce(s, total - first_rounds, first=last)
        sent = first_n + rest
        assert sent > total * AGENTS + 1
        config["http"]["port"] = free_port()
        # Second run: the ghost is assessed at once; nobody answers for it.
        config["detection"] = {"debounce_transitions": 1, "debounce_s": 0}
        config["agents"]["urls"][GHOST] = "http://127.0.0.1:9"
        config["assessment"] = {"agent_retry": {"attempts": 1}}
        again = CapwatchProcess(config, tmp_path, "second")
        try:
            wait(lambda: again.alive() and sum(_committed(s).values()) == sent + 1,
                 120, "every transition to be committed")
            wait(lambda: any(a["agent_id"] == AGENT for a in _read(s, s.topics.alerts)), 30,
                 "the drift alert")
            # A duplicate would need buffered evidence (which holds the commit back) or
            # an assessment still queued or running: wait until neither is left.
            wait(lambda: again.settled(lambda: sent + 1 - sum(
                _committed(s).values())), 60, "the daemon to settle")
            assert again.stop(signal.SIGTERM) == 0
        finally:
            again.kill_quietly()
    models = _read(s, s.topics.models)
    alerts = [a for a in _read(s, s.topics.alerts) if a["agent_id"] != GHOST]
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
