"""The alert policy's parsing and how a group of alerts merges into one.

Suppression windows and group waits are applied by the outbox (tests/alerts/test_outbox.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from capwatch.alerts import (
    Alert,
    AlertPolicy,
    AlertType,
    Severity,
    inconsistency_alert,
    merge_group,
)

T0 = datetime(2026, 11, 25, 21, 0, tzinfo=UTC)


def reduced(agent: str, fp: str = "abc", t: datetime = T0) -> Alert:
    return Alert(AlertType.CAPABILITY_REDUCED, Severity.CRITICAL, "rover-v3", agent,
                 "sample_rock", "sample_rock(?r ?s ?w) now requires (battery_full ?r)", t,
                 fingerprint=fp, evidence={"queries": 3})


def test_a_group_of_one_is_the_alert_itself() -> None:
    assert merge_group([reduced("rover-1")]) == reduced("rover-1")


def test_same_change_across_a_family_is_one_grouped_alert() -> None:
    g = merge_group([reduced(f"rover-{i}") for i in reversed(range(7))])
    assert g.summary == ("7 agents of rover-v3: sample_rock(?r ?s ?w) now requires "
                         "(battery_full ?r)")
    assert g.agent_id is None
    assert g.agents == tuple(f"rover-{i}" for i in range(7))
    assert set(g.evidence["agents"]) == set(g.agents)
    assert g.dedup_key == "capability_reduced|rover-v3|*|sample_rock|abc"
    tagged = merge_group([reduced("a"), reduced("b")], tag="d1")
    assert tagged.dedup_key == "capability_reduced|rover-v3|*|sample_rock|abc~d1"


def test_group_lists_a_bounded_number_of_agents() -> None:
    g = merge_group([reduced(f"r{i:02d}") for i in range(10)], max_agents_listed=3)
    assert len(g.agents) == 10
    assert g.detail["agents"] == ["r00", "r01", "r02"]
    assert g.detail["agents_not_listed"] == 7
    assert len(g.evidence["agents"]) == 3


def test_grouped_agent_specific_alerts_use_the_group_phrase() -> None:
    g = merge_group([inconsistency_alert(family="gripper", agent_id=agent, action="pick",
                                         time=T0, contradicted=[pa], header="pick(?o ?r ?g)")
                     for agent, pa in [("a", "⟨(free ?g), pick⟩"), ("b", "⟨(at ?o ?r), pick⟩")]])
    assert g.summary == ("2 agents of gripper: pick(?o ?r ?g) observed behaving "
                         "inconsistently with the model; awaiting assessment")


def test_policy_from_config_overrides_and_rejects_nonsense() -> None:
    p = AlertPolicy.from_config({"severity": {"assessment_failed": "critical"},
                                 "suppress_seconds": {"assessment_failed": 60},
                                 "group_wait_seconds": 0})
    assert p.severities[AlertType.ASSESSMENT_FAILED] is Severity.CRITICAL
    assert p.suppress_for[AlertType.ASSESSMENT_FAILED] == timedelta(seconds=60)
    assert p.group_wait == timedelta(0)
    with pytest.raises(ValueError, match="unknown alert type"):
        AlertPolicy.from_config({"severity": {"capability_lost": "critical"}})
    with pytest.raises(ValueError, match="unknown severity"):
        AlertPolicy.from_config({"severity": {"assessment_failed": "page-me"}})
    with pytest.raises(ValueError, match="unknown alert policy keys"):
        AlertPolicy.from_config({"sevrity": {}})
    with pytest.raises(ValueError, match="must not be negative"):
        AlertPolicy.from_config({"group_wait_seconds": -1})


def test_the_inconsistency_alert_does_not_wait_for_its_group_unless_configured() -> None:
    p = AlertPolicy.from_config({"group_wait_seconds": 30})
    assert p.wait_for(AlertType.UNEXPLAINED_INCONSISTENCY) == timedelta(0)
    assert p.wait_for(AlertType.CAPABILITY_REDUCED) == timedelta(seconds=30)
    p = AlertPolicy.from_config({"group_wait_by_type": {"unexplained_inconsistency": 12,
                                                        "assessment_failed": 0}})
    assert p.wait_for(AlertType.UNEXPLAINED_INCONSISTENCY) == timedelta(seconds=12)
    assert p.wait_for(AlertType.ASSESSMENT_FAILED) == timedelta(0)
    assert p.wait_for(AlertType.CAPABILITY_EXPANDED) == timedelta(seconds=30)
    with pytest.raises(ValueError, match="unknown alert type"):
        AlertPolicy.from_config({"group_wait_by_type": {"inconsistency": 0}})
    with pytest.raises(ValueError, match="must not be negative"):
        AlertPolicy.from_config({"group_wait_by_type": {"assessment_failed": -1}})


def test_a_grouped_assessment_failure_keeps_its_cause() -> None:
    """"2 agents of gripper: assessment failed (error)" said nothing of why; the cause
    stays in the summary, each agent's message in detail.causes, and both reach the wire
    event (its detail field)."""
    from capwatch.alerts import assessment_failed_alert
    from capwatch.alerts.sinks import alert_event

    g = merge_group([assessment_failed_alert(family="gripper", agent_id=a, time=T0,
                                             reason="error", message="KeyError: 'agentid'")
                     for a in ("g1", "g2")])
    assert g.summary == "2 agents of gripper: assessment failed (error): KeyError: 'agentid'"
    assert g.detail["causes"] == {"g1": "KeyError: 'agentid'", "g2": "KeyError: 'agentid'"}
    event = alert_event(g)
    assert event.detail["reason"] == "error"
    assert event.detail["causes"]["g2"] == "KeyError: 'agentid'"
    assert "causes" not in merge_group([reduced("a"), reduced("b")]).detail
