"""Outages are survived (issue 12): a store that fails makes the daemon say not ready and
why, wait and retry, and resume with nothing lost, instead of exiting."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.store import StoreError
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample


def test_a_failing_store_is_retried_and_nothing_is_lost(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [good_sample("rover-a", step=0), good_sample("rover-b", step=1),
             good_sample("rover-c", step=2), good_sample("rover-d", step=3)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    service = build_service(cfg, publisher=MemoryPublisher())
    pipeline = service.pipeline
    store = pipeline.registry.store
    real = store.latest
    failures = {"left": 3}
    seen_problems: list[list[str]] = []

    def flaky(family: str, agent_id: str | None):  # type: ignore[no-untyped-def]
        # Fails where the store is read for an agent seen the first time (the store's
        # read, not Registry.load: a compiled class's methods cannot be replaced).
        if agent_id == "rover-b" and failures["left"] > 0:
            failures["left"] -= 1
            seen_problems.append(pipeline.problems())
            raise StoreError("database is unreachable")
        return real(family, agent_id)

    monkeypatch.setattr(store, "latest", flaky)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(
        service.run(exit_when_idle=True, install_signals=False)))
    runner.start()
    runner.join(120)
    assert not runner.is_alive()
    assert result == [0]
    assert failures["left"] == 0
    # After the first failure the daemon said what was wrong while it retried.
    assert any("models store unavailable" in p for problems in seen_problems[1:]
               for p in problems), seen_problems
    assert pipeline.processed == len(lines)
    assert pipeline.checkpoints.commit_offsets() == {0: len(lines)}
    assert pipeline.ready is False  # stopped; and no outage is left over
    assert pipeline.problems() == ["not consuming"]


def test_a_failing_dependency_check_makes_the_daemon_not_ready(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(good_sample("rover-a", step=0) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    service = build_service(cfg, publisher=MemoryPublisher())
    pipeline = service.pipeline
    silent: list[str] = []
    pipeline.checks.append(lambda: silent[0] if silent else None)
    pipeline._consuming = True
    assert pipeline.ready and pipeline.problems() == []
    silent.append("Kafka unavailable: no answer from b:9092 for 12 s")
    assert not pipeline.ready
    assert pipeline.problems() == ["Kafka unavailable: no answer from b:9092 for 12 s"]
    silent.clear()
    assert pipeline.ready
    service.store.close()



def test_a_loop_off_the_main_loop_logs_an_outage_once_naming_the_component() -> None:
    import sqlite3

    import structlog
    from structlog.testing import capture_logs

    from capwatch.daemon.infra import OutageLog

    outage = OutageLog(structlog.get_logger("test"), "claiming queued work")
    with capture_logs() as logs:
        outage.ok()
        for _ in range(50):
            outage.failed(sqlite3.OperationalError("database is locked"))
        outage.failed(OSError("No route to host"))
        outage.ok()
        outage.ok()
    assert [(e["event"], e.get("component")) for e in logs] == [
        ("claiming queued work failed; retrying", "models store"),
        ("claiming queued work failed; retrying", "disk or network"),
        ("claiming queued work works again", "disk or network")]
    assert logs[0]["problem"] == ("models store unavailable: OperationalError: database is"
                                  " locked")


def test_outages_are_put_on_the_right_component() -> None:
    import sqlite3

    import psycopg
    from kafka.errors import KafkaTimeoutError

    from capwatch.daemon.infra import component_of

    assert component_of(KafkaTimeoutError("x")) == "Kafka"
    assert component_of(psycopg.OperationalError("x")) == "models store"
    assert component_of(sqlite3.OperationalError("x")) == "models store"
    assert component_of(ConnectionRefusedError("x")) == "disk or network"
    confluent = pytest.importorskip("confluent_kafka")
    assert component_of(confluent.KafkaException("x")) == "Kafka"


def test_an_outage_names_the_error_class_once() -> None:
    import sqlite3

    from kafka.errors import KafkaTimeoutError

    from capwatch.daemon.infra import describe_outage

    # kafka-python's errors carry their class name in their own text.
    kafka = KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1")
    assert str(kafka).startswith("KafkaTimeoutError")
    assert describe_outage(kafka) == \
        "Kafka unavailable: KafkaTimeoutError: Unable to bootstrap from 127.0.0.1:1"
    assert describe_outage(sqlite3.OperationalError("database or disk is full")) == \
        "models store unavailable: OperationalError: database or disk is full"


def test_queuing_that_fails_in_one_outage_is_logged_once(tmp_path: Path) -> None:
    """Every record of an agent whose evidence is ripe tries to queue it again while the
    store is down; the log says so once an outage (oper17: a 50 s PostgreSQL stop logged
    103 warnings for two agents), and again for the next outage."""
    from types import SimpleNamespace
    from typing import Any

    from structlog.testing import capture_logs

    from capwatch.daemon.pipeline import Pipeline

    path = tmp_path / "in.jsonl"
    path.write_text("")
    service = build_service(config(tmp_path, source={"kind": "jsonl", "path": str(path)}),
                            publisher=MemoryPublisher())
    pipeline = service.pipeline
    assert isinstance(pipeline, Pipeline)
    watch: Any = SimpleNamespace(agent_id="rover-a")  # all _queue_or_keep reads of it

    def down(_watch: object) -> None:
        raise StoreError("database is unreachable")

    pipeline.queue = down  # type: ignore[method-assign,assignment]
    with capture_logs() as logs:
        for _ in range(5):
            pipeline._queue_or_keep(watch)
        pipeline._outage = None  # the main loop saw the store answer again
        for _ in range(3):
            pipeline._queue_or_keep(watch)
    warned = [e for e in logs if e["event"].startswith("queuing failed")]
    assert len(warned) == 2 and all(e["agent_id"] == "rover-a" for e in warned)
    assert any(p.startswith("models store unavailable") for p in pipeline.problems())
    pipeline.source.close()
    pipeline.store.close()


def test_a_store_back_within_the_back_off_is_retried_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The main loop's back-off reaches 30 s; a store that answers again is retried when a
    probe finds it back, not at the back-off's end (oper18: PostgreSQL back 31 s before the
    main loop resumed, /readyz 503 meanwhile). A store that answers but fails the work
    (never seen unreachable) keeps the whole back-off."""
    import capwatch.daemon.pipeline as pipeline_module

    path = tmp_path / "in.jsonl"
    path.write_text(good_sample("rover-a", step=0) + "\n")
    service = build_service(config(tmp_path, source={"kind": "jsonl", "path": str(path)}),
                            publisher=MemoryPublisher())
    pipeline = service.pipeline
    monkeypatch.setattr(pipeline_module, "STORE_PROBE_EVERY_S", 0.0)
    answers = ["connection refused", "connection refused", None]
    probes: list[float] = []

    def unreachable(wait_s: float) -> str | None:
        probes.append(wait_s)
        return answers.pop(0) if answers else None

    monkeypatch.setattr(pipeline.store, "unreachable", unreachable)
    pipeline._outage_wait = 16.0  # the next wait is 30 s
    pipeline._failed(StoreError("database is unreachable"))
    assert pipeline._outage_wait == 30.0
    assert len(probes) == 3 and answers == []  # down, down, back: the wait ended there
    # The retry then fails with the store answering (it fails the work, not the
    # connection): every probe says so and the back-off is waited out (here: until stop),
    # not cut short at the first probe because an earlier one of the outage found it down.
    monkeypatch.setattr(pipeline, "_stop", _Stopped(after=5))
    probes.clear()
    pipeline._failed(StoreError("constraint failed"))
    assert len(probes) == 5
    # A failure of Kafka is not the store's: no probe of the store.
    monkeypatch.setattr(pipeline, "_stop", _Stopped(after=2))
    probes.clear()

    from kafka.errors import KafkaTimeoutError

    pipeline._failed(KafkaTimeoutError("broker down"))
    assert probes == []
    service.store.close()


class _Stopped:
    """A stop event set after ``after`` waits: ends a back-off without waiting it out."""

    def __init__(self, after: int) -> None:
        self.left = after

    def is_set(self) -> bool:
        return self.left <= 0

    def wait(self, timeout: float) -> bool:
        self.left -= 1
        return self.is_set()
