"""The emitter's Kafka transport against a real broker (tests/support/kafka_broker.py)."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer

from capwatch.client import DeliveryError, KafkaTransport, TransitionEmitter
from capwatch.contracts.wire import decode

pytestmark = pytest.mark.integration

S0 = frozenset({("at", "rover1", "wp1")})
S1 = frozenset({("at", "rover1", "wp2")})
NAV = ("navigate", "rover1", "wp1", "wp2")


def test_batches_reach_the_topic_keyed_by_agent_in_order(kafka_bootstrap: str,
                                                         kafka_topic: str) -> None:
    with TransitionEmitter(KafkaTransport(kafka_bootstrap, kafka_topic), agent_id="rover-17",
                           family="rover-v3", batch_size=16) as emitter:
        for _ in range(50):
            emitter.emit(S0, NAV, S1, executed=True)
        emitter.flush()
        assert emitter.delivered == 50
    consumer = KafkaConsumer(kafka_topic, bootstrap_servers=kafka_bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    try:
        records = []
        for record in consumer:
            records.append(record)
            if len(records) == 50:
                break
    finally:
        consumer.close()
    assert {r.key for r in records} == {b"rover-17"}
    steps = []
    for r in records:
        decoded = decode(r.value, key=r.key)
        assert isinstance(decoded, list)
        steps.append(decoded[0].step)
    assert steps == list(range(50))


def test_a_record_the_broker_refuses_surfaces_as_a_delivery_error(kafka_bootstrap: str,
                                                                  kafka_topic: str) -> None:
    transport = KafkaTransport(kafka_bootstrap, kafka_topic, max_request_size=2000)
    emitter = TransitionEmitter(transport, agent_id="rover-17", family="rover-v3")
    big = frozenset({("at", f"rover{i}", "wp1") for i in range(200)})
    emitter.emit(big, NAV, big)
    with pytest.raises(DeliveryError, match="MessageSizeTooLarge") as info:
        emitter.close()
    assert len(info.value.undelivered) == 1
