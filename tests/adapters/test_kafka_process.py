"""The daemon's side of kafka_process.ProcessKafkaSource against a scripted child on a
socket pair (no broker; the real child is tested against a broker in tests/integration):
events in order, a revoke's commits answered while the child waits, records fetched
across a rebalance dropped, the child's failures and death raised."""

from __future__ import annotations

import pickle
import socket
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection

import pytest
from kafka.errors import KafkaConnectionError

from capwatch.adapters.io import kafka_process as kp
from capwatch.contracts.ports import PartitionFailing, Record

NONE_FAILING: dict[int, PartitionFailing] = {}
"""A fake source's failing(): the same object while nothing changes, as the source's."""


def batch(partition: int, first: int, n: int) -> bytes:
    records = [Record("t", partition, o, b"k", b"v%d" % o, 1.0)
               for o in range(first, first + n)]
    return kp._RECORDS + kp._ENCODE((records, {partition: (first, first + n)}))


class Script:
    """A source whose child is this test: ``child`` is the child's end of the channel."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.source = kp.ProcessKafkaSource("unused:9092", "t", "g")
        self.source._conn = kp._Channel(ours)
        self.child = Connection(theirs.detach())
        self.assigned: list[set[int]] = []
        self.revoked: list[set[int]] = []
        self.on_revoke: Callable[[set[int]], None] = lambda parts: None
        self.source._on_assign = self.assigned.append
        self.source._on_revoke = self._revoke

    def _revoke(self, parts: set[int]) -> None:
        self.revoked.append(parts)
        self.on_revoke(parts)

    def send(self, *messages: bytes) -> None:
        for m in messages:
            self.child.send_bytes(m)

    def assign(self, *parts: int) -> None:
        """An assignment the daemon has handled."""
        self.send(kp._ASSIGN + pickle.dumps(set(parts)))
        assert self.source.poll(1.0) == []
        assert self.child.recv_bytes() == kp._DONE


@pytest.fixture
def script() -> Iterator[Script]:
    s = Script()
    yield s
    s.child.close()
    assert s.source._conn is not None
    s.source._conn.close()


def offsets(records: list[Record]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def test_batches_arrive_whole_and_in_order(script: Script) -> None:
    script.assign(0, 1)
    script.send(batch(0, 0, 3), batch(1, 0, 2))
    assert offsets(script.source.poll(1.0)) == [(0, 0), (0, 1), (0, 2)]
    assert offsets(script.source.poll(1.0)) == [(1, 0), (1, 1)]
    assert script.source.poll(0.01) == []


def test_a_revoke_runs_after_every_earlier_batch_and_its_commit_reaches_the_child(
        script: Script) -> None:
    script.assign(0)
    handled: list[tuple[int, int]] = []
    script.on_revoke = lambda parts: script.source.commit({0: handled[-1][1] + 1})
    script.send(batch(0, 0, 3), kp._REVOKE + pickle.dumps({0}))
    handled += offsets(script.source.poll(1.0))
    assert script.revoked == []

    def child() -> None:  # the child's listener: serves the daemon's calls until done
        call = script.child.recv_bytes()
        assert call[:1] == kp._CALL
        assert pickle.loads(call[1:]) == ("commit", {0: 3})
        script.send(kp._REPLY + pickle.dumps((True, None)))
        assert script.child.recv_bytes() == kp._DONE

    listener = threading.Thread(target=child)
    listener.start()
    assert script.source.poll(1.0) == []
    listener.join(5)
    assert not listener.is_alive()
    assert script.revoked == [{0}]


def test_records_fetched_before_a_revoke_and_sent_after_it_are_dropped(
        script: Script) -> None:
    script.assign(0, 1)
    script.send(batch(0, 0, 2))
    assert offsets(script.source.poll(1.0)) == [(0, 0), (0, 1)]
    script.send(kp._REVOKE + pickle.dumps({0, 1}))
    assert script.source.poll(1.0) == []
    assert script.child.recv_bytes() == kp._DONE
    # kafka-python finished the round on its IO thread while the child was sending a
    # batch it had polled before: partition 0 is no longer this member's.
    script.send(batch(0, 2, 2))
    assert script.source.poll(1.0) == []
    script.assign(1)
    script.send(batch(1, 0, 2))
    assert offsets(script.source.poll(1.0)) == [(1, 0), (1, 1)]


def test_a_partition_fetched_again_from_its_commit_is_not_handed_out_twice(
        script: Script) -> None:
    script.assign(0)
    script.send(kp._REVOKE + pickle.dumps({0}))
    assert script.source.poll(1.0) == []
    assert script.child.recv_bytes() == kp._DONE
    script.assign(0)
    # A batch polled before the revoke (from the commit on), then the same records
    # fetched again from the commit after the assignment, and what follows them.
    script.send(batch(0, 5, 3), batch(0, 5, 4))
    assert offsets(script.source.poll(1.0)) == [(0, 5), (0, 6), (0, 7)]
    assert offsets(script.source.poll(1.0)) == [(0, 8)]


def test_what_the_child_sends_while_a_call_waits_is_kept_for_poll(script: Script) -> None:
    script.assign(0)

    def child() -> None:
        call = script.child.recv_bytes()
        script.send(batch(0, 0, 2))  # polled before it read the call
        assert pickle.loads(call[1:]) == ("member_id", None)
        script.send(kp._REPLY + pickle.dumps((True, "m-1")))

    t = threading.Thread(target=child)
    t.start()
    assert script.source.member_id() == "m-1"
    t.join(5)
    assert offsets(script.source.poll(0.01)) == [(0, 0), (0, 1)]


def test_a_commit_in_background_does_not_wait_for_the_child_and_is_answered_at_a_poll(
        script: Script) -> None:
    """The scheduled checkpoint's commit (CommitsInBackground): sent, not waited for; the
    child's answer comes in order with its batches and reaches ``done`` at a poll."""
    from capwatch.contracts.ports import CommitsInBackground

    assert isinstance(script.source, CommitsInBackground)
    script.assign(0)
    answers: list[BaseException | None] = []
    script.source.commit_async({0: 3}, answers.append)  # returns: no reply was sent yet
    call = script.child.recv_bytes()
    assert call[:1] == kp._CALL and pickle.loads(call[1:]) == ("commit", {0: 3})
    assert answers == []
    script.send(kp._REPLY + pickle.dumps((True, None)), batch(0, 0, 2))
    assert offsets(script.source.poll(1.0)) == [(0, 0), (0, 1)]
    assert answers == [None]
    # A failure is handed to ``done`` (the checkpoint then commits again, waiting).
    script.source.commit_async({0: 5}, answers.append)
    script.child.recv_bytes()
    script.send(kp._REPLY + kp._dumps_reply(False, KafkaConnectionError("not taken")))
    assert script.source.poll(0.2) == []
    assert isinstance(answers[1], KafkaConnectionError)


def test_a_call_made_while_a_commit_in_background_is_unanswered_gets_its_own_reply(
        script: Script) -> None:
    """The child answers calls in the order they came: the commit's reply, read first
    while a later call waits, goes to the commit (at the next poll), not to the call."""
    script.assign(0)
    answers: list[BaseException | None] = []
    script.source.commit_async({0: 1}, answers.append)

    def child() -> None:
        assert pickle.loads(script.child.recv_bytes()[1:]) == ("commit", {0: 1})
        assert pickle.loads(script.child.recv_bytes()[1:]) == ("member_id", None)
        script.send(kp._REPLY + kp._dumps_reply(False, KafkaConnectionError("not taken")),
                    kp._REPLY + pickle.dumps((True, "m-1")))

    t = threading.Thread(target=child)
    t.start()
    assert script.source.member_id() == "m-1"
    t.join(5)
    assert answers == []  # at a poll, on the thread that polls
    assert script.source.poll(0.01) == []
    assert len(answers) == 1 and isinstance(answers[0], KafkaConnectionError)


def test_a_failed_poll_or_call_in_the_child_is_raised_by_the_daemon(script: Script) -> None:
    script.send(kp._FAILED + kp._dumps_error(KafkaConnectionError("broker gone")))
    with pytest.raises(KafkaConnectionError, match="broker gone"):
        script.source.poll(1.0)

    def child() -> None:
        script.child.recv_bytes()
        script.send(kp._REPLY + kp._dumps_reply(False, KafkaConnectionError("no commit")))

    t = threading.Thread(target=child)
    t.start()
    with pytest.raises(KafkaConnectionError, match="no commit"):
        script.source.commit({0: 1})
    t.join(5)


def test_an_exception_that_does_not_pickle_still_says_what_it_was() -> None:
    class Odd(Exception):
        def __reduce__(self) -> str | tuple[object, ...]:
            raise TypeError("not picklable")

    error = kp._loads_error(kp._dumps_error(Odd("lost the socket")))
    assert "Odd: lost the socket" in str(error)


def test_the_child_gone_is_an_error_not_an_empty_poll(script: Script) -> None:
    script.child.close()
    with pytest.raises(kp.SourceProcessError, match="process ended"):
        script.source.poll(1.0)


def test_a_consumer_the_child_cannot_make_fails_start_with_the_clients_own_error() -> None:
    """A real child: what kafka-python raises while the consumer is made or joins (here a
    setting it does not know, before any connection) is what the daemon's start() raises,
    as with the consumer in process; the child is gone afterwards."""
    from kafka.errors import KafkaConfigurationError

    source = kp.ProcessKafkaSource("127.0.0.1:1", "t", "g",
                                   security={"no_such_setting": True})
    with pytest.raises(KafkaConfigurationError, match="no_such_setting"):
        source.start(lambda parts: None, lambda parts: None, {})
    child = source._child
    assert child is not None
    source.close()
    assert child.poll() is not None


def test_the_child_hands_messages_over_in_the_order_they_came_while_waiting_for_room(
        ) -> None:
    """A rebalance's message (small) sent while a batch polled before it waits for room
    (the daemon is 16 MiB behind) goes out after that batch: had it passed it, the batch
    would reach the daemon after the partitions were assigned again and be taken as
    fresh, and the records fetched again from the commit dropped as already handled."""
    ours, theirs = socket.socketpair()
    with ours:
        Connection(ours.detach()).send_bytes(pickle.dumps(("b", "t", "g", {}, None)))
        child = kp._Child(Connection(theirs.detach()))
    waiting = child.room._waiters  # type: ignore[attr-defined]
    child.queued = kp._AHEAD_BYTES - 50  # written to the channel, not yet read
    big = kp._RECORDS + b"x" * 100
    revoke = kp._REVOKE + pickle.dumps({0})
    assert len(revoke) < 50 < len(big)
    first = threading.Thread(target=child._send, args=(big,))
    first.start()
    deadline = time.monotonic() + 10
    while len(waiting) < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    second = threading.Thread(target=child._send, args=(revoke,))
    second.start()
    while len(waiting) < 2 and second.is_alive() and time.monotonic() < deadline:
        time.sleep(0.001)
    with child.room:  # the daemon reads what was written: room for both
        child.queued = 0
        child.room.notify_all()
    first.join(10)
    second.join(10)
    assert [child.out.get_nowait(), child.out.get_nowait()] == [big, revoke]
    child.conn.close()


def _answer_ends(script: Script, ends: dict[int, tuple[int, int, int | None]],
                 before: bytes = b"") -> threading.Thread:
    def child() -> None:
        call = script.child.recv_bytes()
        assert pickle.loads(call[1:]) == ("ends", None)
        if before:
            script.send(before)  # polled and sent before it read the call
        script.send(kp._REPLY + pickle.dumps((True, ends)))

    t = threading.Thread(target=child)
    t.start()
    return t


def test_lag_counts_from_the_childs_position_once_the_daemon_has_all_it_sent(
        script: Script) -> None:
    script.assign(0)
    script.send(batch(0, 0, 5))
    assert len(script.source.poll(1.0)) == 5
    # The child's position is past a transaction's marker (offset 5) behind the last
    # record it sent: every record handled, no lag (it counted 1, the marker).
    t = _answer_ends(script, {0: (6, 6, 5)})
    assert script.source.lag() == {0: 0}
    t.join(5)
    # Records sent and not yet taken by the daemon: counted from its last record.
    t = _answer_ends(script, {0: (12, 12, 9)}, before=batch(0, 5, 4))
    assert script.source.lag() == {0: 7}
    t.join(5)
    assert len(script.source.poll(1.0)) == 4


def test_the_child_waits_longer_after_each_failed_poll_and_polls_at_once_after_one_that_worked(
        ) -> None:
    ours, theirs = socket.socketpair()
    daemon = Connection(ours.detach())  # open, with nothing to say, while the child runs
    daemon.send_bytes(pickle.dumps(("b", "t", "g", {}, None)))
    child = kp._Child(Connection(theirs.detach()))
    outcomes = iter([KafkaConnectionError("1"), KafkaConnectionError("2"), "worked",
                     KafkaConnectionError("3"), KafkaConnectionError("4"),
                     KafkaConnectionError("5"), KafkaConnectionError("6"),
                     KafkaConnectionError("7"), KafkaConnectionError("8"),
                     KafkaConnectionError("9")])
    pauses: list[float] = []

    class Failing:
        def poll(self, timeout_s: float) -> list[Record]:
            outcome = next(outcomes, None)
            if outcome is None:
                child.closing = True
                return []
            if isinstance(outcome, Exception):
                raise outcome
            return []

        def backed_off(self, error: BaseException) -> bool:
            return False

        def recordless(self) -> dict[int, tuple[int, int]]:
            return {}

        def failing(self) -> dict[int, PartitionFailing]:
            return NONE_FAILING

    child._start = lambda: Failing()  # type: ignore[method-assign,assignment,return-value]
    child._pause = pauses.append  # type: ignore[method-assign,assignment]
    child._send = lambda message: None  # type: ignore[method-assign]
    child._run()
    assert pauses == [0.5, 1.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    child.conn.close()
    daemon.close()


def test_a_partitions_own_failure_is_backed_off_by_the_source_not_the_whole_child() -> None:
    # One partition's batch corrupt in the log fails every fetch of it while the others
    # deliver: the child's own wait, reset by each poll that worked, stayed at 0.5 s and
    # the partition was fetched again twice a second for good. The source pauses that
    # partition alone (kafka_backoff, against the broker in test_kafka_records_broker);
    # the child polls the others on at once, and still waits after a failure that is no
    # partition's.
    ours, theirs = socket.socketpair()
    daemon = Connection(ours.detach())
    daemon.send_bytes(pickle.dumps(("b", "t", "g", {}, None)))
    child = kp._Child(Connection(theirs.detach()))
    own = [KafkaConnectionError(f"p{i}") for i in range(4)]
    outcomes = iter([own[0], "worked", own[1], "worked", own[2], own[3],
                     KafkaConnectionError("whole"), "worked"])
    pauses: list[float] = []
    sent: list[bytes] = []
    failing: dict[int, PartitionFailing] = {}

    class Failing:
        def poll(self, timeout_s: float) -> list[Record]:
            nonlocal failing
            outcome = next(outcomes, None)
            if outcome is None:
                child.closing = True
                return []
            if isinstance(outcome, Exception):
                if self.backed_off(outcome):  # replaced whole, as kafka_backoff does
                    n = failing[0].failures + 1 if failing else 1
                    failing = {0: PartitionFailing(n, 0.0, str(outcome))}
                raise outcome
            return []

        def backed_off(self, error: BaseException) -> bool:
            return any(error is e for e in own)

        def recordless(self) -> dict[int, tuple[int, int]]:
            return {0: (5, 6)}  # a marker read past: sent once, not at every poll

        def failing(self) -> dict[int, PartitionFailing]:
            return failing

    child._start = lambda: Failing()  # type: ignore[method-assign,assignment,return-value]
    child._pause = pauses.append  # type: ignore[method-assign,assignment]
    child._send = sent.append  # type: ignore[method-assign,assignment]
    child._run()
    assert pauses == [0.5]
    # Every failure still reaches the daemon, a partition's own said to be so (the
    # daemon's loop then polls on at once: tests/daemon/test_partition_failures.py),
    # each after what the source's failing() became with it.
    tags = [m[:1] for m in sent if m[:1] in (kp._FAILED, kp._OWN_FAILED, kp._FAILING)]
    assert tags == [kp._FAILING, kp._OWN_FAILED] * 4 + [kp._FAILED]
    assert [pickle.loads(m[1:])[0].failures for m in sent if m[:1] == kp._FAILING] == \
        [1, 2, 3, 4]
    assert [pickle.loads(m[1:]) for m in sent if m[:1] == kp._SKIPS] == [{0: (5, 6)}]
    child.conn.close()
    daemon.close()
