"""The servers' bounded pool: idle connections cannot pile up threads (issue 12)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

from capwatch.contracts.bounded_http import PooledHTTPServer
from tests.support.slow_client import trickling


class _Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


@contextmanager
def _serving(**kwargs: float) -> Iterator[int]:
    server = PooledHTTPServer(("127.0.0.1", 0), _Hello, **kwargs)  # type: ignore[arg-type]
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _get(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return c.recv(100)


def test_beyond_the_pool_and_its_backlog_a_connection_gets_503_not_a_thread() -> None:
    with _serving(workers=4, backlog=4, read_timeout_s=60.0) as port:
        assert _get(port).startswith(b"HTTP/1.1 200")
        before = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(20)]
        try:
            assert _get(port).startswith(b"HTTP/1.1 503")
            assert threading.active_count() <= before + 4
        finally:
            for s in idle:
                s.close()


def test_an_idle_connection_is_closed_after_the_read_timeout() -> None:
    with _serving(workers=2, backlog=0, read_timeout_s=0.5) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as idle:
            assert idle.recv(1) == b""  # closed by the server, not by our 30 s timeout
        assert _get(port).startswith(b"HTTP/1.1 200")


def test_a_client_trickling_its_request_head_is_cut_at_the_deadline() -> None:
    """Red-team rerun of issue 12 (session 3): a byte every 0.1 s never lets a 0.5 s read
    time out, so the one worker was held for as long as the client went on (40 such
    clients kept the reference agent answering 503 to everyone)."""
    with _serving(workers=1, backlog=0, read_timeout_s=0.5) as port, trickling(
            port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ") as stop:
        answers = []
        for _ in range(100):  # 20 s at most; the client trickles on unless cut off
            answers.append(_get(port)[:12])
            if answers[-1] == b"HTTP/1.1 200":
                break
            stop.wait(0.2)
        assert answers[-1] == b"HTTP/1.1 200", answers[-3:]


class _Gated(BaseHTTPRequestHandler):
    """Records which address each request came from, then holds its worker until the
    test lets one request through."""

    protocol_version = "HTTP/1.1"
    order: ClassVar[list[str]] = []
    gate = threading.Semaphore(0)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        type(self).order.append(self.client_address[0])
        type(self).gate.acquire(timeout=30)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"ok")


def _send_get(port: int, source: str) -> socket.socket:
    c = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    return c


def test_one_client_holds_at_most_its_share_and_another_is_served_next() -> None:
    """A client reconnecting at every read timeout (or opening all it can) held every
    slot: others got 503, or waited behind all its connections. Now it holds at most
    ``per_client`` and a client not being served goes before its waiting connections.
    Two loopback addresses stand for two clients."""
    _Gated.order = []
    _Gated.gate = threading.Semaphore(0)
    server = PooledHTTPServer(("127.0.0.1", 0), _Gated, workers=1, backlog=7,
                              read_timeout_s=30.0)
    assert server.per_client == 4
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    port = int(server.server_address[1])
    held = [_send_get(port, "127.0.0.1") for _ in range(4)]
    try:
        _wait(lambda: _Gated.order == ["127.0.0.1"])  # one served, three waiting
        with socket.create_connection(("127.0.0.1", port), timeout=30) as fifth:
            fifth.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = fifth.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        other = _send_get(port, "127.0.0.2")
        held.append(other)
        _wait(lambda: server._held.get("127.0.0.2") == 1)
        _Gated.gate.release()  # the first request ends; the worker takes the next
        _wait(lambda: len(_Gated.order) == 2)
        assert _Gated.order[1] == "127.0.0.2", _Gated.order  # not the hog's 3 waiting
        _Gated.gate.release()
        assert other.recv(100).startswith(b"HTTP/1.1 200")
    finally:
        for _ in range(10):
            _Gated.gate.release()
        for c in held:
            c.close()
        server.shutdown()
        server.server_close()


def _wait(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
