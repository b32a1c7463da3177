"""A publisher never leaves an agent's older model version last on the models topic
(PendingPublisher.newest_model): a version sent again goes out as the newest, and a newer
version stored meanwhile is sent after an acknowledged one. Over a real broker:
tests/integration/test_kafka_version_order.py. Here a scripted client and store."""

from __future__ import annotations

from typing import Any

import pytest

from capwatch.adapters.io.kafka_common import PendingPublisher, PublishError


class Scripted(PendingPublisher):
    """The records whose handles are in ``refused`` fail; the others are acknowledged.
    ``store`` stands for the models store: its newest version, or down."""

    def __init__(self, refused: set[int]) -> None:
        super().__init__(models_topic="m", alerts_topic="a", dead_letter_topic="d")
        self.sent: list[tuple[str, bytes]] = []
        self.refused = refused
        self.newest = b"v1"
        self.down = False
        self.newest_model = self._newer_than

    def _newer_than(self, value: bytes) -> bytes | None:
        if self.down:
            raise RuntimeError("store unreachable")
        return self.newest if self.newest > value else None

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> Any:
        self.sent.append((topic, value))
        return len(self.sent) - 1

    def _flush_client(self, timeout_s: float) -> None:
        pass

    def _failure(self, handle: Any, timeout_s: float) -> tuple[Exception | None, bool]:
        return (RuntimeError("refused"), False) if handle in self.refused else (None, False)

    def values(self) -> list[bytes]:
        return [v for _, v in self.sent]


def test_a_version_sent_again_is_its_agents_newest_and_waits_while_that_is_not_known(
        ) -> None:
    pub = Scripted(refused={0})
    pub._send("m", "agent", b"v1")
    pub.newest, pub.down = b"v2", True  # another replica stored (and published) v2
    with pytest.raises(PublishError):
        pub.flush(1)  # refused; the store cannot say which is newest: not sent again
    assert pub.values() == [b"v1"] and pub.pending() == 1
    pub.down = False
    with pytest.raises(PublishError):
        pub.flush(1)  # kept unsent until now: this flush fails too, nothing committed
    assert pub.values() == [b"v1", b"v2"]  # the newest, once it is known
    pub.flush(1)
    assert pub.pending() == 0 and pub.values() == [b"v1", b"v2"]


def test_a_newer_version_stored_meanwhile_is_sent_after_an_acknowledged_one() -> None:
    """The record was held inside the client (this replica cut off) and went out once the
    connection came back, after another replica's newer version: the newest follows."""
    pub = Scripted(refused=set())
    pub._send("m", "agent", b"v1")
    pub.newest, pub.down = b"v2", True
    pub.flush(1)  # v1 acknowledged; which version is newest is not known yet
    assert pub.values() == [b"v1"] and pub.pending() == 1
    pub.down = False
    with pytest.raises(PublishError):
        pub.flush(1)  # checked now: v2 goes out after v1
    assert pub.values() == [b"v1", b"v2"]
    pub.flush(1)
    assert pub.pending() == 0 and pub.values() == [b"v1", b"v2"]
    pub._send("m", "agent", b"v2")
    pub.flush(1)  # the newest itself: nothing more
    assert pub.pending() == 0 and pub.values() == [b"v1", b"v2", b"v2"]


def test_records_of_other_topics_are_sent_again_as_they_were() -> None:
    pub = Scripted(refused={0})
    pub.newest = b"~never"
    pub._send("a", "agent", b"alert")
    with pytest.raises(PublishError):
        pub.flush(1)
    pub.flush(1)
    assert pub.values() == [b"alert", b"alert"]
