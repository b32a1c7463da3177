"""A model version the publisher sends again goes out as its agent's newest
(PendingPublisher.newest_model; over a real broker: tests/integration/
test_kafka_version_order.py). Here a scripted client: the first record sent fails."""

from __future__ import annotations

from typing import Any

import pytest

from capwatch.adapters.io.kafka_common import PendingPublisher, PublishError


class FirstSendFails(PendingPublisher):
    def __init__(self) -> None:
        super().__init__(models_topic="m", alerts_topic="a", dead_letter_topic="d")
        self.sent: list[tuple[str, bytes]] = []

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> Any:
        self.sent.append((topic, value))
        return len(self.sent) - 1

    def _flush_client(self, timeout_s: float) -> None:
        pass

    def _failure(self, handle: Any, timeout_s: float) -> tuple[Exception | None, bool]:
        return (RuntimeError("refused"), False) if handle == 0 else (None, False)


def test_a_version_sent_again_is_its_agents_newest_and_waits_while_that_is_not_known(
        ) -> None:
    pub = FirstSendFails()
    answers: list[bytes | Exception] = [RuntimeError("store unreachable"), b"v2"]

    def newest(value: bytes) -> bytes:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    pub.newest_model = newest
    pub._send("m", "agent", b"v1")
    with pytest.raises(PublishError):
        pub.flush(1)  # refused; the store cannot say which is newest: not sent again
    assert [v for _, v in pub.sent] == [b"v1"] and pub.pending() == 1
    with pytest.raises(PublishError):
        pub.flush(1)  # kept unsent until then: this flush fails too, nothing committed
    assert [v for _, v in pub.sent] == [b"v1", b"v2"]  # the newest, once it is known
    pub.flush(1)
    assert pub.pending() == 0


def test_records_of_other_topics_are_sent_again_as_they_were() -> None:
    pub = FirstSendFails()
    pub.newest_model = lambda value: b"never"
    pub._send("a", "agent", b"alert")
    with pytest.raises(PublishError):
        pub.flush(1)
    pub.flush(1)
    assert [v for _, v in pub.sent] == [b"alert", b"alert"]
