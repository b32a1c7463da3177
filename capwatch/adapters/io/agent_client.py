"""capwatch's client of the agent query protocol (HTTP, standard library only).

It uses ``http.client`` directly rather than urllib so that it can enforce one deadline
per attempt (urllib's timeout applies to each socket operation, so a server trickling
bytes could hold capwatch indefinitely) and cap the size of an answer.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from capwatch.assess.agent import AgentUnavailable, QueryResult, State
from capwatch.contracts.agent_protocol import (
    AGENT_ID_HEADER,
    DRIFT_PATH,
    HEALTH_PATH,
    MAX_SAMPLES,
    QUERY_PATH,
    AgentCannotAttempt,
    AgentProtocolError,
    AgentRejectedQuery,
    DriftRequest,
    DriftResponse,
    ErrorResponse,
    HealthResponse,
    QueryRequest,
    QueryResponse,
)
from capwatch.contracts.wire import duplicate_key
from capwatch.model.domain import GroundAction

log = logging.getLogger(__name__)

_M = TypeVar("_M", bound=BaseModel)

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
    def __init__(self, message: str, retry_after: float | None = None,
                 timed_out: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.timed_out = timed_out


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
                 ssl_context: ssl.SSLContext | None = None,
                 agent_id: str | None = None,
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
        if agent_id is not None:
            # The agent can then refuse a query meant for another (AGENT_ID_HEADER).
            self._headers[AGENT_ID_HEADER] = agent_id
        self._ssl_context = ssl_context
        """https:// only: whom to trust and our client certificate (mutual TLS)."""
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
        if samples > MAX_SAMPLES:
            # The protocol bounds one request's samples; a probability re-estimate sized to
            # the drift audit asks thousands (capwatch.assess.probabilities): in requests
            # of at most MAX_SAMPLES each, answered as one.
            results: list[QueryResult] = []
            while len(results) < samples:
                results += self.query(state, plan, min(MAX_SAMPLES, samples - len(results)))
            return results
        body = QueryRequest.of(state, plan, samples).model_dump_json().encode()
        try:
            # A timeout says how large the query was: an assessment's can hold hundreds of
            # steps on thousands of fresh objects, which an agent answering its other
            # queries in time may take longer than the timeout over.
            size = (f"{len(plan)} step{'' if len(plan) == 1 else 's'}, {len(state):,}"
                    f" atom{'' if len(state) == 1 else 's'}, {len(body):,} bytes")
            response = self._call("POST", QUERY_PATH, body, QueryResponse, size)
            results = response.to_core()
            if len(results) != samples:
                raise AgentProtocolError(
                    f"agent at {self.url} returned {len(results)} results for {samples} samples"
                )
            bad = [r.executed for r in results if r.executed > len(plan)]
            if bad:
                raise AgentProtocolError(f"agent at {self.url} reported executing {bad[0]} steps "
                                         f"of a {len(plan)}-step plan")
            # Nothing executed leaves s_I as it was (the protocol's s_F). An answer saying
            # otherwise cannot be read as behaviour: taken as a refusal it hid the change,
            # taken as an execution it contradicted the agent's own count.
            start = frozenset(state)
            moved = next((r.state for r in results
                          if r.executed == 0 and frozenset(r.state) != start), None)
            if moved is not None:
                end = frozenset(moved)
                raise AgentProtocolError(
                    f"agent at {self.url} reported executing 0 steps but a state other than "
                    f"the one it was put in ({len(end - start)} atoms made true, "
                    f"{len(start - end)} made false): with no step executed the state is "
                    "the start state")
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

    def _call(self, method: str, path: str, body: bytes | None, model: type[_M],
              what: str = "") -> _M:
        """``what``: the request's size, named when its last attempt timed out."""
        last = ""
        timed_out = False
        for attempt in range(self.retries + 1):
            with self._lock:
                self._attempts += 1
            try:
                status, data = self._attempt(method, self._prefix + path, body)
                return self._decode(status, data, model)
            except _Retryable as e:
                last, timed_out = str(e), e.timed_out
                if attempt == self.retries:
                    break
                delay = self._delay(attempt, e.retry_after)
                log.info("agent request failed, retrying", extra={
                    "agent_url": self.url, "attempt": attempt + 1, "error": last,
                    "retry_in_s": round(delay, 3)})
                self._sleep(delay)
        if timed_out and what:
            last += f" (the query: {what})"
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
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout,
                                               context=self._ssl_context)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
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
            raise _Retryable(f"no complete answer within {self.timeout} s",
                             timed_out=True) from None
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
                if response.length:
                    # read1() returns b"" when the connection closes early, where read()
                    # would raise IncompleteRead: a cut answer is the network's fault,
                    # retried like a reset, not the agent breaking the protocol (that
                    # failed the assessment for good on a flaky connection: rev14).
                    raise _Retryable(f"the connection closed {response.length} bytes "
                                     f"short of the answer's Content-Length")
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
                if err.code == "invalid_query":
                    raise AgentCannotAttempt(status, err.code, err.message)
                raise AgentRejectedQuery(status, err.code, err.message)
            except ValidationError:
                raise AgentRejectedQuery(status, "unknown", _message(data)) from None
        if status != 200:
            raise AgentProtocolError(f"agent at {self.url} answered HTTP {status}: "
                                     f"{_message(data)}")
        try:
            answer = model.model_validate_json(data)
        except ValidationError as e:
            first = e.errors(include_url=False, include_input=False)[0]
            loc = ".".join(str(p) for p in first["loc"]) or "the answer"
            raise AgentProtocolError(
                f"agent at {self.url} answered outside the protocol: {loc}: {first['msg']}"
            ) from None
        # An answer that gives a key twice means what the reader decides (the parser keeps
        # the last value): refused, like an inbound event, rather than learnt from.
        ambiguous = duplicate_key(data)
        if ambiguous is not None:
            raise AgentProtocolError(f"agent at {self.url} answered outside the protocol:"
                                     f" {ambiguous}")
        return answer


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
