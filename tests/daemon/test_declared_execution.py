"""The daemon reads the wire's ``executed`` for a transition whose state did not change:
a rover that drops a sample it does not hold (drop_sample lost its precondition
``(store_full ?r ?s)``; its effects delete atoms that are false already) and says it
executed is evidence, not a refusal (tests/monitor/test_declared_executed.py has the
monitor's side). Before, nothing was queued: the drift stayed invisible however often the
agent said so."""

from __future__ import annotations

from pathlib import Path

from tests.daemon.helpers import HALF, transition
from tests.daemon.test_registry_and_jobs import _consume_jsonl

DROP = ["drop_sample", "rover1", "store1"]


def _queued(tmp_path: Path, executed: bool | None) -> list[str]:
    extra = {} if executed is None else {"executed": executed}
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "in.jsonl"
    path.write_text("".join(transition("rover-a", "rover-v1", HALF, DROP, HALF, step, **extra)
                            + "\n" for step in range(3)))
    service = _consume_jsonl(tmp_path, path)
    d = service.pipeline
    items = [i.key for i in d.store.queue_items()]
    d.source.close()
    d.store.close()
    return items


def test_an_execution_the_model_calls_impossible_is_assessed(tmp_path: Path) -> None:
    (key,) = _queued(tmp_path, True)
    assert key.startswith("rover-v1/rover-a@")


def test_an_unchanged_state_not_said_executed_stays_a_refusal(tmp_path: Path) -> None:
    assert _queued(tmp_path / "a", None) == []
    assert _queued(tmp_path / "b", False) == []


def test_a_changed_state_said_not_executed_is_assessed(tmp_path: Path) -> None:
    # A refused action changes nothing: a sample dropped (the state changed as the model
    # says) by an agent saying it did not execute contradicts itself. Before, it was
    # counted applied and nothing was queued; now it is evidence.
    full = [*HALF, ["store_full", "rover1", "store1"]]
    extra = {"executed": False}
    path = tmp_path / "in.jsonl"
    path.write_text("".join(transition("rover-a", "rover-v1", full, DROP, HALF, step, **extra)
                            + "\n" for step in range(3)))
    service = _consume_jsonl(tmp_path, path)
    d = service.pipeline
    items = [i.key for i in d.store.queue_items()]
    d.source.close()
    d.store.close()
    assert len(items) == 1 and items[0].startswith("rover-v1/rover-a@")
