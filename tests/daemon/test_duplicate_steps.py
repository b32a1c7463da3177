"""A step sent twice (same agent, episode, step and action: a producer's retry) is
observed once: the drift statistics, the evidence and the transition counts are those of
the stream without the retries, and the retries are counted
(``capwatch_duplicate_steps_total``). Through Kafka, with a hard kill between a step and
its retry: tests/integration/test_drift_restart_kafka.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.fleet import SimulatedFleet
from capwatch.daemon.agent_watch import STEP_WINDOW
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import Service, build_service
from capwatch.monitor.snapshot import snapshot_agent
from tests.daemon.helpers import config, good_sample, refused_sample
from tests.integration._daemon_setup import family_specs

AGENTS = 3


def _run(tmp_path: Path, name: str, lines: list[bytes]) -> Service:
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    store = tmp_path / f"{name}.db"
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 store={"url": f"sqlite:///{store}"})
    service = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    return service


def _fed(tmp_path: Path, name: str, lines: list[bytes]) -> Pipeline:
    """A daemon fed the lines by hand (no run loop: evidence stays buffered)."""
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 10_000, "debounce_s": 3600})
    d = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    while records := d.source.poll(0.1):
        d.handle_batch(records)
    return d


def _drift(service: Service, agents: list[str]) -> dict[str, Any]:
    drift = service.pipeline.drift
    return {a: snapshot_agent(drift, a) for a in agents}


def _metric(service: Service, family: str) -> float:
    value = service.pipeline.metrics.registry.get_sample_value(
        "capwatch_duplicate_steps_total", {"family": family})
    return 0.0 if value is None else value


def test_retried_steps_are_observed_once_and_counted(tmp_path: Path) -> None:
    fleet = SimulatedFleet.build(family_specs("courier-v1"), AGENTS, [], seed=11)
    events = list(fleet.events(120))
    agents = sorted({e.agent_id for e in events})
    once = [e.value for e in events]
    # Retries as producers make them: a record sent again at once, and a batch of the
    # last few sent again after other agents' records.
    retried: list[bytes] = []
    resent = 0
    for i, value in enumerate(once):
        retried.append(value)
        if i % 5 == 0:
            retried.append(value)
            resent += 1
        if i % 17 == 16:
            batch = once[i - 2:i + 1]
            retried.extend(batch)
            resent += len(batch)
    plain = _run(tmp_path, "plain", once)
    again = _run(tmp_path, "again", retried)
    assert again.pipeline.processed == len(retried)
    assert again.pipeline.batches.duplicates == resent > 0
    assert _metric(again, "courier-v1") == resent
    assert _metric(plain, "courier-v1") == 0
    # The drift tables hold the very same counts, as if no step had been sent twice.
    expected = _drift(plain, agents)
    assert any(snap["actions"] for snap in expected.values())
    assert _drift(again, agents) == expected
    for agent in agents:
        mine, theirs = again.pipeline.registry.get(agent), plain.pipeline.registry.get(agent)
        assert mine is not None and theirs is not None
        assert mine.transitions == theirs.transitions


def test_a_retried_inconsistency_is_buffered_once(tmp_path: Path) -> None:
    lines = [refused_sample(step=1).encode()] * 3 + [good_sample(step=2).encode()]
    d = _fed(tmp_path, "refused", lines)
    watch = d.registry.get("rover-a")
    assert watch is not None
    assert len(watch.evidence) == 1
    assert watch.inconsistent == 1
    assert d.batches.duplicates == 2
    d.source.close()
    d.store.close()


def test_what_is_not_a_retry_is_observed(tmp_path: Path) -> None:
    def step(episode: str | None, n: int | None, recharge: bool = False) -> bytes:
        event = json.loads(good_sample(step=0))
        event["episode_id"], event["step"] = episode, n
        if recharge:
            event["action"] = ["recharge", "rover1"]
        return json.dumps({k: v for k, v in event.items() if v is not None}).encode()

    lines = [
        step(None, None), step(None, None),  # no episode or step: nothing to tell by
        step("e1", None), step("e1", None),
        step(None, 3), step(None, 3),
        step("e1", 1), step("e2", 1),  # another episode
        step("e1", 1, recharge=True),  # another action in the same step: not a retry
    ]
    # Steps repeated after the window: an episode id reused long after is a new episode.
    lines += [step("e9", n) for n in range(STEP_WINDOW + 1)] + [step("e9", 0)]
    d = _fed(tmp_path, "distinct", lines)
    assert d.batches.duplicates == 0
    watch = d.registry.get("rover-a")
    assert watch is not None and watch.transitions == len(lines)
    d.source.close()
    d.store.close()


def test_a_step_key_reused_with_unknown_vocabulary_is_a_dead_letter(tmp_path: Path) -> None:
    # Not a retry: a retry resends what was sent. The hostile-message chaos test caught
    # this one accepted silently (its unknown predicate never reached the monitor).
    first = json.loads(good_sample(step=4))
    bad = dict(first, state=[*first["state"], ["teleporter", "rover1"]])
    path = tmp_path / "reused.jsonl"
    path.write_bytes(json.dumps(first).encode() + b"\n" + json.dumps(bad).encode() + b"\n")
    publisher = MemoryPublisher()
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 store={"url": f"sqlite:///{tmp_path / 'reused.db'}"})
    service = build_service(cfg, publisher=publisher, source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    (dead,) = publisher.dead_letters
    assert "teleporter" in dead.reason
    assert service.pipeline.batches.duplicates == 0
    watch = service.pipeline.registry.get("rover-a")
    assert watch is not None and watch.transitions == 1


def test_a_hard_inconsistency_under_a_sent_steps_key_is_alerted_not_skipped(
        tmp_path: Path) -> None:
    # bench_alert_latency injects a copy of an agent's consistent step whose next state
    # lacks an atom: under the first send's key it was skipped as a retry, and 2 of 55
    # injected hard inconsistencies were never alerted.
    first = good_sample(step=6).encode()
    other = json.loads(refused_sample(step=6))
    assert other["action"] == json.loads(first)["action"]
    d = _fed(tmp_path, "conflict", [first, json.dumps(other).encode()])
    watch = d.registry.get("rover-a")
    assert watch is not None
    assert watch.inconsistent == 1 and len(watch.evidence) == 1
    assert d.batches.duplicates == 0
    d.source.close()
    d.store.close()
