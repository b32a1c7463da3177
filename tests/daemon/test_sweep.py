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


def test_the_sweep_queues_all_ripe_evidence_in_one_write_or_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agents = [f"rover-{i}" for i in range(4)]
    d = _manual(tmp_path, [refused_sample(a, step=0) for a in agents],
                detection={"debounce_transitions": 5, "debounce_s": 60.0})
    try:
        for r in d.source.poll(1.0):
            d.handle(r)
        for a in agents:
            watch = d.registry.get(a)
            assert watch is not None and watch.evidence_since is not None
            watch.evidence_since -= 61.0  # a minute on: ripe by time
        enqueue_many, writes = d.store.enqueue_many, []

        def store_down(items: object) -> list[bool]:
            raise OSError("store unreachable")

        monkeypatch.setattr(d.store, "enqueue_many", store_down)
        with pytest.raises(OSError):
            d.sweep()
        assert d.store.queue_items() == []
        assert all(w.buffered and w.awaiting is None for w in d.registry)

        def counted(items: list[tuple[object, object]]) -> list[bool]:
            writes.append(len(items))
            return enqueue_many(items)  # type: ignore[arg-type]

        monkeypatch.setattr(d.store, "enqueue_many", counted)
        d.sweep()
        assert writes == [4]
        assert sorted(i.agent_id for i in d.store.queue_items()) == agents
        assert len([r for r in d.store.outbox() if r.key.startswith("queued")]) == 4
        assert all(not w.buffered and w.awaiting is not None for w in d.registry)
    finally:
        d.source.close()
        d.store.close()
