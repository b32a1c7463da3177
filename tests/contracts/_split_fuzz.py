"""What the splitters' tests (test_wire_split, test_wire_split_trace) share: valid
messages mutated into hostile bytes, and the members a strict parser reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgspec
from hypothesis import strategies as st


@st.composite
def mutated(draw: st.DrawFn, messages: st.SearchStrategy[bytes],
            pieces: Sequence[bytes]) -> bytes:
    """A message of ``messages`` with up to three edits: one of ``pieces`` inserted or
    written over, a few bytes deleted, or the rest cut off."""
    raw = draw(messages)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(raw)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "cut"]))
        piece = draw(st.sampled_from(pieces))
        if kind == "insert":
            raw = raw[:at] + piece + raw[at:]
        elif kind == "delete":
            raw = raw[:at] + raw[at + draw(st.integers(1, 4)):]
        elif kind == "replace":
            raw = raw[:at] + piece + raw[at + len(piece):]
        else:
            raw = raw[:at]
    return raw


def pairs(raw: bytes) -> list[tuple[str, Any]] | None:
    """The top-level members as a strict parser reads them, in order, repeats kept."""
    try:
        msgspec.json.decode(raw)  # strict JSON (json.loads takes NaN, say)
        got = json.loads(raw, object_pairs_hook=lambda pairs: pairs)
    except (msgspec.DecodeError, ValueError):
        return None
    return got if isinstance(got, list) else None
