"""HTTP: /metrics, /healthz, /readyz and a small read API over the models store.

Standard library only (http.server): a handful of operator requests per minute and a
Prometheus scrape do not justify a web framework. Handlers never touch the pipeline's
registry; they read the store (thread-safe) and a few counters.

Read API (JSON unless noted)::

    GET /api/v1/agents                                  agents with a lineage + baselines
    GET /api/v1/agents/{agent}/model?family=F[&format=pddl]   current model
    GET /api/v1/agents/{agent}/versions?family=F        version history
    GET /api/v1/agents/{agent}/versions/{n}?family=F[&format=pddl]
    GET /api/v1/agents/{agent}/diff?family=F&from=N&to=M
    GET /api/v1/alerts[?limit=N]                        most recent alerts, newest first

``family`` may be omitted when the replica knows the agent. The family baseline is
addressed with the agent name ``_baseline``.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from capwatch.contracts.store import ModelRegistry
from capwatch.contracts.versions import ModelVersion, diff_versions
from capwatch.contracts.wire import AlertEvent

BASELINE = "_baseline"


class RecentAlerts:
    """The last N alerts published by this replica (the read API's /alerts)."""

    def __init__(self, size: int = 200) -> None:
        self._lock = threading.Lock()
        self._items: deque[AlertEvent] = deque(maxlen=size)

    def add(self, alert: AlertEvent) -> None:
        with self._lock:
            self._items.append(alert)

    def latest(self, limit: int) -> list[AlertEvent]:
        with self._lock:
            return list(self._items)[::-1][:limit]


class _Error(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class ApiServer:
    def __init__(self, store: ModelRegistry, registry: CollectorRegistry, *,
                 ready: Callable[[], bool], families_of: Callable[[str], str | None],
                 alerts: RecentAlerts, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = store
        self.registry = registry
        self.ready = ready
        self.families_of = families_of
        self.alerts = alerts
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Request lines would drown the JSON log; metrics count requests instead."""

            def do_GET(self) -> None:
                api._dispatch(self)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        return f"http://{host if isinstance(host, str) else host.decode()}:{self.port}"

    def start(self) -> ApiServer:
        self._thread = threading.Thread(target=self._server.serve_forever, name="http",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [unquote(p) for p in url.path.strip("/").split("/") if p]
        try:
            if parts == ["metrics"]:
                self._send(h, HTTPStatus.OK, generate_latest(self.registry), CONTENT_TYPE_LATEST)
                return
            if parts == ["healthz"]:
                self._json(h, HTTPStatus.OK, {"status": "ok"})
                return
            if parts == ["readyz"]:
                self._readyz(h)
                return
            if parts[:2] == ["api", "v1"]:
                self._json(h, HTTPStatus.OK, self._api(parts[2:], query, h))
                return
            raise _Error(HTTPStatus.NOT_FOUND, f"no such path {url.path}")
        except _Error as e:
            self._json(h, e.status, {"error": str(e)})
        except _Text as t:
            self._send(h, HTTPStatus.OK, t.text.encode(), "text/plain; charset=utf-8")
        except Exception as e:  # a read API bug must answer 500, not kill the thread
            self._json(h, HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}"})

    def _readyz(self, h: BaseHTTPRequestHandler) -> None:
        problems = []
        if not self.ready():
            problems.append("not consuming")
        try:
            self.store.lineages()
        except Exception as e:
            problems.append(f"store unreachable: {type(e).__name__}")
        status = HTTPStatus.OK if not problems else HTTPStatus.SERVICE_UNAVAILABLE
        self._json(h, status, {"ready": not problems, "problems": problems})

    def _send(self, h: BaseHTTPRequestHandler, status: HTTPStatus, body: bytes,
              content_type: str) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _json(self, h: BaseHTTPRequestHandler, status: HTTPStatus, obj: Any) -> None:
        self._send(h, status, json.dumps(obj, default=str).encode(), "application/json")

    # ------------------------------------------------------------------ read API

    def _family(self, agent: str, query: dict[str, str]) -> str:
        family = query.get("family") or self.families_of(agent)
        if not family:
            raise _Error(HTTPStatus.BAD_REQUEST, f"which family is {agent!r}? add ?family=")
        return family

    def _lineage(self, agent: str) -> str | None:
        return None if agent == BASELINE else agent

    def _current(self, agent: str, family: str) -> ModelVersion:
        v = self.store.latest(family, self._lineage(agent))
        if v is None and agent != BASELINE:
            v = self.store.latest(family, None)
        if v is None:
            raise _Error(HTTPStatus.NOT_FOUND, f"no model for {agent!r} in family {family!r}")
        return v

    def _version(self, agent: str, family: str, n: str) -> ModelVersion:
        try:
            number = int(n)
        except ValueError:
            raise _Error(HTTPStatus.BAD_REQUEST, f"version must be a number, got {n!r}") from None
        for v in self.store.history(family, self._lineage(agent)):
            if v.version == number:
                return v
        raise _Error(HTTPStatus.NOT_FOUND, f"{agent!r} has no version {number}")

    def _api(self, parts: list[str], query: dict[str, str], h: BaseHTTPRequestHandler) -> Any:
        if parts == ["agents"]:
            return [{"family": s.family, "agent_id": s.agent_id or BASELINE,
                     "latest_version": s.latest_version, "updated_at": s.updated_at.isoformat(),
                     "delta_to_baseline": s.delta_to_baseline}
                    for s in self.store.lineages(query.get("family"))]
        if parts == ["alerts"]:
            limit = int(query.get("limit", "50"))
            return [a.model_dump(mode="json") for a in self.alerts.latest(limit)]
        if len(parts) >= 3 and parts[0] == "agents":
            agent, what = parts[1], parts[2:]
            family = self._family(agent, query)
            if what == ["model"]:
                return self._model(self._current(agent, family), query)
            if what == ["versions"]:
                return [{"version": v.version, "parent": v.parent.to_json() if v.parent else None,
                         "delta_to_parent": v.delta_to_parent, "summary": list(v.summary),
                         "created_at": v.created_at.isoformat()}
                        for v in self.store.history(family, self._lineage(agent))]
            if len(what) == 2 and what[0] == "versions":
                return self._model(self._version(agent, family, what[1]), query)
            if what == ["diff"]:
                if "from" not in query or "to" not in query:
                    raise _Error(HTTPStatus.BAD_REQUEST, "diff needs ?from=N&to=M")
                a = self._version(agent, family, query["from"])
                b = self._version(agent, family, query["to"])
                return diff_versions(a, b).to_json()
        raise _Error(HTTPStatus.NOT_FOUND, f"no such API path /api/v1/{'/'.join(parts)}")

    def _model(self, v: ModelVersion, query: dict[str, str]) -> Any:
        if query.get("format") == "pddl":
            raise _Text(v.pddl)
        return v.to_json()


class _Text(Exception):
    """Raised by a handler to answer plain text (PDDL) instead of JSON."""

    def __init__(self, text: str) -> None:
        super().__init__("text")
        self.text = text
