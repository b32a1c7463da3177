"""The transition emitter: batching, bounded buffer, backpressure and delivery errors."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from capwatch.client import (
    BufferFull,
    DeliveryError,
    HttpTransport,
    JsonlTransport,
    TransitionEmitter,
    TransportError,
    Vocabulary,
    VocabularyError,
)
from capwatch.contracts.wire import AgentTransition, decode
from tests.paths import REPO_ROOT

S0 = frozenset({("at", "rover1", "wp1")})
S1 = frozenset({("at", "rover1", "wp2")})
NAV = ("navigate", "rover1", "wp1", "wp2")


class Recorder:
    """A transport that records batches; ``gate`` holds sends back, ``fail`` refuses them."""

    retry_safe = True

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, bytes]]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail: TransportError | None = None
        self.attempts = 0
        self.closed = False

    def send(self, batch: Sequence[tuple[str, bytes]], timeout_s: float) -> None:
        self.attempts += 1
        assert self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        self.batches.append(list(batch))

    def close(self) -> None:
        self.closed = True


def _decoded(values: list[bytes]) -> list[AgentTransition]:
    out = []
    for v in values:
        d = decode(v)
        assert isinstance(d, list), d
        out.extend(d)
    return out


def test_events_are_batched_in_order_and_decode_as_wire_events() -> None:
    rec = Recorder()
    rec.gate.clear()  # hold the first batch so that the rest accumulates
    clock = iter(datetime(2026, 11, 25, 21, 0, s % 60, tzinfo=UTC) for s in range(100))
    emitter = TransitionEmitter(rec, agent_id="rover-17", family="rover-v3", batch_size=10,
                                linger_s=0.01, clock=lambda: next(clock))
    for _ in range(25):
        emitter.emit(S0, NAV, S1, executed=True)
    rec.gate.set()
    emitter.close()
    assert rec.closed
    sizes = [len(b) for b in rec.batches]
    assert sum(sizes) == 25 and max(sizes) <= 10 and len(sizes) >= 3
    events = _decoded([v for b in rec.batches for _, v in b])
    assert [t.step for t in events] == list(range(25))
    assert {k for b in rec.batches for k, _ in b} == {"rover-17"}
    assert events[0].state == S0 and events[0].next_state == S1 and events[0].executed
    assert emitter.delivered == 25


def test_full_buffer_blocks_then_raises_and_raise_mode_fails_at_once() -> None:
    rec = Recorder()
    rec.gate.clear()
    emitter = TransitionEmitter(rec, agent_id="a", family="f", batch_size=2, max_buffered=4,
                                block_timeout_s=0.2, linger_s=0)
    for _ in range(4):
        emitter.emit(S0, NAV, S1)
    with pytest.raises(BufferFull, match="4 transitions buffered"):
        emitter.emit(S0, NAV, S1)
    emitter.on_full = "raise"
    with pytest.raises(BufferFull):
        emitter.emit(S0, NAV, S1)
    rec.gate.set()
    emitter.flush(10)
    emitter.emit(S0, NAV, S1)  # room again once the transport caught up
    emitter.close()
    assert sum(len(b) for b in rec.batches) == 5


def test_blocked_emit_resumes_when_the_transport_catches_up() -> None:
    rec = Recorder()
    rec.gate.clear()
    emitter = TransitionEmitter(rec, agent_id="a", family="f", batch_size=1, max_buffered=1,
                                block_timeout_s=10, linger_s=0)
    emitter.emit(S0, NAV, S1)
    threading.Timer(0.2, rec.gate.set).start()
    emitter.emit(S0, NAV, S1)  # blocks until the first send completes
    emitter.close()
    assert len(rec.batches) == 2


def test_delivery_failure_reaches_the_caller_with_the_undelivered_events() -> None:
    rec = Recorder()
    rec.fail = TransportError("refused: 401 unauthorized", retryable=False)
    emitter = TransitionEmitter(rec, agent_id="a", family="f", batch_size=5, linger_s=0)
    for _ in range(3):
        emitter.emit(S0, NAV, S1)
    with pytest.raises(DeliveryError, match=r"3 transition.* not delivered: refused") as info:
        emitter.flush(10)
    assert rec.attempts == 1  # not retryable: asked once
    assert [t.step for t in _decoded([v for _, v in info.value.undelivered])] == [0, 1, 2]
    rec.fail = None
    emitter.emit(S0, NAV, S1)  # the error was handed over once; later events flow again
    emitter.close()
    assert [t.step for t in _decoded([v for _, v in rec.batches[0]])] == [3]


def test_retryable_failures_are_retried_before_they_are_reported() -> None:
    rec = Recorder()
    rec.fail = TransportError("connection refused")
    emitter = TransitionEmitter(rec, agent_id="a", family="f", retries=2,
                                retry_backoff_s=0.01, linger_s=0)
    emitter.emit(S0, NAV, S1)
    with pytest.raises(DeliveryError):
        emitter.close()
    assert rec.attempts == 3


def test_vocabulary_errors_are_raised_before_anything_is_buffered() -> None:
    rec = Recorder()
    vocab = Vocabulary.from_file(REPO_ROOT / "capwatch" / "examples" / "rover.pddl")
    emitter = TransitionEmitter(rec, agent_id="a", family="f", vocabulary=vocab)
    with pytest.raises(VocabularyError, match="next_state: unknown predicate 'at_rover'"):
        emitter.emit(S0, NAV, {("at_rover", "rover1", "wp2")})
    with pytest.raises(VocabularyError, match="action 'navigate' takes 3"):
        emitter.emit(S0, ("navigate", "rover1"), S1)
    with pytest.raises(VocabularyError, match="cannot be encoded"):
        TransitionEmitter(rec, agent_id="a", family="f").emit(
            {("at", "rover 1", "wp1")}, NAV, S1)
    emitter.close()
    assert emitter.emitted == 0 and rec.batches == []


def test_jsonl_transport_appends_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "transitions.jsonl"
    for episode in ("ep-1", "ep-2"):
        with TransitionEmitter(JsonlTransport(path), agent_id="a", family="f",
                               batch_size=3) as emitter:
            emitter.begin_episode(episode)
            for _ in range(4):
                emitter.emit(S0, NAV, S1)
    lines = path.read_bytes().splitlines()
    events = _decoded(lines)
    assert [(t.episode_id, t.step) for t in events] == [
        (e, s) for e in ("ep-1", "ep-2") for s in range(4)]


class _Ingest(BaseHTTPRequestHandler):
    """A stand-in for the daemon's ingest endpoint (the real one: tests/daemon)."""

    received: ClassVar[list[bytes]] = []
    status = 200

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ok = self.headers.get("Authorization") == "Bearer s3cret"
        status = self.status if ok else 401
        if status == 200:
            type(self).received.extend(body.splitlines())
            data = json.dumps({"accepted": len(body.splitlines())}).encode()
        else:
            data = json.dumps({"error": {"code": "x", "message": f"no ({status})"}}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def ingest() -> Iterator[str]:
    _Ingest.received = []
    _Ingest.status = 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ingest)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_http_transport_posts_ndjson_with_the_token(ingest: str) -> None:
    with TransitionEmitter(HttpTransport(ingest, "s3cret"), agent_id="a", family="f") as em:
        for _ in range(3):
            em.emit(S0, NAV, S1)
    assert [t.step for t in _decoded(_Ingest.received)] == [0, 1, 2]


def test_http_transport_surfaces_refusals_without_retrying(ingest: str) -> None:
    transport = HttpTransport(ingest, "wrong")
    with pytest.raises(TransportError, match="401: no") as info:
        transport.send([("a", b"{}")], 5)
    assert not info.value.retryable
    _Ingest.status = 503
    with pytest.raises(TransportError, match="503") as info:
        HttpTransport(ingest, "s3cret").send([("a", b"{}")], 5)
    assert info.value.retryable


def test_http_transport_reports_an_unreachable_daemon() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransportError, match="POST /ingest/v1/transitions") as info:
        HttpTransport(f"http://127.0.0.1:{port}", "t", timeout_s=2).send([("a", b"{}")], 2)
    assert info.value.retryable
