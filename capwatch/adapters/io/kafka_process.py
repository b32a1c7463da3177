"""kafka-python in a process of its own (``kafka.consumer_process: true``): the consumer's
fetching and record parsing run on another core while the daemon's pipeline runs.

kafka-python parses fetched record batches in pure Python on the thread that calls
``poll()``: 6-22 us of CPU per record on 0.5-6 KB messages, on the same core (and under
the same GIL) as the pipeline. Here a child process runs :class:`~capwatch.adapters.io.
kafka.KafkaSource` unchanged (the same settings, group membership, listener and commit
code) and hands each polled batch to the daemon as one msgpack message over a socket
pair; the daemon only decodes it (~1 us a record).

The rules do not change, because everything crosses one ordered channel:

- **Commit rule.** The daemon commits only offsets it names, as before; a commit is a
  request the child carries out and answers, and a failure is raised in the daemon.
- **Rebalances.** The child's listener sends the revoke (assign) to the daemon and waits
  for it to be handled before kafka-python goes on. Every batch the child sent before it
  precedes it on the channel, and the daemon takes events strictly in order, so by the
  time it runs its revoke callback (the checkpoint) it has handled exactly what the child
  handed out, as when the consumer ran in the daemon's own process. The commits that
  checkpoint makes are served by the waiting listener (as kafka.py's listener does, off
  kafka-python's IO thread). kafka-python may also finish a group round on its IO thread
  between two polls, so a batch polled before a revoke can reach the daemon after it: the
  daemon drops records of partitions it does not own and records below the offset it has
  already handled (the same records, fetched again from the commit), so nothing is
  handled by two members nor twice by one.
- **Flow control.** The child stops polling once 16 MiB of batches wait to be written
  to the daemon (on top of the socket's buffer and kafka-python's own fetch buffer).
  What it sends goes out in the order it was handed over: a rebalance's message never
  passes a batch polled before it that waits for room (that batch, reaching the daemon
  after the partitions were assigned again, would be taken as fresh records).
- **Death.** The child exits when its end of the channel closes (the daemon exited or was
  killed) without committing anything; the daemon raises if the child died.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import os
import pickle
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from capwatch.contracts.ports import AssignmentLost, PartitionFailing, Rebalance, Record

if TYPE_CHECKING:
    from capwatch.adapters.io.kafka import KafkaSource

log = structlog.get_logger("capwatch.kafka")

__all__ = ["ProcessKafkaSource", "SourceProcessError"]

# What crosses the channel: one tag byte, then the payload.
_RECORDS = b"R"  # child -> daemon: a msgpack _Batch
_REVOKE = b"V"  # child -> daemon: pickled partitions; the child waits for _DONE
_ASSIGN = b"A"  # child -> daemon: likewise
_FAILED = b"E"  # child -> daemon: a pickled exception poll() raised
_OWN_FAILED = b"F"  # child -> daemon: likewise, one partition's own, backed off alone
_FAILING = b"X"  # child -> daemon: pickled, the source's failing() when it changed
_REPLY = b"K"  # child -> daemon: pickled (ok, result or exception) for a _CALL
_STARTED = b"S"  # child -> daemon: start() returned
_SKIPS = b"P"  # child -> daemon: pickled, the source's recordless() when it changed
_CALL = b"C"  # daemon -> child: pickled (method, argument)
_DONE = b"D"  # daemon -> child: a rebalance was handled

_Batch = tuple[list[Record], dict[int, tuple[int, int]]]
"""A poll's records and, per partition, the first offset among them and the one after
the last (kafka-python returns each partition's records in order, unbroken)."""
_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder(_Batch).decode

_CLOSE_WAIT_S = 30.0

_AHEAD_BYTES = 16 * 2**20
"""How far (bytes of batches not yet written to the socket) the child may run ahead of
the daemon, beyond the socket's buffer and kafka-python's fetched records (up to
``kafka.partition_fetch_bytes`` per partition). At least one batch, whatever its size."""

_POLL_S = 0.05
"""The child's poll timeout: how long a call from the daemon (a commit) may wait while
the stream is quiet."""

_RETRY_S = (0.5, 30.0)
"""After a failed poll that was no one partition's (those wait alone: kafka_backoff) the
child waits this long, doubling up to the second figure, before it polls again (serving
the daemon's calls meanwhile), as the daemon's main loop waits after a failure. Polling
again at once, a failure each poll raises was a fetch in a loop, and failures queued by
the thousand ahead of the daemon, which takes one a retry: it went on reading stale ones
long after the broker was well again."""


class SourceProcessError(RuntimeError):
    """The consumer's process died or broke the channel's protocol."""


def _dumps_error(error: BaseException) -> bytes:
    try:
        return pickle.dumps(error)
    except Exception:  # an exception that does not pickle still says what it was
        return pickle.dumps(RuntimeError(f"{type(error).__name__}: {error}"))


def _loads_error(payload: bytes | memoryview) -> BaseException:
    try:
        error = pickle.loads(payload)
    except Exception as e:  # an exception class that cannot be rebuilt from its args
        return SourceProcessError(f"the Kafka consumer's process failed ({e})")
    return error if isinstance(error, BaseException) else SourceProcessError(repr(error))


def _loads_reply(payload: bytes | memoryview) -> tuple[bool, Any]:
    try:
        ok, result = pickle.loads(payload)
    except Exception as e:
        return False, SourceProcessError(f"the Kafka consumer's process failed ({e})")
    return bool(ok), result


def _dumps_reply(ok: bool, result: Any) -> bytes:
    if ok:
        return pickle.dumps((True, result))
    try:
        return pickle.dumps((False, result))
    except Exception:
        return pickle.dumps((False, RuntimeError(f"{type(result).__name__}: {result}")))


class _Channel:
    """The daemon's end of the socket pair, framed as multiprocessing's Connection frames
    (the child's end is one), read straight into one buffer per message: Connection's
    reads copy a 2-3 MB batch three more times (chunks, a BytesIO, the payload's slice),
    ~2 µs a record of 5.6 KB on the daemon's main loop."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._ready = select.poll()
        self._ready.register(sock, select.POLLIN)

    def poll(self, timeout_s: float) -> bool:
        """Something (or the end) can be read within ``timeout_s``."""
        return bool(self._ready.poll(max(0, int(timeout_s * 1000))))

    def send_bytes(self, message: bytes) -> None:
        self.sock.sendall(struct.pack("!i", len(message)) + message)

    def recv(self) -> tuple[bytes, memoryview]:
        """A message's tag and payload."""
        size = struct.unpack("!i", self._read(4))[0]
        if size == -1:
            size = struct.unpack("!Q", self._read(8))[0]
        message = self._read(size)
        return bytes(message[:1]), memoryview(message)[1:]

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        while view:
            got = self.sock.recv_into(view)
            if not got:
                raise EOFError("the channel was closed")
            view = view[got:]
        return buf

    def close(self) -> None:
        self.sock.close()


class ProcessKafkaSource:
    """The transitions topic read by kafka-python in a child process; commits only when
    told. The same arguments as :class:`~capwatch.adapters.io.kafka.KafkaSource`."""

    def __init__(self, bootstrap: str, topic: str, group_id: str, *,
                 log_setup: tuple[str, str, tuple[Any, ...]] | None = None,
                 **options: Any) -> None:
        self.name = topic
        self.topic = topic
        self._args = (bootstrap, topic, group_id, options, log_setup)
        """``log_setup``: (module, function, arguments) the child calls first, so that its
        log lines look like the daemon's (the adapter does not import the daemon's
        logging)."""
        self._conn: _Channel | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._events: collections.deque[tuple[bytes, memoryview]] = collections.deque()
        """What the child sent while the daemon waited for an answer, in order."""
        self._lock = threading.RLock()
        self._on_assign: Rebalance | None = None
        self._on_revoke: Rebalance | None = None
        self._owned: set[int] = set()
        """The partitions assigned to this member, as the daemon was told."""
        self._next: dict[int, int] = {}
        """Per owned partition, the offset after the last record handed to the daemon."""
        self._recordless: dict[int, tuple[int, int]] = {}
        """The child's source's :meth:`recordless`, as it last sent it."""
        self._failing: Mapping[int, PartitionFailing] = {}
        """The child's source's :meth:`failing`, as it last sent it (replaced whole)."""
        self._backed_off: BaseException | None = None
        """The last failure the child said was one partition's own (:meth:`backed_off`)."""
        self._unanswered: collections.deque[Callable[[BaseException | None], None]] = \
            collections.deque()
        """The ``done`` of each commit sent by :meth:`commit_async` and not yet answered,
        oldest first: the child serves calls in the order they came, so the next reply
        not to a synchronous :meth:`_call` is the oldest's."""
        self._answered: list[tuple[Callable[[BaseException | None], None],
                                   BaseException | None]] = []
        """Answers read (by a synchronous call's wait, or a poll), handed to their
        ``done`` at the next :meth:`poll`."""

    # ------------------------------------------------------------------ the contract

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        del resume  # the group's committed offsets are the checkpoint
        self._on_assign, self._on_revoke = on_assign, on_revoke
        ours, theirs = socket.socketpair()
        with ours, theirs:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "capwatch.adapters.io.kafka_process",
                 str(theirs.fileno())], pass_fds=(theirs.fileno(),))
            self._conn = _Channel(socket.socket(fileno=os.dup(ours.fileno())))
        self._conn.send_bytes(pickle.dumps(self._args))
        while True:  # rebalances may come before start() returns, as in-process
            tag, payload = self._receive()
            if tag == _STARTED:
                return
            self._handle(tag, payload)

    def poll(self, timeout_s: float) -> list[Record]:
        with self._lock:
            self._deliver_answers()
            deadline = time.monotonic() + timeout_s
            while True:
                if self._events:
                    tag, payload = self._events.popleft()
                else:
                    conn = self._connection()
                    if not conn.poll(deadline - time.monotonic()):
                        return []
                    tag, payload = self._receive()
                if tag == _RECORDS:
                    return self._accept(*_DECODE(payload))
                if tag == _REPLY:
                    self._answer(payload)  # a commit_async's: the wait for records goes on
                    self._deliver_answers()
                    continue
                self._handle(tag, payload)
                deadline = 0.0  # a rebalance handled: return what is there, if anything

    def commit(self, offsets: Mapping[int, int]) -> None:
        if self._conn is None or not offsets:
            return
        try:
            self._call("commit", dict(offsets))
        except AssignmentLost as e:
            # The child's source stopped reading them; what it sent before is dropped
            # here until the group assigns them again (its callback says so, in order).
            with self._lock:
                self._owned -= e.partitions
                for p in e.partitions:
                    self._next.pop(p, None)
            raise

    def commit_async(self, offsets: Mapping[int, int],
                     done: Callable[[BaseException | None], None]) -> None:
        """See :class:`~capwatch.contracts.ports.CommitsInBackground`: the commit goes to
        the child, which makes it between two of its polls, and the daemon's main loop
        goes on meanwhile; ``done`` is called at a later :meth:`poll` with the child's
        answer. A membership lost shows in ``done``'s error; the caller's synchronous
        commit then raises AssignmentLost as :meth:`commit` does.

        The synchronous commit made the main loop wait for the child to finish the poll
        or write under way, serve the call and commit to the broker: 50-85 ms a scheduled
        checkpoint at load 13-15 (stochastic, docs/performance.md, session 21), while
        the child's read-ahead sat unread."""
        if self._conn is None or not offsets:
            done(None)
            return
        with self._lock:
            self._connection().send_bytes(_CALL + pickle.dumps(("commit", dict(offsets))))
            self._unanswered.append(done)

    def topic_id(self) -> str | None:
        """See :class:`~capwatch.contracts.ports.KnowsTopicId`: asked of the cluster by an
        admin client here (the child's consumer holds it, out of reach of a call): one
        connection at an assignment; None if it cannot be read."""
        from capwatch.adapters.io.kafka import described_topic_id

        bootstrap, topic, _, options, _ = self._args
        try:
            return described_topic_id(bootstrap, topic, security=options.get("security"),
                                      timeout_s=options.get("session_timeout_ms", 10_000)
                                      / 1000)
        except Exception as e:  # the positions are then used as before: never fatal
            log.warning("the topic's id could not be read", topic=topic, error=str(e)[:300])
            return None

    def member_id(self) -> str | None:
        """This member's id in the group (None before it joined)."""
        if self._conn is None:
            return None
        result = self._call("member_id", None)
        return str(result) if result is not None else None

    @property
    def child_pid(self) -> int | None:
        """The consumer's process (benchmarks add its CPU time to the daemon's)."""
        return self._child.pid if self._child is not None else None

    def exhausted(self) -> bool:
        return False

    def recordless(self) -> dict[int, tuple[int, int]]:
        """See :class:`~capwatch.contracts.ports.SkipsRecordless`: sent by the child after
        the poll that read past them, in order with its records (no round trip)."""
        return dict(self._recordless)

    def failing(self) -> Mapping[int, PartitionFailing]:
        """See :class:`~capwatch.contracts.ports.ReportsFailingPartitions`: sent by the
        child when it changed, before the failure that changed it."""
        return self._failing

    def backed_off(self, error: BaseException) -> bool:
        """Whether ``error``, raised by the last poll, was a partition's own, which the
        child backs off alone (as :meth:`KafkaSource.backed_off
        <capwatch.adapters.io.kafka.KafkaSource.backed_off>`)."""
        return error is self._backed_off

    def lag(self) -> dict[int, int]:
        if self._conn is None:
            return {}
        try:
            ends: dict[int, tuple[int, int, int | None]] = self._call("ends", None)
        except Exception:  # lag is a metric: never let it break a checkpoint
            return {}
        lag = {}
        for p, (end, position, sent) in ends.items():
            # The child's position runs ahead of the daemon by what it has sent and the
            # daemon not yet taken: counted from the daemon's last record then. Once the
            # daemon has everything sent, the child's position counts: it is past what
            # no record stands for (a transaction's marker, a compacted batch's end),
            # which the daemon's last record is not, so a stream ending with a committed
            # transaction showed a lag of 1 for good.
            handled = self._next.get(p)
            lag[p] = max(0, end - (position if handled is None or handled == sent
                                   else handled))
        return lag

    def close(self) -> None:
        if self._conn is None:
            return
        with contextlib.suppress(Exception):
            self._call("close", None)
        self._conn.close()
        self._conn = None
        if self._child is not None:
            try:
                self._child.wait(_CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()
            self._child = None

    def _accept(self, records: list[Record], ranges: dict[int, tuple[int, int]]
                ) -> list[Record]:
        """The batch's records this member may hand out: of owned partitions, from the
        offset it has reached on (see the module's docstring)."""
        owned, upto = self._owned, self._next
        if all(p in owned and first >= upto.get(p, first)
               for p, (first, _) in ranges.items()):
            for p, (_, after) in ranges.items():
                upto[p] = after
            return records
        kept = []
        for r in records:
            p = r.partition
            if p in owned and r.offset >= upto.get(p, r.offset):
                kept.append(r)
                upto[p] = r.offset + 1
        log.info("dropped records fetched across a rebalance",
                 records=len(records) - len(kept), owned=sorted(owned))
        return kept

    # ------------------------------------------------------------------ the channel

    def _connection(self) -> _Channel:
        if self._conn is None:
            raise SourceProcessError("the Kafka consumer's process is not started")
        return self._conn

    def _receive(self) -> tuple[bytes, memoryview]:
        try:
            return self._connection().recv()
        except (EOFError, OSError) as e:
            code = self._child.poll() if self._child is not None else None
            raise SourceProcessError(f"the Kafka consumer's process ended (exit code "
                                     f"{code})") from e

    def _call(self, method: str, argument: Any) -> Any:
        with self._lock:
            self._connection().send_bytes(_CALL + pickle.dumps((method, argument)))
            earlier = len(self._unanswered)  # commits sent before this call, answered first
            while True:
                tag, payload = self._receive()
                if tag == _REPLY and earlier:
                    self._answer(payload)
                    earlier -= 1
                    continue
                if tag == _REPLY:
                    ok, result = _loads_reply(payload)
                    if not ok:
                        raise result
                    return result
                # Sent before the child read the call: kept, in order, for poll().
                self._events.append((tag, payload))

    def _answer(self, payload: memoryview) -> None:
        """The child's reply to the oldest commit sent by :meth:`commit_async`."""
        if not self._unanswered:
            raise SourceProcessError("a reply from the consumer that no call waits for")
        done = self._unanswered.popleft()
        ok, result = _loads_reply(payload)
        error = None if ok else (result if isinstance(result, BaseException)
                                 else SourceProcessError(repr(result)))
        if isinstance(error, AssignmentLost):
            # As commit() does: what the child's source stopped reading is dropped here.
            self._owned -= error.partitions
            for p in error.partitions:
                self._next.pop(p, None)
        self._answered.append((done, error))

    def _deliver_answers(self) -> None:
        answered, self._answered = self._answered, []
        for done, error in answered:
            done(error)

    def _handle(self, tag: bytes, payload: memoryview) -> None:
        if tag == _FAILED:
            raise _loads_error(payload)
        if tag == _OWN_FAILED:
            error = self._backed_off = _loads_error(payload)
            raise error
        if tag == _SKIPS:
            self._recordless = pickle.loads(payload)
            return
        if tag == _FAILING:
            self._failing = pickle.loads(payload)
            return
        if tag not in (_REVOKE, _ASSIGN):
            raise SourceProcessError(f"unexpected message {tag!r} from the consumer")
        parts: set[int] = pickle.loads(payload)
        callback = self._on_revoke if tag == _REVOKE else self._on_assign
        if tag == _REVOKE:
            self._owned -= parts
        else:
            self._owned |= parts
        for p in parts:
            self._next.pop(p, None)
            self._recordless.pop(p, None)
        if parts & self._failing.keys():
            self._failing = {p: f for p, f in self._failing.items() if p not in parts}
        try:
            assert callback is not None
            callback(parts)
        except Exception:
            # Said, not raised: the child's rebalance goes on once _DONE arrives either
            # way, and Pipeline.revoke already gives up a failed checkpoint's partitions
            # without a commit, so nothing is left for a retry to save.
            log.exception("rebalance callback failed", partitions=sorted(parts),
                          callback="revoke" if tag == _REVOKE else "assign")
        finally:
            self._connection().send_bytes(_DONE)


# ---------------------------------------------------------------------- the child process


class _Child:
    """The child's side: a KafkaSource polled in a loop, serving the daemon's calls.

    Everything it sends goes through one writer thread, in the order it was handed over,
    up to :data:`_AHEAD_BYTES` ahead of the daemon: the poll loop goes on fetching while
    the daemon's main loop is busy with a batch (or waits for a CPU on a busy machine),
    instead of stopping at each socket-buffer's worth."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.reading = threading.Lock()
        """Held while the channel is read: by the poll loop between polls, by a rebalance
        callback (on its own thread) while it waits for the daemon."""
        self.out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.room = threading.Condition()
        self.queued = 0
        """Bytes handed to the writer and not yet written."""
        self.tickets = 0
        """Messages that came to :meth:`_send` so far: each is handed over in that order."""
        self.turn = 0
        """The ticket of the next message to hand over."""
        self.gone = False
        """The channel broke: the daemon is gone."""
        self.args = pickle.loads(conn.recv_bytes())
        self.source: KafkaSource | None = None
        self.sent: dict[int, int] = {}
        """Per partition, the offset after the last record sent to the daemon (read by
        the daemon's lag: when it has taken them all, this process's position is its)."""
        self.closing = False
        self.writer = threading.Thread(target=self._write, name="capwatch-consumer-writer",
                                       daemon=True)

    def run(self) -> None:
        self.writer.start()
        try:
            self._run()
        finally:
            self.out.put(None)  # what is queued (the close's answer) goes out first
            self.writer.join(_CLOSE_WAIT_S)

    def _start(self) -> KafkaSource:
        from capwatch.adapters.io.kafka import KafkaSource

        bootstrap, topic, group_id, options, log_setup = self.args
        if log_setup is not None:
            module, function, arguments = log_setup
            getattr(importlib.import_module(module), function)(*arguments)
        source = self.source = KafkaSource(bootstrap, topic, group_id, **options)
        source.start(self._forward(_ASSIGN), self._forward(_REVOKE), {})
        return source

    def _run(self) -> None:
        try:
            source = self._start()
        except Exception as e:  # the daemon's start() raises it, as in process
            self._send(_FAILED + _dumps_error(e))
            return
        self._send(_STARTED)
        wait = 0.0
        skips: dict[int, tuple[int, int]] = {}
        failing = source.failing()
        while not self.closing:
            with self.reading:
                while not self.closing and self.conn.poll(0):
                    self._serve(self.conn.recv_bytes())
            if self.closing:
                break
            try:
                records = source.poll(_POLL_S)
            except Exception as e:
                if source.backed_off(e):
                    if source.failing() is not failing:  # said before the failure
                        failing = source.failing()
                        self._send(_FAILING + pickle.dumps(dict(failing)))
                    self._send(_OWN_FAILED + _dumps_error(e))
                    # A partition's own failure: it waits alone (kafka_backoff), so the
                    # others are polled on at once. The whole-consumer wait below, reset
                    # by any poll that worked, never grew while they delivered between
                    # two failures: the failing partition was fetched again, and its
                    # failure sent, about twice a second for good.
                    continue
                self._send(_FAILED + _dumps_error(e))
                wait = min(_RETRY_S[1], max(_RETRY_S[0], wait * 2))
                self._pause(wait)
                continue
            wait = 0.0
            if records:
                ranges: dict[int, tuple[int, int]] = {}
                for r in records:
                    first = ranges.get(r.partition)
                    ranges[r.partition] = (r.offset if first is None else first[0],
                                           r.offset + 1)
                self._send(_RECORDS + _ENCODE((records, ranges)))
                for p, (_, after) in ranges.items():
                    self.sent[p] = after
            # A transaction's marker is mostly read at a poll of its own, after the
            # records: the daemon's checkpoint commits past it once it knows.
            now = source.recordless()
            if now != skips:
                skips = now
                self._send(_SKIPS + pickle.dumps(now))
            if source.failing() is not failing:  # replaced whole at each change
                failing = source.failing()
                self._send(_FAILING + pickle.dumps(dict(failing)))

    def _pause(self, seconds: float) -> None:
        """Serve the daemon's calls for ``seconds`` (or until it closes the source). The
        channel is held a poll slice at a time: a rebalance callback reads it too."""
        deadline = time.monotonic() + seconds
        while not self.closing and (left := deadline - time.monotonic()) > 0:
            with self.reading:
                if self.conn.poll(min(left, _POLL_S)):
                    self._serve(self.conn.recv_bytes())

    def _send(self, message: bytes) -> None:
        # First come, first handed over: a rebalance's small message must not pass a
        # batch polled before it that waits for room, or that batch would reach the
        # daemon after the partitions were assigned again and be taken for fresh records
        # (the records fetched again from the commit dropped as already handled).
        with self.room:
            ticket = self.tickets
            self.tickets += 1
            while self.turn != ticket \
                    or (self.queued and self.queued + len(message) > _AHEAD_BYTES):
                if self.gone:
                    raise BrokenPipeError("the daemon is gone")
                self.room.wait(0.5)
            if self.gone:
                raise BrokenPipeError("the daemon is gone")
            self.queued += len(message)
            self.out.put(message)
            self.turn += 1
            self.room.notify_all()

    def _write(self) -> None:
        while (message := self.out.get()) is not None:
            try:
                self.conn.send_bytes(message)
            except OSError:
                with self.room:
                    self.gone = True
                    self.room.notify_all()
                return
            with self.room:
                self.queued -= len(message)
                self.room.notify_all()

    def _forward(self, tag: bytes) -> Rebalance:
        def call(parts: set[int]) -> None:
            if self.closing:
                return
            for p in parts:  # read again from the commit: as for the daemon's own count
                self.sent.pop(p, None)
            self._send(tag + pickle.dumps(parts))
            with self.reading:
                while True:  # the daemon's commits come while it handles the rebalance
                    message = self.conn.recv_bytes()
                    if message == _DONE:
                        return
                    self._serve(message)
        return call

    def _serve(self, message: bytes) -> None:
        if message[:1] != _CALL:
            raise SourceProcessError(f"unexpected message {message[:1]!r} from the daemon")
        method, argument = pickle.loads(message[1:])
        try:
            result: Any = None
            source = self.source
            if source is None:
                raise SourceProcessError("the consumer is not made yet")
            if method == "commit":
                source.commit(argument)
            elif method == "member_id":
                result = source.member_id()
            elif method == "ends":
                result = {p: (end, position, self.sent.get(p))
                          for p, (end, position) in source.ends().items()}
            elif method == "close":
                self.closing = True
                source.close()
            else:
                raise SourceProcessError(f"no such call {method!r}")
        except Exception as e:
            self._send(_REPLY + _dumps_reply(False, e))
            return
        self._send(_REPLY + _dumps_reply(True, result))


def main(fd: int) -> int:
    # The daemon ends this process through the channel (or by going away): a terminal's
    # Ctrl-C, sent to the whole process group, must not kill it before the daemon's
    # last commit.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    child: _Child | None = None
    try:
        child = _Child(conn)
        child.run()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        # The daemon is gone: leave the group at once, committing nothing.
        if child is not None and child.source is not None:
            child.closing = True
            with contextlib.suppress(Exception):
                child.source.close()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
