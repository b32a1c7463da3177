"""An agent that starts reporting under another family keeps what it already showed: the
evidence buffered under the old family is queued (and alerted on) before the new watch
replaces the old one, and a result for the old family never lands on the new watch."""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource
from capwatch.contracts.store import WorkQueue
from capwatch.daemon.service import build_service
from tests.daemon.helpers import (
    EXAMPLES,
    HALF,
    SAMPLE,
    SAMPLED,
    config,
    good_sample,
    refused_sample,
    transition,
)


def _pending(store: WorkQueue) -> list[tuple[str, str]]:
    return [(i.agent_id, i.family) for i in store.queue_items("pending")]


def test_buffered_evidence_is_queued_under_the_old_family_when_the_agent_moves(
        tmp_path: Path) -> None:
    lines = [refused_sample(step=0), refused_sample(step=1),  # under the debounce of three
             transition("rover-a", "rover-v2", HALF, SAMPLE, SAMPLED, step=2, executed=True)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    families = {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl")},
                "rover-v2": {"domain": str(EXAMPLES / "rover.pddl")}}
    cfg = config(tmp_path, families=families, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600})
    d = build_service(cfg, source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    records = list(d.source.poll(1.0))
    for r in records[:2]:
        d.handle(r)
    assert _pending(d.store) == []  # two inconsistencies: still buffered
    d.handle(records[2])
    assert _pending(d.store) == [("rover-a", "rover-v1")]
    (watch,) = [w for w in d.registry if w.agent_id == "rover-a"]
    assert watch.family == "rover-v2" and not watch.buffered
    d.source.close()
    d.store.close()


def test_an_agent_staying_in_its_family_is_not_queued_early(tmp_path: Path) -> None:
    lines = [refused_sample(step=0), refused_sample(step=1), good_sample(step=2)]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600})
    d = build_service(cfg, source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(d.assign, d.revoke, {})
    for r in d.source.poll(1.0):
        d.handle(r)
    assert _pending(d.store) == []
    d.source.close()
    d.store.close()
