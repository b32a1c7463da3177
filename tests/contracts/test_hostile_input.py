"""Hostile input at the wire (issue 12): strict types, agent ids that cannot move a query,
dead letters that always fit."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from capwatch.contracts.agent_protocol import AgentAddressError, agent_url
from capwatch.contracts.wire import (
    MAX_DEAD_LETTER_RAW,
    DeadLetter,
    DecodeLimits,
    dead_letter_record,
    decode,
)

EVENT: dict[str, Any] = {
    "type": "transition", "agent_id": "rover-17", "family": "rover-v3", "step": 12,
    "time": "2026-11-25T21:00:00Z", "state": [["at", "rover1", "waypoint1"]],
    "action": ["navigate", "rover1", "waypoint1", "waypoint2"],
    "next_state": [["at", "rover1", "waypoint2"]], "optimal": False, "executed": True}


def _decode(**changes: Any) -> Any:
    return decode(json.dumps({**EVENT, **changes}).encode())


def test_the_example_event_is_read() -> None:
    [t] = _decode()
    assert t.step == 12 and t.executed is True and t.optimal is False


@pytest.mark.parametrize("field,value", [
    ("step", "12"), ("step", 12.0), ("step", True), ("step", 10**30),
    ("optimal", "yes"), ("optimal", 1), ("executed", 1), ("executed", "true"),
    ("time", 1764104400), ("agent_id", 17), ("family", 3),
])
def test_no_coercion(field: str, value: Any) -> None:
    result = _decode(**{field: value})
    assert isinstance(result, DeadLetter), f"{field}={value!r} was accepted"
    assert field in result.reason


def test_a_trace_with_integer_flags_is_refused() -> None:
    trace = {"type": "trace", "agent_id": "a", "family": "f", "states": [[], []],
             "actions": [["x"]], "executed": [1]}
    assert isinstance(decode(json.dumps(trace).encode()), DeadLetter)


@pytest.mark.parametrize("agent_id", [
    "rover-17", "rover_v3.eu-west-1", "A", "0", "agent.7.fleet", "x" * 128])
def test_agent_ids_of_the_documented_pattern_are_read(agent_id: str) -> None:
    assert not isinstance(_decode(agent_id=agent_id), DeadLetter)


@pytest.mark.parametrize("agent_id", [
    "127.0.0.1:18080/ssrf-0#", "evil.example/x", "a/../../admin", "user@evil.example",
    "rover 1", "[::1]", "%2e%2e", "a#frag", "http://evil.example/", "x?y=1", "a\\\\b", "..",
    "a..b", ".a", "a.", "-a", "a-", "", "x" * 129, "é"])
def test_agent_ids_that_could_change_a_url_are_dead_letters(agent_id: str) -> None:
    result = _decode(agent_id=agent_id)
    assert isinstance(result, DeadLetter) and "agent_id" in result.reason


@pytest.mark.parametrize("template", [
    "http://{agent_id}.agents.svc:8080", "http://{agent_id}:8080",
    "https://gateway.internal/agents/{agent_id}/", "http://{family}-{agent_id}.svc"])
def test_agent_urls_come_from_the_template(template: str) -> None:
    url = agent_url(template, "rover-17", "rover")
    assert url == template.format(agent_id="rover-17", family="rover")


@pytest.mark.parametrize("agent_id", ["127.0.0.1:18080/ssrf-0#", "a/../b", "x?y", "u@h",
                                      "..", "a b"])
@pytest.mark.parametrize("template", [
    "http://{agent_id}.agents.svc:8080", "https://gateway.internal/agents/{agent_id}/"])
def test_an_agent_id_never_moves_the_url(template: str, agent_id: str) -> None:
    with pytest.raises(AgentAddressError):
        agent_url(template, agent_id, "rover")


NOW = datetime(2026, 11, 26, tzinfo=UTC)


def test_a_dead_letter_that_cannot_fit_is_truncated_with_length_and_digest() -> None:
    raw = bytes(range(256)) * (3 * MAX_DEAD_LETTER_RAW // 256)
    record = dead_letter_record(DeadLetter("too big", raw), "t", 0, 7, NOW)
    assert record.truncated
    assert record.raw_length == len(raw)
    assert record.raw_sha256 == hashlib.sha256(raw).hexdigest()
    assert base64.b64decode(record.raw_base64) == raw[:MAX_DEAD_LETTER_RAW]
    assert len(record.model_dump_json()) < 1_000_000


def test_a_small_dead_letter_keeps_the_original_whole() -> None:
    record = dead_letter_record(DeadLetter("bad", b"{nope"), "t", 0, 1, NOW)
    assert not record.truncated and record.raw == b"{nope" and record.raw_length == 5


def test_a_message_cut_by_its_source_is_refused_for_its_whole_size() -> None:
    result = decode(b"{" * 100, DecodeLimits(max_message_bytes=64), size=5_000_000,
                    sha256="ab" * 32)
    assert isinstance(result, DeadLetter)
    assert "5000000 bytes" in result.reason
    record = dead_letter_record(result, "in.jsonl", 0, 0, NOW)
    assert record.truncated and record.raw_length == 5_000_000
    assert record.raw_sha256 == "ab" * 32
