"""An agent endpoint in front of a real reference agent that misbehaves on purpose, for
benchmarks/fault_runs.py: slow answers, answers trickled a piece at a time (a slow loris),
cut bodies, malformed or oversized answers, another agent's answers.

A *mode* is a function of (proxy, request body, how many times that body was asked
before) returning an action: ``pass``, ``sleep:S``, ``trickle:S``, ``alt``, ``malformed``,
``cut``, ``huge`` or ``wrong_extra``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Mode = Callable[["Proxy", bytes, int], str]


class Proxy(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, mode: Mode, alt: str | None = None) -> None:
        self.upstream, self.alt, self.mode = upstream, alt, mode
        self.asked: dict[bytes, int] = {}
        self.log: list[tuple[float, str, int]] = []
        self.n = 0
        """Queries asked so far (a scenario waits on it to place its fault)."""
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def _fetch(base: str, path: str, body: bytes | None, headers: dict[str, str]
           ) -> tuple[int, bytes]:
    req = urllib.request.Request(base + path, data=body, headers={
        "Content-Type": "application/json",
        **{k: v for k, v in headers.items() if k.lower() == "capwatch-agent-id"}})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status), bytes(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), bytes(e.read())


class _Handler(BaseHTTPRequestHandler):
    server: Proxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        status, data = _fetch(self.server.upstream, self.path, None, dict(self.headers))
        self._send(status, data)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            k = self.server.asked.get(body, 0)
            self.server.asked[body] = k + 1
            self.server.n += 1
        action = self.server.mode(self.server, body, k) if "/query" in self.path else "pass"
        self.server.log.append((time.time(), action, len(body)))
        headers = dict(self.headers)
        if action.startswith("sleep:"):
            time.sleep(float(action.split(":")[1]))
            action = "pass"
        if action.startswith("trickle:"):
            self._trickle(body, headers, float(action.split(":")[1]))
        elif action == "pass":
            self._send(*_fetch(self.server.upstream, self.path, body, headers))
        elif action == "alt":
            self._send(*_fetch(self.server.alt or "", self.path, body, headers))
        elif action == "malformed":
            self._send(200, b'{"results": [{"executed": 1, "state": [["at"')
        elif action == "cut":
            self._cut(body, headers)
        elif action == "huge":
            _, data = _fetch(self.server.upstream, self.path, body, headers)
            answer = json.loads(data)
            answer["padding"] = "x" * (70 * 1024 * 1024)
            self._send(200, json.dumps(answer).encode())
        elif action == "wrong_extra":  # one extra true atom in each final state
            _, data = _fetch(self.server.upstream, self.path, body, headers)
            answer = json.loads(data)
            for r in answer.get("results", []):
                if r["state"]:
                    r["state"] = [*r["state"], ["battery_full", r["state"][0][1]]]
            self._send(200, json.dumps(answer).encode())
        else:
            raise AssertionError(action)

    def _trickle(self, body: bytes, headers: dict[str, str], total_s: float) -> None:
        """The whole answer, in 40 pieces spread evenly over ``total_s``."""
        status, data = _fetch(self.server.upstream, self.path, body, headers)
        self._head(status, len(data))
        pieces = max(1, min(len(data), 40))
        step = -(-len(data) // pieces)
        try:
            for i in range(0, len(data), step):
                self.wfile.write(data[i:i + step])
                self.wfile.flush()
                time.sleep(total_s / pieces)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _cut(self, body: bytes, headers: dict[str, str]) -> None:
        """Half the body announced, then the connection closed."""
        _, data = _fetch(self.server.upstream, self.path, body, headers)
        self._head(200, len(data))
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _head(self, status: int, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def _send(self, status: int, data: bytes) -> None:
        self._head(status, len(data))
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


def body_hash(body: bytes) -> int:
    """A query's own number in 0-255: a mode that misbehaves on some queries picks the
    same ones on every asking."""
    return hashlib.sha256(body).digest()[0]
