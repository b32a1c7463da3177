"""Probability drift across a family groups like the other kinds: one page, not N.

Every agent of a family whose action's outcomes became less reliable gets its own version,
each with its own estimate (0.69, 0.71, ...). The capability kinds group on the change
itself, which is exact; before session 20 the drift alert's group key held the estimated
probabilities, so no two agents ever shared a group and an on-call engineer got one page
per agent for one family-wide regression.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capwatch.alerts import (
    Alert,
    AlertPolicy,
    AlertType,
    alerts_for_model_change,
    merge_group,
    outbox_record,
    plan_routing,
)
from capwatch.model.domain import Domain, LiftedAtom, Outcome
from capwatch.model.pddl_reader import read_domain

EXAMPLES = Path(__file__).resolve().parents[2] / "capwatch" / "examples"
T0 = datetime(2026, 11, 25, 21, 0, tzinfo=UTC)
POLICY = AlertPolicy(group_wait=timedelta(seconds=30))


@pytest.fixture(scope="module")
def courier() -> Domain:
    return read_domain(EXAMPLES / "courier.pddl")


def estimated(base: Domain, probabilities: tuple[float, ...]) -> Domain:
    pick = base.action("pick")
    return base.replace_action(pick.replace(outcomes=tuple(
        Outcome(o.add, o.delete, p) for o, p in zip(pick.outcomes, probabilities, strict=True))))


def drift_alert(base: Domain, agent: str, probabilities: tuple[float, ...],
                seconds: float = 0) -> Alert:
    (a,) = alerts_for_model_change(base, estimated(base, probabilities), family="courier",
                                   agent_id=agent, time=T0 + timedelta(seconds=seconds),
                                   model_version=1)
    return a


ESTIMATES = [(0.69, 0.31), (0.71, 0.29), (0.7, 0.3), (0.66, 0.34), (0.73, 0.27)]


def test_a_family_wide_probability_drift_is_one_delivery(courier: Domain) -> None:
    alerts = [drift_alert(courier, f"c{i}", p, i) for i, p in enumerate(ESTIMATES)]
    assert {a.type for a in alerts} == {AlertType.EFFECT_DISTRIBUTION_DRIFT}
    rows = [outbox_record(a, f"v{i}") for i, a in enumerate(alerts)]
    # An agent whose pick became *more* reliable is another change: a group of its own.
    rows.append(outbox_record(drift_alert(courier, "c9", (0.97, 0.03), 1), "up"))
    plan = plan_routing(rows, {}, POLICY, T0 + timedelta(seconds=31), ["kafka"])
    assert sorted(d.members for d in plan.deliveries) == [
        ("up",), tuple(f"v{i}" for i in range(5))]
    (grouped,) = [d for d in plan.deliveries if len(d.members) > 1]
    g = Alert.from_record(grouped.alert)
    assert g.agent_id is None and g.agents == tuple(f"c{i}" for i in range(5))
    assert g.summary == (
        "5 agents of courier: pick(?r ?p ?x) outcome probabilities changed: (makes "
        "(carrying ?r ?p) true, (at ?p ?x) false, (free ?r) false) less likely; "
        "(no effect) more likely")
    # Each agent's own estimate is kept, not only the first member's.
    assert {agent: d["probabilities"]["new"] for agent, d in g.detail["by_agent"].items()} \
        == {f"c{i}": list(p) for i, p in enumerate(ESTIMATES)}
    assert "probabilities" not in g.detail
    # Dedup keys stay per agent and per estimate: a further drift of one agent within the
    # window is a new alert, not a repeat.
    assert len({r.dedup_key for r in rows}) == len(rows)
    again = drift_alert(courier, "c0", (0.5, 0.5), 3600)
    assert again.dedup_key != alerts[0].dedup_key


def test_an_outcome_added_across_a_family_is_one_delivery(courier: Domain) -> None:
    pick = courier.action("pick")
    win, idle = pick.outcomes
    lost = LiftedAtom("at", ("?p", "?x"))

    def lossy(agent: str, p_lost: float) -> Alert:
        changed = courier.replace_action(pick.replace(outcomes=(
            Outcome(win.add, win.delete, 0.9 - p_lost),
            Outcome(frozenset(), frozenset({lost}), p_lost),
            Outcome(idle.add, idle.delete, 0.1))))
        (a,) = alerts_for_model_change(courier, changed, family="courier", agent_id=agent,
                                       time=T0)
        return a

    members = [lossy("c1", 0.2), lossy("c2", 0.18), lossy("c3", 0.23)]
    assert len({a.group_key for a in members}) == 1
    assert len({a.dedup_key for a in members}) == 3
    g = merge_group(members)
    assert g.summary.startswith("3 agents of courier: pick(?r ?p ?x) outcomes changed: ")
    assert "makes (at ?p ?x) false" in g.summary
    assert "0.2" not in g.summary and "0.18" not in g.summary


def test_capability_groups_keep_their_detail_as_before(courier: Domain) -> None:
    # Members of a capability group share their change: the merged detail is the change's,
    # with no per-agent copy.
    a = Alert(AlertType.CAPABILITY_REDUCED, drift_alert(courier, "x", (0.5, 0.5)).severity,
              "rover", "r1", "go", "go now requires (p)", T0, fingerprint="f",
              detail={"changes": [1]})
    g = merge_group([a, Alert.from_record({**a.to_record(), "agent_id": "r2"})])
    assert g.detail["changes"] == [1] and "by_agent" not in g.detail


def test_one_agents_two_drifts_in_a_group_count_once_and_keep_both(courier: Domain) -> None:
    # review20: one agent's two versions a few seconds apart (0.9 -> 0.7, then 0.7 -> 0.5)
    # have the same shape (the pick less likely), so they share a group now, where their
    # estimates kept them apart before. The page said "2 agents" for one, and detail.by_agent
    # (keyed by agent) kept one version's estimate: the other's was lost.
    first = drift_alert(courier, "c1", (0.7, 0.3), 0)
    second, = alerts_for_model_change(
        estimated(courier, (0.7, 0.3)), estimated(courier, (0.5, 0.5)), family="courier",
        agent_id="c1", time=T0 + timedelta(seconds=5), model_version=2)
    other = drift_alert(courier, "c2", (0.69, 0.31), 1)
    assert first.group_key == second.group_key == other.group_key
    rows = [outbox_record(first, "v1"), outbox_record(second, "v2"),
            outbox_record(other, "w1")]
    plan = plan_routing(rows, {}, POLICY, T0 + timedelta(seconds=31), ["kafka"])
    (d,) = plan.deliveries
    g = Alert.from_record(d.alert)
    assert g.agents == ("c1", "c2")
    assert g.summary.startswith("2 agents of courier: ")
    c1, c2 = g.detail["by_agent"]["c1"], g.detail["by_agent"]["c2"]
    assert c1["probabilities"]["new"] == [0.5, 0.5]
    assert [v["probabilities"]["new"] for v in c1["earlier"]] == [[0.7, 0.3]]
    assert c2["probabilities"]["new"] == [0.69, 0.31] and "earlier" not in c2
