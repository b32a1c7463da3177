"""The daemon's HTTP ingest: transition events and OTLP traces POSTed by agents.

Both endpoints check the bearer token, bound the body, validate every event (wire format,
family, vocabulary of the family's model) and append what they accept to the spool
(capwatch.adapters.io.spool), answering only after it is fsynced. The pipeline reads the
spool as its source; its checkpoint in the store says how far it got.

- ``POST /ingest/v1/transitions`` (capwatch.contracts.ingest): all or nothing. One bad
  event refuses the whole request with a 400 naming each bad line, so a producer's retry
  never duplicates half a batch.
- ``POST /v1/traces`` (OTLP/HTTP, binary or JSON): spans that carry ``capwatch.action``
  become transitions (capwatch.adapters.io.otlp); spans with bad capwatch attributes are
  refused individually in ``partial_success``, as OTLP prescribes.

A spool over its size limit answers 503 with Retry-After; both kinds of producers retry.
"""

from __future__ import annotations

import gzip
import hmac
import json
import zlib
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any

import structlog

from capwatch.adapters.io.spool import Spool, SpoolFull
from capwatch.contracts.http_body import BodyRefused, discard_body, read_sized_body
from capwatch.contracts.ingest import INGEST_PATH, NDJSON, OTLP_TRACES_PATH
from capwatch.contracts.wire import DeadLetter, DecodeLimits, decode, vocabulary_error
from capwatch.daemon.config import IngestConfig
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.model.domain import Domain

log = structlog.get_logger("capwatch.ingest")

PROTOBUF = "application/x-protobuf"


class _Refusal(Exception):
    def __init__(self, status: HTTPStatus, code: str, message: str,
                 extra: dict[str, Any] | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = extra or {}
        self.retry_after = retry_after


class IngestEndpoints:
    """Serves the two POST endpoints on the daemon's HTTP server (capwatch.daemon.http)."""

    def __init__(self, spool: Spool, config: IngestConfig, families: Mapping[str, Domain],
                 limits: DecodeLimits, metrics: DaemonMetrics | None = None) -> None:
        token = config.ingest_token()
        if not token:
            raise ValueError("ingest.token is required")
        self._token = token.encode()
        self.spool = spool
        self.config = config
        self.families = dict(families)
        self.limits = limits
        self.paths = {INGEST_PATH} | ({OTLP_TRACES_PATH} if config.otlp else set())
        if config.otlp:
            # Fail at start-up, not at the first trace, when the extra is missing.
            try:
                import capwatch.adapters.io.otlp  # noqa: F401
            except ImportError as e:
                raise ValueError(f"ingest.otlp needs opentelemetry-proto (pip install"
                                 f" 'capwatch[otel]', or set ingest.otlp: false): {e}") from e
        self.accepted = 0
        self.refused = 0
        self.metrics = metrics

    def handle(self, h: BaseHTTPRequestHandler, path: str) -> None:
        json_reply = True
        try:
            self._authenticate(h)
            body = self._body(h)
            ctype = h.headers.get("Content-Type", "application/json").split(";", 1)[0]
            ctype = ctype.strip().lower()
            if path == OTLP_TRACES_PATH:
                json_reply = ctype != PROTOBUF
                status, reply, content_type = self._otlp(body, ctype)
            else:
                status, reply, content_type = self._transitions(body, ctype)
            _send(h, status, reply, content_type)
        except _Refusal as e:
            self.refused += 1
            if e.status >= 500 or e.status == HTTPStatus.UNAUTHORIZED:
                log.warning("ingest refused", path=path, status=int(e.status), reason=e.message)
            headers = {"Retry-After": str(e.retry_after)} if e.retry_after else {}
            if e.status == HTTPStatus.UNAUTHORIZED:
                headers["WWW-Authenticate"] = 'Bearer realm="capwatch-ingest"'
            if path == OTLP_TRACES_PATH and not json_reply:
                # OTLP/protobuf clients read a google.rpc.Status; the message is in the log.
                _send(h, e.status, b"", PROTOBUF, headers)
            else:
                error = {"error": {"code": e.code, "message": e.message, **e.extra}}
                _send(h, e.status, json.dumps(error).encode(), "application/json", headers)

    def _authenticate(self, h: BaseHTTPRequestHandler) -> None:
        scheme, _, value = h.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                                 self._token):
            discard_body(h, self.config.max_body_bytes)
            raise _Refusal(HTTPStatus.UNAUTHORIZED, "unauthorized",
                           "missing or wrong bearer token")

    def _body(self, h: BaseHTTPRequestHandler) -> bytes:
        limit = self.config.max_body_bytes
        try:
            data = read_sized_body(h, limit)
        except BodyRefused as e:
            raise _Refusal(e.status, e.code, e.message) from None
        encoding = h.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding == "gzip":
            try:
                # Bounded: a small gzip bomb must not expand past the body limit.
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data = d.decompress(data, limit + 1)
                if len(data) > limit or d.unconsumed_tail:
                    raise _Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body_too_large",
                                   f"decompressed body exceeds the limit of {limit} bytes")
            except (zlib.error, gzip.BadGzipFile) as e:
                raise _Refusal(HTTPStatus.BAD_REQUEST, "invalid_encoding",
                               f"body is not valid gzip: {e}") from None
        elif encoding != "identity":
            raise _Refusal(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_encoding",
                           f"Content-Encoding {encoding!r}: send identity or gzip")
        return data

    def _check(self, raw: bytes) -> str | None:
        """Why this event cannot be processed, or None."""
        decoded = decode(raw, self.limits)
        if isinstance(decoded, DeadLetter):
            return decoded.reason
        for t in decoded:
            domain = self.families.get(t.family)
            if domain is None:
                return f"unknown family {t.family!r}: no baseline model"
            error = vocabulary_error(domain, t)
            if error is not None:
                return error
        return None

    def _count(self, endpoint: str, result: str, n: int) -> None:
        if self.metrics is not None and n:
            self.metrics.ingest_events.labels(endpoint, result).inc(n)

    def _store(self, events: list[bytes], endpoint: str) -> None:
        try:
            self.spool.append(events)
        except SpoolFull as e:
            self._count(endpoint, "refused", len(events))
            raise _Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "spool_full", str(e),
                           retry_after=5) from None
        except OSError as e:
            # Not on disk, so not accepted: the producer must send it again.
            log.error("ingest spool write failed", error=str(e))
            self._count(endpoint, "refused", len(events))
            raise _Refusal(HTTPStatus.SERVICE_UNAVAILABLE, "spool_unavailable",
                           f"the spool could not be written: {e.strerror}",
                           retry_after=5) from None
        self.accepted += len(events)
        self._count(endpoint, "accepted", len(events))
        if self.metrics is not None:
            self.metrics.ingest_spool_bytes.set(self.spool.size)

    def _transitions(self, body: bytes, ctype: str) -> tuple[HTTPStatus, bytes, str]:
        if ctype == NDJSON:
            lines = [line.strip() for line in body.splitlines()]
            events = [line for line in lines if line]
        elif ctype == "application/json":
            try:
                parsed = json.loads(body)
            except ValueError as e:
                raise _Refusal(HTTPStatus.BAD_REQUEST, "invalid_json",
                               f"body is not JSON: {e}") from None
            items = parsed if isinstance(parsed, list) else [parsed]
            events = [json.dumps(x, separators=(",", ":")).encode() for x in items]
        else:
            raise _Refusal(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                           f"send {NDJSON} or application/json, not {ctype!r}")
        if len(events) > self.config.max_events:
            raise _Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_many_events",
                           f"{len(events)} events, the limit is {self.config.max_events}")
        rejected = [{"line": i, "reason": reason} for i, e in enumerate(events)
                    if (reason := self._check(e)) is not None]
        if rejected:
            self._count("transitions", "refused", len(events))
            shown = "; ".join(f"event {r['line']}: {r['reason']}" for r in rejected[:3])
            raise _Refusal(HTTPStatus.BAD_REQUEST, "invalid_events",
                           f"{len(rejected)} of {len(events)} events refused, none stored:"
                           f" {shown}", {"rejected": rejected[:100]})
        if events:
            self._store(events, "transitions")
        return HTTPStatus.OK, json.dumps({"accepted": len(events)}).encode(), "application/json"

    def _otlp(self, body: bytes, ctype: str) -> tuple[HTTPStatus, bytes, str]:
        from capwatch.adapters.io.otlp import OtlpDecodeError, parse_request, spans_to_events

        if ctype not in (PROTOBUF, "application/json"):
            raise _Refusal(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                           f"send {PROTOBUF} or application/json, not {ctype!r}")
        json_encoding = ctype == "application/json"
        try:
            request = parse_request(body, json_encoding)
        except OtlpDecodeError as e:
            raise _Refusal(HTTPStatus.BAD_REQUEST, "invalid_otlp", str(e)) from None
        batch = spans_to_events(request)
        if len(batch.events) > self.config.max_events:
            raise _Refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "too_many_events",
                           f"{len(batch.events)} spans, the limit is {self.config.max_events}")
        accepted = []
        for event in batch.events:
            reason = self._check(event)
            if reason is None:
                accepted.append(event)
            else:
                batch.rejected.append(reason)
        self._count("otlp", "refused", len(batch.rejected))
        if accepted:
            self._store(accepted, "otlp")
        if batch.rejected:
            log.warning("ingest refused spans", rejected=len(batch.rejected),
                        first=batch.rejected[0])
        content_type = "application/json" if json_encoding else PROTOBUF
        return HTTPStatus.OK, batch.response(json_encoding), content_type


def _send(h: BaseHTTPRequestHandler, status: HTTPStatus, body: bytes, content_type: str,
          headers: dict[str, str] | None = None) -> None:
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(body)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    if h.close_connection:
        h.send_header("Connection", "close")
    h.end_headers()
    h.wfile.write(body)
