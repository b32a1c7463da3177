"""The commit rule observed during a run, not only at its end (faults15 checked only that
everything was committed when a run was over): the consumer group's commits are sampled
all along a daemon's run over the real broker while its dead-letter topic refuses one
dead letter for a while, and no sampled commit may have passed a record whose dead letter
the broker had not yet appended. The dead-letter topic stamps each record with the
broker's append time (LogAppendTime), the same host's clock as the sampler's, so a
commit seen before its dead letter's append is a commit before the acknowledgement."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from capwatch.adapters.sim.fleet import SimulatedFleet
from tests.integration._daemon_setup import (
    CLIENTS,
    Setup,
    committed,
    daemon_config,
    family_specs,
    lag,
    make_topics,
    produce,
    running,
    serve_fleet,
    wait,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def setup(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    topics = make_topics(kafka_bootstrap, kafka_topic, PARTITIONS)
    fleet = SimulatedFleet.build(family_specs("rover-v1", "courier-v1"), 3, [], seed=5)
    with serve_fleet(fleet) as urls:
        yield Setup(kafka_bootstrap, topics, PARTITIONS, fleet, urls, tmp_path)


def _letters(bootstrap: str, topic: str, n: int) -> dict[tuple[int, int], float]:
    """Source (partition, offset) of each dead letter → the broker's append time (s)."""
    import json

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=2000)
    out: dict[tuple[int, int], float] = {}
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        for m in consumer:
            assert m.timestamp_type == 1, "the topic stamps the append time"
            letter = json.loads(m.value)
            out[(letter["partition"], letter["offset"])] = m.timestamp / 1000
    consumer.close()
    return out


@pytest.mark.parametrize("client", CLIENTS)
def test_no_commit_seen_during_the_run_passes_a_dead_letter_not_yet_appended(
        setup: Setup, client: str) -> None:
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    dlq = f"{setup.topics.dead_letter}-observed"
    admin = KafkaAdminClient(bootstrap_servers=setup.bootstrap)
    try:
        admin.create_topics([NewTopic(dlq, 1, 1, topic_configs={
            "max.message.bytes": "4096", "message.timestamp.type": "LogAppendTime"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=setup.bootstrap, acks="all")
    bad: list[tuple[int, int]] = []

    def bad_records(size: int, count: int) -> None:
        for i in range(count):
            meta = producer.send(setup.topics.transitions, key=f"fuzz-{i}".encode(),
                                 value=b"{" + b"x" * size).get(30)
            bad.append((meta.partition, meta.offset))

    # Two phases, so that commits move during the run: the first (its dead letters fit)
    # is committed before the second brings the refused one.
    n = produce(setup, rounds=2)
    bad_records(10, 3)
    n += 3

    configure_logging("error", "json")
    config = daemon_config(setup, 0, client)
    config["kafka"]["dead_letter_topic"] = dlq
    service = build_service(DaemonConfig(**config))
    p = service.pipeline
    samples: list[tuple[float, dict[int, int]]] = []
    reported: list[str] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen = committed(setup)
            at = time.time()  # after the answer: the commit it reports was made before
            if seen is not None:
                samples.append((at, {tp.partition: o for tp, o in seen.items()
                                     if tp.topic == setup.topics.transitions}))
            reported.extend(x for x in p.problems() if "written to Kafka" in x)
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with running(service):
            wait(lambda: p.processed >= n and lag(setup) == 0, 90, "the first phase committed")
            bad_records(8000, 1)  # refused (over 4 KB) until the topic's limit is raised
            n += 1 + produce(setup, rounds=2)
            bad_records(10, 3)
            n += 3
            producer.close()
            wait(lambda: p.processed >= n, 90, "the second phase to be handled")
            during = len(samples)
            wait(lambda: len(samples) >= during + 20, 60, "commits sampled during the refusal")

            def raise_the_limit() -> bool:
                admin = KafkaAdminClient(bootstrap_servers=setup.bootstrap)
                try:
                    admin.alter_configs([ConfigResource(
                        ConfigResourceType.TOPIC, dlq, configs={"max.message.bytes": "1000000"})])
                    return True
                except ValueError:  # the admin client's check: the topic's configs not known
                    return False
                finally:
                    admin.close()

            wait(raise_the_limit, 30, "the dead-letter topic's limit to be raised")
            wait(lambda: lag(setup) == 0 and not p.problems(), 90,
                 "every offset committed once the dead letter is written")
    finally:
        stop.set()
        sampler.join(10)
        producer.close()
    appended = _letters(setup.bootstrap, dlq, len(bad))
    assert sorted(appended) == sorted(bad), "every bad record has its dead letter"
    states = {tuple(sorted(c.items())) for _, c in samples}
    assert len(states) >= 3, f"commits moved during the run ({len(states)} states seen)"
    early = [(at, source, appended[source]) for at, commits in samples
             for source in bad if commits.get(source[0], 0) > source[1]
             and appended[source] > at]
    assert early == [], f"commits seen before their dead letters were appended: {early[:3]}"
    assert reported, "the refused dead letter was reported while the topic refused it"
