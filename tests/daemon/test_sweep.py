"""The sweep for evidence ripe by time looks at the watches that hold evidence, not at
every held watch: with 40,000 agents held it ran over all of them five times a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.daemon.agent_watch import AgentWatch
from tests.daemon.helpers import good_sample, refused_sample
from tests.daemon.test_pipeline import _manual


def test_the_sweep_looks_only_at_watches_holding_evidence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str | bytes] = [good_sample(f"rover-{i:02d}", step=0) for i in range(40)]
    lines.append(refused_sample("rover-x", step=0))
    d = _manual(tmp_path, lines, detection={"debounce_transitions": 5, "debounce_s": 60.0})
    try:
        for r in d.source.poll(1.0):
            d.handle(r)
        assert len(d.registry) == 41 and d.store.queue_items() == []
        watch = d.registry.get("rover-x")
        assert watch is not None and watch.evidence_since is not None
        watch.evidence_since -= 61.0  # a minute on: ripe by time
        asked: list[str] = []
        ripe = AgentWatch.ripe

        def counted(self: AgentWatch, force: bool = False) -> bool:
            asked.append(self.agent_id)
            return ripe(self, force)

        monkeypatch.setattr(AgentWatch, "ripe", counted)
        d.sweep()
        assert asked == ["rover-x"]  # the 40 idle agents are not looked at
        (item,) = d.store.queue_items()
        assert item.agent_id == "rover-x"
        asked.clear()
        d.sweep()
        assert asked == []  # queued: nothing left to look at
    finally:
        d.source.close()
        d.store.close()


def test_evidence_whose_queuing_failed_is_swept_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = _manual(tmp_path, [refused_sample(step=i) for i in range(3)],
                detection={"debounce_transitions": 3, "debounce_s": 3600.0})
    try:
        enqueue = d.store.enqueue

        def store_down(*args: object, **kwargs: object) -> bool:
            raise OSError("store unreachable")

        monkeypatch.setattr(d.store, "enqueue", store_down)
        for r in d.source.poll(1.0):
            d.handle(r)  # ripe by count, but the store refuses it: it stays buffered
        assert d.store.queue_items() == []
        monkeypatch.setattr(d.store, "enqueue", enqueue)
        d.sweep()
        assert len(d.store.queue_items()) == 1
    finally:
        d.source.close()
        d.store.close()
