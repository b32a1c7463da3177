"""Issue 11, finding 1 in the daemon: evidence no assessment can explain starts one
assessment, raises ``assessment_failed``, publishes nothing, and the same kind of evidence
does not start another; different evidence does."""

from __future__ import annotations

import json
from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.model.pddl_reader import read_domain
from tests.daemon.helpers import config, run_queued
from tests.paths import DATA

HOIST = DATA / "own" / "hoist"


class Directory:
    """The agent answers queries as the old model says (its stream shows the drift): no
    model over this vocabulary explains both, as in the field report."""

    def __init__(self) -> None:
        self.sim = SimulatedAgent(read_domain(HOIST / "domain.pddl"), seed=1)
        self.asked = 0

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        self.asked += 1
        return self.sim


def _line(step: int, state: list[list[str]], action: list[str], after: list[list[str]],
          executed: bool) -> str:
    return json.dumps({"type": "transition", "agent_id": "hoist-a", "family": "hoist-v1",
                       "episode_id": "ep", "step": step, "state": state, "action": action,
                       "next_state": after, "executed": executed})


def _repeated(step: int) -> str:
    h = f"h{step % 2 + 1}"  # the drifted hoist loses (at h) on move_down h h
    return _line(step, [["at", h]], ["move_down", h, h], [["visited", h]], True)


def _pipeline(tmp_path: Path, lines: list[str]) -> tuple[Pipeline, Directory, MemoryPublisher]:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 families={"hoist-v1": {"domain": str(HOIST / "domain.pddl"),
                                        "problem": str(HOIST / "problem.pddl")}},
                 detection={"debounce_transitions": 3, "debounce_s": 3600.0},
                 assessment={"query_budget": 500})
    agents = Directory()
    memory = MemoryPublisher()
    service = build_service(cfg, publisher=memory, agents=agents, source=JsonlSource(str(path)))
    d = service.pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    return d, agents, memory


def test_unexplainable_evidence_is_assessed_once_and_reported(tmp_path: Path) -> None:
    lines = [_repeated(i) for i in range(60)]
    # A different kind of evidence afterwards: move_up refused where the model allows it.
    lines.append(_line(60, [["at", "h1"], ["below", "h1", "h2"]], ["move_up", "h1", "h2"],
                       [["at", "h1"], ["below", "h1", "h2"]], False))
    d, _, memory = _pipeline(tmp_path, lines)
    records = d.source.poll(1.0)
    assessments = 0
    for r in records[:60]:
        d.handle(r)
        assessments += run_queued(d)
    # Before issue 11: a 500-query assessment per batch of three, each "no change".
    assert assessments == 1
    assert len(d.store.queue_items("failed")) == 1
    alerts = [a.alert for a in d.store.outbox() if a.alert_type == "assessment_failed"]
    assert [a["detail"]["reason"] for a in alerts] == ["unexplained"]
    assert "nothing was published" in alerts[0]["summary"]
    assert alerts[0]["evidence"]["assessment"]["unexplained"]
    assert memory.models == [] and d.store.latest("hoist-v1", "hoist-a") is None
    watch = d.registry.get("hoist-a")
    assert watch is not None and watch.held_back >= 50 and not watch.evidence
    # New, different evidence reopens the assessment.
    d.handle(records[60])
    d.sweep(force=True)
    assert run_queued(d) == 1
    d.source.close()
    d.store.close()


def test_the_back_off_ends_and_grows(tmp_path: Path) -> None:
    d, _, _ = _pipeline(tmp_path, [_repeated(i) for i in range(12)])
    now = [1000.0]
    records = d.source.poll(1.0)
    for r in records[:3]:
        d.handle(r)
    watch = d.registry.get("hoist-a")
    assert watch is not None
    watch.clock = lambda: now[0]
    assert run_queued(d) == 1
    ((until, n),) = watch.backoff.values()
    assert n == 1 and until == 1000.0 + 600.0
    now[0] = until + 1  # the back-off is over: the same evidence may be assessed again
    for r in records[3:6]:
        d.handle(r)
    assert run_queued(d) == 1
    ((until2, n2),) = watch.backoff.values()
    assert n2 == 2 and until2 == now[0] + 1200.0
    d.source.close()
    d.store.close()


def test_the_back_off_outlives_a_restart(tmp_path: Path) -> None:
    d, _, _ = _pipeline(tmp_path, [_repeated(i) for i in range(3)])
    for r in d.source.poll(1.0):
        d.handle(r)
    assert run_queued(d) == 1
    d.source.close()
    d.store.close()
    # The restarted daemon reads the same kind of evidence again (new records).
    (tmp_path / "in.jsonl").unlink()
    again, _, _ = _pipeline(tmp_path, [_repeated(i) for i in range(3, 12)])
    again._prepare()
    for r in again.source.poll(1.0):
        again.handle(r)
    again.sweep(force=True)
    assert run_queued(again) == 0
    watch = again.registry.get("hoist-a")
    assert watch is not None and watch.held_back == 9
    again.source.close()
    again.store.close()


def test_the_back_off_outlives_an_eviction(tmp_path: Path) -> None:
    d, _, _ = _pipeline(tmp_path, [_repeated(i) for i in range(9)])
    records = d.source.poll(1.0)
    for r in records[:3]:
        d.handle(r)
    assert run_queued(d) == 1
    d.registry.drop(["hoist-a"])  # evicted while idle, or its partition moved away
    for r in records[3:]:
        d.handle(r)
    d.sweep(force=True)
    assert run_queued(d) == 0
    watch = d.registry.get("hoist-a")
    assert watch is not None and watch.held_back == 6
    d.source.close()
    d.store.close()
