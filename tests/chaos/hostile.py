"""Hostile messages, generated from valid ones, each with what capwatch must do with it.

Every generated message is labelled ``dead`` (it must reach the dead letters, with a
reason) or ``ok`` (it must be processed like any valid event). The kinds cover what
issue 12 and the wire-format rules name: bytes that are not JSON or not UTF-8, keys given
twice, deep nesting, type confusion that a lax parser would coerce (``"step": "12"``,
``"optimal": "yes"``, ``"executed": 1``), unknown and missing fields, bad names, atoms
and states over the limits, unknown vocabulary, traces with the wrong lengths, agent ids
that could change where capwatch sends its queries, and messages over the size limit.

A message never contains a newline: one message is one JSONL line (or one Kafka record).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]


@dataclass(frozen=True)
class Hostile:
    kind: str
    value: bytes
    key: str
    expect: str
    """``dead`` or ``ok``."""


def _dump(event: Any) -> bytes:
    return json.dumps(event, separators=(",", ":"), allow_nan=True).encode()


def _no_newline(raw: bytes) -> bytes:
    # A blank line is not a record at all; a newline would split the message in two.
    raw = raw.replace(b"\n", b" ").replace(b"\r", b" ")
    return raw if raw.strip() else b"\x01"


AGENT_IDS_HOSTILE = [
    "127.0.0.1:18080/ssrf-0#", "evil.example/x?", "a/../../admin", "user@evil.example",
    "rover 1", "[::1]", "%2e%2e", "a#frag", "http://evil.example/", "x?y=1", "a\\b",
]
"""Ids that, placed in a URL template, could change its host, port, path or query."""


def _mutations(rng: random.Random, valid: Event, limits: dict[str, int]
               ) -> list[tuple[str, str, Callable[[], tuple[bytes, str]]]]:
    agent = str(valid["agent_id"])

    def event(**changes: Any) -> Callable[[], tuple[bytes, str]]:
        def make() -> tuple[bytes, str]:
            e = dict(valid)
            for k, v in changes.items():
                if v is _DROP:
                    e.pop(k, None)
                else:
                    e[k] = v(e) if callable(v) else v
            return _dump(e), agent
        return make

    def raw(make_bytes: Callable[[], bytes], key: str | None = None
            ) -> Callable[[], tuple[bytes, str]]:
        return lambda: (_no_newline(make_bytes()), key or agent)

    depth = rng.choice([100, 1000, 10_000, 100_000])
    atom_max = limits["max_state_atoms"]
    return [
        # not JSON, not UTF-8, not an object
        ("random_bytes", "dead", raw(lambda: rng.randbytes(rng.randint(1, 300)))),
        ("truncated", "dead", raw(lambda: _dump(valid)[:rng.randint(1, len(_dump(valid)) - 1)])),
        ("not_utf8", "dead", raw(lambda: _dump(valid).replace(b'"state"', b'"st\xffate"'))),
        ("lone_surrogate", "dead",
         event(action=lambda e: [e["action"][0] + "\udcff", *e["action"][1:]])),
        ("json_array", "dead", raw(lambda: _dump([valid]))),
        ("json_scalar", "dead", raw(lambda: rng.choice([b"1", b'"x"', b"null", b"true"]))),
        ("deep_nesting", "dead", raw(lambda: b"[" * depth + b"]" * depth)),
        ("deep_in_field", "dead", raw(lambda: _dump({**valid, "state": "@"}).replace(
            b'"@"', b"[" * depth + b'"p"' + b"]" * depth))),
        ("trailing_garbage", "dead", raw(lambda: _dump(valid) + b"}{")),
        ("duplicate_key", "dead", raw(lambda: _duplicated(rng, valid))),
        ("two_objects", "dead", raw(lambda: _dump(valid) + _dump(valid))),
        ("nan", "dead", event(step=float("nan"))),
        ("huge_int", "dead", event(step=10**400)),
        # type confusion a lax parser coerces
        ("step_string", "dead", event(step=lambda e: str(e.get("step", 0)))),
        ("step_float", "dead", event(step=1.0)),
        ("step_bool", "dead", event(step=True)),
        ("optimal_string", "dead", event(optimal="yes")),
        ("optimal_int", "dead", event(optimal=1)),
        ("executed_int", "dead", event(executed=1)),
        ("executed_string", "dead", event(executed="true")),
        ("time_number", "dead", event(time=1732572000)),
        ("agent_id_number", "dead", event(agent_id=17)),
        ("negative_step", "dead", event(step=-1)),
        # shape
        ("unknown_field", "dead", event(optmal=True)),
        ("missing_field", "dead", event(state=_DROP)),
        ("wrong_type", "dead", event(type="transitions")),
        ("wrong_version", "dead", event(v=2)),
        ("empty_atom", "dead", event(action=[])),
        ("name_with_space", "dead", event(action=lambda e: ["sample rock", *e["action"][1:]])),
        ("name_with_paren", "dead",
         event(action=lambda e: [e["action"][0] + "(", *e["action"][1:]])),
        ("control_char", "dead", event(episode_id="ep\x07")),
        ("too_many_args", "dead", event(action=lambda e: [e["action"][0]] + ["o"] * 40)),
        ("too_many_atoms", "dead",
         event(state=lambda e: [["p", f"o{i}"] for i in range(atom_max + 1)])),
        ("long_name", "dead", event(action=lambda e: ["a" * 300, *e["action"][1:]])),
        # vocabulary of the agent's model
        ("unknown_family", "dead", event(family="no-such-family")),
        ("unknown_action", "dead", event(action=lambda e: ["fly", *e["action"][1:]])),
        ("unknown_predicate", "dead", event(state=lambda e: [*e["state"], ["levitating", "x"]])),
        ("wrong_arity", "dead", event(action=lambda e: [*e["action"], "extra"])),
        # traces
        ("trace_lengths", "dead", raw(lambda: _dump({
            "type": "trace", "agent_id": agent, "family": valid["family"],
            "states": [valid["state"]], "actions": [valid["action"]]}))),
        ("trace_executed_int", "dead", raw(lambda: _dump({
            "type": "trace", "agent_id": agent, "family": valid["family"],
            "states": [valid["state"], valid["next_state"]], "actions": [valid["action"]],
            "executed": [1]}))),
        # agent ids that must never reach a URL
        ("hostile_agent_id", "dead", _hostile_id(rng, valid)),
        # what must still work
        ("valid", "ok", event()),
        ("valid_unicode_episode", "ok", event(episode_id="épisode-✓")),
        ("valid_trace", "ok", raw(lambda: _dump({
            "type": "trace", "agent_id": agent, "family": valid["family"],
            "states": [valid["state"], valid["next_state"]], "actions": [valid["action"]],
            **({"executed": [valid["executed"]]} if "executed" in valid else {})}))),
    ]


def _duplicated(rng: random.Random, valid: Event) -> bytes:
    """A key given twice, with the same or another value, sometimes spelt with an escape:
    what it means depends on the reader, so it must be a dead letter."""
    key = rng.choice(sorted(valid))
    value = rng.choice([valid[key], not valid[key] if isinstance(valid[key], bool) else []])
    escaped = f'"\\u{ord(key[0]):04x}{key[1:]}"'
    spelt = json.dumps(key) if rng.random() < 0.7 else escaped
    return _dump(valid)[:-1] + f",{spelt}:".encode() + _dump(value) + b"}"


class _Drop:
    pass


_DROP = _Drop()


def _hostile_id(rng: random.Random, valid: Event) -> Callable[[], tuple[bytes, str]]:
    def make() -> tuple[bytes, str]:
        agent = rng.choice(AGENT_IDS_HOSTILE)
        return _dump({**valid, "agent_id": agent}), agent
    return make


def generate(valid: Sequence[bytes], n: int, seed: int, limits: dict[str, int] | None = None,
             kinds: Sequence[str] | None = None) -> Iterator[Hostile]:
    """``n`` messages mutated from the ``valid`` ones (JSON transition events)."""
    rng = random.Random(seed)
    lim = {"max_state_atoms": 5000, **(limits or {})}
    events = [json.loads(v) for v in valid]
    for _ in range(n):
        base = rng.choice(events)
        table = _mutations(rng, base, lim)
        if kinds is not None:
            table = [t for t in table if t[0] in kinds]
        kind, expect, make = rng.choice(table)
        value, key = make()
        yield Hostile(kind, value, key, expect)


def oversized(valid: bytes, size: int) -> bytes:
    """A valid-looking event of about ``size`` bytes (a long episode id): over a size
    limit, it must be refused for its size alone."""
    event = json.loads(valid)
    pad = max(0, size - len(valid))
    event["episode_id"] = "x" * pad
    return _dump(event)
