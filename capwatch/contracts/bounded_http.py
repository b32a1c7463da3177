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

One client (an address) holds at most ``per_client`` of the slots (default: half of them,
never fewer than the workers), and a free worker takes the next connection of the client
with the fewest connections being served, then of the one served longest ago (a new
client first), rather than the oldest connection overall.
A client reconnecting at every read timeout, or opening as many connections as it can,
therefore cannot hold every slot nor keep the workers to itself: another client's request
is answered within one read timeout at worst (session 4; before, it waited behind every
one of the hog's connections or got a 503). Clients behind one proxy share an address and
so the per-client share; the pool's own bounds still apply to all.
Standard library only, so any layer may use it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, NamedTuple


def _busy(message: str) -> bytes:
    body = json.dumps({"error": {"code": "busy", "message": message}}).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Retry-After: 1\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


BUSY = "all workers are busy"
BUSY_CLIENT = "too many connections from your address"


class _Waiting(NamedTuple):
    request: socket.socket
    client_address: Any
    accepted: float


class _FairQueue:
    """Accepted connections by client, handed to workers fairly (see the module)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: dict[str, deque[_Waiting]] = {}
        self.serving: dict[str, int] = {}
        self.last: dict[str, int] = {}
        """When each client holding connections last got a worker (a take count): the
        client served longest ago goes first, a new one before all."""
        self.takes = 0
        self.closed = False

    def put(self, client: str, item: _Waiting) -> None:
        with self.cond:
            self.waiting.setdefault(client, deque()).append(item)
            self.cond.notify()

    def take(self) -> tuple[str, _Waiting] | None:
        """The next connection to serve (blocks); None once closed."""
        with self.cond:
            while not self.waiting and not self.closed:
                self.cond.wait()
            if self.closed:
                return None
            client = min(self.waiting, key=lambda c: (self.serving.get(c, 0),
                                                      self.last.get(c, -1),
                                                      self.waiting[c][0].accepted))
            line = self.waiting[client]
            item = line.popleft()
            if not line:
                del self.waiting[client]
            self.serving[client] = self.serving.get(client, 0) + 1
            self.takes += 1
            self.last[client] = self.takes
            return client, item

    def done(self, client: str) -> None:
        with self.cond:
            left = self.serving.get(client, 1) - 1
            if left > 0:
                self.serving[client] = left
            else:
                self.serving.pop(client, None)
                if client not in self.waiting:
                    self.last.pop(client, None)

    def close(self) -> list[_Waiting]:
        with self.cond:
            self.closed = True
            left = [item for line in self.waiting.values() for item in line]
            self.waiting.clear()
            self.cond.notify_all()
            return left


class PooledHTTPServer(HTTPServer):
    """See the module docstring. ``read_timeout_s`` bounds every read of a connection."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], *,
                 workers: int = 16, backlog: int = 64, read_timeout_s: float = 10.0,
                 max_request_s: float = 60.0, name: str = "http",
                 per_client: int | None = None) -> None:
        self.read_timeout_s = read_timeout_s
        self.max_request_s = max_request_s
        self.workers = workers
        self.per_client = per_client if per_client is not None \
            else max(workers, (workers + backlog) // 2)
        self._name = name
        self._queue = _FairQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._queued = 0
        """Connections put in the queue and not yet taken by a worker."""
        self._held: dict[str, int] = {}
        """Slots (served or waiting) each client address holds."""
        self._held_lock = threading.Lock()
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

    def refuse(self, request: socket.socket, message: str = BUSY) -> None:
        """Answer a connection beyond the pool and its backlog (``BUSY``) or beyond its
        client's share (``BUSY_CLIENT``), on the accepting thread (so briefly); the
        connection is closed after it."""
        request.settimeout(0.05)
        request.sendall(_busy(message))

    def process_request(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0]) if isinstance(client_address, tuple) \
            else str(client_address)
        with self._held_lock:
            over = self._held.get(client, 0) >= self.per_client
            if not over:
                self._held[client] = self._held.get(client, 0) + 1
        if over or not self._slots.acquire(blocking=False):
            if not over:
                self._release_client(client)
            with contextlib.suppress(OSError):
                self.refuse(request, BUSY_CLIENT if over else BUSY)
            self.shutdown_request(request)
            return
        if self._queue.closed:
            self._slots.release()
            self._release_client(client)
            self.shutdown_request(request)
            return
        with self._held_lock:
            self._queued += 1
        self._queue.put(client, _Waiting(request, client_address, time.monotonic()))
        self._add_worker()

    def _add_worker(self) -> None:
        """A worker thread more while connections outnumber the idle workers and the pool
        is not full (started as needed: a server that answers a query now and then keeps
        one or two)."""
        with self._held_lock:
            if self._queued <= self._idle or len(self._threads) >= self.workers:
                return
            t = threading.Thread(target=self._worker, daemon=True,
                                 name=f"{self._name}_{len(self._threads)}")
            self._threads.append(t)
            self._idle += 1
        t.start()

    def _worker(self) -> None:
        while True:
            taken = self._queue.take()
            if taken is None:
                return
            with self._held_lock:
                self._idle -= 1
                self._queued -= 1
            client, item = taken
            try:
                self._work(*item)
            finally:
                self._queue.done(client)
                self._release_client(client)
                with self._held_lock:
                    self._idle += 1

    def _release_client(self, client: str) -> None:
        with self._held_lock:
            left = self._held.get(client, 1) - 1
            if left > 0:
                self._held[client] = left
            else:
                self._held.pop(client, None)

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
        for item in self._queue.close():
            self._slots.release()
            self.shutdown_request(item.request)


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
