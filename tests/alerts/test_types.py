"""Alert builders: which type a model change is, and how it reads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.alerts import (
    AlertType,
    Severity,
    alerts_for_model_change,
    alerts_for_version,
    assessment_failed_alert,
    inconsistency_alert,
)
from capwatch.model.domain import Domain, LiftedAtom, Outcome
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, build_version

EXAMPLES = Path(__file__).resolve().parents[2] / "capwatch" / "examples"
T = datetime(2026, 11, 25, 21, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def rover() -> Domain:
    return read_domain(EXAMPLES / "rover.pddl")


@pytest.fixture(scope="module")
def courier() -> Domain:
    return read_domain(EXAMPLES / "courier.pddl")


def test_sample_rock_drift_is_a_capability_reduction_in_model_words(rover: Domain) -> None:
    drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    (alert,) = alerts_for_model_change(rover, drifted, family="rover-v3", agent_id="rover-17",
                                       time=T, model_version=2)
    assert alert.type is AlertType.CAPABILITY_REDUCED
    assert alert.severity is Severity.CRITICAL
    assert alert.action == "sample_rock"
    assert alert.summary.startswith("sample_rock(?r ?s ?w) ")
    assert "now requires (battery_full ?r)" in alert.summary
    assert "no longer requires (battery_half ?r)" in alert.summary
    assert "(battery_full ?r) in pre" in alert.detail["reduced"]
    assert alert.dedup_key.startswith("capability_reduced|rover-v3|rover-17|sample_rock|")


def test_dropping_a_precondition_or_adding_an_effect_is_an_expansion(rover: Domain) -> None:
    sample = rover.action("sample_rock")
    atom = LiftedAtom("battery_half", ("?r",))
    relaxed = rover.replace_action(sample.replace(pre_pos=sample.pre_pos - {atom}))
    (a,) = alerts_for_model_change(rover, relaxed, family="f", agent_id="x", time=T)
    assert (a.type, a.severity) == (AlertType.CAPABILITY_EXPANDED, Severity.INFO)
    assert a.summary == "sample_rock(?r ?s ?w) no longer requires (battery_half ?r)"
    # The reverse change takes the capability away again.
    (b,) = alerts_for_model_change(relaxed, rover, family="f", agent_id="x", time=T)
    assert b.type is AlertType.CAPABILITY_REDUCED
    assert b.fingerprint != a.fingerprint


def test_probability_change_is_effect_distribution_drift(courier: Domain) -> None:
    pick = courier.action("pick")
    moved = tuple(Outcome(o.add, o.delete, 0.5) for o in pick.outcomes)
    changed = courier.replace_action(pick.replace(outcomes=moved))
    (a,) = alerts_for_model_change(courier, changed, family="courier", agent_id="c1", time=T)
    assert a.type is AlertType.EFFECT_DISTRIBUTION_DRIFT
    assert a.action == "pick"
    assert a.summary == "pick(?r ?p ?x) outcome probabilities changed: 0.9→0.5, 0.1→0.5"
    assert a.detail["probabilities"] == {"old": [0.9, 0.1], "new": [0.5, 0.5]}


def test_an_outcome_added_without_a_mode_change_is_announced(courier: Domain) -> None:
    # oper19: pick gained a "parcel lost" outcome; Δ 0 and no pairable probability, so
    # the version went out with no alert at all.
    pick = courier.action("pick")
    win, idle = pick.outcomes
    lost = Outcome(frozenset(), frozenset({LiftedAtom("at", ("?p", "?x"))}), 0.2)
    changed = courier.replace_action(pick.replace(
        outcomes=(Outcome(win.add, win.delete, 0.7), lost, Outcome(idle.add, idle.delete, 0.1))))
    (a,) = alerts_for_model_change(courier, changed, family="courier", agent_id="c1", time=T)
    assert a.type is AlertType.EFFECT_DISTRIBUTION_DRIFT
    assert a.action == "pick"
    assert a.summary.startswith("pick(?r ?p ?x) outcomes changed: 0.9 ")
    assert "0.2 (makes (at ?p ?x) false)" in a.summary
    assert [o["probability"] for o in a.detail["outcomes"]["new"]] == [0.7, 0.2, 0.1]
    # A deterministic action that now sometimes does nothing is announced the same way.
    drop = courier.action("drop")
    (eff,) = drop.outcomes
    flaky = courier.replace_action(drop.replace(
        outcomes=(Outcome(eff.add, eff.delete, 0.8), Outcome(probability=0.2))))
    (b,) = alerts_for_model_change(courier, flaky, family="courier", agent_id="c1", time=T)
    assert (b.type, b.action) == (AlertType.EFFECT_DISTRIBUTION_DRIFT, "drop")
    assert b.fingerprint != a.fingerprint


def test_alerts_for_stored_version_match_direct_build(rover: Domain) -> None:
    drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    base = build_version(ModelRef("rover-v3", None, 1), rover, T)
    v = build_version(ModelRef("rover-v3", "rover-17", 1), drifted, T, parent=base,
                      evidence={"queries": 4})
    (a,) = alerts_for_version(base, v)
    (b,) = alerts_for_model_change(rover, drifted, family="rover-v3", agent_id="rover-17",
                                   time=T, model_version=1, evidence={"queries": 4})
    assert a == b
    assert a.evidence == {"queries": 4}


def test_severity_is_configurable_per_type(rover: Domain) -> None:
    drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    sev = {t: Severity.INFO for t in AlertType}
    (a,) = alerts_for_model_change(rover, drifted, family="f", agent_id="x", time=T,
                                   severities=sev)
    assert a.severity is Severity.INFO


def test_inconsistency_and_failure_alerts() -> None:
    a = inconsistency_alert(family="f", agent_id="x", action="pick", time=T,
                            header="pick(?o ?r ?g)",
                            contradicted=["⟨(free ?g), pick⟩"] * 5)
    assert a.type is AlertType.UNEXPLAINED_INCONSISTENCY
    assert a.summary.endswith("...)") and a.summary.startswith("pick(?o ?r ?g) observed")
    f = assessment_failed_alert(family="f", agent_id="x", time=T, reason="budget_exhausted",
                                message="40 queries asked")
    assert f.summary == "assessment failed (budget exhausted): 40 queries asked"
    with pytest.raises(ValueError, match="reason must be one of"):
        assessment_failed_alert(family="f", agent_id="x", time=T, reason="bored", message="")
    with pytest.raises(ValueError, match="time zone"):
        assessment_failed_alert(family="f", agent_id="x", time=datetime(2026, 1, 1),
                                reason="error", message="")


def test_a_new_delete_effect_is_a_reduction_not_a_gain(rover: Domain) -> None:
    # sample_rock now destroys the rover's data: what it makes false is what plans lose.
    sample = rover.action("sample_rock")
    taken = LiftedAtom("rock_sample_taken", ("?r",))
    (outcome,) = sample.outcomes
    destructive = rover.replace_action(sample.replace(outcomes=(
        Outcome(add=outcome.add - {taken}, delete=outcome.delete | {taken}),)))
    (a,) = alerts_for_model_change(rover, destructive, family="f", agent_id="x", time=T)
    assert (a.type, a.severity) == (AlertType.CAPABILITY_REDUCED, Severity.CRITICAL)
    assert a.summary == ("sample_rock(?r ?s ?w) now makes (rock_sample_taken ?r) false "
                         "instead of makes (rock_sample_taken ?r) true")
    # Losing a delete only widens what the action leaves true.
    (b,) = alerts_for_model_change(destructive, rover, family="f", agent_id="x", time=T)
    assert b.type is AlertType.CAPABILITY_EXPANDED


def test_an_effect_the_new_precondition_makes_vacuous_is_not_announced(rover: Domain) -> None:
    # recharge used to make (battery_half ?r) true; now it requires it and no longer adds it.
    # Wherever the new model runs, battery_half already holds: no query can observe the
    # lost add, so only the new requirement is announced, and as a reduction.
    recharge = rover.action("recharge")
    half = LiftedAtom("battery_half", ("?r",))
    (outcome,) = recharge.outcomes
    drifted = rover.replace_action(recharge.replace(
        pre_pos=recharge.pre_pos | {half},
        outcomes=(Outcome(add=outcome.add - {half}, delete=outcome.delete),)))
    (a,) = alerts_for_model_change(rover, drifted, family="f", agent_id="x", time=T)
    assert a.type is AlertType.CAPABILITY_REDUCED
    assert a.summary == "recharge(?r) now requires (battery_half ?r)"
    assert [c["location"] for c in a.detail["changes"]] == ["pre"]
    # The stored version still records both pal-tuples: Δ counts modes, not behaviour.
    version = build_version(ModelRef("f", "x", 2), drifted, T, parent=build_version(
        ModelRef("f", None, 1), rover, T))
    assert version.delta_to_parent == 2
    assert version.summary == ("recharge(?r) now requires (battery_half ?r)",)


def test_an_action_whose_only_change_is_unobservable_raises_no_alert(rover: Domain) -> None:
    top_up = rover.action("top_up")
    full = LiftedAtom("battery_full", ("?r",))
    (outcome,) = top_up.outcomes
    # Requiring battery_full and no longer adding it, compared with a model that already
    # requires it and still "adds" it: the two cannot be told apart by any plan.
    requires = rover.replace_action(top_up.replace(pre_pos=top_up.pre_pos | {full},
                                                   outcomes=(Outcome(delete=outcome.delete),)))
    same = requires.replace_action(requires.action("top_up").replace(outcomes=(outcome,)))
    # `same` holds the illegal ⟨+,+⟩ pa-value written by hand; the diff must still be silent.
    assert alerts_for_model_change(requires, same, family="f", agent_id="x", time=T) == []
