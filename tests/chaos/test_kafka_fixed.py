"""Rows of issue 12 over the real Kafka broker that are fixed, in a bounded form (part of
``make test``): one 10 MB message among ordinary ones (row 3), and a broker frozen under
the daemon (row 6; 30 s outages, frozen and killed, with the drift fleet are in
reproductions/test_kafka_outages.py, run by ``make chaos``).

Row 3 was reported as "dead-lettered 9 times". The count was the test's own doing: it
keyed all 21 records with the first agent's id while half of the ordinary events were
another agent's, and those 8 were (rightly) dead-lettered for a key that does not match
their agent id; the 10 MB record itself was dead-lettered once. This test keys every
record by its agent and checks each record's fate, so a real repeat would show.
"""

from __future__ import annotations

import base64
import hashlib
import json
import signal
import time
from pathlib import Path

import pytest

from tests.chaos.harness import Daemon, names_kafka, readyz, wait_readyz
from tests.chaos.hostile import oversized
from tests.chaos.kafka_harness import (
    CLIENTS,
    committed_and_end,
    kafka_daemon_config,
    make_topics,
    produce,
    read_topic,
    wait_done,
)
from tests.chaos.selection import cases
from tests.support._proc import free_port
from tests.support.kafka_broker import KafkaBroker

pytestmark = pytest.mark.integration

MB = 1024 * 1024


@pytest.mark.parametrize("client", cases(["kafka-python"], CLIENTS))
def test_a_10_mb_message_is_dead_lettered_once_and_the_partition_moves_on(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], kafka_bootstrap: str,
        tmp_path: Path, client: str) -> None:
    valid, families = valid_events
    ordinary = valid[:40]
    keys = [json.loads(v)["agent_id"] for v in ordinary]
    huge = oversized(ordinary[0], 10 * MB)
    at = 17  # in the middle: records before and after it share its fetches
    values = [*ordinary[:at], huge, *ordinary[at:]]
    topics = make_topics(kafka_bootstrap, partitions=1, transitions_max_bytes=16 * MB)
    produce(topics, values, [*keys[:at], keys[0], *keys[at:]], max_request_size=16 * MB)
    store = tmp_path / "store.db"
    config = kafka_daemon_config(topics, store, families, {}, client=client)
    d = Daemon(config, tmp_path, "huge")
    done = wait_done(topics, store, lambda: d.proc.poll() is None, 120)
    code = d.kill(signal.SIGTERM)
    assert done, f"not done (exit {code}): {d.tail()}"
    assert code == 0
    stopped = next(e for e in d.log_events() if e.get("event") == "daemon stopped")
    assert stopped["processed"] == len(values)
    assert stopped["dead_letters"] == 1

    dead = [json.loads(v) for v in read_topic(topics, topics.dead_letter)]
    assert len(dead) == 1, [(x["offset"], x["reason"]) for x in dead]
    letter = dead[0]
    assert (letter["partition"], letter["offset"]) == (0, at)
    assert "exceeds" in letter["reason"]
    assert letter["raw_length"] == len(huge)
    assert letter["raw_sha256"] == hashlib.sha256(huge).hexdigest()
    assert letter["truncated"] is True
    assert huge.startswith(base64.b64decode(letter["raw_base64"]))
    assert len(json.dumps(letter)) < 1_000_000  # fits the dead-letter topic's default limit
    assert committed_and_end(topics) == (len(values), len(values))

    # Committed past it: a restart of the group reads only what arrives later.
    more = valid[40:45]
    produce(topics, more, [json.loads(v)["agent_id"] for v in more])
    again = Daemon(config, tmp_path, "again")
    done = wait_done(topics, store, lambda: again.proc.poll() is None, 120)
    code = again.kill(signal.SIGTERM)
    assert done and code == 0, again.tail()
    stopped = next(e for e in again.log_events() if e.get("event") == "daemon stopped")
    assert (stopped["processed"], stopped["dead_letters"]) == (len(more), 0)
    assert len(read_topic(topics, topics.dead_letter)) == 1


@pytest.mark.parametrize("client", cases(["confluent-kafka"], CLIENTS))
def test_a_frozen_broker_makes_the_daemon_not_ready_until_it_answers_again(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], own_broker: KafkaBroker,
        tmp_path: Path, client: str) -> None:
    process = own_broker.process
    assert process is not None
    valid, families = valid_events
    keys = [json.loads(v)["agent_id"] for v in valid]
    half = len(valid) // 2
    topics = make_topics(own_broker.bootstrap)
    produce(topics, valid[:half], keys[:half])
    store = tmp_path / "store.db"
    port = free_port()
    d = Daemon(kafka_daemon_config(topics, store, families, {}, http_port=port,
                                   client=client), tmp_path, "frozen")
    try:
        assert wait_done(topics, store, lambda: d.proc.poll() is None, 120), d.tail()
        assert wait_readyz(port, d, lambda s, b: s == 200, 60) is not None, d.tail()
        process.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        seen: list[tuple[float, int, dict[str, object]]] = []
        # Silence for longer than the session timeout (6 s here) is an outage.
        noticed = wait_readyz(port, d, names_kafka, 30, seen)
        frozen_for = time.monotonic() - t0
        assert d.proc.poll() is None, d.tail()
        status_while_frozen = readyz(port)
    finally:
        process.send_signal(signal.SIGCONT)
    assert noticed is not None, f"/readyz while the broker was frozen: {seen[-3:]}"
    # Still frozen: not ready, and why (or no answer in 2 s on a loaded machine).
    assert status_while_frozen[0] == 0 or names_kafka(*status_while_frozen), \
        status_while_frozen
    back = wait_readyz(port, d, lambda s, b: s == 200, 60)
    produce(topics, valid[half:], keys[half:])
    done = wait_done(topics, store, lambda: d.proc.poll() is None, 120)
    code = d.kill(signal.SIGTERM)
    assert back is not None and done and code == 0, d.tail()
    assert committed_and_end(topics) == (len(valid), len(valid))
    stopped = next(e for e in d.log_events() if e.get("event") == "daemon stopped")
    assert stopped["dead_letters"] == 0
    failed = [e for e in d.log_events() if e.get("event") == "dependency failed; retrying"]
    assert failed and all(e.get("component") == "Kafka" for e in failed), failed
    print(f"\nfrozen broker: /readyz 503 naming Kafka after {frozen_for:.1f} s")
