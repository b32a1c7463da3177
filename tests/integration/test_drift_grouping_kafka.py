"""A family-wide probability drift over a real Kafka broker: one grouped alert.

Every courier agent's `pick` wears from 0.9 to 0.5. Each agent is assessed on its own and
gets its own version, with its own estimate (0.48, 0.53, ...): before session 20 the
estimate was part of the drift alert's group key, so no two agents shared a group and the
on-call engineer got one `effect_distribution_drift` page per agent, where a family-wide
capability change is one (tests/integration/test_alert_grouping_kafka.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.sim.fleet import DriftSpec, SimulatedFleet
from capwatch.model.pddl_reader import read_domain
from tests.integration._daemon_setup import (
    EXAMPLES,
    Setup,
    daemon_config,
    families_config,
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

AGENTS = 4
PARTITIONS = 2


@pytest.fixture
def worn(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    topics = make_topics(kafka_bootstrap, kafka_topic, PARTITIONS)
    drift = DriftSpec(read_domain(EXAMPLES / "courier-pick-wear.pddl"), 25,
                      family="courier-v1")
    fleet = SimulatedFleet.build(family_specs("courier-v1"), AGENTS, [drift], seed=5)
    with serve_fleet(fleet) as urls:
        yield Setup(kafka_bootstrap, topics, PARTITIONS, fleet, urls, tmp_path)


def test_a_family_wide_probability_drift_is_one_grouped_alert(worn: Setup) -> None:
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    s = worn
    couriers = sorted(s.fleet.agent_ids)
    n = produce(s, rounds=400)
    assert sorted(s.fleet.drifted_agents()) == couriers
    cfg: dict[str, Any] = {**daemon_config(s, 0), "families": families_config("courier-v1")}
    # Groups close when the daemon stops (it closes open groups on the way out), not by a
    # timer racing the assessments: the test waits for every version, then stops it.
    cfg["alerts"] = {"group_wait_seconds": 3600, "route_s": 0.2}
    cfg["assessment"]["workers"] = 2
    configure_logging("error", "json")
    service = build_service(DaemonConfig(**cfg))

    def versions() -> list[dict[str, Any]]:
        return read_all(s, s.topics.models)

    with running(service) as (runner,):
        wait(lambda: lag(s) == 0 and service.pipeline.processed >= n
             and not service.pipeline.awaiting(), 120, "the stream to be consumed")
        # The stream's detector alarms on most agents within the stream (one of four, at
        # this seed, only later, by the minute's audit): those with a version are the group.
        wait(lambda: len(versions()) >= 2, 60, "the drifted agents' versions")
    assert not runner.is_alive()

    published = sorted(m["agent_id"] for m in versions())
    assert len(published) == len(set(published)) >= 2  # each agent its own version
    alerts = [a for a in read_all(s, s.topics.alerts)
              if a["alert_type"] == "effect_distribution_drift"]
    (group,) = alerts
    assert group["agent_id"] == "*" and group["family"] == "courier-v1"
    assert group["action"] == "pick"
    assert group["summary"].startswith(
        f"{len(published)} agents of courier-v1: pick(?r ?p ?x) outcome probabilities "
        "changed: ")
    assert sorted(group["evidence"]["agents"]) == published
    by_agent = group["detail"]["by_agent"]
    assert sorted(by_agent) == published
    assert all(d["probabilities"]["old"][0] == 0.9 and d["probabilities"]["new"][0] < 0.9
               for d in by_agent.values())
