"""Issue 12 over a real Kafka broker: row 1 (SIGKILL mid-stream) and row 2 (hostile
messages: every dead letter reaches the dead-letter topic before its offset is
committed). Row 3 (one 10 MB message) is fixed and lives in the bounded suite,
tests/chaos/test_kafka_fixed.py; row 6 (broker outages) is in test_kafka_outages.py."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.chaos.harness import Daemon, FleetInput, compare
from tests.chaos.hostile import generate
from tests.chaos.kafka_harness import (
    KafkaTopics,
    kafka_daemon_config,
    kafka_outcome,
    make_topics,
    produce,
    read_topic,
    wait_done,
)

pytestmark = pytest.mark.integration


def _alive(d: Daemon) -> bool:
    return d.proc.poll() is None


def _finish(d: Daemon, topics: KafkaTopics, store: Path, timeout_s: float = 120) -> int:
    done = wait_done(topics, store, lambda: _alive(d), timeout_s)
    code = d.kill(signal.SIGTERM)
    assert done, f"not done (exit {code}): {d.tail()}"
    return code


def _kafka_reference(inp: FleetInput, bootstrap: str, tmp: Path):  # type: ignore[no-untyped-def]
    topics = make_topics(bootstrap)
    produce(topics, inp.lines, inp.keys)
    store = tmp / "ref.db"
    d = Daemon(kafka_daemon_config(topics, store, inp.families, inp.urls), tmp, "ref")
    code = _finish(d, topics, store)
    return kafka_outcome(topics, store, [code], d.tracebacks())


@pytest.mark.parametrize("seed", [1, 2])
def test_sigkill_over_kafka_changes_nothing(drift_fleet: FleetInput, kafka_bootstrap: str,
                                            tmp_path: Path, seed: int) -> None:
    ref = _kafka_reference(drift_fleet, kafka_bootstrap, tmp_path)
    assert len(ref.versions) == len(drift_fleet.drifted)
    topics = make_topics(kafka_bootstrap)
    store = tmp_path / "store.db"
    config = kafka_daemon_config(topics, store, drift_fleet.families, drift_fleet.urls)
    first = Daemon(config, tmp_path, "first")
    rng = random.Random(seed)
    # A live producer, paced so that the kill lands while records still arrive.
    lines, keys = drift_fleet.lines, drift_fleet.keys
    chunks = [(lines[i:i + 400], keys[i:i + 400]) for i in range(0, len(lines), 400)]

    def live() -> None:
        for v, k in chunks:
            produce(topics, v, k)
            time.sleep(0.2)

    producer = threading.Thread(target=live)
    producer.start()
    time.sleep(rng.uniform(2.0, 2.0 + 0.2 * len(chunks)))  # the random moment of the kill
    first.kill(signal.SIGKILL)
    producer.join()
    second = Daemon(config, tmp_path, "second")
    code = _finish(second, topics, store)
    got = kafka_outcome(topics, store, [-9, code], first.tracebacks() + second.tracebacks())
    assert compare(ref, got, len(lines)) == []
    assert code == 0


def test_every_dead_letter_reaches_the_topic_before_its_offset_is_committed(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], kafka_bootstrap: str,
        tmp_path: Path) -> None:
    valid, families = valid_events
    messages = list(generate(valid, 120, seed=2))
    # Under the daemon's 1 MB limit, but as base64 in a dead letter over the broker's 1 MB.
    big = [b"{" + b"x" * 800_000 for _ in range(6)]
    values = [m.value for m in messages] + big
    keys: list[str | None] = [m.key for m in messages]
    keys += ["big"] * len(big)
    expected_dead = sum(m.expect == "dead" for m in messages) + len(big)
    topics = make_topics(kafka_bootstrap)
    produce(topics, values, keys, max_request_size=2_000_000)
    store = tmp_path / "store.db"
    d = Daemon(kafka_daemon_config(topics, store, families, {}), tmp_path, "hostile")
    code = _finish(d, topics, store)
    dead = [json.loads(v) for v in read_topic(topics, topics.dead_letter)]
    counted = next(e["dead_letters"] for e in d.log_events()
                   if e.get("event") == "daemon stopped")
    assert code == 0
    assert len(dead) == counted == expected_dead, (
        f"{len(dead)} dead letters on the topic, {counted} counted, {expected_dead} expected")
    for letter in dead:
        assert letter["reason"]
        # Each is the original, or a truncation that says how long the original was.
        assert "raw_base64" in letter or "raw_length" in letter
