"""Emit an agent's transitions to capwatch: Kafka, the daemon's HTTP ingest, or a file.

:class:`TransitionEmitter` is called from the agent's own (synchronous) loop. ``emit``
validates and encodes the step at once, in the caller, and puts it in a bounded buffer;
one background thread sends the buffer in batches through a :class:`Transport`. When
the buffer is full, ``emit`` blocks up to ``block_timeout_s`` and then raises
:class:`BufferFull` (``on_full="block"``), or raises at once (``on_full="raise"``), so an
agent that outruns its transport finds out instead of growing without bound.

A batch that cannot be delivered (after the transport's own retries and the emitter's)
is kept, with its cause, in a :class:`DeliveryError` that the next ``emit``, ``flush`` or
``close`` raises: nothing is dropped silently, and the caller holds the undelivered
events (``error.undelivered``) to store or resend.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal, Protocol
from urllib.parse import urlsplit

from pydantic import ValidationError

from capwatch.client.vocabulary import Vocabulary, VocabularyError
from capwatch.contracts.errors import error_text
from capwatch.contracts.ingest import INGEST_PATH, NDJSON
from capwatch.contracts.wire import AgentTransition, encode_transition
from capwatch.model.domain import GroundAction, GroundAtom

__all__ = [
    "BufferFull",
    "DeliveryError",
    "HttpTransport",
    "JsonlTransport",
    "KafkaTransport",
    "TransitionEmitter",
    "Transport",
    "TransportError",
]

Message = tuple[str, bytes]
"""(key, value): the agent id and one wire-format event."""


class TransportError(RuntimeError):
    """A batch was not delivered. ``retryable`` is False when sending it again cannot help
    (the receiver refused the content, e.g. a 400 or 401)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class DeliveryError(RuntimeError):
    """Events could not be delivered; ``undelivered`` holds them, oldest first."""

    def __init__(self, message: str, undelivered: list[Message]) -> None:
        super().__init__(message)
        self.undelivered = undelivered


class BufferFull(RuntimeError):
    """The emitter's buffer stayed full: the transport is slower than the agent."""


class Transport(Protocol):
    """Delivers a batch or raises :class:`TransportError`. Called from one thread."""

    def send(self, batch: Sequence[Message], timeout_s: float) -> None: ...

    def close(self) -> None: ...


class JsonlTransport:
    """Appends events to a file, one per line, flushed and fsynced per batch.

    The daemon reads such a file with ``source.kind: jsonl`` (``follow: true`` to tail it).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 - closed in close()

    def send(self, batch: Sequence[Message], timeout_s: float) -> None:
        try:
            self._file.write(b"".join(value + b"\n" for _, value in batch))
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as e:
            raise TransportError(f"writing {self.path}: {e}") from e

    def close(self) -> None:
        self._file.close()


class KafkaTransport:
    """A kafka-python producer: ``acks=all``, idempotent, keyed by agent id.

    A batch counts as delivered when every record in it is acknowledged by the broker.
    The producer retries internally, so the emitter does not (a resend after a partial
    failure would duplicate records).

    A batch counts as undelivered only once the producer itself has given up on it: it
    keeps retrying a record until ``delivery_timeout_s`` (its ``delivery_timeout_ms``),
    so :meth:`send` waits that long whatever shorter timeout the emitter passes. Giving up
    earlier (oper19b) handed the emitter's caller "undelivered" events that the producer
    delivered anyway once the broker was back, and a caller that resent them duplicated
    them. The emitter's ``send_timeout_s`` defaults to this ``delivery_timeout_s``.
    """

    retry_safe = False
    RESOLVE_GRACE_S = 10.0
    """Past the delivery timeout, how long a record may still take to be failed: an
    in-flight request is failed when its ``request_timeout_ms`` runs out."""

    def __init__(self, bootstrap_servers: str, topic: str = "capwatch.transitions", *,
                 delivery_timeout_s: float = 30.0, **producer_options: Any) -> None:
        from kafka import KafkaProducer

        options: dict[str, Any] = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}
        options.update(producer_options)
        options.setdefault("delivery_timeout_ms", int(delivery_timeout_s * 1000))
        # kafka-python refuses a delivery timeout below linger_ms + request_timeout_ms.
        options.setdefault("request_timeout_ms", min(
            30_000, max(1, options["delivery_timeout_ms"] - options["linger_ms"])))
        self.delivery_timeout_s = options["delivery_timeout_ms"] / 1000
        self.topic = topic
        self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers, **options)

    def send(self, batch: Sequence[Message], timeout_s: float) -> None:
        try:
            futures = [self._producer.send(self.topic, key=k.encode(), value=v)
                       for k, v in batch]
        except Exception as e:
            raise TransportError(f"Kafka topic {self.topic}: {error_text(e)}") from e
        deadline = time.monotonic() + max(timeout_s,
                                          self.delivery_timeout_s + self.RESOLVE_GRACE_S)
        with contextlib.suppress(Exception):  # the futures say what became of each record
            self._producer.flush(timeout=max(0.0, deadline - time.monotonic()))
        errors: list[Exception] = []
        unresolved = 0
        for f in futures:
            try:
                f.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as e:
                if f.is_done:
                    errors.append(e)
                else:
                    unresolved += 1
        if unresolved:
            raise TransportError(
                f"Kafka topic {self.topic}: {unresolved} record(s) still pending in the"
                f" producer {self.delivery_timeout_s + self.RESOLVE_GRACE_S:g}s after they"
                " were sent: they may yet be delivered")
        if errors:
            raise TransportError(f"Kafka topic {self.topic}: {error_text(errors[0])}")

    def close(self) -> None:
        self._producer.close(timeout=10)


class HttpTransport:
    """POSTs batches to the daemon's ingest endpoint (``/ingest/v1/transitions``).

    ``url`` is the daemon's base URL; ``token`` its ingest token. A 200 means the daemon
    stored the whole batch durably. 4xx answers are not retried (the message says why);
    connection errors, timeouts and 5xx are.
    """

    retry_safe = True

    def __init__(self, url: str, token: str, *, timeout_s: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http(s) URL, got {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/") + INGEST_PATH
        self._token = token
        self.timeout_s = timeout_s

    def send(self, batch: Sequence[Message], timeout_s: float) -> None:
        body = b"".join(value + b"\n" for _, value in batch)
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=min(timeout_s, self.timeout_s))
        try:
            conn.request("POST", self._path, body=body, headers={
                "Content-Type": NDJSON, "Authorization": f"Bearer {self._token}"})
            response = conn.getresponse()
            data = response.read(1_000_000)
        except (OSError, http.client.HTTPException) as e:
            raise TransportError(f"POST {self._path}: {type(e).__name__}: {e}") from e
        finally:
            conn.close()
        if response.status == 200:
            return
        message = _error_message(data)
        raise TransportError(f"POST {self._path}: {response.status}: {message}",
                             retryable=response.status >= 500 or response.status in (408, 429))

    def close(self) -> None:
        """Connections are per batch; nothing to release."""


def _error_message(data: bytes) -> str:
    try:
        body = json.loads(data)
        error = body.get("error", {})
        return str(error.get("message", body))
    except (ValueError, AttributeError):
        return data[:500].decode("utf-8", "replace")


class TransitionEmitter:
    """Buffers, batches and sends one agent's transitions (thread-safe).

    ``vocabulary``, when given, checks every atom and action before it is buffered
    (:class:`~capwatch.client.vocabulary.VocabularyError`). Steps are numbered within an
    episode; call :meth:`begin_episode` when the agent starts a new one.
    """

    def __init__(self, transport: Transport, *, agent_id: str, family: str,
                 vocabulary: Vocabulary | None = None, batch_size: int = 200,
                 linger_s: float = 0.05, max_buffered: int = 10_000,
                 on_full: Literal["block", "raise"] = "block", block_timeout_s: float = 10.0,
                 retries: int | None = None, retry_backoff_s: float = 0.2,
                 send_timeout_s: float | None = None,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        if not agent_id or not family:
            raise ValueError("agent_id and family must be non-empty")
        if batch_size < 1 or max_buffered < batch_size:
            raise ValueError("need 1 <= batch_size <= max_buffered")
        if on_full not in ("block", "raise"):
            raise ValueError("on_full is 'block' or 'raise'")
        self.agent_id = agent_id
        self.family = family
        self.vocabulary = vocabulary
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.max_buffered = max_buffered
        self.on_full = on_full
        self.block_timeout_s = block_timeout_s
        # Resending a batch is safe only when the transport delivers a batch all or nothing.
        self.retries = retries if retries is not None else (
            3 if getattr(transport, "retry_safe", True) else 0)
        self.retry_backoff_s = retry_backoff_s
        # A transport that cannot give up on a batch sooner (KafkaTransport: its producer
        # retries until its delivery timeout) sets the default.
        self.send_timeout_s = send_timeout_s if send_timeout_s is not None else float(
            getattr(transport, "delivery_timeout_s", 30.0))
        self._transport = transport
        self._clock = clock
        self._cond = threading.Condition()
        self._buffer: deque[Message] = deque()
        self._inflight = 0
        self._failed: list[Message] = []
        self._failure: str | None = None
        self._closed = False
        self.episode_id = self._new_episode_id()
        self._step = 0
        self.emitted = 0
        self.delivered = 0
        self._thread = threading.Thread(target=self._run, name="capwatch-emitter", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ caller side

    def _new_episode_id(self) -> str:
        return f"{self.agent_id}-{uuid.uuid4().hex[:12]}"

    def begin_episode(self, episode_id: str | None = None) -> str:
        with self._cond:
            self.episode_id = episode_id or self._new_episode_id()
            self._step = 0
            return self.episode_id

    def emit(self, state: Iterable[GroundAtom], action: GroundAction,
             next_state: Iterable[GroundAtom], *, executed: bool | None = None,
             optimal: bool = False) -> None:
        """Validate, encode and buffer ⟨s, a, s'⟩.

        Raises VocabularyError for vocabulary the domain lacks, DeliveryError if earlier
        events could not be delivered, BufferFull if the buffer stays full.
        """
        s = frozenset(tuple(a) for a in state)
        s2 = frozenset(tuple(a) for a in next_state)
        a = tuple(action)
        if self.vocabulary is not None:
            self.vocabulary.check_action(a)
            self.vocabulary.check_state(s, "state")
            self.vocabulary.check_state(s2, "next_state")
        with self._cond:
            self._raise_failure()
            if self._closed:
                raise RuntimeError("the emitter is closed")
            t = AgentTransition(self.agent_id, self.family, self.episode_id, self._step,
                           self._clock(), s, a, s2, optimal, executed)
            try:
                value = encode_transition(t)
            except ValidationError as e:
                raise VocabularyError(f"transition cannot be encoded: {e.errors()[0]['msg']}"
                                      f" at {'.'.join(map(str, e.errors()[0]['loc']))}"
                                      ) from None
            deadline = time.monotonic() + self.block_timeout_s
            while len(self._buffer) + self._inflight >= self.max_buffered:
                remaining = deadline - time.monotonic()
                if self.on_full == "raise" or remaining <= 0:
                    raise BufferFull(f"{self.max_buffered} transitions buffered and not yet"
                                     " delivered: the transport is slower than the agent")
                self._cond.wait(remaining)
                self._raise_failure()
            self._buffer.append((self.agent_id, value))
            self._step += 1
            self.emitted += 1
            self._cond.notify_all()

    def flush(self, timeout_s: float = 30.0) -> None:
        """Block until everything emitted so far is delivered (or raise DeliveryError)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._cond.notify_all()
            while self._buffer or self._inflight:
                if self._failure is not None:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{len(self._buffer) + self._inflight} transitions"
                                       f" still undelivered after {timeout_s:g}s")
                self._cond.wait(remaining)
            self._raise_failure()

    @property
    def buffered(self) -> int:
        with self._cond:
            return len(self._buffer) + self._inflight

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush, stop the sender and close the transport. Raises DeliveryError if
        anything stayed undelivered (the transport is closed all the same)."""
        try:
            self.flush(timeout_s)
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join(timeout_s)
            self._transport.close()

    def __enter__(self) -> TransitionEmitter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _raise_failure(self) -> None:
        # Called with the lock held. Once raised, the caller owns the undelivered events.
        if self._failure is None:
            return
        message, failed = self._failure, self._failed
        self._failure, self._failed = None, []
        raise DeliveryError(f"{len(failed)} transition(s) not delivered: {message}", failed)

    # ------------------------------------------------------------------ sender thread

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._buffer and not self._closed:
                    self._cond.wait()
                if not self._buffer and self._closed:
                    return
                if len(self._buffer) < self.batch_size and not self._closed:
                    # Give the agent a moment to fill the batch (fewer, larger requests).
                    self._cond.wait(self.linger_s)
                n = min(self.batch_size, len(self._buffer))
                batch = [self._buffer.popleft() for _ in range(n)]
                self._inflight = n
            error = self._deliver(batch)
            with self._cond:
                self._inflight = 0
                if error is None:
                    self.delivered += n
                else:
                    self._failed.extend(batch)
                    self._failure = error
                self._cond.notify_all()

    def _deliver(self, batch: list[Message]) -> str | None:
        for attempt in range(self.retries + 1):
            try:
                self._transport.send(batch, self.send_timeout_s)
                return None
            except TransportError as e:
                if not e.retryable or attempt == self.retries:
                    return str(e)
                time.sleep(self.retry_backoff_s * 2 ** attempt)
            except Exception as e:  # a transport bug must reach the caller, not kill us
                return f"{type(e).__name__}: {e}"
        return "unreachable"
