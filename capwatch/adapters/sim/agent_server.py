"""The reference agent's HTTP server: the agent side of the query protocol.

Serves any :class:`~capwatch.assess.agent.AgentQuery` (the SDK's ExecutorAgent, or the
reference SimulatedAgent, which also accepts drift injection and runs episodes).
Standard library only: ``http.server`` on a bounded worker pool
(capwatch.contracts.bounded_http). The reference agent answers a handful of queries per
assessment, so an async framework would add a dependency and no capacity anyone needs.
capwatch's own side of the protocol is capwatch.adapters.io.agent_client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.contracts.agent_protocol import (
    AGENT_ID_HEADER,
    DEFAULT_MAX_BODY_BYTES,
    DRIFT_PATH,
    EPISODE_PATH,
    HEALTH_PATH,
    QUERY_PATH,
    DriftRequest,
    DriftResponse,
    EpisodeRequest,
    EpisodeResponse,
    ErrorDetail,
    ErrorResponse,
    HealthResponse,
    InvalidQuery,
    QueryRequest,
    QueryResponse,
    misdirected,
)
from capwatch.contracts.bounded_http import PooledHTTPServer
from capwatch.contracts.http_body import BodyRefused, discard_body, read_json_body
from capwatch.model.domain import Domain
from capwatch.model.errors import ModelError
from capwatch.model.pddl_reader import parse_domain

log = logging.getLogger(__name__)

_M = TypeVar("_M", bound=BaseModel)


@runtime_checkable
class DriftableAgent(Protocol):
    """An agent whose model can be replaced at run time (the reference simulated agent)."""

    @property
    def domain(self) -> Domain: ...

    def switch_model(self, domain: Domain) -> int: ...


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, code: str, message: str,
                 details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def _validation_error(exc: ValidationError, what: str) -> _HttpError:
    errors = exc.errors(include_url=False, include_input=False)
    if any(e["type"] == "json_invalid" for e in errors):
        first = errors[0]
        return _HttpError(HTTPStatus.BAD_REQUEST, "invalid_json",
                          f"body is not valid JSON: {first['msg']}")
    details = [{"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]}
               for e in errors[:20]]
    summary = "; ".join(f"{d['loc'] or 'body'}: {d['msg']}" for d in details[:3])
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return _HttpError(HTTPStatus.BAD_REQUEST, "invalid_request",
                      f"{what} does not match the schema: {summary}{more}", details)


class _Server(PooledHTTPServer):
    # A restarted agent must be able to take its port back while old sockets linger.
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], agent: AgentQuery, *, max_body_bytes: int,
                 allow_drift: bool, request_timeout: float,
                 agent_id: str | None = None) -> None:
        self.agent = agent
        self.agent_id = agent_id
        self.max_body_bytes = max_body_bytes
        self.allow_drift = allow_drift
        self.request_timeout = request_timeout
        super().__init__(address, _Handler, workers=8, backlog=32,
                         read_timeout_s=request_timeout, name="capwatch-agent-http")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "capwatch-agent"

    def setup(self) -> None:
        # Bounds how long a slow or idle client can hold a worker thread.
        super().setup()
        self.connection.settimeout(self.server.request_timeout)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("agent http: " + format, *args)

    # ------------------------------------------------------------------ routing

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        routes: dict[str, tuple[str, Callable[[], BaseModel]]] = {
            QUERY_PATH: ("POST", self._query),
            DRIFT_PATH: ("POST", self._drift),
            EPISODE_PATH: ("POST", self._episode),
            HEALTH_PATH: ("GET", self._health),
        }
        path = self.path.split("?", 1)[0]
        try:
            route = routes.get(path)
            if route is None:
                raise _HttpError(HTTPStatus.NOT_FOUND, "not_found", f"no such endpoint {path}")
            allowed, handler = route
            if method != allowed:
                self._allow = allowed
                raise _HttpError(HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed",
                                 f"{path} accepts {allowed}, not {method}")
            wrong = misdirected(self.server.agent_id, self.headers.get(AGENT_ID_HEADER))
            if path == QUERY_PATH and wrong is not None:
                self._discard_body()
                raise _HttpError(HTTPStatus.MISDIRECTED_REQUEST, "wrong_agent", wrong)
            self._send(HTTPStatus.OK, handler())
        except _HttpError as e:
            self._send(e.status, ErrorResponse(error=ErrorDetail(
                code=e.code, message=e.message, details=e.details)))
        except Exception:
            log.exception("agent http: request failed", extra={"path": path})
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, ErrorResponse(error=ErrorDetail(
                code="internal_error", message="the agent failed while answering")))

    def _send(self, status: HTTPStatus, body: BaseModel) -> None:
        data = body.model_dump_json(exclude_none=True).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", getattr(self, "_allow", "GET"))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _body(self, model: type[_M]) -> _M:
        try:
            data = read_json_body(self, self.server.max_body_bytes)
        except BodyRefused as e:
            raise _HttpError(e.status, e.code, e.message) from None
        try:
            return model.model_validate_json(data)
        except ValidationError as e:
            raise _validation_error(e, model.__name__) from None

    def _discard_body(self) -> None:
        discard_body(self, self.server.max_body_bytes)

    # ------------------------------------------------------------------ endpoints

    def _query(self) -> BaseModel:
        request = self._body(QueryRequest)
        state, plan = request.to_core()
        try:
            results = self.server.agent.query(state, plan, request.samples)
        except InvalidQuery as e:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "invalid_query", str(e)) from None
        return QueryResponse.of(results)

    def _drift(self) -> BaseModel:
        agent = self.server.agent
        if not self.server.allow_drift or not isinstance(agent, DriftableAgent):
            self._discard_body()
            raise _HttpError(HTTPStatus.NOT_FOUND, "drift_disabled",
                             "this agent does not accept drift injection")
        request = self._body(DriftRequest)
        try:
            domain = parse_domain(request.domain, "<drift request>")
        except ModelError as e:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "invalid_domain", str(e)) from None
        if request.strip_action_literals:
            domain = domain.without_action_literals()
        version = agent.switch_model(domain)
        return DriftResponse(domain=domain.name, model_version=version,
                             actions=[a.name for a in domain.actions])

    def _episode(self) -> BaseModel:
        agent = self.server.agent
        if not isinstance(agent, SimulatedAgent) or agent.problem is None:
            self._discard_body()
            raise _HttpError(HTTPStatus.NOT_FOUND, "no_problem",
                             "this agent serves no problem to act on (start it with --problem)")
        request = self._body(EpisodeRequest)
        if request.mode == "optimal":
            trace = agent.run_optimal(max_steps=request.steps)
        else:
            trace = agent.random_walk(request.steps, p_inapplicable=request.p_inapplicable)
        return EpisodeResponse(
            states=[[list(a) for a in sorted(s)] for s in trace.states],
            actions=[list(a) for a in trace.actions], executed=list(trace.executed),
            optimal=trace.optimal, goal_reached=trace.goal_reached)

    def _health(self) -> BaseModel:
        agent = self.server.agent
        stats = getattr(agent, "stats", None)
        if stats is None:
            return HealthResponse()
        return HealthResponse(domain=stats.domain, model_version=stats.model_version,
                              queries=stats.queries, samples=stats.samples)


class AgentServer:
    """Serves an :class:`AgentQuery` (usually a SimulatedAgent) over HTTP.

    ``port=0`` picks a free port; read the real one from :attr:`port` or :attr:`url`.
    Use as a context manager, or call :meth:`start` (background thread) or
    :meth:`serve_forever` (this thread) and then :meth:`close`.
    """

    def __init__(self, agent: AgentQuery, host: str = "127.0.0.1", port: int = 0, *,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, allow_drift: bool = True,
                 request_timeout: float = 30.0, poll_interval: float = 0.1,
                 agent_id: str | None = None) -> None:
        # poll_interval bounds how long shutdown() waits for the serving loop to notice.
        self._poll_interval = poll_interval
        self._server = _Server((host, port), agent, max_body_bytes=max_body_bytes,
                               allow_drift=allow_drift, request_timeout=request_timeout,
                               agent_id=agent_id)
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> AgentServer:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        args=(self._poll_interval,),
                                        name="capwatch-agent-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever(self._poll_interval)

    def shutdown(self) -> None:
        """Stop serve_forever; safe to call from a signal handler's helper thread."""
        self._server.shutdown()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> AgentServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
