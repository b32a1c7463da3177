"""``kafka.auto_offset_reset: latest`` with a replica killed before its first checkpoint,
over the real broker, with each replica a ``capwatch run`` process of its own.

With ``latest`` a partition nothing was committed of starts at its end. Before the source
committed that resolved start, a replica SIGKILLed before its first checkpoint left no
commit, and the next replica started at the end again: every record produced in between
was never read (a fault run of session 10: 400 of 800). Here replica A starts with
``latest`` on a topic that already holds history, handles a first batch, and is killed
with nothing checkpointed (``scheduler.checkpoint_s`` one hour); a second batch is
produced while no replica runs; replica B starts and a third batch follows. B must
handle every record of the three batches exactly once, and none of the history.

At-least-once allows one kind of duplicate, and only it happens: the first batch is
handled by A and again by B, because A never committed past it.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.chaos.harness import Daemon
from tests.chaos.kafka_harness import committed_and_end, make_topics, produce, wait_done
from tests.chaos.kafka_replicas import (
    SOURCES,
    group_committed,
    replica_config,
    wait_holding,
    wait_read,
)
from tests.chaos.selection import cases
from tests.support._proc import free_port

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.mark.parametrize("source", cases(["kafka-python-process"], list(SOURCES)))
def test_records_produced_while_no_replica_committed_are_read_by_the_next(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], kafka_bootstrap: str,
        tmp_path: Path, source: str) -> None:
    lines, families = valid_events
    keys = [json.loads(v)["agent_id"] for v in lines]
    history, first, second, third = 12, 36, 36, 36
    assert len(lines) >= history + first + second + third
    batches = [(lines[a:b], keys[a:b]) for a, b in (
        (0, history), (history, history + first), (history + first, history + first + second),
        (history + first + second, history + first + second + third))]
    topics = make_topics(kafka_bootstrap, partitions=PARTITIONS)
    store = tmp_path / "store.db"
    produce(topics, *batches[0])

    port_a = free_port()
    a = Daemon(replica_config(topics, store, families, "a", source, port_a, 3600.0),
               tmp_path, "a")
    try:
        wait_holding([a], PARTITIONS, 120)
        at_start = group_committed(topics)
        produce(topics, *batches[1])
        wait_read(a, port_a, first, 60)
    finally:
        a.kill(signal.SIGKILL)
    at_kill = group_committed(topics)
    produce(topics, *batches[2])

    port_b = free_port()
    b = Daemon(replica_config(topics, store, families, "b", source, port_b, 1.0),
               tmp_path, "b")
    try:
        wait_holding([b], PARTITIONS, 120)
        produce(topics, *batches[3])
        done = wait_done(topics, store, lambda: b.proc.poll() is None, 120)
    finally:
        code = b.kill(signal.SIGTERM)
    assert done, f"B did not commit every record (exit {code}): {b.tail()}"
    assert code == 0
    stopped = next(e for e in b.log_events() if e.get("event") == "daemon stopped")
    # Every record after A's start exactly once (none lost, none twice in B), no history.
    assert stopped["processed"] == first + second + third, b.tail()
    assert stopped["dead_letters"] == 0
    assert committed_and_end(topics) == (history + first + second + third,) * 2
    # A's start was committed before it handed out a record (the history's end on every
    # partition), and nothing past it: A was killed before its first checkpoint.
    assert at_start == at_kill and sum(at_start.values()) == history, (at_start, at_kill)
    assert set(at_start) == set(range(PARTITIONS))
