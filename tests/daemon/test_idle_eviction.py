"""Agents idle for ``limits.evict_idle_after_s`` leave memory at a scheduled checkpoint,
however few are held, and come back exactly at their next record (issue 13: an idle
agent must cost about 0.2 KB, not the few KB a held watch costs)."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.ports import Record
from capwatch.daemon import pipeline as pipeline_module
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


def _pipeline(tmp_path: Path, idle_s: float | None) -> Pipeline:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 limits={"evict_idle_after_s": idle_s})
    service = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path)))
    p = service.pipeline
    p.seed_families()
    return p


def _feed(p: Pipeline, agent: str, step: int, offset: int) -> None:
    p.handle_batch([Record("in", 0, offset, None, good_sample(agent, step).encode())])


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    fake = SimpleNamespace(monotonic=c.monotonic, time=c.time,
                           process_time=time.process_time)
    monkeypatch.setattr(pipeline_module, "time", fake)
    return c


def test_an_agent_idle_for_the_setting_is_evicted_and_an_active_one_stays(
        tmp_path: Path, clock: Clock) -> None:
    p = _pipeline(tmp_path, idle_s=60)
    _feed(p, "rover-a", 0, 0)
    _feed(p, "rover-b", 0, 1)
    p.checkpoint()  # marks: both seen before t=1000
    clock.now += 30
    _feed(p, "rover-b", 1, 2)
    p.checkpoint()
    assert len(p.registry) == 2  # nobody idle for 60 s yet
    clock.now += 31
    p.checkpoint()  # rover-a: no record since t=1000; rover-b: one at t=1030
    assert {w.agent_id for w in p.registry} == {"rover-b"}
    assert p.checkpoints.evictions == 1
    clock.now += 30
    p.checkpoint()
    assert len(p.registry) == 0 and p.checkpoints.evictions == 2
    restores = p.checkpoints.restores
    _feed(p, "rover-a", 1, 3)
    assert {w.agent_id for w in p.registry} == {"rover-a"}
    assert p.checkpoints.restores == restores + 1
    assert p.dead_letters == 0 and p.processed == 4


def test_null_keeps_idle_agents_until_the_count_limit(tmp_path: Path, clock: Clock) -> None:
    p = _pipeline(tmp_path, idle_s=None)
    _feed(p, "rover-a", 0, 0)
    for _ in range(5):
        p.checkpoint()
        clock.now += 10_000
    assert len(p.registry) == 1 and p.checkpoints.evictions == 0
