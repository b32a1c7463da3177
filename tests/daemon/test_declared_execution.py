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


def test_its_assessment_fails_closed_saying_why(tmp_path: Path) -> None:
    # The agent itself is the modelled rover (it answers queries as rover.pddl says):
    # only its producer's word contradicts the change. No version can explain it, so
    # nothing is published and the failure names the transition.
    import json

    from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
    from capwatch.adapters.sim.agent import SimulatedAgent
    from capwatch.daemon.service import build_service
    from tests.daemon.helpers import config, example

    class Honest:
        def __init__(self) -> None:
            self.sim = SimulatedAgent(example("rover.pddl"), seed=1)

        def agent(self, agent_id: str, family: str) -> SimulatedAgent:
            return self.sim

    full = [*HALF, ["store_full", "rover1", "store1"]]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(transition("rover-a", "rover-v1", full, DROP, HALF, step,
                                       executed=False) + "\n" for step in range(3)))
    memory = MemoryPublisher()
    service = build_service(config(tmp_path, source={"kind": "jsonl", "path": str(path)}),
                            publisher=memory, agents=Honest(), source=JsonlSource(str(path)))
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    assert [v for v in memory.models if v.agent_id == "rover-a"] == []
    (failed,) = [a for a in memory.alerts if a.alert_type == "assessment_failed"]
    assert failed.detail["reason"] == "unexplained"
    assert "was said not executed, but the state changed" in json.dumps(failed.evidence)
