"""Joining a consumer group with kafka-python 3: two client flaws worked around.

kafka-python 3.0 (3.0.12 the latest) runs each JoinGroup/SyncGroup round as a task on its
IO thread, and ``poll(timeout)`` waits for that task only until its timeout; the round is
left in flight for the next poll to take up. Two things then go wrong when a round
outlasts a poll, as it does under load and always with the daemon's 0.1 s polls:

- **Lost joins (a livelock).** A round that finishes *between* two polls is thrown away
  by the next one, which sends a fresh JoinGroup; a leader's JoinGroup starts a new
  generation for the whole group. A consumer polling with ``timeout 0`` and 0.3 s of work
  between polls never got partitions: 90 generations in 30 s at load 15.
- **A member that never rejoins.** ``need_rejoin()`` is re-evaluated before the finished
  round is taken up. When the rejoin was asked for by the leader's own metadata check
  (the partitions it assigned from differ from those it knows now), the leader's
  assignment in that very round settles the check, ``need_rejoin()`` turns False, and the
  round's result is never applied: no partitions, heartbeats stay off, the broker drops
  the member after its session timeout, and it never joins again. Seen in 2 of 14 fresh
  single-member groups at load ~14 (kafka-python debug logs: SyncGroup answered with both
  partitions, then "timeout in ensure_active_group", then nothing for 150 s).

Every fresh group hit the second path's trigger: the coordinator's metadata snapshot is
rebuilt only when a metadata answer arrives after ``subscribe()``; the first round,
usually sent before, assigned from an empty snapshot, and the answer then forced a second
round at once.

What this module does (the daemon's and the tests' KafkaSource use it):
:func:`await_group_metadata` lets the first round assign from the topic's partitions
(no second round); :func:`finish_join` keeps driving the group coordinator while a round
is in flight, so that a call is awaiting it when it finishes (up to the session timeout),
and marks any round still unfinished as wanted, so that the next poll takes it up rather
than forgetting it. What is left: a round that finishes between two polls after that
bound is still re-sent by the client (one more generation), never lost.

These reach into kafka-python's coordinator (``_coordinator``, ``_join_task``,
``_metadata_snapshot``, ``request_rejoin``, ``poll``); each access degrades to the client's own
behaviour if the attribute is gone, and tests/adapters/test_kafka_join.py checks that the
installed client still has them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

JOIN_WAIT_MIN_S = 1.0


def coordinator(consumer: Any) -> Any:
    return getattr(consumer, "_coordinator", None)


def join_unfinished(consumer: Any) -> bool:
    """A JoinGroup/SyncGroup round was started and its result not yet applied."""
    return getattr(coordinator(consumer), "_join_task", None) is not None


def group_snapshot_lists(consumer: Any, topic: str) -> bool:
    """The group coordinator's metadata snapshot (what a leader assigns from) lists the
    topic's partitions."""
    snapshot = getattr(coordinator(consumer), "_metadata_snapshot", None)
    return bool(snapshot.get(topic)) if isinstance(snapshot, dict) else True


def await_group_metadata(consumer: Any, topic: str, timeout_s: float,
                         clock: Callable[[], float] = time.monotonic,
                         sleep: Callable[[float], None] = time.sleep) -> bool:
    """After ``subscribe()``: wait (up to ``timeout_s``) for the metadata answer that the
    subscription asked for to reach the coordinator's snapshot, so that the first round
    assigns from it. False if it did not come (joining anyway costs one more round)."""
    deadline = clock() + timeout_s
    while not group_snapshot_lists(consumer, topic):
        if clock() >= deadline:
            return False
        # The IO thread fills the snapshot in; nothing here to wait on but the attribute.
        sleep(0.02)
    return True


def finish_join(consumer: Any, wait_s: float,
                clock: Callable[[], float] = time.monotonic) -> bool:
    """While a round is unfinished, ask for the rejoin (so that the next poll takes the
    round up instead of dropping it) and drive the group coordinator alone (no fetch, so
    no waiting for records once joined), up to ``wait_s``: the round's result is then
    applied by a call awaiting it. True if no round is left unfinished."""
    group = coordinator(consumer)
    rejoin = getattr(group, "request_rejoin", None)
    drive = getattr(group, "poll", None)
    if rejoin is None or drive is None:
        return not join_unfinished(consumer)
    deadline = clock() + max(wait_s, JOIN_WAIT_MIN_S)
    while join_unfinished(consumer):
        rejoin()
        left = deadline - clock()
        if left <= 0:
            return False  # still in flight: the next poll awaits it, the rejoin asked for
        drive(timeout_ms=int(left * 1000))
    return True
