"""Issue 11, finding 2: what an assessment could not check is said, not published silently.

The hoist's winch breaks (move_up never executes) while move_down drifts: the engine
learns move_down but finds no state in which move_up runs. Its old modes contradict the
refusals the agent answered, so nothing is published and the alert names the actions that
could not be checked. A version that is published with unresolved pal-tuples carries the
coverage in its event, its alerts, the API and the console.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.alerts.types import alerts_for_version
from capwatch.console.data import VersionView
from capwatch.console.html import version_section
from capwatch.contracts.versions import ModelRef, build_version
from capwatch.daemon.events import model_event
from capwatch.model.pddl_reader import read_domain
from tests.daemon.helpers import run_queued
from tests.daemon.test_no_loops import HOIST, Directory, _pipeline, _repeated


class Broken(Directory):
    def __init__(self) -> None:
        super().__init__()
        self.sim = SimulatedAgent(read_domain(HOIST / "drift-broken-winch.pddl"), seed=1)


def test_an_action_no_state_runs_is_reported_and_its_old_modes_are_not_published(
        tmp_path: Path) -> None:
    d, _, memory = _pipeline(tmp_path, [_repeated(i) for i in range(3)])
    d.workers.agents = Broken()
    for r in d.source.poll(1.0):
        d.handle(r)
    assert run_queued(d) == 1
    (alert,) = [a.alert for a in d.store.outbox() if a.alert_type == "assessment_failed"]
    assert alert["detail"]["reason"] == "unexplained"
    assert "12 capabilities could not be checked (move_up)" in alert["detail"]["message"]
    coverage = alert["evidence"]["assessment"]["coverage"]
    assert coverage["unresolved_actions"] == ["move_up"] and coverage["confirmed"] > 0
    assert memory.models == []
    d.source.close()
    d.store.close()


def test_a_published_version_says_what_could_not_be_checked() -> None:
    known = read_domain(HOIST / "domain.pddl")
    truth = read_domain(HOIST / "drift-no-arrival.pddl")
    base = build_version(ModelRef("hoist-v1", None, 1), known, datetime.now(UTC))
    coverage = {"confirmed": 11, "carried_over": 1, "unresolved": 12,
                "carried_over_actions": ["move_down"], "unresolved_actions": ["move_up"],
                "unresolved_pal_tuples": ["..."]}
    v = build_version(ModelRef("hoist-v1", "hoist-a", 1), truth, datetime.now(UTC),
                      parent=base, baseline=known,
                      evidence={"assessment": {"coverage": coverage}})
    line = "12 capabilities could not be checked (move_up); they keep their previous modes"
    kinds = {(a.type.value, a.detail.get("reason")) for a in alerts_for_version(base, v)}
    assert ("assessment_failed", "incomplete") in kinds
    assert ("capability_reduced", None) in kinds
    event = model_event(v)
    assert event.coverage is not None and event.coverage.unchecked == line
    assert event.coverage.unresolved_actions == ["move_up"]
    assert model_event(base).coverage is None  # a baseline: no assessment, no coverage
    html = version_section(VersionView(v, [], [], 3, 0))
    assert line in html and "11 pal-tuples confirmed" in html
