"""The HTTP form of the agent query protocol: a reference agent server and capwatch's client.

Both sides use only the standard library. The server is ``http.server``'s
ThreadingHTTPServer: the reference agent answers a handful of queries per assessment,
so an async framework would add a dependency and no capacity anyone needs. The client
uses ``http.client`` directly rather than urllib so that it can enforce one deadline per
attempt (urllib's timeout applies to each socket operation, so a server trickling bytes
could hold capwatch indefinitely) and cap the size of an answer.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from capwatch.adapters.agent_protocol import (
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
    QueryRequest,
    QueryResponse,
)
from capwatch.adapters.agent_sim import InvalidQuery, SimulatedAgent
from capwatch.assess.agent import AgentQuery, AgentUnavailable, QueryResult, State
from capwatch.model.domain import Domain, GroundAction
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A restarted agent must be able to take its port back while old sockets linger.
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], agent: AgentQuery, *, max_body_bytes: int,
                 allow_drift: bool, request_timeout: float) -> None:
        self.agent = agent
        self.max_body_bytes = max_body_bytes
        self.allow_drift = allow_drift
        self.request_timeout = request_timeout
        super().__init__(address, _Handler)


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
        ctype = self.headers.get("Content-Type", "application/json")
        if ctype.split(";", 1)[0].strip().lower() != "application/json":
            self._discard_body()
            raise _HttpError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                             f"send Content-Type: application/json, not {ctype!r}")
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "length_required",
                             "chunked bodies are not accepted: send Content-Length")
        raw_length = self.headers.get("Content-Length")
        if raw_length is None:
            self.close_connection = True
            raise _HttpError(HTTPStatus.LENGTH_REQUIRED, "length_required",
                             "Content-Length is required")
        try:
            length = int(raw_length)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise _HttpError(HTTPStatus.BAD_REQUEST, "invalid_length",
                             f"bad Content-Length {raw_length!r}") from None
        if length > self.server.max_body_bytes:
            # Not reading a body this large means the connection cannot be reused.
            self.close_connection = True
            raise _HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body_too_large",
                             f"body of {length} bytes exceeds the limit of "
                             f"{self.server.max_body_bytes} bytes")
        data = self.rfile.read(length)
        if len(data) < length:
            self.close_connection = True
            raise _HttpError(HTTPStatus.BAD_REQUEST, "truncated_body",
                             f"expected {length} body bytes, received {len(data)}")
        try:
            return model.model_validate_json(data)
        except ValidationError as e:
            raise _validation_error(e, model.__name__) from None

    def _discard_body(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if 0 <= length <= self.server.max_body_bytes:
            self.rfile.read(length)
        else:
            self.close_connection = True

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
                 request_timeout: float = 30.0, poll_interval: float = 0.1) -> None:
        # poll_interval bounds how long shutdown() waits for the serving loop to notice.
        self._poll_interval = poll_interval
        self._server = _Server((host, port), agent, max_body_bytes=max_body_bytes,
                               allow_drift=allow_drift, request_timeout=request_timeout)
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


# ---------------------------------------------------------------------- client


class AgentRejectedQuery(AgentUnavailable):
    """The agent answered with a client error (4xx): asking again would not help."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"agent rejected the request ({status} {code}): {message}")
        self.status = status
        self.code = code
        self.reason = message


class AgentProtocolError(AgentUnavailable):
    """The agent answered, but not in the protocol (wrong schema, wrong number of results)."""


@dataclass(frozen=True, slots=True)
class ClientStats:
    queries: int
    """Queries answered successfully."""
    samples: int
    attempts: int
    """HTTP requests sent, retries included."""
    failures: int
    """Queries that ended in AgentUnavailable."""


class _Retryable(Exception):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class HttpAgentClient:
    """:class:`~capwatch.assess.agent.AgentQuery` over HTTP, with deadlines and retries.

    Each attempt must finish within ``timeout`` seconds (connect, send, and the whole
    answer). Failed attempts (connection errors, timeouts, 5xx, 408, 429) are retried
    ``retries`` times after ``backoff * 2**i`` seconds (at most ``max_backoff``, with
    jitter, or the server's Retry-After), then :class:`AgentUnavailable` is raised. A 4xx
    answer raises :class:`AgentRejectedQuery` at once and an answer that breaks the
    protocol raises :class:`AgentProtocolError`: both are AgentUnavailable too.
    """

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 3, backoff: float = 0.5,
                 *, max_backoff: float = 10.0, max_response_bytes: int = 64 * 1024 * 1024,
                 headers: dict[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"agent URL must be http(s)://host[:port][/prefix], got {url!r}")
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise ValueError("timeout must be positive, retries and backoff non-negative")
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_response_bytes = max_response_bytes
        self._headers = dict(headers or {})
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._queries = self._samples = self._attempts = self._failures = 0

    @property
    def stats(self) -> ClientStats:
        with self._lock:
            return ClientStats(self._queries, self._samples, self._attempts, self._failures)

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        body = QueryRequest.of(state, plan, samples).model_dump_json().encode()
        try:
            response = self._call("POST", QUERY_PATH, body, QueryResponse)
            results = response.to_core()
            if len(results) != samples:
                raise AgentProtocolError(
                    f"agent at {self.url} returned {len(results)} results for {samples} samples"
                )
            bad = [r.executed for r in results if r.executed > len(plan)]
            if bad:
                raise AgentProtocolError(f"agent at {self.url} reported executing {bad[0]} steps "
                                         f"of a {len(plan)}-step plan")
        except AgentUnavailable:
            with self._lock:
                self._failures += 1
            raise
        with self._lock:
            self._queries += 1
            self._samples += samples
        log.debug("agent query answered", extra={"agent_url": self.url, "plan_length": len(plan),
                                                 "samples": samples,
                                                 "executed": [r.executed for r in results]})
        return results

    def health(self) -> HealthResponse:
        return self._call("GET", HEALTH_PATH, None, HealthResponse)

    def drift(self, domain_pddl: str, strip_action_literals: bool = True) -> DriftResponse:
        """Ask a reference agent to switch model (drift injection)."""
        body = DriftRequest(domain=domain_pddl, strip_action_literals=strip_action_literals)
        return self._call("POST", DRIFT_PATH, body.model_dump_json().encode(), DriftResponse)

    # ------------------------------------------------------------------ transport

    def _call(self, method: str, path: str, body: bytes | None, model: type[_M]) -> _M:
        last = ""
        for attempt in range(self.retries + 1):
            with self._lock:
                self._attempts += 1
            try:
                status, data = self._attempt(method, self._prefix + path, body)
                return self._decode(status, data, model)
            except _Retryable as e:
                last = str(e)
                if attempt == self.retries:
                    break
                delay = self._delay(attempt, e.retry_after)
                log.info("agent request failed, retrying", extra={
                    "agent_url": self.url, "attempt": attempt + 1, "error": last,
                    "retry_in_s": round(delay, 3)})
                self._sleep(delay)
        raise AgentUnavailable(
            f"agent at {self.url} unavailable after {self.retries + 1} attempts: {last}"
        )

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        base = min(self.backoff * (2.0 ** attempt), self.max_backoff)
        # Jitter spreads the retries of many capwatch replicas hitting one recovering agent.
        return base * (0.5 + 0.5 * self._rng.random())

    def _attempt(self, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        deadline = time.monotonic() + self.timeout
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.timeout)
        headers = {"Accept": "application/json", **self._headers}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=body, headers=headers)
            # Kept here because getresponse() drops conn.sock when the server closes.
            sock = conn.sock
            if sock is not None:
                sock.settimeout(_remaining(deadline))
            response = conn.getresponse()
            data = self._read(response, sock, deadline)
            status = response.status
            if status in _RETRY_STATUSES:
                raise _Retryable(f"HTTP {status}: {_message(data)}",
                                 _retry_after(response.getheader("Retry-After")))
            return status, data
        except TimeoutError:
            raise _Retryable(f"no complete answer within {self.timeout} s") from None
        except (OSError, http.client.HTTPException) as e:
            raise _Retryable(f"{type(e).__name__}: {e}") from None
        finally:
            conn.close()

    def _read(self, response: http.client.HTTPResponse, sock: socket.socket | None,
              deadline: float) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            if sock is not None:
                sock.settimeout(_remaining(deadline))
            chunk = response.read1(65536)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > self.max_response_bytes:
                raise AgentProtocolError(f"agent at {self.url} sent more than "
                                         f"{self.max_response_bytes} bytes")
            chunks.append(chunk)

    def _decode(self, status: int, data: bytes, model: type[_M]) -> _M:
        if 400 <= status < 500:
            try:
                err = ErrorResponse.model_validate_json(data).error
                raise AgentRejectedQuery(status, err.code, err.message)
            except ValidationError:
                raise AgentRejectedQuery(status, "unknown", _message(data)) from None
        if status != 200:
            raise AgentProtocolError(f"agent at {self.url} answered HTTP {status}: "
                                     f"{_message(data)}")
        try:
            return model.model_validate_json(data)
        except ValidationError as e:
            first = e.errors(include_url=False, include_input=False)[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise AgentProtocolError(
                f"agent at {self.url} answered outside the protocol: {loc}: {first['msg']}"
            ) from None


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # HTTP-date form: fall back to our own backoff


def _message(data: bytes) -> str:
    try:
        return ErrorResponse.model_validate_json(data).error.message
    except ValidationError:
        return data[:200].decode("utf-8", "replace") or "(empty body)"
