"""Two assessments of one agent that still race (two replicas after a rebalance, each
running work of the agent): the one whose version is stored second lost a race, nothing
crashed. Before session 22 the loser's VersionConflict was logged as "assessment crashed"
at error level, counted as a retry and handed back to the queue, where its next claim
found it superseded (and enough such attempts would have raised assessment_failed)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import structlog

from capwatch.contracts.versions import ModelRef, build_version
from capwatch.daemon.assessor import AssessmentOutcome, AssessmentRequest
from tests.daemon.helpers import example, queued_refusal
from tests.daemon.test_lease import Hooked, Scripted

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_the_loser_of_a_race_logs_it_counts_it_and_ends_its_work_without_a_version(
        tmp_path: Path) -> None:
    drifted = example("rover-sample-drift.pddl")
    won: list[int] = []

    def another_replica_publishes_first(request: AssessmentRequest) -> AssessmentOutcome:
        base = d.store.latest("rover-v1")
        assert base is not None
        winner = build_version(ModelRef("rover-v1", "rover-a", 1), drifted, T0,
                               parent=base, baseline=base.domain(),
                               evidence={"assessment_key": "other-work", "replica": "r2"})
        won.append(d.store.put(winner).version)
        return AssessmentOutcome(model=drifted, queries=3)

    d, out = queued_refusal(tmp_path, Hooked(lambda: None), lambda: T0,
                            {"lease_s": 60.0, "workers": 1, "max_attempts": 1},
                            Scripted(another_replica_publishes_first))
    (item,) = d.store.claim("r1/w0", T0, 60.0, 1)
    with structlog.testing.capture_logs() as logs:
        d.workers.run_claimed("r1/w0", item)
    assert won == [1]
    assert [e for e in logs if e["log_level"] in ("error", "critical")] == [], \
        "a lost race was logged as an error"
    (line,) = [e for e in logs if e["event"].startswith("assessment lost a race")]
    assert line["log_level"] == "info"
    assert (line["agent_id"], line["published_version"], line["tried_version"],
            line["published_by"]) == ("rover-a", 1, 1, "r2")
    # Ended, not handed back: nothing retries it, and no failure alert is written.
    assert d.store.queue_items("pending") == [] and d.store.queue_items("claimed") == []
    assert [i.key for i in d.store.queue_items("done")] == [item.key]
    alerts = [a.alert for a in d.store.outbox()]
    assert [a for a in alerts if a.get("type") == "assessment_failed"] == []
    assert [a["evidence"]["ended"] for a in alerts if a.get("ends_at")] == \
        ["superseded by version 1"]
    # The winner's version, once; the loser published nothing.
    assert [v.evidence["assessment_key"] for v in d.store.history("rover-v1", "rover-a")] \
        == ["other-work"]
    assert out.models == []
    metrics = d.metrics.registry
    assert metrics.get_sample_value("capwatch_assessments_total",
                                    {"family": "rover-v1", "result": "superseded"}) == 1
    assert metrics.get_sample_value("capwatch_assessments_total",
                                    {"family": "rover-v1", "result": "retry"}) in (None, 0)
    d.source.close()
    d.store.close()
