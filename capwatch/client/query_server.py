"""Answer capwatch's plan-outcome queries (docs/agent-query-protocol.md) from the agent.

The agent team supplies three callables, usually on a simulator or digital twin of the
agent rather than the agent acting in the world:

- ``set_state(atoms)`` puts it in the given abstract state (closed world);
- ``execute(action) -> bool`` tries one ground action; False when it cannot be executed
  (its precondition does not hold), leaving the state as it was;
- ``observe() -> atoms`` returns the current abstract state.

:class:`QueryServer` gets the protocol's semantics right (one ``set_state`` per sample,
stop at the first step that fails, report the longest executable prefix and the whole
state after it) and serves ``POST /capwatch/v1/query`` with bearer-token authentication,
a bounded pool of worker threads (a full pool answers 503 with Retry-After, which
capwatch retries) and a body-size limit. Vocabulary the domain lacks is refused with a
400 before the callables see it.

Standard library only; it depends on capwatch.contracts and capwatch.model alone.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from pydantic import ValidationError

from capwatch.client.vocabulary import Vocabulary, VocabularyError
from capwatch.contracts.agent_protocol import (
    AGENT_ID_HEADER,
    HEALTH_PATH,
    PROTOCOL_VERSION,
    QUERY_PATH,
    InvalidQuery,
    QueryRequest,
    misdirected,
)
from capwatch.contracts.bounded_http import BUSY, PooledHTTPServer
from capwatch.contracts.http_body import BodyRefused, discard_body, read_json_body
from capwatch.model.domain import GroundAction, GroundAtom

__all__ = ["Executor", "InvalidQuery", "QueryServer", "answer_query"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


class Executor(Protocol):
    """What the agent team implements (see the module docstring)."""

    def set_state(self, atoms: frozenset[GroundAtom]) -> None: ...

    def execute(self, action: GroundAction) -> bool: ...

    def observe(self) -> Iterable[GroundAtom]: ...


@dataclass(frozen=True, slots=True)
class CallableExecutor:
    """An :class:`Executor` from three plain functions."""

    set_state_fn: Callable[[frozenset[GroundAtom]], None]
    execute_fn: Callable[[GroundAction], bool]
    observe_fn: Callable[[], Iterable[GroundAtom]]

    def set_state(self, atoms: frozenset[GroundAtom]) -> None:
        self.set_state_fn(atoms)

    def execute(self, action: GroundAction) -> bool:
        return self.execute_fn(action)

    def observe(self) -> Iterable[GroundAtom]:
        return self.observe_fn()


def answer_query(executor: Executor, state: frozenset[GroundAtom],
                 plan: list[GroundAction], samples: int,
                 vocabulary: Vocabulary | None = None) -> list[dict[str, Any]]:
    """The protocol's semantics on ``executor``: one result body per sample."""
    if vocabulary is not None:
        try:
            vocabulary.check_state(state, "state")
            for i, a in enumerate(plan):
                vocabulary.check_action(a, f"plan step {i}")
        except VocabularyError as e:
            raise InvalidQuery(str(e)) from None
    results = []
    for _ in range(samples):
        executor.set_state(state)
        executed = 0
        for action in plan:
            if not executor.execute(action):
                break
            executed += 1
        final = sorted({tuple(a) for a in executor.observe()})
        if vocabulary is not None:
            # A wrong observation would teach capwatch a wrong model: refuse to answer.
            vocabulary.check_state(final, "observe()")
        results.append({"executed": executed, "state": [list(a) for a in final]})
    return results


class _HttpError(Exception):
    def __init__(self, status: HTTPStatus, code: str, message: str,
                 details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.details = status, code, message, details


class _PooledServer(PooledHTTPServer):
    """The bounded server of the daemon and the reference agent (a pool of ``workers``,
    ``backlog`` more waiting, then a 503 from the accepting thread; read timeouts and read
    deadlines, so a client trickling its request cannot hold a worker), with one executor
    per worker thread and the query endpoint's own 503."""

    def __init__(self, address: tuple[str, int], owner: QueryServer) -> None:
        self.owner = owner
        self._local = threading.local()
        super().__init__(address, _Handler, workers=owner.workers, backlog=owner.backlog,
                         read_timeout_s=owner.request_timeout_s, name="capwatch-query")

    def refuse(self, request: socket.socket, message: str = BUSY) -> None:
        self.owner._count("busy")
        # Read what already arrived of the request (briefly: this is the accepting
        # thread), so that closing does not reset the connection under the client before
        # it reads the 503.
        request.settimeout(0.05)
        with contextlib.suppress(OSError):
            request.recv(65536)
        request.sendall(_raw_response(
            HTTPStatus.SERVICE_UNAVAILABLE, "busy",
            "all query workers are busy" if message == BUSY else message, retry_after=1))

    def executor(self) -> Executor:
        """One executor per worker thread when the owner has a factory."""
        ex: Executor | None = getattr(self._local, "executor", None)
        if ex is None:
            ex = self.owner._make_executor()
            self._local.executor = ex
        return ex


def _raw_response(status: HTTPStatus, code: str, message: str,
                  retry_after: int | None = None) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = [f"HTTP/1.1 {status.value} {status.phrase}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close"]
    if retry_after is not None:
        head.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "capwatch-client"
    server: _PooledServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.owner.request_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("query server: " + format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        try:
            if path == HEALTH_PATH:
                if method != "GET":
                    raise self._not_allowed("GET", method, path)
                self._send(HTTPStatus.OK, owner.health())
                return
            if path != QUERY_PATH:
                raise _HttpError(HTTPStatus.NOT_FOUND, "not_found", f"no such endpoint {path}")
            if method != "POST":
                raise self._not_allowed("POST", method, path)
            self._authenticate()
            wrong = misdirected(owner.agent_id, self.headers.get(AGENT_ID_HEADER))
            if wrong is not None:
                self._discard_body()
                raise _HttpError(HTTPStatus.MISDIRECTED_REQUEST, "wrong_agent", wrong)
            self._send(HTTPStatus.OK, self._query())
        except _HttpError as e:
            owner._count(e.code)
            error: dict[str, Any] = {"code": e.code, "message": e.message}
            if e.details:
                error["details"] = e.details
            self._send(e.status, {"error": error})
        except Exception:
            owner._count("internal_error")
            log.exception("query server: the executor failed")
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": {
                "code": "internal_error", "message": "the agent failed while answering"}})

    def _not_allowed(self, allowed: str, method: str, path: str) -> _HttpError:
        self._allow = allowed
        self._discard_body()
        return _HttpError(HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed",
                          f"{path} accepts {allowed}, not {method}")

    def _authenticate(self) -> None:
        token = self.server.owner.token
        if token is None:
            return
        given = self.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                                 token.encode()):
            self._discard_body()
            raise _HttpError(HTTPStatus.UNAUTHORIZED, "unauthorized",
                             "missing or wrong bearer token")

    def _query(self) -> dict[str, Any]:
        owner = self.server.owner
        data = self._body()
        try:
            request = QueryRequest.model_validate_json(data)
        except ValidationError as e:
            errors = e.errors(include_url=False, include_input=False)
            if any(x["type"] == "json_invalid" for x in errors):
                raise _HttpError(HTTPStatus.BAD_REQUEST, "invalid_json",
                                 f"body is not valid JSON: {errors[0]['msg']}") from None
            details = [{"loc": ".".join(map(str, x["loc"])), "msg": x["msg"],
                        "type": x["type"]} for x in errors[:20]]
            summary = "; ".join(f"{d['loc'] or 'body'}: {d['msg']}" for d in details[:3])
            raise _HttpError(HTTPStatus.BAD_REQUEST, "invalid_request",
                             f"QueryRequest does not match the schema: {summary}",
                             details) from None
        if request.samples > owner.max_samples:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "invalid_request",
                             f"samples {request.samples} exceeds this agent's limit of"
                             f" {owner.max_samples}")
        state, plan = request.to_core()
        executor = self.server.executor()
        try:
            with owner._lock_for(executor):
                results = answer_query(executor, state, plan, request.samples,
                                       owner.vocabulary)
        except InvalidQuery as e:
            raise _HttpError(HTTPStatus.BAD_REQUEST, "invalid_query", str(e)) from None
        owner._answered(request.samples)
        return {"results": results}

    def _body(self) -> bytes:
        try:
            return read_json_body(self, self.server.owner.max_body_bytes)
        except BodyRefused as e:
            raise _HttpError(e.status, e.code, e.message) from None

    def _discard_body(self) -> None:
        discard_body(self, self.server.owner.max_body_bytes)

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", getattr(self, "_allow", "GET"))
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Bearer realm="capwatch-agent"')
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)


class QueryServer:
    """Serves the agent query protocol over ``executor`` (see the module docstring).

    ``executor`` is one :class:`Executor`, whose queries are then serialised (it holds one
    state), or a zero-argument factory (such as the executor's class) returning a fresh
    executor, one per worker thread,
    so that up to ``workers`` queries run at once. ``agent_id``: the id this agent sends
    its transitions under; queries capwatch means for another agent are refused (421).
    ``token`` is required: pass
    ``token=None`` explicitly only for a server on a private interface in a test.
    ``port=0`` picks a free port (:attr:`url`).
    """

    def __init__(self, executor: Executor | Callable[[], Executor], *, token: str | None,
                 vocabulary: Vocabulary | None = None, host: str = "127.0.0.1",
                 port: int = 0, workers: int = 4, backlog: int = 16,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_samples: int = 1000,
                 request_timeout_s: float = 30.0, agent_id: str | None = None) -> None:
        if token is not None and not token:
            raise ValueError("token must be non-empty (or None to disable authentication)")
        if workers < 1 or backlog < 0:
            raise ValueError("need workers >= 1 and backlog >= 0")
        self.token = token
        self.agent_id = agent_id
        """This agent's id: a query naming another (AGENT_ID_HEADER) gets 421."""
        self.vocabulary = vocabulary
        self.workers = workers
        self.backlog = backlog
        self.max_body_bytes = max_body_bytes
        self.max_samples = max_samples
        self.request_timeout_s = request_timeout_s
        if not isinstance(executor, type) and all(
                hasattr(executor, m) for m in ("set_state", "execute", "observe")):
            self._factory: Callable[[], Executor] | None = None
            self._shared: Executor | None = executor  # type: ignore[assignment]
        else:
            self._factory = executor  # type: ignore[assignment]
            self._shared = None
        self._shared_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self.queries = 0
        self.samples = 0
        self.refused: dict[str, int] = {}
        self._server = _PooledServer((host, port), self)
        self._thread: threading.Thread | None = None

    def _make_executor(self) -> Executor:
        if self._factory is not None:
            return self._factory()
        assert self._shared is not None
        return self._shared

    def _lock_for(self, executor: Executor) -> Any:
        if self._factory is None:
            return self._shared_lock
        return _NoLock()

    def _answered(self, samples: int) -> None:
        with self._stats_lock:
            self.queries += 1
            self.samples += samples

    def _count(self, code: str) -> None:
        with self._stats_lock:
            self.refused[code] = self.refused.get(code, 0) + 1

    def health(self) -> dict[str, Any]:
        with self._stats_lock:
            body: dict[str, Any] = {"status": "ok", "protocol": PROTOCOL_VERSION,
                                    "queries": self.queries, "samples": self.samples}
        if self.vocabulary is not None:
            body["domain"] = self.vocabulary.domain
        return body

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self) -> QueryServer:
        """Serve in a background thread (no-op when already serving)."""
        if self._thread is not None:
            return self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,),
                                        name="capwatch-query-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever(0.1)

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> QueryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


