"""A version whose only change is a probabilistic action's outcome set is announced.

An agent's `pick` gained an outcome (the parcel is lost: `(at ?p ?x)` false, nothing
carried) beside the known ones. No pal-tuple changes mode (`(at ?p ?x)` was already
deleted by the success outcome, Δ 0) and the known outcomes' probabilities cannot be
paired with the new ones, so neither the capability alerts nor the probability-shift
alert covered it: oper19's run over a real broker published the version (its summary
read "outcomes changed: ...") with no alert at all, the operator's only word being the
earlier "awaiting assessment".
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

PARTITIONS = 2
AGENT = "courier-v1-002"
LOST = """:effect (probabilistic
              0.7 (and (carrying ?r ?p) (not (at ?p ?x)) (not (free ?r)))
              0.2 (and (not (at ?p ?x)))))"""


@pytest.fixture
def setup(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    text = (EXAMPLES / "courier.pddl").read_text()
    known = """:effect (probabilistic
              0.9 (and (carrying ?r ?p) (not (at ?p ?x)) (not (free ?r)))))"""
    assert text.count(known) == 1
    drifted = tmp_path / "courier-lost.pddl"
    drifted.write_text(text.replace(known, LOST))
    topics = make_topics(kafka_bootstrap, kafka_topic, PARTITIONS)
    fleet = SimulatedFleet.build(family_specs("courier-v1"), 4,
                                 [DriftSpec(read_domain(drifted), 25, agent_id=AGENT)], seed=5)
    with serve_fleet(fleet) as urls:
        yield Setup(kafka_bootstrap, topics, PARTITIONS, fleet, urls, tmp_path)


def _versions(s: Setup) -> list[dict[str, Any]]:
    return [m for m in read_all(s, s.topics.models) if m["agent_id"] == AGENT]


def test_a_new_outcome_without_a_mode_change_is_alerted(setup: Setup) -> None:
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    n = produce(setup, rounds=400)
    configure_logging("warning", "json")
    config = {**daemon_config(setup, 0), "families": families_config("courier-v1")}
    service = build_service(DaemonConfig(**config))
    with running(service):
        wait(lambda: lag(setup) == 0 and service.pipeline.processed >= n
             and not service.pipeline.awaiting(), 90, "the stream to be consumed")
        wait(lambda: bool(_versions(setup)), 60, "the drifted agent's version")
        (version,) = _versions(setup)
        assert any("outcomes changed" in line for line in version["summary"]), version
        # The version's alerts are written with it; routing lets them out within its wait.
        wait(lambda: any(a["agent_id"] == AGENT and a["alert_type"] != "unexplained_inconsistency"
                         for a in read_all(setup, setup.topics.alerts)), 30,
             "an alert for the published version")
    alerts = [a for a in read_all(setup, setup.topics.alerts)
              if a["agent_id"] == AGENT and a["alert_type"] != "unexplained_inconsistency"]
    (alert,) = alerts
    assert alert["alert_type"] == "effect_distribution_drift"
    assert alert["action"] == "pick"
    assert alert["model_version"] == version["version"]
    assert alert["summary"] in version["summary"]
