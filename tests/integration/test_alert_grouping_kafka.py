"""A family-wide drift over a real Kafka broker: one grouped alert, a version per agent.

Every agent of one family receives the same update (the paper's sample_rock example);
each is assessed on its own and gets its own model version, but operators are paged once:
"5 agents of rover-v1: sample_rock(?r ?s ?w) now requires (battery_full ?r); ...".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from capwatch.adapters.sim.fleet import DriftSpec, SimulatedFleet
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.integration._daemon_setup import (
    EXAMPLES,
    Setup,
    daemon_config,
    family_specs,
    lag,
    make_topics,
    produce,
    read_all,
    running,
    serve_fleet,
    wait,
)

pytestmark = pytest.mark.integration

AGENTS = 5
PARTITIONS = 4


@pytest.fixture
def family_drift(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    topics = make_topics(kafka_bootstrap, kafka_topic, PARTITIONS)
    drift = DriftSpec(read_domain(EXAMPLES / "rover-sample-drift.pddl"), 25, family="rover-v1")
    fleet = SimulatedFleet.build(family_specs("rover-v1", "courier-v1"), AGENTS, [drift],
                                 seed=5)
    with serve_fleet(fleet) as urls:
        yield Setup(kafka_bootstrap, topics, PARTITIONS, fleet, urls, tmp_path)


def _keys(bootstrap: str, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    ends = consumer.end_offsets(tps)
    keys: list[bytes] = []
    while any(consumer.position(tp) < ends[tp] for tp in tps):
        for records in consumer.poll(timeout_ms=300).values():
            keys.extend(r.key for r in records)
    consumer.close()
    return keys


def test_a_family_wide_drift_is_one_grouped_alert_on_the_topic(family_drift: Setup) -> None:
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    s = family_drift
    rovers = sorted(a for a in s.fleet.agent_ids if a.startswith("rover-v1"))
    n = produce(s, rounds=150)
    assert sorted(s.fleet.drifted_agents()) == rovers
    cfg: dict[str, Any] = daemon_config(s, 0)
    # Long enough for all five assessments (well under a second each) to land in the
    # group opened by the first; the test's only wait beyond the stream itself.
    cfg["alerts"] = {"group_wait_seconds": 6, "route_s": 0.2}
    cfg["assessment"]["workers"] = 3
    configure_logging("error", "json")
    service = build_service(DaemonConfig(**cfg))

    def reduced() -> list[dict[str, Any]]:
        return [a for a in read_all(s, s.topics.alerts)
                if a["alert_type"] == "capability_reduced"]

    with running(service) as (runner,):
        wait(lambda: lag(s) == 0 and service.pipeline.processed >= n
             and not service.pipeline.awaiting(), 60, "the stream to be consumed")
        wait(lambda: bool(reduced()), 30, "the grouped alert")
    assert not runner.is_alive()

    models = read_all(s, s.topics.models)
    assert sorted(m["agent_id"] for m in models) == rovers  # each agent its own lineage
    for m in models:
        assert m["version"] == 1 and m["parent_agent_id"] is None
        assert delta(domain_from_json(m["model"]["json"]), s.fleet.true_model(m["agent_id"])) == 0

    alerts = read_all(s, s.topics.alerts)
    (group,) = reduced()
    assert group["agent_id"] == "*" and group["family"] == "rover-v1"
    assert group["summary"].startswith(
        f"{AGENTS} agents of rover-v1: sample_rock(?r ?s ?w) now requires (battery_full ?r)")
    assert sorted(group["evidence"]["agents"]) == rovers
    assert group["model_version"] is None and group["severity"] == "critical"
    # The "awaiting assessment" alerts of the five queued assessments: grouped too, and
    # every drifted agent is named exactly once.
    waiting = [a for a in alerts if a["alert_type"] == "unexplained_inconsistency"]
    named = [agent for a in waiting
             for agent in (a["evidence"].get("agents") or [a["agent_id"]])]
    assert sorted(named) == rovers
    assert len(waiting) < AGENTS
    assert {a["alert_type"] for a in alerts} == {"capability_reduced",
                                                 "unexplained_inconsistency"}
    dedup = [a["dedup_key"] for a in alerts]
    assert len(dedup) == len(set(dedup))
    # Grouped alerts are keyed by family on the topic (ordered per family).
    assert b"rover-v1" in _keys(s.bootstrap, s.topics.alerts)
