"""A fake agent for the chaos tests: records every request it gets and answers queries
in a chosen way (``empty``, ``unknown_atoms``, ``wrong_arity``, ``oversized`` or
``contradictory``), so tests can see what capwatch sent and what it does with lies."""

from __future__ import annotations

import json
import random
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: list[str] = []
        self.rng = random.Random(0)
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def host_port(self) -> str:
        """``host:port`` it listens on (``server_address`` is typed for any family)."""
        return f"127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.requests.append(f"GET {self.path}")
        self._send({"status": "ok"})

    def do_POST(self) -> None:
        self.server.requests.append(f"POST {self.path}")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        self._send(self._answer(body))

    def _answer(self, q: dict[str, Any]) -> dict[str, Any]:
        n, state, samples = len(q["plan"]), q["state"], q.get("samples", 1)
        mode = self.server.mode
        if mode == "empty":
            result = {"executed": n, "state": []}
        elif mode == "unknown_atoms":
            result = {"executed": n, "state": [*state, ["teleported", "nowhere"]]}
        elif mode == "wrong_arity":
            result = {"executed": n, "state": [[a[0]] for a in state]}
        elif mode == "oversized":
            result = {"executed": n, "state": [*state, *(["at", f"o{i}", "w"] for i in
                                                       range(400_000))]}
        else:  # contradictory: the same question answered at random
            result = {"executed": self.server.rng.randint(0, n), "state":
                      self.server.rng.sample(state, self.server.rng.randint(0, len(state)))}
        return {"results": [result] * samples}

    def _send(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
