"""Issue 12, last row: ``step: "12"``, ``optimal: "yes"``, ``executed: 1`` were silently
coerced. Every type confusion must be dead-lettered, and an agent id that could change
where capwatch sends its queries (row 4) too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.hostile import generate
from tests.chaos.scenarios import hostile_jsonl

COERCED = ["step_string", "step_float", "step_bool", "optimal_string", "optimal_int",
           "executed_int", "executed_string", "time_number", "agent_id_number", "huge_int",
           "trace_executed_int"]


@pytest.mark.parametrize("kind", [*COERCED, "hostile_agent_id"])
def test_type_confusion_is_dead_lettered(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], tmp_path: Path,
        kind: str) -> None:
    valid, families = valid_events
    messages = list(generate(valid, 40, seed=13, kinds=[kind, "valid"]))
    report = hostile_jsonl(messages, tmp_path / kind, families)
    assert report.exit_code == 0
    assert report.wrong == {}, report.by_kind
