"""A topic's id is stored beside positions as one text whichever Kafka client read it
(rev22b: kafka-python's ``uuid.UUID`` and librdkafka's base64 ``Uuid`` of one topic
compared as two topics)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Uuid

from capwatch.adapters.io.kafka_common import topic_id_text


def _halves(u: uuid.UUID) -> Uuid:
    return Uuid(int.from_bytes(u.bytes[:8], "big", signed=True),
                int.from_bytes(u.bytes[8:], "big", signed=True))


@pytest.mark.parametrize("text", ["01234567-89ab-cdef-0fed-cba987654321",
                                  "ffffffff-ffff-ffff-8000-000000000001",
                                  "00000000-0000-0001-0000-000000000000"])
def test_both_clients_ids_of_one_topic_read_alike(text: str) -> None:
    u = uuid.UUID(text)
    assert str(_halves(u)) != text  # librdkafka's own text is another form
    assert topic_id_text(u) == topic_id_text(_halves(u)) == topic_id_text(text) == text


def test_no_id_is_none() -> None:
    zero = uuid.UUID(int=0)
    assert topic_id_text(None) is None
    assert topic_id_text(zero) is None
    assert topic_id_text(_halves(zero)) is None
    assert topic_id_text(str(zero)) is None


def test_a_text_that_is_no_uuid_is_kept_as_given() -> None:
    assert topic_id_text("not-a-uuid") == "not-a-uuid"
