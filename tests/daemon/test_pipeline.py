"""The pipeline end to end without servers: simulated fleet or JSONL in, SQLite store."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.contracts.ports import Record
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.model.pal import delta
from capwatch.model.serialize import domain_from_json
from capwatch.models_store import open_store
from tests.daemon.helpers import (
    SAMPLE,
    config,
    example,
    good_sample,
    refused_sample,
    run,
    simulated,
    transition,
)


class Directory:
    def __init__(self) -> None:
        self.sim = SimulatedAgent(example("rover-sample-drift.pddl"), seed=1)
        self.asked: list[str] = []

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        self.asked.append(agent_id)
        return self.sim


def test_each_drift_yields_one_exact_model_version_and_one_alert(tmp_path: Path) -> None:
    """One capability alert per drift, plus, for drifts found by inconsistent
    transitions, the "awaiting assessment" alert raised when the work was queued."""
    drifts = [
        {"agent_id": "rover-v1-001", "at_step": 30, "domain": str(
            Path("capwatch/examples/rover-sample-drift.pddl").resolve())},
        {"agent_id": "courier-v1-000", "at_step": 30, "domain": str(
            Path("capwatch/examples/courier-drop-jam.pddl").resolve())},
        {"agent_id": "courier-v1-002", "at_step": 20, "domain": str(
            Path("capwatch/examples/courier-pick-wear.pddl").resolve())},
    ]
    service, out = run(simulated(tmp_path, agents=3, rounds=500, drifts=drifts))
    fleet = service.pipeline.agents.fleet  # type: ignore[attr-defined]
    drifted = {"rover-v1-001", "courier-v1-000", "courier-v1-002"}
    assert set(fleet.drifted_agents()) == drifted
    assert sorted(m.agent_id for m in out.models) == sorted(drifted)
    for m in out.models:
        learned = domain_from_json(m.model.json_)
        truth = fleet.true_model(m.agent_id)
        assert m.version == 1 and m.parent_agent_id is None and m.parent_version == 1
        assert delta(learned, truth) == 0, m.summary
    waiting = [a for a in out.alerts if a.alert_type == "unexplained_inconsistency"]
    assert sorted(a.agent_id for a in waiting) == ["courier-v1-000", "rover-v1-001"]
    rover_wait = next(a for a in waiting if a.agent_id == "rover-v1-001")
    assert rover_wait.summary.startswith("sample_rock(?r ?s ?w) observed behaving "
                                         "inconsistently with the model; awaiting assessment")
    assert rover_wait.evidence["assessment_key"].startswith("rover-v1/rover-v1-001@")
    by_agent = {a.agent_id: a for a in out.alerts if a not in waiting}
    assert len(out.alerts) - len(waiting) == len(by_agent) == 3
    assert by_agent["rover-v1-001"].alert_type == "capability_reduced"
    assert "now requires (battery_full ?r)" in by_agent["rover-v1-001"].summary
    assert by_agent["courier-v1-000"].alert_type == "capability_reduced"
    assert by_agent["courier-v1-002"].alert_type == "effect_distribution_drift"
    pick = domain_from_json(next(m for m in out.models if m.agent_id == "courier-v1-002")
                            .model.json_).action("pick")
    assert pick.outcomes[0].probability == pytest.approx(0.5, abs=0.1)
    assert out.dead_letters == []
    # The metrics agree: courier-v1-002's change is probability-only (Δ 0) and still drifted,
    # and the sequential test that caught it counts as drift tests run.
    registry = service.pipeline.metrics.registry
    per_family = {f: registry.get_sample_value("capwatch_agents_drifted", {"family": f})
                  for f in ("rover-v1", "courier-v1")}
    assert per_family == {"rover-v1": 1, "courier-v1": 2}
    tests = registry.get_sample_value("capwatch_drift_tests_total", {
        "family": "courier-v1", "action": "pick", "test": "sequential"})
    assert tests is not None and tests >= 100
    # Counted per finding: only executions of a probabilistic action are drift-tested.
    applied = registry.get_sample_value("capwatch_transitions_total", {
        "family": "courier-v1", "action": "pick", "verdict": "applied"})
    assert applied is not None and tests <= applied
    assert registry.get_sample_value("capwatch_transitions_total", {
        "family": "courier-v1", "action": "move", "verdict": "applied"})
    assert registry.get_sample_value("capwatch_drift_tests_total", {
        "family": "courier-v1", "action": "move", "test": "sequential"}) is None


def _write(path: Path, lines: list[str | bytes]) -> Path:
    with open(path, "wb") as f:
        for line in lines:
            f.write((line.encode() if isinstance(line, str) else line) + b"\n")
    return path


def _jsonl_daemon(tmp_path: Path, lines: list[str | bytes], **overrides: object
                  ) -> tuple[MemoryPublisher, Directory, object]:
    path = _write(tmp_path / "in.jsonl", lines)
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)}, **overrides)
    memory = MemoryPublisher()
    agents = Directory()
    service = build_service(cfg, publisher=memory, agents=agents,
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    return memory, agents, service


def test_bad_input_goes_to_the_dead_letters_and_good_input_is_processed(
        tmp_path: Path) -> None:
    lines: list[str | bytes] = [
        good_sample(step=0),
        b"{not json",
        transition("x", "no-such-family", [], ["navigate", "a", "b", "c"], []),
        transition("rover-a", "rover-v1", [["wet", "rover1"]], ["navigate", "rover1",
                   "waypoint1", "waypoint2"], []),
        transition("rover-a", "rover-v1", [], ["fly", "rover1"], []),
        transition("rover-a", "rover-v1", [], ["sample_rock", "rover1"], []),
        b"\xff\xfe\x00",
        b'{"type": "transition"}',
        good_sample(step=1),
    ]
    memory, _, service = _jsonl_daemon(tmp_path, lines)
    reasons = [d.reason for d in memory.dead_letters]
    assert len(reasons) == 7
    assert [d.offset for d in memory.dead_letters] == [1, 2, 3, 4, 5, 6, 7]
    assert "unknown family 'no-such-family'" in reasons[1]
    assert "unknown predicate 'wet'" in reasons[2]
    assert "unknown action 'fly'" in reasons[3]
    assert "takes 3 arguments, found 1" in reasons[4]
    assert memory.dead_letters[5].raw == b"\xff\xfe\x00"
    assert service.pipeline.processed == len(lines)  # type: ignore[attr-defined]
    assert memory.models == [] and memory.alerts == []


def test_a_kafka_record_without_a_key_is_a_dead_letter(tmp_path: Path) -> None:
    path = _write(tmp_path / "in.jsonl", [])
    memory = MemoryPublisher()
    service = build_service(config(tmp_path, source={"kind": "kafka"}), publisher=memory,
                            agents=Directory(), source=JsonlSource(str(path)))
    d = service.pipeline
    d.seed_families()
    d.handle_batch([Record("t", 0, 0, None, good_sample(step=0).encode()),
                    Record("t", 0, 1, b"rover-a", good_sample(step=1).encode())])
    assert [x.offset for x in memory.dead_letters] == [0]
    assert "without a key" in memory.dead_letters[0].reason
    assert d.processed == 2 and len(d.registry) == 1


def _manual(tmp_path: Path, lines: list[str | bytes], **overrides: object) -> Pipeline:
    """A daemon whose records the test feeds by hand (no run loop, no workers)."""
    path = _write(tmp_path / "in.jsonl", lines)
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)}, **overrides)
    service = build_service(cfg, publisher=MemoryPublisher(), agents=Directory(),
                            source=JsonlSource(str(path)))
    d = service.pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    return d


def test_debounce_queues_once_when_enough_evidence_arrived(tmp_path: Path) -> None:
    lines: list[str | bytes] = [refused_sample(step=0), good_sample(step=1),
                                refused_sample(step=2), refused_sample(step=3),
                                refused_sample(step=4)]
    d = _manual(tmp_path, lines, detection={"debounce_transitions": 3, "debounce_s": 3600.0})
    records = d.source.poll(1.0)
    for r in records[:3]:
        d.handle(r)
    d.sweep()
    assert d.store.queue_items() == []  # two inconsistencies: still debouncing
    d.handle(records[3])
    (item,) = d.store.queue_items()
    assert [o["offset"] for o in item.payload["inconsistent"]] == [0, 2, 3]
    d.handle(records[4])  # evidence while queued does not queue again
    d.sweep(force=True)
    assert len(d.store.queue_items()) == 1
    d.source.close()
    d.store.close()


def test_executed_evidence_leaves_out_the_steps_a_trace_took_before_its_inconsistency(
        tmp_path: Path) -> None:
    # One trace message is one record: every step has its offset. A drift that began
    # mid-trace left the trace's earlier, pre-drift executions "at or after the first
    # inconsistency", so the assessment got the old behaviour as evidence of the new and
    # failed closed (rev13a's own fleet: openstacks and parking drifts, 2 of 8 missed).
    at = [["equipped_rock_analysis", "rover1"], ["battery_half", "rover1"]]
    states = [[["at", "rover1", "waypoint0"], *at], [["at", "rover1", "waypoint1"], *at],
              [["at", "rover1", "waypoint1"], *at], [["at", "rover1", "waypoint2"], *at]]
    trace = json.dumps({"type": "trace", "agent_id": "rover-a", "family": "rover-v1",
                        "episode_id": "ep", "start_step": 0, "states": states,
                        "actions": [["navigate", "rover1", "waypoint0", "waypoint1"], SAMPLE,
                                    ["navigate", "rover1", "waypoint1", "waypoint2"]],
                        "executed": [True, False, True]})
    later = transition("rover-a", "rover-v1", states[3],
                       ["navigate", "rover1", "waypoint2", "waypoint3"],
                       [["at", "rover1", "waypoint3"], *at], 3, executed=True)
    d = _manual(tmp_path, [trace, later, refused_sample(step=4), refused_sample(step=5)],
                detection={"debounce_transitions": 3, "debounce_s": 3600.0})
    for r in d.source.poll(1.0):
        d.handle(r)
    (item,) = d.store.queue_items()
    assert [o["offset"] for o in item.payload["inconsistent"]] == [0, 2, 3]
    executed = [o["action"] for o in item.payload["executed"]]
    assert ["navigate", "rover1", "waypoint0", "waypoint1"] not in executed
    assert ["navigate", "rover1", "waypoint2", "waypoint3"] in executed
    d.source.close()
    d.store.close()


def test_debounce_time_bound_queues_a_lone_inconsistency(tmp_path: Path) -> None:
    d = _manual(tmp_path, [refused_sample(step=0)],
                detection={"debounce_transitions": 3, "debounce_s": 0.0})
    for r in d.source.poll(1.0):
        d.handle(r)
    assert len(d.store.queue_items()) == 1
    d.source.close()
    d.store.close()


def test_the_commit_never_passes_a_buffered_inconsistency(tmp_path: Path) -> None:
    d = _manual(tmp_path, [good_sample(step=0), refused_sample(step=1), good_sample(step=2),
                           good_sample(step=3)],
                detection={"debounce_transitions": 5, "debounce_s": 3600.0})
    for record in d.source.poll(1.0):
        d.handle(record)
    assert d.checkpoints.commit_offsets() == {0: 1}  # the refusal at offset 1 is not yet durable
    agent = d.registry.get("rover-a")
    assert agent is not None and len(agent.evidence) == 1
    d.sweep(force=True)
    assert d.checkpoints.commit_offsets() == {0: 4}
    d.source.close()
    d.store.close()


def test_a_restarted_daemon_resumes_from_its_checkpoint_without_duplicates(
        tmp_path: Path) -> None:
    lines: list[str | bytes] = [good_sample(step=0)]
    lines += [refused_sample(step=i) for i in range(1, 6)]
    lines += [good_sample("rover-b", step=i) for i in range(5)]
    memory, _, first = _jsonl_daemon(tmp_path, lines)
    assert len(memory.models) == 1
    assert sorted(a.alert_type for a in memory.alerts) == ["capability_reduced",
                                                           "unexplained_inconsistency"]
    assert first.pipeline.processed == len(lines)  # type: ignore[attr-defined]
    again, _, second = _jsonl_daemon(tmp_path, lines)
    assert second.pipeline.processed == 0  # type: ignore[attr-defined]
    assert again.models == [] and again.alerts == []
    store = open_store(f"sqlite:///{tmp_path / 'models.db'}")
    try:
        history = store.history("rover-v1", "rover-a")
        assert [v.version for v in history] == [1]
        assert delta(history[0].domain(), example("rover-sample-drift.pddl")) == 0
        assert store.load_offsets("capwatch") == {("in.jsonl", 0): len(lines)}
    finally:
        store.close()


def test_a_new_version_is_used_for_later_transitions(tmp_path: Path) -> None:
    # After the drift is learned, the same refusal is consistent: no second version.
    lines: list[str | bytes] = [refused_sample(step=i) for i in range(3)]
    memory, _, first = _jsonl_daemon(tmp_path, lines)
    assert len(memory.models) == 1
    path = _write(tmp_path / "more.jsonl", [refused_sample(step=i) for i in range(3, 9)])
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    more = MemoryPublisher()
    service = build_service(cfg, publisher=more, agents=Directory(),
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    assert more.models == [] and more.alerts == []
    agent = service.pipeline.registry.get("rover-a")
    assert agent is not None and agent.version.agent_id == "rover-a"
    assert agent.inconsistent == 0
    del first


def test_event_payloads_are_json_with_the_model_text(tmp_path: Path) -> None:
    # The three by count, not two by time: at load a 2 s debounce ran out between records.
    memory, _, _ = _jsonl_daemon(tmp_path, [refused_sample(step=i) for i in range(3)],
                                 detection={"debounce_s": 3600.0})
    (event,) = memory.models
    data = json.loads(event.model_dump_json())
    assert data["type"] == "model_version" and data["agent_id"] == "rover-a"
    assert data["model"]["pddl"].startswith("(define (domain rover)")
    assert data["model"]["json"]["name"] == "rover"
    assert {"action": "sample_rock", "atom": ["battery_full", "?r"], "location": "pre",
            "old": "0", "new": "+"} in [{k: c[k] for k in ("action", "atom", "location", "old",
                                                           "new")} for c in data["changes"]]
    assert data["evidence"]["queries"] > 0
    assert [t["offset"] for t in data["evidence"]["transitions"]] == [0, 1, 2]


def test_a_trace_with_one_bad_step_is_refused_whole(tmp_path: Path) -> None:
    from tests.daemon.helpers import HALF, SAMPLE, SAMPLED

    bad_trace = json.dumps({"type": "trace", "agent_id": "rover-a", "family": "rover-v1",
                            "states": [HALF, SAMPLED, [["wet", "rover1"]]],
                            "actions": [SAMPLE, ["drop_sample", "rover1", "store1"]]})
    good_trace = json.dumps({"type": "trace", "agent_id": "rover-a", "family": "rover-v1",
                             "states": [HALF, SAMPLED], "actions": [SAMPLE]})
    d = _manual(tmp_path, [bad_trace, good_trace])
    for r in d.source.poll(1.0):
        d.handle(r)
    (dead,) = d.publisher.inner.dead_letters  # type: ignore[attr-defined]
    assert dead.reason.startswith("step 1: next_state: unknown predicate 'wet'")
    agent = d.registry.get("rover-a")
    assert agent is not None and agent.transitions == 1  # only the good trace's step
    d.source.close()
    d.store.close()


def test_a_message_that_trips_a_bug_is_dead_lettered_not_fatal(tmp_path: Path) -> None:
    d = _manual(tmp_path, [good_sample(step=0), good_sample("rover-boom", step=1),
                           good_sample(step=2)])
    # The bug is tripped inside the watch's observation through the agent's own clock
    # (read at every execution), not by patching AgentWatch: compiled, the batch loop
    # calls AgentWatch.observe in C, past a patch of the class.
    boom = d.registry.load("rover-boom", "rover-v1", 0)
    assert boom is not None

    def clock() -> float:
        raise RuntimeError("boom")

    boom.clock = clock
    for r in d.source.poll(1.0):
        d.handle(r)
    (dead,) = d.publisher.inner.dead_letters  # type: ignore[attr-defined]
    assert dead.reason == "internal error: RuntimeError: boom" and dead.offset == 1
    assert d.checkpoints.commit_offsets() == {0: 3}
    d.source.close()
    d.store.close()


def test_a_store_failure_stops_the_daemon_without_committing_the_record(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from capwatch.contracts.store import StoreError

    d = _manual(tmp_path, [good_sample(step=0), good_sample("rover-new", step=1)])
    records = d.source.poll(1.0)
    d.handle(records[0])

    def down(*args: object) -> None:
        raise StoreError("database is unreachable")

    monkeypatch.setattr(d.store, "latest", down)
    monkeypatch.setattr(d.store, "own_lineages", down)
    with pytest.raises(StoreError):
        d.handle(records[1])
    assert d.checkpoints.commit_offsets() == {0: 1}
    d.source.close()
    d.store.close()


def test_the_fleet_gauges_follow_an_assessment_on_a_quiet_stream(tmp_path: Path) -> None:
    # The gauges were set only by a checkpoint that moved an offset: once the stream went
    # quiet, an agent whose assessment finished was reported awaiting one forever.
    d = _manual(tmp_path, [refused_sample(step=i) for i in range(3)],
                detection={"debounce_transitions": 3, "debounce_s": 3600.0})
    for record in d.source.poll(1.0):
        d.handle(record)
    d.checkpoint()
    gauge = d.metrics.registry.get_sample_value
    assert gauge("capwatch_agents") == 1
    assert gauge("capwatch_agents_awaiting_assessment") == 1
    d.workers.start()
    give_up = time.monotonic() + 120  # a hang guard, not a speed target
    try:
        while d.registry.awaiting():
            assert time.monotonic() < give_up, "the assessment never finished"
            d.poll_results()
            d.drain()
            d.source.poll(0.05)  # the daemon's wait between passes; the file has ended
    finally:
        d.workers.stop(10.0)
    d.checkpoint()  # no record arrived: no offset moves
    assert gauge("capwatch_agents_awaiting_assessment") == 0
    d.source.close()
    d.store.close()


def test_an_outage_at_shutdown_is_not_fatal_and_everything_is_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A replica resumed after a freeze past its session was out of the group: the
    # scheduler's queued checkpoint, run by the shutdown's drain, failed its commit, the
    # error escaped the shutdown (exit 1, "capwatch run: Kafka at ...") and the source
    # and publisher were never closed.
    from kafka.errors import CommitFailedError

    d = _manual(tmp_path, [good_sample(step=0), good_sample(step=1)])
    for r in d.source.poll(1.0):
        d.handle(r)

    def kicked_out(offsets: object) -> None:
        raise CommitFailedError("the consumer is not part of an active group")

    closed: list[str] = []
    source_close, publisher_close = d.source.close, d.publisher.close
    monkeypatch.setattr(d.source, "commit", kicked_out)

    def closing(name: str, close: Callable[[], None]) -> Callable[[], None]:
        def noted() -> None:
            closed.append(name)
            close()
        return noted

    monkeypatch.setattr(d.source, "close", closing("source", source_close))
    monkeypatch.setattr(d.publisher, "close", closing("publisher", publisher_close))
    d.submit(d.checkpoint)  # the scheduler's, queued when SIGTERM came
    d.stop()
    assert d.run() == 0
    assert closed == ["source", "publisher"]
    assert d.checkpoints.commit_offsets() == {0: 2}  # nothing committed: replayed next start
    d.store.close()
