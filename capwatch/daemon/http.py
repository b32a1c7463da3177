"""HTTP: /metrics, /healthz, /livez, /readyz and a small read API over the models store.

Standard library only (http.server): a handful of operator requests per minute and a
Prometheus scrape do not justify a web framework. Handlers never touch the pipeline's
registry; they read the store (thread-safe) and a few counters.

The server starts before the daemon connects to anything (:meth:`ApiServer.attach` hands
it the store later), so /healthz answers from the first second and /readyz says what the
daemon is waiting for. /livez is /healthz that also answers 503 once the daemon's main
loop has stalled (daemon.health): the liveness probe's path, where a restart is the cure;
/readyz is the readiness probe's (a dependency down, no partitions: wait, do not restart).

Read API (JSON unless noted)::

    GET /api/v1/agents                                  agents with a lineage + baselines
    GET /api/v1/agents/{agent}/model?family=F[&format=pddl]   current model
    GET /api/v1/agents/{agent}/versions?family=F        version history
    GET /api/v1/agents/{agent}/versions/{n}?family=F[&format=pddl]
    GET /api/v1/agents/{agent}/diff?family=F[&from=N|baseline][&to=M]
    GET /api/v1/alerts[?limit=N]                        recent alerts of every replica

``family`` may be omitted when the replica knows the agent. The family baseline is
addressed with the agent name ``_baseline``. ``diff`` compares two versions of the agent;
``from`` defaults to ``baseline`` (the family baseline version the agent's lineage forked
from), ``to`` to the agent's current version.

Errors have the agent query protocol's form,
``{"error": {"code": ..., "message": ..., "details": []}}``. With a token configured,
every write (any method but GET/HEAD) needs ``Authorization: Bearer <token>``, and so do
reads of /api/ with ``read_auth``; /healthz, /livez, /readyz and /metrics stay open.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from capwatch.alerts.sinks import alert_event
from capwatch.alerts.types import Alert
from capwatch.console.web import MAX_BODY, Console
from capwatch.contracts.bounded_http import PooledHTTPServer
from capwatch.contracts.ingest import INGEST_PATH, OTLP_TRACES_PATH
from capwatch.contracts.store import ModelRegistry
from capwatch.contracts.versions import ModelVersion, diff_versions, unchecked_summary
from capwatch.contracts.wire import AlertEvent
from capwatch.daemon.events import coverage_of
from capwatch.daemon.ingest import IngestEndpoints
from capwatch.daemon.store_probe import STORE_PROBE_WAIT_S, StoreProbe
from capwatch.models_store.lineage import lineage_chain

BASELINE = "_baseline"
INGEST_PATHS = (INGEST_PATH, OTLP_TRACES_PATH)
MAX_ALERTS = 200


class _AttachedProbe(StoreProbe):
    """The probe of one attached store."""

    def __init__(self, store: ModelRegistry, probe: Callable[[], str | None]) -> None:
        # An answering store's probe ends within its lock wait and, when that call's
        # round trip is stuck, a probe of its own (2 s to connect, one round trip).
        super().__init__(probe, late_s=2 * STORE_PROBE_WAIT_S)
        self.store = store


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
    def __init__(self, status: HTTPStatus, code: str, message: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


def _discard_body(h: BaseHTTPRequestHandler) -> None:
    try:
        length = int(h.headers.get("Content-Length") or 0)
    except ValueError:
        length = 0
    if 0 < length <= 1 << 20:
        h.rfile.read(length)
    else:
        h.close_connection = True


def _not_starting() -> str | None:
    return None


class ApiServer:
    def __init__(self, store: ModelRegistry | None, registry: CollectorRegistry, *,
                 ready: Callable[[], bool], families_of: Callable[[str], str | None],
                 alerts: RecentAlerts, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, read_auth: bool = False,
                 starting: Callable[[], str | None] = _not_starting,
                 ingest: IngestEndpoints | None = None) -> None:
        """``store`` None: the daemon is still starting (``starting`` says on what it
        waits); :meth:`attach` supplies the store once it is open."""
        if read_auth and not token:
            raise ValueError("read_auth needs a token")
        self.store = store
        self.ingest = ingest
        self.registry = registry
        self.ready = ready
        self.families_of = families_of
        self.alerts = alerts
        self.starting = starting
        self.problems: Callable[[], list[str]] = lambda: []
        """Why the daemon is not ready (a dependency that fails), when it knows."""
        self.notes: Callable[[], list[str]] = lambda: []
        """What /readyz adds to a 200 (a replica standing by)."""
        self.stalled: Callable[[], list[str]] = lambda: []
        """Why the daemon should be restarted (/livez)."""
        self._token = token.encode() if token else None
        self._read_auth = read_auth
        self._probe: _AttachedProbe | None = None
        """/readyz's store probe (made for the attached store at the first /readyz)."""
        self.console: Console | None = None
        """The operator's web pages (capwatch.console.web) under /console/, and
        POST /api/v1/actions; set once the store is open. They check the token
        themselves (a browser signs in once instead of sending it)."""
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Request lines would drown the JSON log; metrics count requests instead."""

            def do_GET(self) -> None:
                api._dispatch(self)

            def do_HEAD(self) -> None:
                api._dispatch(self)

            def _write(self) -> None:
                api._write(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = _write

        # A bounded pool with read timeouts: idle or slow clients cannot pile up threads.
        try:
            self._server = PooledHTTPServer((host, port), Handler, workers=16, backlog=256,
                                            read_timeout_s=10.0, name="http")
        except OSError as e:
            # The bare "[Errno 98] Address already in use" named neither the address nor
            # the setting that chose it.
            raise OSError(e.errno, f"cannot listen on {host}:{port} (http.host, http.port):"
                                   f" {e.strerror}") from e
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        return f"http://{host if isinstance(host, str) else host.decode()}:{self.port}"

    def start(self) -> ApiServer:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, name="http",
                                            daemon=True)
            self._thread.start()
        return self

    @property
    def started(self) -> bool:
        return self._thread is not None

    def attach(self, store: ModelRegistry, ready: Callable[[], bool],
               families_of: Callable[[str], str | None],
               problems: Callable[[], list[str]] | None = None,
               notes: Callable[[], list[str]] | None = None,
               stalled: Callable[[], list[str]] | None = None) -> None:
        """The daemon is built: serve its store and readiness from now on."""
        self.families_of = families_of
        self.ready = ready
        if problems is not None:
            self.problems = problems
        if notes is not None:
            self.notes = notes
        if stalled is not None:
            self.stalled = stalled
        self.store = store
        self._probe = None

    def _store_probe(self) -> StoreProbe:
        """The attached store's probe, made at the first /readyz that needs it."""
        store = self.store
        assert store is not None
        probe = self._probe
        if probe is None or probe.store is not store:
            unreachable = getattr(store, "unreachable", None)
            if unreachable is not None:
                def check() -> str | None:
                    why: str | None = unreachable(STORE_PROBE_WAIT_S)
                    return why
            else:
                def check() -> str | None:
                    store.lineages()  # raises when the store cannot answer
                    return None
            probe = self._probe = _AttachedProbe(store, check)
        return probe

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ dispatch

    def _authorised(self, h: BaseHTTPRequestHandler) -> bool:
        if self._token is None:
            return False
        given = h.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(),
                                                                  self._token)

    def _require_token(self, h: BaseHTTPRequestHandler) -> None:
        if self._token is None:
            raise _Error(HTTPStatus.FORBIDDEN, "forbidden",
                         "writes need http.token in the daemon's configuration; none is set")
        if not self._authorised(h):
            raise _Error(HTTPStatus.UNAUTHORIZED, "unauthorized",
                         "missing or wrong bearer token (Authorization: Bearer ...)",
                         {"WWW-Authenticate": 'Bearer realm="capwatch"'})

    def _write(self, h: BaseHTTPRequestHandler) -> None:
        """Writes other than the console's are refused, but never before the token is
        checked, so the API cannot leak what exists to an unauthenticated client."""
        path = urlsplit(h.path).path
        if self.ingest is None and self.store is None and path in INGEST_PATHS:
            # Still starting: a 503 makes emitters and OTLP exporters retry; a 401 or 405
            # here would make them drop the batch.
            _discard_body(h)
            self._error(h, _Error(HTTPStatus.SERVICE_UNAVAILABLE, "starting",
                                  f"starting: {self.starting() or 'not ready'}",
                                  {"Retry-After": "1"}))
            return
        if self.ingest is not None and h.command == "POST" and path in self.ingest.paths:
            # Agents' ingest: its own token (ingest.token), body limits and answers.
            try:
                self.ingest.handle(h, path)
            except Exception as e:  # an ingest bug must answer 500 (nothing stored)
                h.close_connection = True
                self._error(h, _Error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal_error",
                                      type(e).__name__))
            return
        if self.console is not None and self.console.handles(h.command, urlsplit(h.path).path):
            self._console(h)
            return
        try:
            length = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if 0 < length <= 1 << 20:
            h.rfile.read(length)  # read, so the client sees the answer, not a reset
        else:
            h.close_connection = True
        try:
            self._require_token(h)
            raise _Error(HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed",
                         f"{h.command} is not allowed on {urlsplit(h.path).path}",
                         {"Allow": "GET, HEAD"})
        except _Error as e:
            self._error(h, e)

    def _dispatch(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [unquote(p) for p in url.path.strip("/").split("/") if p]
        if self.console is not None and self.console.handles(h.command, url.path):
            self._console(h)
            return
        try:
            if parts == ["metrics"]:
                self._send(h, HTTPStatus.OK, generate_latest(self.registry), CONTENT_TYPE_LATEST)
                return
            if parts == ["healthz"]:
                self._json(h, HTTPStatus.OK, {"status": "ok"})
                return
            if parts == ["livez"]:
                stalled = self.stalled()
                self._json(h, HTTPStatus.SERVICE_UNAVAILABLE if stalled else HTTPStatus.OK,
                           {"status": "stalled" if stalled else "ok", "problems": stalled})
                return
            if parts == ["readyz"]:
                self._readyz(h)
                return
            if parts[:2] == ["api", "v1"]:
                if self._read_auth:
                    self._require_token(h)
                if self.store is None:
                    raise _Error(HTTPStatus.SERVICE_UNAVAILABLE, "starting",
                                 f"capwatch is starting: {self.starting() or 'not ready'}",
                                 {"Retry-After": "5"})
                self._json(h, HTTPStatus.OK, self._api(parts[2:], query, self.store))
                return
            raise _Error(HTTPStatus.NOT_FOUND, "not_found", f"no such path {url.path}")
        except _Error as e:
            self._error(h, e)
        except _Text as t:
            self._send(h, HTTPStatus.OK, t.text.encode(), "text/plain; charset=utf-8")
        except Exception as e:  # a read API bug must answer 500, not kill the thread
            self._error(h, _Error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal_error",
                                  f"{type(e).__name__} while answering {url.path}"))

    def _console(self, h: BaseHTTPRequestHandler) -> None:
        assert self.console is not None
        try:
            length = int(h.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            h.close_connection = True
            self._error(h, _Error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_large",
                                  f"a console request body is at most {MAX_BODY} bytes"))
            return
        body = h.rfile.read(length) if length else b""
        try:
            r = self.console.handle(h.command, h.path, dict(h.headers.items()), body)
        except Exception as e:  # a page bug must answer 500, not kill the thread
            self._error(h, _Error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal_error",
                                  f"{type(e).__name__} while answering {h.path}"))
            return
        self._send(h, r.status, r.body, r.content_type, dict(r.headers))

    def _error(self, h: BaseHTTPRequestHandler, e: _Error) -> None:
        body = {"error": {"code": e.code, "message": str(e), "details": []}}
        self._send(h, e.status, json.dumps(body).encode(), "application/json", e.headers)

    def _readyz(self, h: BaseHTTPRequestHandler) -> None:
        problems = []
        if self.store is None:
            problems.append(f"starting: {self.starting() or 'not ready'}")
        else:
            if not self.ready():
                problems.extend(self.problems() or ["not consuming"])
            why = self._store_probe().check()
            if why is not None:
                problems.append(f"store unreachable: {why}")
            # A store that answers its probe may still refuse this replica's writes (a
            # full disk answers a select): docs/operations.md, "Readiness".
            failing = getattr(self.store, "write_failures", None)
            if failing is not None:
                problems.extend(f"store writes failing ({kind}): {why}"
                                for kind, why in sorted(failing().items()))
        status = HTTPStatus.OK if not problems else HTTPStatus.SERVICE_UNAVAILABLE
        body: dict[str, Any] = {"ready": not problems, "problems": problems}
        # Notes go beside a 200 only. The problems and the notes each describe the group
        # afresh, and the group can settle between the two (a rebalance ending): a 503
        # that said "no partitions held" and also "standing by" contradicted itself.
        notes = self.notes() if self.store is not None and not problems else []
        if notes:
            body["notes"] = notes
        self._json(h, status, body)

    def _send(self, h: BaseHTTPRequestHandler, status: HTTPStatus, body: bytes,
              content_type: str, headers: dict[str, str] | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _json(self, h: BaseHTTPRequestHandler, status: HTTPStatus, obj: Any) -> None:
        self._send(h, status, json.dumps(obj, default=str).encode(), "application/json")

    # ------------------------------------------------------------------ read API

    def _family(self, agent: str, query: dict[str, str]) -> str:
        family = query.get("family") or self.families_of(agent)
        if not family:
            raise _Error(HTTPStatus.NOT_FOUND, "not_found",
                         f"unknown agent {agent!r}: this replica does not hold it; name its "
                         f"family with ?family=")
        return family

    def _lineage(self, agent: str) -> str | None:
        return None if agent == BASELINE else agent

    def _current(self, store: ModelRegistry, agent: str, family: str) -> ModelVersion:
        v = store.latest(family, self._lineage(agent))
        if v is None and agent != BASELINE:
            v = store.latest(family, None)
        if v is None:
            raise _Error(HTTPStatus.NOT_FOUND, "not_found",
                         f"no model for {agent!r} in family {family!r}")
        return v

    def _version(self, store: ModelRegistry, agent: str, family: str, n: str) -> ModelVersion:
        try:
            number = int(n)
        except ValueError:
            raise _Error(HTTPStatus.BAD_REQUEST, "invalid_request",
                         f"version must be a number, got {n!r}") from None
        for v in store.history(family, self._lineage(agent)):
            if v.version == number:
                return v
        raise _Error(HTTPStatus.NOT_FOUND, "not_found", f"{agent!r} has no version {number}")

    def _forked_from(self, store: ModelRegistry, v: ModelVersion) -> ModelVersion:
        """The family baseline version ``v``'s lineage descends from."""
        return next(a for a in reversed(lineage_chain(store, v.ref)) if a.agent_id is None)

    def _api(self, parts: list[str], query: dict[str, str], store: ModelRegistry) -> Any:
        if parts == ["agents"]:
            return [{"family": s.family, "agent_id": s.agent_id or BASELINE,
                     "latest_version": s.latest_version, "updated_at": s.updated_at.isoformat(),
                     "delta_to_baseline": s.delta_to_baseline}
                    for s in store.lineages(query.get("family"))]
        if parts == ["alerts"]:
            raw = query.get("limit", "50")
            try:
                limit = int(raw)
            except ValueError:
                limit = -1
            if not 1 <= limit <= MAX_ALERTS:
                raise _Error(HTTPStatus.BAD_REQUEST, "invalid_request",
                             f"limit must be a whole number from 1 to {MAX_ALERTS}, got {raw!r}")
            return [a.model_dump(mode="json") for a in self._alerts(store, limit)]
        if len(parts) >= 3 and parts[0] == "agents":
            agent, what = parts[1], parts[2:]
            family = self._family(agent, query)
            if what == ["model"]:
                return self._model(self._current(store, agent, family), query)
            if what == ["versions"]:
                return [{"version": v.version, "parent": v.parent.to_json() if v.parent else None,
                         "delta_to_parent": v.delta_to_parent, "summary": list(v.summary),
                         "created_at": v.created_at.isoformat(),
                         "unchecked": unchecked_summary(v.coverage)}
                        for v in store.history(family, self._lineage(agent))]
            if len(what) == 2 and what[0] == "versions":
                return self._model(self._version(store, agent, family, what[1]), query)
            if what == ["diff"]:
                to = query.get("to")
                b = (self._version(store, agent, family, to) if to is not None
                     else self._current(store, agent, family))
                start = query.get("from", "baseline")
                a = (self._forked_from(store, b) if start == "baseline"
                     else self._version(store, agent, family, start))
                return diff_versions(a, b).to_json()
        raise _Error(HTTPStatus.NOT_FOUND, "not_found",
                     f"no such API path /api/v1/{'/'.join(parts)}")

    def _alerts(self, store: ModelRegistry, limit: int) -> list[AlertEvent]:
        """What every replica sharing the store let out (its alert deliveries, kept for
        ``alerts.keep_s``), with what this replica published itself, newest first."""
        events = {(a.dedup_key, a.time): a for a in self.alerts.latest(MAX_ALERTS)}
        deliveries = getattr(store, "deliveries", None)
        if callable(deliveries):
            for d in deliveries():
                event = alert_event(Alert.from_record(d.alert))
                events.setdefault((event.dedup_key, event.time), event)
        return sorted(events.values(), key=lambda a: a.time, reverse=True)[:limit]

    def _model(self, v: ModelVersion, query: dict[str, str]) -> Any:
        if query.get("format") == "pddl":
            raise _Text(v.pddl)
        coverage = coverage_of(v)
        return {**v.to_json(), "coverage": coverage.model_dump(mode="json")
                if coverage is not None else None}


class _Text(Exception):
    """Raised by a handler to answer plain text (PDDL) instead of JSON."""

    def __init__(self, text: str) -> None:
        super().__init__("text")
        self.text = text
