"""An HTTP server with a bounded worker pool, for every server capwatch runs (the daemon's
API and the reference agent).

``http.server.ThreadingHTTPServer`` starts a thread per connection, without bound: 3,000
idle connections made 3,012 threads (issue 12). Here at most ``workers`` connections are
served at once and ``backlog`` more wait; a connection beyond that gets a 503 from the
accepting thread and is closed. With the handler's read timeout, an idle connection holds a
worker for at most that long. Standard library only, so any layer may use it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
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
                 name: str = "http") -> None:
        self.read_timeout_s = read_timeout_s
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._slots = threading.BoundedSemaphore(workers + backlog)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(0.05)
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        try:
            self._pool.submit(self._work, request, client_address)
        except RuntimeError:  # shutting down
            self._slots.release()
            self.shutdown_request(request)

    def _work(self, request: socket.socket, client_address: Any) -> None:
        try:
            # Every read waits at most this long: an idle or trickling client cannot hold
            # a worker for longer (the handler may set a shorter timeout of its own).
            request.settimeout(self.read_timeout_s)
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that times out or goes away is not worth a traceback on stderr."""

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)
