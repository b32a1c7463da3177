"""An alert larger than a broker takes in one record still goes out, and does not hold up
what is published after it.

A broker's default ``message.max.bytes`` is 1 MB; the producer allows 8 MiB (a model
version of a big domain). An operator's run made a 6 MB ``assessment_failed`` alert (its
evidence: whole query states). The broker refused it on every attempt; each flush, which
also carries the model versions and dead letters a commit waits for, failed with it, so
the daemon published nothing more and ``/readyz`` said "Kafka unavailable". The alert's
evidence is left out of the record when it would not fit (the store keeps it whole, for
``capwatch alerts show``)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from kafka import KafkaConsumer

from capwatch.adapters.io.kafka import KafkaPublisher, ensure_topics
from capwatch.adapters.io.kafka_common import MAX_ALERT_BYTES, PendingPublisher, alert_record
from capwatch.contracts.wire import AlertEvent, DeadLetterRecord


def _alert(evidence_bytes: int,
           summary: str = "assessment failed (unexplained): ...") -> AlertEvent:
    return AlertEvent(alert_type="assessment_failed", severity="warning", agent_id="depot-1",
                      family="depot", summary=summary,
                      detail={"reason": "unexplained"},
                      evidence={"assessment": {"unexplained": ["x" * evidence_bytes]}},
                      dedup_key="assessment_failed|depot|depot-1|-|unexplained",
                      time=datetime.now(UTC))


def _publisher(client: str, bootstrap: str, prefix: str) -> KafkaPublisher | Any:
    m, a, d = f"{prefix}-m", f"{prefix}-a", f"{prefix}-d"
    ensure_topics(bootstrap, transitions=f"{prefix}-t", models=m, alerts=a, dead_letter=d,
                  partitions=1)
    if client == "confluent-kafka":
        from capwatch.adapters.io.kafka_confluent import ConfluentKafkaPublisher
        return ConfluentKafkaPublisher(bootstrap, models_topic=m, alerts_topic=a,
                                       dead_letter_topic=d)
    return KafkaPublisher(bootstrap, models_topic=m, alerts_topic=a, dead_letter_topic=d)


def _read(bootstrap: str, topic: str, n: int) -> list[dict[str, Any]]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, max_partition_fetch_bytes=16 << 20)
    try:
        out = [json.loads(m.value) for m in consumer]
    finally:
        consumer.close()
    assert len(out) == n, out
    return out


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_an_alert_too_large_for_the_broker_goes_out_without_its_evidence(
        kafka_bootstrap: str, client: str) -> None:
    prefix = f"size-{uuid.uuid4().hex[:8]}"
    pub = _publisher(client, kafka_bootstrap, prefix)
    try:
        pub.alert(_alert(3_000_000))
        pub.alert(_alert(10))
        pub.dead_letter(DeadLetterRecord(reason="r", raw_base64="", source="s",
                                         time=datetime.now(UTC)))
        pub.flush(30.0)  # raised PublishError (MessageSizeTooLarge) on every attempt
    finally:
        pub.close()
    big, small = _read(kafka_bootstrap, f"{prefix}-a", 2)
    assert small["evidence"] == {"assessment": {"unexplained": ["x" * 10]}}
    assert big["summary"] == small["summary"] and big["detail"] == small["detail"]
    omitted = big["evidence"]["omitted"]
    assert "capwatch alerts show" in omitted and "3,0" in omitted
    _read(kafka_bootstrap, f"{prefix}-d", 1)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_an_alert_whose_summary_alone_is_too_large_goes_out_with_its_beginning(
        kafka_bootstrap: str, client: str) -> None:
    """Without its evidence and detail the record was still over the broker's limit: the
    summary (one line per cause, or text an agent supplied) is cut to its beginning."""
    prefix = f"size-{uuid.uuid4().hex[:8]}"
    pub = _publisher(client, kafka_bootstrap, prefix)
    summary = "assessment failed (unexplained): " + "state (at depot0 truck1); " * 60_000  # 1.56 MB
    try:
        pub.alert(_alert(10, summary))
        pub.alert(_alert(10))
        pub.dead_letter(DeadLetterRecord(reason="r", raw_base64="", source="s",
                                         time=datetime.now(UTC)))
        pub.flush(30.0)  # raised PublishError (MessageSizeTooLarge) on every attempt
    finally:
        pub.close()
    big, small = _read(kafka_bootstrap, f"{prefix}-a", 2)
    assert small["summary"] == "assessment failed (unexplained): ..."
    kept, note = big["summary"].split(" [... ", 1)
    assert summary.startswith(kept) and len(kept) > 400_000
    assert f"{len(summary) - len(kept):,} more characters" in note
    assert "capwatch alerts show" in note
    assert big["dedup_key"] == small["dedup_key"]
    _read(kafka_bootstrap, f"{prefix}-d", 1)


def test_an_alert_is_cut_only_when_it_would_not_fit() -> None:
    class Kept(PendingPublisher):
        def __init__(self) -> None:
            super().__init__(models_topic="m", alerts_topic="a", dead_letter_topic="d")
            self.values: list[bytes] = []

        def _produce(self, topic: str, key: bytes | None, value: bytes) -> Any:
            self.values.append(value)
            return None

    pub = Kept()
    fits = _alert(MAX_ALERT_BYTES - 2_000)
    pub.alert(fits)
    pub.alert(_alert(MAX_ALERT_BYTES))
    whole, cut = (json.loads(v) for v in pub.values)
    assert whole["evidence"] == fits.evidence
    assert set(cut["evidence"]) == {"omitted"}
    assert len(pub.values[1]) < 4_000


@pytest.mark.parametrize("char", ["x", "\u00e9", "\U0001f680", "\u0000"])
def test_a_summary_of_any_characters_is_cut_to_fit(char: str) -> None:
    """A character is one to six bytes in the record (UTF-8, or an escape): whatever the
    summary holds, the record fits and starts with the summary's beginning."""
    event = _alert(10, char * 800_000)
    value = alert_record(event)
    assert len(value) <= MAX_ALERT_BYTES
    summary = json.loads(value)["summary"]
    kept = summary.split(" [... ", 1)[0]
    assert kept and event.summary.startswith(kept)
    assert len(value) > MAX_ALERT_BYTES // 2  # not cut far more than needed
