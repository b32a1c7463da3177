"""The emitter's Kafka transport against a real broker (tests/support/kafka_broker.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer

from capwatch.client import DeliveryError, KafkaTransport, TransitionEmitter
from capwatch.contracts.wire import decode
from tests.support.kafka_broker import KafkaBroker, start_kafka_broker

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


@pytest.fixture
def own_broker() -> Iterator[KafkaBroker]:
    """A broker of this test's own: it is killed, which others must not see."""
    broker = start_kafka_broker()
    if broker.external or broker.process is None:
        broker.stop()
        pytest.skip("needs a broker this test starts itself")
    try:
        yield broker
    finally:
        broker.stop(graceful=False)


def _values_until_marker(bootstrap: str, topic: str) -> list[bytes]:
    """The topic's values up to the first event from S0 to S0 (the test's marker)."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=60_000)
    values: list[bytes] = []
    try:
        for record in consumer:
            values.append(record.value)
            decoded = decode(record.value, key=record.key)
            assert isinstance(decoded, list)
            if decoded[0].state == S0 and decoded[0].next_state == S0:
                break
    finally:
        consumer.close()
    return values


def test_events_reported_undelivered_are_never_delivered_later(own_broker: KafkaBroker,
                                                               kafka_topic: str) -> None:
    """oper19: with the broker down, flush gave up after send_timeout_s and the emitter
    handed the batch back as undelivered, while kafka-python kept retrying it for its own
    delivery timeout (120 s): once the broker was back the 'undelivered' events arrived
    anyway, and an agent that stored or resent them duplicated them."""
    emitter = TransitionEmitter(KafkaTransport(own_broker.bootstrap, kafka_topic,
                                               delivery_timeout_s=3.0),
                                agent_id="rover-17", family="rover-v3", send_timeout_s=3.0)
    try:
        emitter.emit(S0, NAV, S1)
        emitter.flush()  # the topic exists and the producer knows its leader
        own_broker.kill()
        for _ in range(5):
            emitter.emit(S1, NAV, S0)
        undelivered: set[bytes] = set()
        while True:  # the five may go in more than one batch, each failing on its own
            try:
                emitter.flush(timeout_s=120.0)
                break
            except DeliveryError as e:
                undelivered |= {value for _, value in e.undelivered}
        assert len(undelivered) == 5
        own_broker.start_again()
        for _ in range(10):  # the producer may take longer than 3 s to reconnect
            emitter.emit(S0, NAV, S0)  # the marker: the same producer, key and partition
            try:
                emitter.flush(timeout_s=60.0)
                break
            except DeliveryError as e:
                undelivered |= {value for _, value in e.undelivered}
    finally:
        emitter.close()
    values = _values_until_marker(own_broker.bootstrap, kafka_topic)
    assert len(values) == 2, "events reported undelivered arrived after all"
    assert not undelivered & set(values)
