"""Issue 12, row 6: the Kafka broker goes away for 30 s under a running daemon, frozen
(SIGSTOP: connections stay open, nothing answers) or killed (SIGKILL, then started again
on the same ports with its data). The daemon must say so on /readyz (503, naming Kafka)
and in its log, not exit, and resume when the broker is back with nothing lost: every
record committed, the same model versions as an uninterrupted run."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.harness import (
    Daemon,
    FleetInput,
    Outcome,
    names_kafka,
    read_sqlite_store,
    readyz,
    wait_readyz,
)
from tests.chaos.kafka_harness import (
    committed_and_end,
    kafka_daemon_config,
    make_topics,
    produce,
    wait_done,
)
from tests.support._proc import free_port
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration

OUTAGE_S = 30.0


def _ride_out(drift_fleet: FleetInput, reference: Outcome, broker: KafkaBroker,
              tmp_path: Path, fault: Callable[[], None], recover: Callable[[], object]
              ) -> dict[str, float]:
    topics = make_topics(broker.bootstrap)
    half = len(drift_fleet.lines) // 2
    produce(topics, drift_fleet.lines[:half], drift_fleet.keys[:half])
    store = tmp_path / "store.db"
    port = free_port()
    d = Daemon(kafka_daemon_config(topics, store, drift_fleet.families, drift_fleet.urls,
                                   http_port=port), tmp_path, "outage")
    try:
        assert wait_done(topics, store, lambda: d.proc.poll() is None, 180), d.tail()
        assert wait_readyz(port, d, lambda s, b: s == 200, 60) is not None, d.tail()

        t0 = time.monotonic()
        fault()
        seen: list[tuple[float, int, dict[str, Any]]] = []
        noticed = wait_readyz(port, d, names_kafka, OUTAGE_S, seen)
        assert noticed is not None, f"/readyz during the outage: {seen[-3:]} {d.tail()}"
        noticed_s = time.monotonic() - t0
        # The outage lasts its 30 s; /readyz must say so for all of it.
        during: list[tuple[int, dict[str, Any]]] = []
        while time.monotonic() < t0 + OUTAGE_S:
            assert d.proc.poll() is None, f"exited during the outage: {d.tail()}"
            during.append(readyz(port))
            time.sleep(0.5)
        # Never "ready" while the broker is away, and every answer says why; a probe that
        # got no answer in its 2 s (a loaded machine) is not ready either.
        wrong = [(s, b) for s, b in during if s != 0 and not names_kafka(s, b)]
        assert not wrong and any(s != 0 for s, _ in during), (wrong[:3], len(during))
        recover()
        t1 = time.monotonic()
        back = wait_readyz(port, d, lambda s, b: s == 200, 120)
        assert back is not None, f"not ready after the broker returned: {d.tail()}"
        back_s = time.monotonic() - t1
        produce(topics, drift_fleet.lines[half:], drift_fleet.keys[half:])
        done = wait_done(topics, store, lambda: d.proc.poll() is None, 240)
    finally:
        code = d.kill(signal.SIGTERM)
    assert done and code == 0, d.tail()
    assert committed_and_end(topics) == (len(drift_fleet.lines), len(drift_fleet.lines))
    versions, _ = read_sqlite_store(store)
    assert versions == reference.versions
    events = d.log_events()
    failed = [e for e in events if e.get("event") == "dependency failed; retrying"]
    assert failed and all("Kafka" in str(e.get("problem")) for e in failed), failed
    assert not any("models store" in str(e.get("problem", "")) for e in events)
    # kafka-python logs the reset of a killed broker's connections with a traceback;
    # capwatch's own log has none.
    ours = [e for e in events if "exception" in e
            and not str(e.get("logger", "")).startswith("kafka")]
    assert not ours, ours[:2]
    figures = {"noticed_s": round(noticed_s, 1), "ready_again_s": round(back_s, 1)}
    print(f"\nbroker outage figures: {figures}")
    return figures


def test_a_frozen_broker_is_noticed_and_ridden_out(
        drift_fleet: FleetInput, drift_reference: Outcome, own_broker: KafkaBroker,
        tmp_path: Path) -> None:
    process = own_broker.process
    assert process is not None
    _ride_out(drift_fleet, drift_reference, own_broker, tmp_path,
              fault=lambda: process.send_signal(signal.SIGSTOP),
              recover=lambda: process.send_signal(signal.SIGCONT))


def test_a_killed_broker_is_noticed_and_ridden_out(
        drift_fleet: FleetInput, drift_reference: Outcome, own_broker: KafkaBroker,
        tmp_path: Path) -> None:
    _ride_out(drift_fleet, drift_reference, own_broker, tmp_path,
              fault=own_broker.kill, recover=lambda: own_broker.start_again())
