"""The servers' bounded pool: idle connections cannot pile up threads (issue 12)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from capwatch.contracts.bounded_http import PooledHTTPServer


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
    with _serving(workers=1, backlog=0, read_timeout_s=0.5) as port:
        slow = socket.create_connection(("127.0.0.1", port), timeout=30)
        stop = threading.Event()

        def trickle() -> None:
            try:
                slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                while not stop.wait(0.1):  # one header line that never ends
                    slow.sendall(b"a")
            except OSError:
                return

        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            answers = []
            for _ in range(100):  # 20 s at most; the client trickles on unless cut off
                answers.append(_get(port)[:12])
                if answers[-1] == b"HTTP/1.1 200":
                    break
                stop.wait(0.2)
            assert answers[-1] == b"HTTP/1.1 200", answers[-3:]
        finally:
            stop.set()
            t.join(5)
            slow.close()
