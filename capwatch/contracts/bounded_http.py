"""An HTTP server with a bounded worker pool, for every server capwatch runs (the daemon's
API, the reference agent, and the SDK's query endpoint agents run).

``http.server.ThreadingHTTPServer`` starts a thread per connection, without bound: 3,000
idle connections made 3,012 threads (issue 12). Here at most ``workers`` connections are
served at once and ``backlog`` more wait; a connection beyond that gets a 503 from the
accepting thread and is closed. With the handler's read timeout, an idle connection holds a
worker for at most that long. A client trickling a byte now and then never lets a read
time out, and 40 such clients held the reference agent's every worker (503 to everyone
else) for as long as they kept trickling (red-team rerun of issue 12, session 3), so reads
also have deadlines: a request's head (request line and headers, or the wait for the next
request on a kept-alive connection) within ``read_timeout_s``, the rest of the request
(its body, the answer) within ``max_request_s``. Past a deadline the connection's read side
is shut: an answer being written still goes out, the next read sees the end.
Standard library only, so any layer may use it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

_BUSY_BODY = b'{"error": {"code": "busy", "message": "all workers are busy"}}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Retry-After: 1\r\nConnection: close\r\n"
         + f"Content-Length: {len(_BUSY_BODY)}\r\n\r\n".encode() + _BUSY_BODY)


class PooledHTTPServer(HTTPServer):
    """See the module docstring. ``read_timeout_s`` bounds every read of a connection."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 workers: int = 16, backlog: int = 64, read_timeout_s: float = 10.0,
                 max_request_s: float = 60.0, name: str = "http") -> None:
        self.read_timeout_s = read_timeout_s
        self.max_request_s = max_request_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._slots = threading.BoundedSemaphore(workers + backlog)
        self._deadlines: dict[socket.socket, float] = {}
        """Connections a worker serves → when their current read phase must be over."""
        self._deadlines_lock = threading.Lock()
        self._closed = threading.Event()
        super().__init__(address, _with_deadlines(handler))
        threading.Thread(target=self._watch, name=f"{name}-deadline", daemon=True).start()

    def deadline(self, connection: socket.socket, seconds: float) -> None:
        with self._deadlines_lock:
            if connection in self._deadlines:
                self._deadlines[connection] = time.monotonic() + seconds

    def _watch(self) -> None:
        """Shut the read side of connections past their deadline."""
        while not self._closed.wait(min(0.5, self.read_timeout_s / 4)):
            now = time.monotonic()
            with self._deadlines_lock:
                late = [c for c, t in self._deadlines.items() if now > t]
                for c in late:
                    del self._deadlines[c]
            for c in late:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RD)

    def refuse(self, request: socket.socket) -> None:
        """Answer a connection beyond the pool and its backlog, on the accepting thread
        (so briefly); the connection is closed after it."""
        request.settimeout(0.05)
        request.sendall(_BUSY)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                self.refuse(request)
            self.shutdown_request(request)
            return
        try:
            self._pool.submit(self._work, request, client_address, time.monotonic())
        except RuntimeError:  # shutting down
            self._slots.release()
            self.shutdown_request(request)

    def _work(self, request: socket.socket, client_address: Any, accepted: float) -> None:
        # The head's deadline counts from the accept: a connection that waited for a worker
        # longer than that gets a moment to hand over what it sent meanwhile, so clients
        # trickling in the backlog are cut as fast as workers pick them up.
        now = time.monotonic()
        grace = min(1.0, self.read_timeout_s / 4)
        with self._deadlines_lock:
            self._deadlines[request] = max(accepted + self.read_timeout_s, now + grace)
        try:
            # Every read waits at most this long: an idle client cannot hold a worker for
            # longer (the handler may set a shorter timeout of its own); a trickling one is
            # cut at its deadline by _watch.
            request.settimeout(self.read_timeout_s)
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._deadlines_lock:
                self._deadlines.pop(request, None)
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that times out or goes away is not worth a traceback on stderr."""

    def server_close(self) -> None:
        self._closed.set()
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _with_deadlines(handler: type[BaseHTTPRequestHandler]) -> type[BaseHTTPRequestHandler]:
    """``handler`` telling its server when a request's head starts and ends."""

    class WithDeadlines(handler):  # type: ignore[valid-type,misc]
        server: PooledHTTPServer
        _kept_alive = False

        def handle_one_request(self) -> None:
            # The first head's deadline was set when the connection was accepted.
            if self._kept_alive:
                self.server.deadline(self.connection, self.server.read_timeout_s)
            self._kept_alive = True
            super().handle_one_request()

        def parse_request(self) -> bool:
            ok: bool = super().parse_request()
            self.server.deadline(self.connection, self.server.max_request_s)
            return ok

    WithDeadlines.__name__ = WithDeadlines.__qualname__ = handler.__name__
    return WithDeadlines
