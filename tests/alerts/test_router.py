"""Dedup, suppression windows and family grouping, on an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from capwatch.alerts import (
    Alert,
    AlertPolicy,
    AlertRouter,
    AlertType,
    Severity,
    assessment_failed_alert,
    inconsistency_alert,
)

T0 = datetime(2026, 11, 25, 21, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reduced(agent: str, fp: str = "abc", t: datetime = T0) -> Alert:
    return Alert(AlertType.CAPABILITY_REDUCED, Severity.CRITICAL, "rover-v3", agent,
                 "sample_rock", "sample_rock(?r ?s ?w) now requires (battery_full ?r)", t,
                 fingerprint=fp, evidence={"queries": 3})


def test_alerts_wait_for_their_group_then_go_out_alone() -> None:
    r = AlertRouter(AlertPolicy(group_wait=timedelta(seconds=30)))
    assert r.submit(reduced("rover-1"), at(0))
    assert r.flush(at(29)) == []
    (out,) = r.flush(at(30))
    assert out == reduced("rover-1")
    assert r.pending == 0


def test_same_change_across_a_family_is_one_grouped_alert() -> None:
    r = AlertRouter(AlertPolicy(group_wait=timedelta(seconds=30)))
    for i in range(7):
        r.submit(reduced(f"rover-{i}"), at(i))
    r.submit(reduced("rover-9", fp="other-change"), at(1))
    out = r.flush(at(31))
    grouped = [a for a in out if a.agents]
    single = [a for a in out if not a.agents]
    assert len(grouped) == 1 and len(single) == 1
    g = grouped[0]
    assert g.summary == ("7 agents of rover-v3: sample_rock(?r ?s ?w) now requires "
                         "(battery_full ?r)")
    assert g.agent_id is None
    assert g.agents == tuple(f"rover-{i}" for i in range(7))
    assert set(g.evidence["agents"]) == set(g.agents)
    assert g.dedup_key == "capability_reduced|rover-v3|*|sample_rock|abc"
    assert single[0].agent_id == "rover-9"


def test_group_lists_a_bounded_number_of_agents() -> None:
    r = AlertRouter(AlertPolicy(group_wait=timedelta(0), max_agents_listed=3))
    for i in range(10):
        r.submit(reduced(f"r{i:02d}"), T0)
    (g,) = r.flush(T0)
    assert len(g.agents) == 10
    assert g.detail["agents"] == ["r00", "r01", "r02"]
    assert g.detail["agents_not_listed"] == 7
    assert len(g.evidence["agents"]) == 3


def test_grouped_agent_specific_alerts_use_the_group_phrase() -> None:
    r = AlertRouter(AlertPolicy(group_wait=timedelta(0)))
    for agent, pa in [("a", "⟨(free ?g), pick⟩"), ("b", "⟨(at ?o ?r), pick⟩")]:
        r.submit(inconsistency_alert(family="gripper", agent_id=agent, action="pick",
                                     time=T0, contradicted=[pa], header="pick(?o ?r ?g)"), T0)
    (g,) = r.flush(T0)
    assert g.summary == ("2 agents of gripper: pick(?o ?r ?g) observed behaving "
                         "inconsistently with the model; awaiting assessment")


def test_repeats_inside_the_suppression_window_are_dropped() -> None:
    policy = AlertPolicy(suppress_for={AlertType.CAPABILITY_REDUCED: timedelta(hours=1)},
                         group_wait=timedelta(0))
    r = AlertRouter(policy)
    assert r.submit(reduced("rover-1"), at(0))
    r.flush(at(0))
    assert not r.submit(reduced("rover-1"), at(3599))
    assert r.submit(reduced("rover-1", fp="new-change"), at(3599))  # different content
    assert r.submit(reduced("rover-1"), at(3600))  # window over
    assert (r.stats.submitted, r.stats.suppressed) == (4, 1)


def test_policy_from_config_overrides_and_rejects_nonsense() -> None:
    p = AlertPolicy.from_config({"severity": {"assessment_failed": "critical"},
                                 "suppress_seconds": {"assessment_failed": 60},
                                 "group_wait_seconds": 0})
    r = AlertRouter(p)
    f = assessment_failed_alert(family="f", agent_id="x", time=T0, reason="agent_unreachable",
                                message="connection refused")
    assert f.severity is Severity.WARNING
    r.submit(f, T0)
    (out,) = r.flush(T0)
    assert out.severity is Severity.CRITICAL
    assert not r.submit(f, at(59)) and r.submit(f, at(60))
    with pytest.raises(ValueError, match="unknown alert type"):
        AlertPolicy.from_config({"severity": {"capability_lost": "critical"}})
    with pytest.raises(ValueError, match="unknown severity"):
        AlertPolicy.from_config({"severity": {"assessment_failed": "page-me"}})
    with pytest.raises(ValueError, match="unknown alert policy keys"):
        AlertPolicy.from_config({"sevrity": {}})
