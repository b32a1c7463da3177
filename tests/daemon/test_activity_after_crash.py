"""The transitions the store's activity counts for an agent are the records it sent, each
once, across a crash: a replica killed after a checkpoint replays from the committed
offset, which buffered evidence holds back, and each record replayed was counted again
(oper20: after SIGKILLs, agents awaiting an assessment had 15 transitions more in
``agent_activity`` than records on the topic). Through the pipeline and the store."""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.models_store.actions import action_store
from tests.daemon.helpers import config, good_sample, refused_sample
from tests.daemon.test_prompt_alert_awaiting import DriftedRover


def _start(tmp_path: Path, path: Path) -> Pipeline:
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 50, "debounce_s": 3600.0})
    d = build_service(cfg, publisher=MemoryPublisher(), agents=DriftedRover(),
                      source=JsonlSource(str(path))).pipeline
    d.open()
    return d


def _counts(d: Pipeline) -> dict[str, tuple[int, int]]:
    return {a.agent_id: (a.transitions, a.inconsistent)
            for a in action_store(d.store).activity()}


def test_records_replayed_after_a_crash_are_counted_once(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    # rover-a's refused sample is buffered evidence (not ripe): it holds the commit back
    # at offset 1, past which every record, rover-b's too, is replayed after a crash.
    lines = [good_sample("rover-b", 0), refused_sample("rover-a", 0)]
    lines += [good_sample(agent, step) for step in range(1, 6)
              for agent in ("rover-a", "rover-b")]
    path.write_text("".join(line + "\n" for line in lines))
    sent = {"rover-a": (6, 1), "rover-b": (6, 0)}

    d = _start(tmp_path, path)
    try:
        d.handle_batch(d.source.poll(1.0)[:7])
        assert d.checkpoints.checkpoint()
        assert d.checkpoints.commit_offsets() == {0: 1}
        # Killed here (no checkpoint more): records 7.. were never counted.
    finally:
        d.source.close()
        d.store.close()

    for _ in range(2):  # a restart, killed again after its checkpoint
        d = _start(tmp_path, path)
        try:
            records = d.source.poll(1.0)
            assert records[0].offset == 1  # the replay
            d.handle_batch(records)
            d.checkpoints.checkpoint()
            assert _counts(d) == sent
        finally:
            d.source.close()
            d.store.close()
