"""OTLP spans → transition events: the attribute mapping and its refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from capwatch.adapters.io.otlp import OtlpDecodeError, parse_request, spans_to_events
from capwatch.client.otel import span_attributes
from capwatch.contracts.wire import decode

STATE = [("at", "rover1", "wp1")]
NEXT = [("at", "rover1", "wp2")]
NAV = ("navigate", "rover1", "wp1", "wp2")


def _any(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, list):
        return {"arrayValue": {"values": [_any(x) for x in v]}}
    return {"stringValue": v}


def _kv(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any(v)} for k, v in attrs.items()]


def _request(spans: list[dict[str, Any]], resource: dict[str, Any]) -> bytes:
    return json.dumps({"resourceSpans": [{
        "resource": {"attributes": _kv(resource)},
        "scopeSpans": [{"scope": {"name": "agent"}, "spans": spans}]}]}).encode()


def _span(name: str, attrs: dict[str, Any], start: int) -> dict[str, Any]:
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": name, "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 1),
            "attributes": _kv(attrs)}


def test_json_spans_become_transitions_in_start_order_and_others_are_ignored() -> None:
    later = span_attributes(NEXT, ("navigate", "rover1", "wp2", "wp1"), STATE, step=1)
    first = span_attributes(STATE, NAV, NEXT, step=0, executed=True)
    body = _request([_span("step", later, 2_000_000_000), _span("llm.call", {}, 1),
                     _span("step", first, 1_000_000_000)],
                    {"capwatch.agent_id": "rover-17", "capwatch.family": "rover-v3",
                     "service.name": "rover"})
    batch = spans_to_events(parse_request(body, json_encoding=True))
    assert batch.ignored == 1 and batch.rejected == []
    transitions = []
    for raw in batch.events:
        decoded = decode(raw)
        assert isinstance(decoded, list)
        transitions.extend(decoded)
    assert [t.step for t in transitions] == [0, 1]
    t = transitions[0]
    assert (t.agent_id, t.family, t.action, t.executed) == ("rover-17", "rover-v3", NAV, True)
    assert t.state == frozenset(STATE) and t.next_state == frozenset(NEXT)
    assert t.episode_id == "5b8efff798038103d269b633813fc60c"  # the trace is the episode
    assert t.time is not None and t.time.timestamp() == 1.0


def test_protobuf_round_trip_and_span_attributes_win_over_the_resource() -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    attrs = span_attributes(STATE, NAV, NEXT, agent_id="rover-9")
    body = _request([_span("step", attrs, 5)], {"capwatch.agent_id": "rover-17",
                                                "capwatch.family": "rover-v3"})
    message = parse_request(body, json_encoding=True)
    again = parse_request(message.SerializeToString(), json_encoding=False)
    assert json_format.MessageToDict(again) == json_format.MessageToDict(
        ExportTraceServiceRequest.FromString(message.SerializeToString()))
    [raw] = spans_to_events(again).events
    assert json.loads(raw)["agent_id"] == "rover-9"


@pytest.mark.parametrize(("attrs", "reason"), [
    ({"capwatch.action": "(navigate rover1 wp1 wp2)"}, "missing attribute"),
    ({**span_attributes(STATE, NAV, NEXT), "capwatch.stpe": 3}, "unknown attribute"),
    ({**span_attributes(STATE, NAV, NEXT), "capwatch.state": "(at rover1 wp1)"},
     "expected an array"),
    ({**span_attributes(STATE, NAV, NEXT), "capwatch.action": "navigate rover1"},
     "is not of the form"),
    ({**span_attributes(STATE, NAV, NEXT), "capwatch.step": -1}, "step"),
])
def test_malformed_capwatch_spans_are_rejected_with_a_reason(attrs: dict[str, Any],
                                                             reason: str) -> None:
    body = _request([_span("bad", attrs, 1), _span("good", span_attributes(STATE, NAV, NEXT),
                                                   2)],
                    {"capwatch.agent_id": "rover-17", "capwatch.family": "rover-v3"})
    batch = spans_to_events(parse_request(body, json_encoding=True))
    assert len(batch.events) == 1
    [why] = batch.rejected
    assert "span 'bad'" in why and reason in why
    response = json.loads(batch.response(json_encoding=True))
    assert response["partialSuccess"]["rejectedSpans"] == "1"


def test_bodies_that_are_not_otlp_are_refused() -> None:
    with pytest.raises(OtlpDecodeError, match="OTLP/JSON"):
        parse_request(b'{"resourceSpans": 3}', json_encoding=True)
    with pytest.raises(OtlpDecodeError, match="OTLP/protobuf"):
        parse_request(b"\xff\xff\xff", json_encoding=False)
    with pytest.raises(OtlpDecodeError, match="traceId"):
        parse_request(_request([{"traceId": "zz"}], {}), json_encoding=True)
