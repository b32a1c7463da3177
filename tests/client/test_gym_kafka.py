"""The Taxi scenario over a real Kafka broker: the Gymnasium wrapper emits through the
SDK's KafkaTransport, ``capwatch run`` consumes the topic, queries the agent's endpoint and
publishes the learned model to the compacted models topic."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from capwatch.adapters.io.kafka import ensure_topics
from capwatch.client import KafkaTransport, TransitionEmitter
from capwatch.client.gym import CapwatchWrapper
from capwatch.examples.gym import taxi
from tests.client.gym_scenarios import TOKEN, make_taxi, run_agent, taxi_server
from tests.integration._daemon_setup import CapwatchProcess
from tests.support._proc import free_port, wait_until

pytestmark = pytest.mark.integration


def _read(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    end = consumer.end_offsets([tp])[tp]
    consumer.seek_to_beginning(tp)
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=300).values():
            out.extend(json.loads(r.value) for r in records)
    consumer.close()
    return out


def test_taxi_drift_over_kafka(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> None:
    topics = {"transitions_topic": f"{kafka_topic}-tr", "models_topic": f"{kafka_topic}-m",
              "alerts_topic": f"{kafka_topic}-a", "dead_letter_topic": f"{kafka_topic}-d"}
    ensure_topics(kafka_bootstrap, transitions=topics["transitions_topic"],
                  models=topics["models_topic"], alerts=topics["alerts_topic"],
                  dead_letter=topics["dead_letter_topic"], partitions=1)
    emitter = TransitionEmitter(KafkaTransport(kafka_bootstrap, topics["transitions_topic"]),
                                agent_id="taxi-1", family="taxi-v4", batch_size=500)
    emitted = []
    for drifted, seed in ((False, 1), (True, 2)):
        env = make_taxi(drifted)
        wrapped = CapwatchWrapper(env, taxi.abstraction(env), emitter, executed=taxi.executed)
        run_agent(wrapped, 2000, seed, use_mask=True)
        emitter.flush()
        emitted.append(wrapped.emitted)
    emitter.close()
    port = free_port()
    with taxi_server(drifted=True) as server:
        daemon = CapwatchProcess({
            "replica_id": "kafka-gym",
            "source": {"kind": "kafka"}, "output": {"kind": "kafka"},
            "kafka": {"bootstrap_servers": kafka_bootstrap, **topics,
                      "group_id": f"{kafka_topic}-g", "partitions": 1},
            "store": {"url": f"sqlite:///{tmp_path / 'models.db'}"},
            "families": {"taxi-v4": {"domain": str(taxi.domain_path()),
                                     "problem": str(taxi.problem_path())}},
            "agents": {"urls": {"taxi-1": server.url}, "bearer_token": TOKEN},
            "assessment": {"method": "daaisy"},
            "http": {"enabled": True, "port": port},
            # Assess from 3 inconsistent transitions, not from whatever a loaded machine has read
            # after a short debounce: from one refusal daaisy cannot tell the precondition.
            "detection": {"debounce_transitions": 3, "debounce_s": 10.0},
            "scheduler": {"checkpoint_s": 0.5, "results_poll_s": 0.5},
            "alerts": {"group_wait_seconds": 0, "route_s": 0.2},
            "log": {"level": "info", "format": "json"},
        }, tmp_path, "daemon")
        try:
            assert wait_until(lambda: daemon.alive() and bool(
                _read(kafka_bootstrap, topics["models_topic"])), 90), daemon.tail()
            assert daemon.stop(signal.SIGTERM) == 0, daemon.tail()
        finally:
            daemon.kill_quietly()
    [model] = _read(kafka_bootstrap, topics["models_topic"])
    assert [(c["action"], c["atom"], c["location"], c["old"], c["new"])
            for c in model["changes"]] == [("dropoff", ["destination", "?c"], "pre", "0", "+")]
    first = min(t["offset"] for t in model["evidence"]["transitions"])
    assert first >= emitted[0], "flagged during the baseline phase"
    alerts = {a["alert_type"] for a in _read(kafka_bootstrap, topics["alerts_topic"])}
    assert "capability_reduced" in alerts
