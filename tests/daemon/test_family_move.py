"""An agent that starts reporting under another family keeps what it already showed: the
evidence buffered under the old family is queued (and alerted on) before the new watch
replaces the old one, and a result for the old family never lands on the new watch."""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource
from capwatch.alerts.outbox import ending_key
from capwatch.contracts.ports import Record
from capwatch.contracts.store import WorkQueue
from capwatch.daemon.alerting import queued_alert_key
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import (
    EXAMPLES,
    HALF,
    SAMPLE,
    SAMPLED,
    config,
    good_sample,
    refused_sample,
    transition,
)


def _two_families(tmp_path: Path, lines: list[str]) -> tuple[Pipeline, list[Record]]:
    """A pipeline over ``lines`` with the families rover-v1 and rover-v2 (one model), a
    debounce of three inconsistencies, and the records polled."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    families = {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl")},
                "rover-v2": {"domain": str(EXAMPLES / "rover.pddl")}}
    cfg = config(tmp_path, families=families, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600})
    d = build_service(cfg, source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    return d, list(d.source.poll(1.0))


def _pending(store: WorkQueue) -> list[tuple[str, str]]:
    return [(i.agent_id, i.family) for i in store.queue_items("pending")]


def test_buffered_evidence_is_queued_under_the_old_family_when_the_agent_moves(
        tmp_path: Path) -> None:
    lines = [refused_sample(step=0), refused_sample(step=1),  # under the debounce of three
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=2, executed=True),
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=3, executed=True)]
    d, records = _two_families(tmp_path, lines)
    for r in records[:3]:
        d.handle(r)
    assert _pending(d.store) == []  # two inconsistencies and one stray: still buffered
    d.handle(records[3])  # the second record in a row of rover-v2 moves the agent
    assert _pending(d.store) == [("rover-a", "rover-v1")]
    (watch,) = [w for w in d.registry if w.agent_id == "rover-a"]
    assert watch.family == "rover-v2" and not watch.buffered
    d.source.close()
    d.store.close()


def test_an_agent_staying_in_its_family_is_not_queued_early(tmp_path: Path) -> None:
    lines = [refused_sample(step=0), refused_sample(step=1), good_sample(step=2)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600})
    d = build_service(cfg, source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    for r in d.source.poll(1.0):
        d.handle(r)
    assert _pending(d.store) == []
    d.source.close()
    d.store.close()


def test_evidence_buffered_while_work_is_awaited_ends_its_alert_when_the_agent_moves(
        tmp_path: Path) -> None:
    """The awaited work goes on under the old family; the evidence seen meanwhile (a new
    fault, alerted at once) cannot be queued beside it and goes with the old watch, so
    the alert that announced an assessment of it is ended rather than left open."""
    navigate = ["navigate", "rover1", "waypoint1", "waypoint2"]
    lines = [refused_sample(step=0),
             transition("rover-a", "rover-v1", HALF, navigate, HALF, step=1, executed=False),
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=2, executed=True),
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=3, executed=True)]
    d, records = _two_families(tmp_path, lines)
    d.handle(records[0])
    d.sweep(force=True)  # the refused sample is queued: the watch awaits it
    d.handle(records[1])  # a new fault meanwhile: alerted at once
    (old,) = [w for w in d.registry if w.agent_id == "rover-a"]
    assert old.awaiting is not None and [e.offset for e in old.evidence] == [1]
    announced = queued_alert_key(old.work_key())
    assert announced in {r.key for r in d.store.outbox()}
    d.handle(records[2])
    d.handle(records[3])
    (watch,) = [w for w in d.registry if w.agent_id == "rover-a"]
    assert watch.family == "rover-v2" and not watch.buffered
    assert _pending(d.store) == [("rover-a", "rover-v1")]  # the awaited work only
    d.alert_promptly()
    ended = {r.key: r for r in d.store.outbox()}[ending_key(announced)]
    assert ended.alert["evidence"]["ended"] == "the agent moved to family rover-v2"
    d.source.close()
    d.store.close()


def test_a_record_naming_another_family_is_a_warning_and_counted(tmp_path: Path) -> None:
    """Two records in a row naming another family move the agent to that family's model,
    and two of its own family move it back (since session 19 one record moves nothing):
    each move is a warning naming both families and counts in
    capwatch_agent_family_moves_total. Before, the only trace was an info line about drift
    state ("starting afresh")."""
    from structlog.testing import capture_logs

    lines = [good_sample(step=0),
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=1, executed=True),
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=2, executed=True),
             good_sample(step=3), good_sample(step=4)]
    d, records = _two_families(tmp_path, lines)
    with capture_logs() as logs:
        for r in records:
            d.handle(r)
    moves = [e for e in logs if e["event"].startswith("agent now reports under another")]
    assert [(e["log_level"], e["agent_id"], e["previous_family"], e["family"], e["offset"])
            for e in moves] == [("warning", "rover-a", "rover-v1", "rover-v2", 2),
                                ("warning", "rover-a", "rover-v2", "rover-v1", 4)]
    counted = d.metrics.family_moves
    assert counted.labels("rover-v2", "rover-v1")._value.get() == 1
    assert counted.labels("rover-v1", "rover-v2")._value.get() == 1
    d.source.close()
    d.store.close()


def test_one_stray_record_of_another_family_does_not_move_the_agent(tmp_path: Path) -> None:
    """oper18b: one record of a producer naming the wrong family moved the agent to that
    family's model and back with the next record, setting its drift statistics aside
    twice. One record cannot tell a stray from a redeployment; two in a row can tell
    more: the first is a dead letter (kind ``family``, so it is kept), the agent stays
    watched under its own family, and its own next record clears the candidate."""
    lines = [good_sample(step=0),
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=1, executed=True),
             good_sample(step=2),
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=3, executed=True),
             good_sample(step=4)]
    d, records = _two_families(tmp_path, lines)
    watches = []
    for r in records:
        d.handle(r)
        (watch,) = [w for w in d.registry if w.agent_id == "rover-a"]
        watches.append(watch)
    assert {w.family for w in watches} == {"rover-v1"}
    assert len({id(w) for w in watches}) == 1, "the watch was replaced"
    assert d.metrics.family_moves.labels("rover-v2", "rover-v1")._value.get() == 0
    assert d.metrics.dead_letters.labels("family")._value.get() == 2
    d.source.close()
    d.store.close()


def test_two_records_in_a_row_of_another_family_move_the_agent(tmp_path: Path) -> None:
    """A redeployment under a new family still moves the agent, from its second record
    on (the first is a dead letter of kind ``family``)."""
    lines = [good_sample(step=0)] + [
        transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=i, executed=True)
        for i in (1, 2, 3)]
    d, records = _two_families(tmp_path, lines)
    families = []
    for r in records:
        d.handle(r)
        (watch,) = [w for w in d.registry if w.agent_id == "rover-a"]
        families.append(watch.family)
    assert families == ["rover-v1", "rover-v1", "rover-v2", "rover-v2"]
    assert d.metrics.family_moves.labels("rover-v2", "rover-v1")._value.get() == 1
    assert d.metrics.dead_letters.labels("family")._value.get() == 1
    d.source.close()
    d.store.close()
