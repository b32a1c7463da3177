"""/readyz of a Kafka replica without partitions, against the real broker: 503 with the
group's state when it was left out (a rebalance held up by a member that stopped polling),
200 with a note when it stands by in a group with more members than partitions.

The daemon runs in-process (build_service) with its HTTP server; the other member of its
group is a plain kafka-python consumer the test drives.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.daemon.service import Service, build_service
from tests.daemon.helpers import config
from tests.integration._daemon_setup import CLIENTS, running, wait

pytestmark = pytest.mark.integration


def _readyz(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url + "/readyz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:  # no answer in 10 s on a loaded machine: not ready either
        return 0, {}


def _asked(seen: list[tuple[int, dict[str, Any]]], url: str) -> dict[str, Any]:
    """Asks /readyz once, keeping the answer in ``seen``: its body."""
    seen.append(_readyz(url))
    return seen[-1][1]


class OtherMember:
    """A member of the daemon's group that sorts first (the range assignor gives it the
    first partitions) and polls until told to stop polling, or to leave."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, client_id="a-other-member",
            # A 6 s session was lost once in ~40 loaded runs before the member ever held
            # the partitions (its LeaveGroup then found no such member): the heartbeat
            # thread starved on a 2-core machine at load 20. Nothing here needs the broker
            # to notice this member's death quickly: it leaves the group explicitly.
            enable_auto_commit=False, session_timeout_ms=30_000, heartbeat_interval_ms=3000,
            # A member that stops polling holds a rebalance up this long.
            max_poll_interval_ms=300_000)
        self.consumer.subscribe([topic])
        self.polling = threading.Event()
        self.polling.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.polling.is_set():
                with self._lock:
                    self.consumer.poll(timeout_ms=200)
            else:
                self._stop.wait(0.2)

    def held(self) -> set[int]:
        with self._lock:
            return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self.consumer.close(autocommit=False)


def _daemon(tmp_path: Path, bootstrap: str, topic: str, partitions: int,
            client: str = "kafka-python") -> Service:
    cfg = config(
        tmp_path, source={"kind": "kafka"},
        kafka={"client": client, "bootstrap_servers": bootstrap, "transitions_topic": topic,
               "models_topic": f"{topic}-m", "alerts_topic": f"{topic}-a",
               "dead_letter_topic": f"{topic}-d", "group_id": f"{topic}-g",
               "partitions": partitions, "session_timeout_ms": 6000},
        health={"unassigned_after_s": 3},
        http={"enabled": True, "port": 0})
    return build_service(cfg, publisher=MemoryPublisher())


@pytest.fixture
def other(kafka_bootstrap: str, kafka_topic: str) -> Iterator[list[OtherMember]]:
    members: list[OtherMember] = []
    yield members
    for m in members:
        m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_replica_standing_by_in_a_group_with_more_members_than_partitions_is_ready(
        client: str, tmp_path: Path, kafka_bootstrap: str, kafka_topic: str,
        other: list[OtherMember]) -> None:
    service = _daemon(tmp_path, kafka_bootstrap, kafka_topic, partitions=1, client=client)
    assert service.api is not None
    url = service.api.url
    other.append(first := OtherMember(kafka_bootstrap, kafka_topic, f"{kafka_topic}-g"))
    wait(lambda: first.held() == {0}, 90, "the other member to hold the partition")
    with running(service):
        seen: list[tuple[int, dict[str, Any]]] = []
        wait(lambda: "notes" in _asked(seen, url), 90, "/readyz to say the replica stands by")
        status, body = seen[-1]
        assert status == 200 and body["ready"] is True and body["problems"] == [], seen[-1]
        assert body["notes"] == [f"standing by: the group {kafka_topic}-g has 2 members "
                                 f"for 1 partitions"]
        assert service.pipeline.assigned == set() and first.held() == {0}


def test_a_replica_left_without_partitions_is_not_ready_and_says_why(
        tmp_path: Path, kafka_bootstrap: str, kafka_topic: str,
        other: list[OtherMember]) -> None:
    """A member that stopped polling holds the daemon's join up (the broker waits for it
    to rejoin): the daemon reads nothing. Once that member leaves, the daemon takes the
    partitions and is ready again."""
    service = _daemon(tmp_path, kafka_bootstrap, kafka_topic, partitions=2)
    assert service.api is not None
    url = service.api.url
    other.append(stuck := OtherMember(kafka_bootstrap, kafka_topic, f"{kafka_topic}-g"))
    wait(lambda: stuck.held() == {0, 1}, 90, "the other member to hold both partitions")
    stuck.polling.clear()
    with running(service):
        seen: list[tuple[int, dict[str, Any]]] = []
        wait(lambda: any("no partitions held" in p
                         for p in _asked(seen, url).get("problems", [])), 90,
             "/readyz to say the replica holds no partitions")
        status, body = seen[-1]
        assert status == 503 and body["ready"] is False, body
        problem, = [p for p in body["problems"] if "no partitions held" in p]
        assert f"the group {kafka_topic}-g is PreparingRebalance" in problem, problem
        assert "health.unassigned_after_s 3" in problem
        assert service.pipeline.assigned == set()
        stuck.close()
        other.clear()
        wait(lambda: _readyz(url) == (200, {"ready": True, "problems": []}), 90,
             "/readyz to be 200 once the replica holds the partitions")
        assert service.pipeline.assigned == {0, 1}
