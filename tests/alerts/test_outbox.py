"""Durable routing: suppression that survives restarts, family grouping, re-delivery.

The planner is tested alone (pure, injected time); the outbox runs over a real SQLite
store in tmp_path with in-memory sinks that can be told to fail.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capwatch.alerts import (
    Alert,
    AlertDeliveryError,
    AlertOutbox,
    AlertPolicy,
    AlertType,
    Severity,
    assessment_failed_alert,
    inconsistency_alert,
    outbox_record,
    plan_routing,
)
from capwatch.models_store import ModelStore, open_store

T0 = datetime(2026, 11, 25, 21, 0, tzinfo=UTC)
SUMMARY = "sample_rock(?r ?s ?w) now requires (battery_full ?r)"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def reduced(agent: str, t: datetime = T0, fp: str = "abc") -> Alert:
    return Alert(AlertType.CAPABILITY_REDUCED, Severity.CRITICAL, "rover-v3", agent,
                 "sample_rock", SUMMARY, t, fingerprint=fp, evidence={"queries": 3},
                 model_version=1)


class Sink:
    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[Alert] = []
        self.failing = False

    def send(self, alerts: Sequence[Alert]) -> None:
        if self.failing:
            raise AlertDeliveryError(f"{self.name}: connection refused")
        self.sent.extend(alerts)


class Crashing(Sink):
    """A sink that raises something other than AlertDeliveryError (a bug in a sink)."""

    def send(self, alerts: Sequence[Alert]) -> None:
        raise KeyError("boom")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "models.db"


@pytest.fixture
def store(db: Path) -> Iterator[ModelStore]:
    # On the caller's clock: these tests say what time it is at each call.
    s = open_store(str(db), clock="caller")
    yield s
    s.close()


POLICY = AlertPolicy(group_wait=timedelta(seconds=30))


# -- the planner -------------------------------------------------------------------------

def test_records_round_trip_every_field() -> None:
    a = inconsistency_alert(family="gripper", agent_id="g1", action="pick", time=T0,
                            contradicted=["⟨(free ?g), pick⟩"], header="pick(?o ?r ?g)",
                            evidence={"offsets": [3, 4]})
    assert Alert.from_record(a.to_record()) == a
    g = reduced("r1")
    assert Alert.from_record(g.to_record()) == g


def test_a_family_wide_drift_is_one_delivery_once_the_group_waited() -> None:
    rows = [outbox_record(reduced(f"rover-{i}", at(i)), f"v{i}") for i in range(7)]
    rows.append(outbox_record(reduced("rover-9", at(2), fp="other"), "other"))
    early = plan_routing(rows, {}, POLICY, at(29), ["kafka"])
    assert early.deliveries == () and early.suppressed == ()
    plan = plan_routing(rows, {}, POLICY, at(30), ["kafka"])
    (grouped,) = [d for d in plan.deliveries if len(d.members) > 1]
    assert grouped.members == tuple(f"v{i}" for i in range(7))
    g = Alert.from_record(grouped.alert)
    assert g.summary == f"7 agents of rover-v3: {SUMMARY}"
    assert g.agents == tuple(f"rover-{i}" for i in range(7)) and g.agent_id is None
    assert g.severity is Severity.CRITICAL
    # "other" opened at 2 s: its group is not due before 32 s.
    assert not any(d.members == ("other",) for d in plan.deliveries)
    assert set(plan.sent) == {r.dedup_key for r in rows[:7]}
    # The same members always give the same delivery and dedup key (re-delivery is stable);
    # a later group of other agents with the same change gets a key of its own.
    again = plan_routing(list(reversed(rows)), {}, POLICY, at(31), ["kafka"])
    (same,) = [d for d in again.deliveries if len(d.members) > 1]
    assert (same.key, Alert.from_record(same.alert).dedup_key) == (grouped.key, g.dedup_key)
    later = [outbox_record(reduced(f"rover-{i}", at(100)), f"w{i}") for i in (7, 8)]
    (second,) = plan_routing(later, {}, POLICY, at(200), ["kafka"]).deliveries
    assert Alert.from_record(second.alert).summary.startswith("2 agents of rover-v3")
    assert Alert.from_record(second.alert).dedup_key != g.dedup_key


def test_inconsistency_alerts_go_out_at_once_and_merge_only_within_one_pass() -> None:
    def waiting(agent: str, t: datetime) -> Alert:
        return inconsistency_alert(family="rover-v3", agent_id=agent, action="sample_rock",
                                   time=t, contradicted=["⟨(battery_half ?r), sample_rock⟩"])

    rows = [outbox_record(waiting("r1", at(0)), "q1"), outbox_record(reduced("r1", at(0)), "v1")]
    plan = plan_routing(rows, {}, POLICY, at(0), ["kafka"])
    assert [d.members for d in plan.deliveries] == [("q1",)]  # the reduction waits 30 s
    both = [outbox_record(waiting("r2", at(1)), "q2"), outbox_record(waiting("r3", at(1)), "q3")]
    (d,) = plan_routing(both, {}, POLICY, at(1), ["kafka"]).deliveries
    assert d.members == ("q2", "q3")
    assert Alert.from_record(d.alert).summary.startswith("2 agents of rover-v3")


def test_an_ending_goes_out_alone_after_what_it_ends_and_is_never_suppressed() -> None:
    def waiting(t: datetime, ends_at: datetime | None = None) -> Alert:
        a = inconsistency_alert(family="rover-v3", agent_id="r1", action="sample_rock",
                                time=t, contradicted=[])
        return replace(a, ends_at=ends_at)

    policy = AlertPolicy(group_wait_by_type={AlertType.UNEXPLAINED_INCONSISTENCY:
                                             timedelta(seconds=30)})
    firing = outbox_record(waiting(at(0)), "q")
    ending = outbox_record(waiting(at(5), ends_at=at(5)), "ended:q")
    assert firing.dedup_key == ending.dedup_key
    held = plan_routing([firing, ending], {}, policy, at(6), ["am"])
    assert held.deliveries == () and held.suppressed == ()  # the awaited alert waits
    both = plan_routing([firing, ending], {}, policy, at(30), ["am"])
    assert [d.members for d in both.deliveries] == [("q",)]  # the ending: next pass
    (alone,) = plan_routing([ending], {firing.dedup_key: at(0)}, policy, at(31),
                            ["am"]).deliveries
    assert Alert.from_record(alone.alert).ends_at == at(5)
    assert alone.members == ("ended:q",)
    again = plan_routing([ending], {firing.dedup_key: at(0)}, policy, at(31), ["am"])
    assert again.sent == {}  # an ending does not count as a send for suppression


def test_repeats_inside_the_window_are_suppressed_measured_on_alert_time() -> None:
    policy = AlertPolicy(group_wait=timedelta(0),
                         suppress_for={AlertType.CAPABILITY_REDUCED: timedelta(hours=1)})
    key = reduced("r1").dedup_key
    rows = [outbox_record(reduced("r1", at(3500)), "a"),
            outbox_record(reduced("r1", at(3700)), "b"),
            outbox_record(reduced("r1", at(3800)), "c")]
    plan = plan_routing(rows, {key: T0}, policy, at(10_000), ["log"])
    # a: 3500 s after the last send (suppressed); b: 3700 s (out); c: 100 s after b.
    assert plan.suppressed == ("a", "c")
    assert [d.members for d in plan.deliveries] == [("b",)]
    assert plan.sent == {key: at(3700)}


def test_severity_follows_the_policy_and_a_zero_window_never_suppresses() -> None:
    policy = AlertPolicy(group_wait=timedelta(0),
                         severities={AlertType.CAPABILITY_REDUCED: Severity.WARNING},
                         suppress_for={AlertType.CAPABILITY_REDUCED: timedelta(0)})
    rows = [outbox_record(reduced("r1", at(1)), "a")]
    plan = plan_routing(rows, {reduced("r1").dedup_key: at(1)}, policy, at(1), ["log"])
    (d,) = plan.deliveries
    assert Alert.from_record(d.alert).severity is Severity.WARNING


def test_force_closes_open_groups_and_no_sink_is_an_error() -> None:
    rows = [outbox_record(reduced("r1", at(0)), "a")]
    assert len(plan_routing(rows, {}, POLICY, at(1), ["log"], force=True).deliveries) == 1
    with pytest.raises(ValueError, match="at least one sink"):
        plan_routing(rows, {}, POLICY, at(1), [])


# -- the outbox over a store ---------------------------------------------------------------

def test_suppression_holds_across_a_restart(db: Path) -> None:
    first = open_store(str(db), clock="caller")
    sink = Sink("kafka")
    first.add_alerts([outbox_record(reduced("r1", at(0)), "v1")])
    AlertOutbox(first, [sink], POLICY).run_once(at(30))
    assert [a.agent_id for a in sink.sent] == ["r1"]
    first.close()

    # A new process: nothing in memory, the store remembers what went out.
    second = open_store(str(db), clock="caller")
    sink2 = Sink("kafka")
    suppressed: list[str] = []
    outbox = AlertOutbox(second, [sink2], POLICY,
                         on_suppressed=lambda r: suppressed.append(r.alert_type))
    second.add_alerts([outbox_record(reduced("r1", at(600)), "v1-replayed-as-new")])
    report = outbox.run_once(at(700))
    assert sink2.sent == [] and suppressed == ["capability_reduced"]
    assert [r.key for r in report.suppressed] == ["v1-replayed-as-new"]
    # After the 24 h window the same change alerts again.
    second.add_alerts([outbox_record(reduced("r1", at(86_401)), "v1-next-day")])
    outbox.run_once(at(86_500))
    assert [a.time for a in sink2.sent] == [at(86_401)]
    second.close()


def test_an_alert_written_twice_goes_out_once(store: ModelStore) -> None:
    sink = Sink("kafka")
    rec = outbox_record(reduced("r1"), "version:rover-v3/r1@1|abc")
    assert store.add_alerts([rec]) == 1
    assert store.add_alerts([rec]) == 0  # a retried worker
    AlertOutbox(store, [sink], POLICY).run_once(at(60))
    assert len(sink.sent) == 1


def test_a_failing_sink_is_retried_without_resending_to_the_others(store: ModelStore) -> None:
    kafka, am = Sink("kafka"), Sink("alertmanager")
    am.failing = True
    failures: list[str] = []
    delivered: list[str] = []
    outbox = AlertOutbox(store, [kafka, am], POLICY, retry_after=timedelta(seconds=10),
                         on_failure=lambda name, e: failures.append(name),
                         on_delivered=lambda a: delivered.append(a.dedup_key))
    store.add_alerts([outbox_record(reduced(f"r{i}", at(i)), f"v{i}") for i in range(3)])
    report = outbox.run_once(at(40))
    assert len(report.routed) == 1 and report.delivered == 0
    assert report.failures.keys() == {"alertmanager"} and failures == ["alertmanager"]
    assert len(kafka.sent) == 1 and am.sent == []
    # Backoff: not retried before retry_after, and each failure doubles it.
    assert outbox.run_once(at(45)).failures == {}
    outbox.run_once(at(50))
    assert failures == ["alertmanager"] * 2
    assert outbox.run_once(at(65)).failures == {}
    am.failing = False
    report = outbox.run_once(at(70))
    assert report.delivered == 1 and len(am.sent) == 1 and len(kafka.sent) == 1
    assert am.sent[0] == kafka.sent[0]  # the very same alert, same dedup key
    assert delivered == [kafka.sent[0].dedup_key]
    assert outbox.backlog() == (0, 0)


def test_a_crash_after_sending_redelivers_the_same_alert(store: ModelStore) -> None:
    sink = Sink("kafka")
    outbox = AlertOutbox(store, [sink], POLICY, lease=timedelta(seconds=60))
    store.add_alerts([outbox_record(reduced(f"r{i}", at(i)), f"v{i}") for i in range(2)])
    outbox.route(at(40))
    # The replica claims and sends, then dies before recording the delivery.
    (d,) = store.claim_deliveries(at(41), 60)
    sink.send([Alert.from_record(d.alert)])
    # Another replica (or the restarted one) retries once the lease ran out.
    assert outbox.deliver(at(90)).delivered == 0
    assert outbox.deliver(at(102)).delivered == 1
    assert len(sink.sent) == 2 and sink.sent[0] == sink.sent[1]
    assert sink.sent[0].summary == f"2 agents of rover-v3: {SUMMARY}"


def test_each_run_reports_the_alerts_still_owed_including_a_dead_holders(
        store: ModelStore) -> None:
    sink = Sink("kafka")
    backlog: list[int] = []
    outbox = AlertOutbox(store, [sink], AlertPolicy(group_wait=timedelta(0)),
                         lease=timedelta(seconds=10), on_backlog=backlog.append)
    store.add_alerts([outbox_record(reduced("r1", at(0)), "v1")])
    outbox.route(at(1))
    store.claim_deliveries(at(1), 10)  # another replica claims it, then dies
    outbox.run_once(at(5))
    assert (sink.sent, backlog) == ([], [1])
    outbox.run_once(at(12))  # its hold ran out: this replica sends it
    assert (len(sink.sent), backlog) == (1, [1, 0])


def test_a_sink_bug_is_a_delivery_failure_not_a_crash(store: ModelStore) -> None:
    good, bad = Sink("log"), Crashing("kafka")
    outbox = AlertOutbox(store, [good, bad], AlertPolicy(group_wait=timedelta(0)))
    store.add_alerts([outbox_record(assessment_failed_alert(
        family="rover-v3", agent_id="r1", time=T0, reason="agent_unreachable",
        message="connection refused"), "failed:k")])
    report = outbox.run_once(at(1))
    assert "KeyError" in report.failures["kafka"][0]
    assert len(good.sent) == 1
    (d,) = store.deliveries("pending")
    assert d.sinks_pending == ("kafka",) and "KeyError" in (d.last_error or "")


def test_a_sink_dropped_from_the_configuration_no_longer_holds_deliveries(
        store: ModelStore) -> None:
    store.add_alerts([outbox_record(reduced("r1"), "v1")])
    AlertOutbox(store, [Sink("kafka"), Sink("alertmanager")], POLICY).route(at(60))
    kafka = Sink("kafka")
    report = AlertOutbox(store, [kafka], POLICY).deliver(at(61))
    assert report.delivered == 1 and len(kafka.sent) == 1
    assert store.deliveries("pending") == []


def test_prune_keeps_sent_times_inside_the_suppression_window(store: ModelStore) -> None:
    outbox = AlertOutbox(store, [Sink("kafka")], POLICY)
    store.add_alerts([outbox_record(reduced("r1", at(0)), "v1")])
    outbox.run_once(at(60))
    # keep=1 s, but capability_reduced is suppressed for 24 h: the sent time stays.
    outbox.prune(at(3600), keep=timedelta(seconds=1))
    store.add_alerts([outbox_record(reduced("r1", at(7200)), "v2")])
    assert [r.key for r in outbox.run_once(at(7300)).suppressed] == ["v2"]
    outbox.prune(at(2 * 86_400), keep=timedelta(seconds=1))
    assert store.outbox() == [] and store.deliveries() == []


def test_sink_names_must_be_distinct(store: ModelStore) -> None:
    with pytest.raises(ValueError, match="distinct"):
        AlertOutbox(store, [Sink("log"), Sink("log")])
    with pytest.raises(ValueError, match="at least one sink"):
        AlertOutbox(store, [])


def test_a_grouped_alert_ends_once_every_member_has_ended(store: ModelStore) -> None:
    """Each member's ending names one agent, which are not the labels the grouped "3
    agents of ..." alert went out with: the group gets an ending of its own, with its own
    labels, once (and only once) the last member has ended."""
    from capwatch.alerts import AlertmanagerSink
    from capwatch.alerts.outbox import ending_key

    def waiting(agent: str, t: datetime, ends_at: datetime | None = None) -> Alert:
        a = inconsistency_alert(family="rover-v3", agent_id=agent, action="sample_rock",
                                time=t, contradicted=[])
        return replace(a, ends_at=ends_at)

    policy = AlertPolicy(group_wait_by_type={AlertType.UNEXPLAINED_INCONSISTENCY:
                                             timedelta(seconds=30)})
    am = Sink("alertmanager")
    outbox = AlertOutbox(store, [am], policy)
    agents = ("r1", "r2", "r3")
    store.add_alerts([outbox_record(waiting(a, at(0)), f"q-{a}") for a in agents])
    outbox.run_once(at(31))
    (group,) = am.sent
    assert group.agents == agents

    def end(agent: str, t: float) -> None:
        store.add_alerts([outbox_record(waiting(agent, at(t), ends_at=at(t)),
                                        ending_key(f"q-{agent}"))])
        outbox.run_once(at(t + 1))
        outbox.run_once(at(t + 2))  # a group ending written at t + 1 goes out now

    end("r1", 40)
    end("r2", 50)
    assert [(a.agent_id, a.ends_at) for a in am.sent[1:]] == [("r1", at(40)), ("r2", at(50))]
    end("r3", 60)
    *_, last, group_end = am.sent
    assert (last.agent_id, last.ends_at) == ("r3", at(60))
    assert group_end.ends_at == at(60) and group_end.dedup_key == group.dedup_key
    firing, ending = AlertmanagerSink("http://am:9093").payload([group, group_end])
    assert firing["labels"] == ending["labels"]
    count = len(am.sent)
    outbox.run_once(at(70))
    outbox.run_once(at(80))
    assert len(am.sent) == count  # once


def test_a_group_with_a_member_not_ended_stays_open(store: ModelStore) -> None:
    from capwatch.alerts.outbox import ending_key

    policy = AlertPolicy(group_wait_by_type={AlertType.UNEXPLAINED_INCONSISTENCY:
                                             timedelta(seconds=30)})
    am = Sink("alertmanager")
    outbox = AlertOutbox(store, [am], policy)
    for a in ("r1", "r2"):
        store.add_alerts([outbox_record(inconsistency_alert(
            family="rover-v3", agent_id=a, action="sample_rock", time=at(0),
            contradicted=[]), f"q-{a}")])
    outbox.run_once(at(31))
    ending = replace(inconsistency_alert(family="rover-v3", agent_id="r1",
                                         action="sample_rock", time=at(40), contradicted=[]),
                     ends_at=at(40))
    store.add_alerts([outbox_record(ending, ending_key("q-r1"))])
    for t in (41, 42, 43):
        outbox.run_once(at(t))
    assert [(a.agent_id, a.ends_at is not None) for a in am.sent] == [(None, False),
                                                                      ("r1", True)]


def test_a_clock_set_back_does_not_hold_alerts_back_until_it_catches_up() -> None:
    """Alerts stamped an hour ahead of the router's clock (the clock was set back, or the
    replica that wrote them runs ahead) used to wait until the clock reached their stamp,
    even with a group wait of 0: they have waited for an unknown time and go out now."""
    ahead = at(3600)
    policy = AlertPolicy(group_wait=timedelta(seconds=30),
                         group_wait_by_type={AlertType.UNEXPLAINED_INCONSISTENCY:
                                             timedelta(0)})
    prompt = outbox_record(inconsistency_alert(family="rover-v3", agent_id="r1",
                                               action="sample_rock", time=ahead,
                                               contradicted=[]), "q")
    grouped = outbox_record(reduced("r2", ahead), "v")
    plan = plan_routing([prompt, grouped], {}, policy, at(0), ["am"])
    assert sorted(d.members for d in plan.deliveries) == [("q",), ("v",)]
    # Stamped in the past as usual, or a moment ahead (a writer that committed after the
    # router read its clock), the group still waits.
    for stamp in (at(0), at(1)):
        assert plan_routing([outbox_record(reduced("r3", stamp), "w")], {}, policy, at(0.5),
                            ["am"]).deliveries == ()


def test_deliveries_behind_a_slow_sink_are_not_sent_again_by_another_replica(
        store: ModelStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each send takes 40 s (an Alertmanager answering slowly) against a 60 s hold: the
    deliveries still waiting are not sent by another replica meanwhile as well. Before,
    the whole batch was held from its start, the other replica took what was left once
    that ran out, and both sent it."""
    from capwatch.alerts import outbox as outbox_module

    elapsed = [0.0]
    monkeypatch.setattr(outbox_module, "_monotonic", lambda: elapsed[0])
    policy = AlertPolicy(group_wait=timedelta(0))
    other_sink = Sink("kafka")
    other = AlertOutbox(store, [other_sink], policy, lease=timedelta(seconds=60))

    class Slow(Sink):
        def send(self, alerts: Sequence[Alert]) -> None:
            elapsed[0] += 40
            if len(self.sent) == 1:  # while the second is being sent: the other's turn
                other.deliver(at(elapsed[0]))
            super().send(alerts)

    slow = Slow("kafka")
    outbox = AlertOutbox(store, [slow], policy, lease=timedelta(seconds=60))
    store.add_alerts([outbox_record(reduced(f"r{i}", at(0), fp=f"f{i}"), f"v{i}")
                      for i in range(3)])
    outbox.route(at(0))
    outbox.deliver(at(0))
    sent = [a.dedup_key for a in (*slow.sent, *other_sink.sent)]
    assert len(sent) == 3 and len(set(sent)) == 3, sent
    assert len(other_sink.sent) == 1
    assert outbox.backlog() == (0, 0)


def test_a_send_is_begun_only_while_the_hold_has_that_sinks_send_left(
        store: ModelStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delivery to two sinks: the first takes 40 s of a 60 s hold, the second may take
    30 s. Begun at once, the second send would end after the hold, when another replica
    has taken the delivery and sent it to the second sink as well; it is left to a new
    claim (at once, a whole hold) instead, and goes out once."""
    from capwatch.alerts import outbox as outbox_module

    elapsed = [0.0]
    monkeypatch.setattr(outbox_module, "_monotonic", lambda: elapsed[0])
    policy = AlertPolicy(group_wait=timedelta(0))
    theirs = [Sink("am"), Sink("kafka")]
    other = AlertOutbox(store, theirs, policy, lease=timedelta(seconds=60))

    class Slow(Sink):
        def __init__(self, name: str, takes_s: float) -> None:
            super().__init__(name)
            self.takes_s = self.max_send_s = takes_s

        def send(self, alerts: Sequence[Alert]) -> None:
            start = elapsed[0]
            elapsed[0] += self.takes_s
            if start < 60 < elapsed[0]:  # the hold ran out meanwhile: the other's turn
                other.deliver(at(61))
            super().send(alerts)

    first, second = Slow("am", 40), Slow("kafka", 30)
    outbox = AlertOutbox(store, [first, second], policy, lease=timedelta(seconds=60))
    store.add_alerts([outbox_record(reduced("r1", at(0)), "v1")])
    outbox.route(at(0))
    (delivery,) = store.deliveries("pending")
    assert delivery.sinks_pending == ("am", "kafka")
    outbox.deliver(at(0))
    assert len(first.sent) == 1 and len(second.sent) == 1
    assert [s.sent for s in theirs] == [[], []], "another replica sent it as well"
    assert outbox.backlog() == (0, 0)
