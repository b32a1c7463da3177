"""Hostile input: the decoder never raises, and a running daemon dead-letters every bad
message with a reason while it keeps processing the good ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.wire import DeadLetter, DecodeLimits, decode
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample, refused_sample
from tests.daemon.test_pipeline import Directory
from tests.support.fuzzing import examples

LIMITS = DecodeLimits(max_message_bytes=4096, max_state_atoms=20, max_trace_steps=10)

VALID: dict[str, Any] = json.loads(good_sample("rover-z"))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=30,
)

hostile_strings = st.sampled_from([
    "", " ", "a b", "(x)", "\x00", "\u202e", "🙂", "x" * 300, "?x", "\n", "\ud7ff",
])


@st.composite
def mutated_events(draw: st.DrawFn) -> bytes:
    """A valid transition with one field broken in a way the contract forbids."""
    event = json.loads(json.dumps(VALID))
    field = draw(st.sampled_from([*sorted(event), "extra", "v"]))
    kind = draw(st.sampled_from(["delete", "type", "string", "deep", "huge"]))
    if kind == "delete" or field in ("extra",):
        if field in ("episode_id", "step", "optimal", "executed", "v") and kind == "delete":
            field = "state"  # optional fields may be absent: break a required one
        event.pop(field, None)
        if field == "extra":
            event["extra"] = draw(json_values)
    elif kind == "type":
        event[field] = draw(json_values.filter(
            lambda v: not isinstance(v, list) or v == [] or not isinstance(v[0], list)))
    elif kind == "string":
        event[field] = draw(hostile_strings)
    elif kind == "deep":
        event[field] = json.loads("[" * 300 + "]" * 300)
    else:
        event["state"] = [["at", f"r{i}", "w"] for i in range(LIMITS.max_state_atoms + 1)]
    return json.dumps(event, ensure_ascii=draw(st.booleans())).encode()


hostile = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    mutated_events(),
    st.just(b"{" * 10_000),
    st.just(b"x" * (LIMITS.max_message_bytes + 1)),
)


def _is_bad(raw: bytes) -> bool:
    result = decode(raw, LIMITS)
    return isinstance(result, DeadLetter) or result == []


@settings(max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile)
def test_the_decoder_never_raises_and_always_gives_a_reason(raw: bytes) -> None:
    result = decode(raw, LIMITS)
    if isinstance(result, DeadLetter):
        assert result.reason and result.raw == raw
    else:
        assert all(t.agent_id and t.action for t in result)


def _line_safe(raw: bytes) -> bool:
    # The JSONL source splits on newlines and skips blank lines: such bytes would be
    # several records (or none), which is a different test.
    return b"\n" not in raw and b"\r" not in raw and raw.strip() != b""


@settings(max_examples=examples(6), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(hostile.filter(_line_safe).filter(_is_bad), min_size=5, max_size=40))
def test_a_running_daemon_dead_letters_hostile_input_and_keeps_going(
        tmp_path_factory: Any, bad: list[bytes]) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    good = [refused_sample("rover-z", step=i).encode() for i in range(4)]
    lines: list[bytes] = []
    for i, raw in enumerate(bad):
        lines.append(raw)
        if i < len(good):
            lines.append(good[i])
    lines += good[len(bad):]
    path = tmp / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    cfg = config(tmp, source={"kind": "jsonl", "path": str(path)},
                 limits={"max_message_bytes": LIMITS.max_message_bytes,
                         "max_state_atoms": LIMITS.max_state_atoms,
                         "max_trace_steps": LIMITS.max_trace_steps})
    memory = MemoryPublisher()
    service = build_service(cfg, publisher=memory, agents=Directory(),
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    assert [d.raw for d in memory.dead_letters] == bad
    assert all(d.reason for d in memory.dead_letters)
    good_offsets = {i for i, line in enumerate(lines) if line in good}
    assert not good_offsets & {d.offset for d in memory.dead_letters}
    # The good lines still did their work: the drifted rover got its new model.
    assert [m.agent_id for m in memory.models] == ["rover-z"]
    assert service.pipeline.processed == len(lines)


def test_an_oversized_message_is_dead_lettered_by_the_daemon(tmp_path: Path) -> None:
    big = json.dumps({**VALID, "state": [["at", "rover1", "w" * 200]] * 40}).encode()
    path = tmp_path / "in.jsonl"
    path.write_bytes(big + b"\n" + good_sample("rover-z").encode() + b"\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 limits={"max_message_bytes": 1024})
    memory = MemoryPublisher()
    service = build_service(cfg, publisher=memory, agents=Directory(),
                            source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    (dead,) = memory.dead_letters
    assert "exceeds the limit of 1024" in dead.reason and dead.raw == big
