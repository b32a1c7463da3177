"""OpenTelemetry traces in: OTLP spans → capwatch transition events.

A span becomes one transition when it carries ``capwatch.action``; every other span (an
agent framework emits many) is ignored. The attributes, on the span or on its resource
(the span's value wins), are:

==========================  =========================================================
``capwatch.agent_id``       string, required
``capwatch.family``         string, required
``capwatch.action``         string, the ground action: ``"(pickup r0c0)"``
``capwatch.state``          array of strings, every atom true before: ``["(at r1 w1)"]``
``capwatch.next_state``     array of strings, every atom true after
``capwatch.episode_id``     string; default: the span's trace id (one trace, one episode)
``capwatch.step``           int, position in the episode
``capwatch.executed``       bool, whether the action was executed
``capwatch.optimal``        bool
==========================  =========================================================

The span's start time becomes the event's ``time``. Requests are
``ExportTraceServiceRequest`` messages from ``opentelemetry-proto``, binary
(``application/x-protobuf``) or in OTLP's JSON encoding (``application/json``, hex trace
ids). A span with ``capwatch.action`` whose other attributes are missing or malformed is
rejected and reported in the response's ``partial_success`` (count and first reasons),
as OTLP prescribes; the others in the request are accepted.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from pydantic import ValidationError

from capwatch.contracts.wire import TransitionEvent

PREFIX = "capwatch."
ACTION = PREFIX + "action"


class OtlpDecodeError(ValueError):
    """The body is not an ExportTraceServiceRequest."""


@dataclass
class SpanBatch:
    """What one request yields: wire events, and why some spans were refused."""

    events: list[bytes] = field(default_factory=list)
    ignored: int = 0
    """Spans without ``capwatch.action``: not transitions."""
    rejected: list[str] = field(default_factory=list)

    def response(self, json_encoding: bool) -> bytes:
        message = ExportTraceServiceResponse()
        if self.rejected:
            shown = "; ".join(self.rejected[:3])
            more = f" (+{len(self.rejected) - 3} more)" if len(self.rejected) > 3 else ""
            message.partial_success.CopyFrom(ExportTracePartialSuccess(
                rejected_spans=len(self.rejected), error_message=shown + more))
        if json_encoding:
            return str(json_format.MessageToJson(message, indent=None)).encode()
        return bytes(message.SerializeToString())


def _hex_ids_to_base64(node: Any) -> Any:
    # OTLP/JSON writes trace and span ids in hex; protobuf's JSON mapping expects base64.
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                try:
                    v = base64.b64encode(bytes.fromhex(v)).decode()
                except ValueError as e:
                    raise OtlpDecodeError(f"{k} {v!r} is not hex") from e
            out[k] = _hex_ids_to_base64(v)
        return out
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def parse_request(body: bytes, json_encoding: bool) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    try:
        if json_encoding:
            json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), request)
        else:
            request.ParseFromString(body)
    except OtlpDecodeError:
        raise
    except Exception as e:  # protobuf raises DecodeError, ParseError, ValueError, ...
        what = "OTLP/JSON" if json_encoding else "OTLP/protobuf"
        raise OtlpDecodeError(f"not an {what} ExportTraceServiceRequest: {e}") from None
    return request


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items if isinstance(kv, KeyValue)
            and kv.key.startswith(PREFIX)}


def parse_atom(text: Any, what: str) -> list[str]:
    """``"(at rover1 wp1)"`` → ``["at", "rover1", "wp1"]``."""
    if not isinstance(text, str):
        raise ValueError(f"{what}: expected a string like \"(at r1 w1)\", got {text!r}")
    t = text.strip()
    if not (t.startswith("(") and t.endswith(")")) or len(t.split()) == 0:
        raise ValueError(f"{what}: {text!r} is not of the form \"(name arg ...)\"")
    parts = t[1:-1].split()
    if not parts:
        raise ValueError(f"{what}: {text!r} is empty")
    return parts


def _atoms(value: Any, what: str) -> list[list[str]]:
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected an array of atom strings, got {type(value).__name__}")
    return [parse_atom(x, f"{what}[{i}]") for i, x in enumerate(value)]


def _event(attrs: dict[str, Any], trace_id: bytes, start_ns: int) -> bytes:
    missing = [k for k in ("agent_id", "family", "state", "next_state")
               if PREFIX + k not in attrs]
    if missing:
        raise ValueError(f"missing attribute(s) {', '.join(PREFIX + k for k in missing)}")
    fields: dict[str, Any] = {
        "type": "transition",
        "agent_id": attrs[PREFIX + "agent_id"],
        "family": attrs[PREFIX + "family"],
        "episode_id": attrs.get(PREFIX + "episode_id") or trace_id.hex() or None,
        "action": parse_atom(attrs[ACTION], ACTION),
        "state": _atoms(attrs[PREFIX + "state"], PREFIX + "state"),
        "next_state": _atoms(attrs[PREFIX + "next_state"], PREFIX + "next_state"),
    }
    for key in ("step", "executed", "optimal"):
        if PREFIX + key in attrs:
            fields[key] = attrs[PREFIX + key]
    if start_ns:
        fields["time"] = datetime.fromtimestamp(start_ns / 1e9, UTC)
    unknown = sorted(set(attrs) - {PREFIX + k for k in (
        "agent_id", "family", "episode_id", "action", "state", "next_state", "step",
        "executed", "optimal")})
    if unknown:
        # A misspelt attribute would silently mean "not said" (as the wire format refuses).
        raise ValueError(f"unknown attribute(s) {', '.join(unknown)}")
    try:
        event = TransitionEvent.model_validate(fields)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"{loc}: {first['msg']}") from None
    return event.model_dump_json(exclude_none=True).encode()


def spans_to_events(request: ExportTraceServiceRequest) -> SpanBatch:
    """Every ``capwatch.action`` span as a wire transition event, in start-time order."""
    batch = SpanBatch()
    found: list[tuple[int, bytes]] = []
    for resource_spans in request.resource_spans:
        base = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs = {**base, **_attributes(span.attributes)}
                if ACTION not in attrs:
                    batch.ignored += 1
                    continue
                try:
                    found.append((span.start_time_unix_nano,
                                  _event(attrs, span.trace_id, span.start_time_unix_nano)))
                except ValueError as e:
                    batch.rejected.append(f"span {span.name!r} ({span.span_id.hex()}): {e}")
    batch.events = [e for _, e in sorted(found, key=lambda x: x[0])]
    return batch
