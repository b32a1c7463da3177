"""An assessment's lease: renewed while it runs, and a worker that lost it publishes nothing.

Found by the failover review of session 8: with agents answering 0.3 s late, an assessment
outlived its lease (no renewal), a second replica's worker claimed and ran it as well,
found the version stored by the first and published it again (the models topic had the
agent's version 1 twice). The same happens to a replica frozen (SIGSTOP, a long GC pause,
a stalled VM) past the lease in the middle of an assessment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.daemon.assessor import AssessmentOutcome, AssessmentRequest
from capwatch.daemon.pipeline import Pipeline
from capwatch.model.domain import GroundAction, GroundAtom
from tests.daemon.helpers import example, queued_refusal

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


class Hooked:
    """The drifted rover; ``on_first_query`` runs once, inside the assessment."""

    def __init__(self, on_first_query: Callable[[], None]) -> None:
        self.sim = SimulatedAgent(example("rover-sample-drift.pddl"), seed=1)
        self.hook: Callable[[], None] | None = on_first_query

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()
        return self.sim.query(state, plan, samples)



def _daemon(tmp_path: Path, agent: Hooked, now: list[datetime], lease_s: float
            ) -> tuple[Pipeline, MemoryPublisher]:
    return queued_refusal(tmp_path, agent, lambda: now[0],
                          {"lease_s": lease_s, "workers": 1})


def test_a_worker_whose_lease_ran_out_mid_assessment_stores_and_publishes_nothing(
        tmp_path: Path) -> None:
    """Frozen past its lease while it asks the agent, the worker wakes up to find the work
    claimed by another: the other publishes the version, once."""
    now = [T0]
    taken: list[str] = []

    def frozen_past_the_lease() -> None:
        now[0] = T0 + timedelta(seconds=61)
        taken.extend(i.key for i in d.store.claim("other/w0", now[0], 60.0, 1))

    d, out = _daemon(tmp_path, Hooked(frozen_past_the_lease), now, 60.0)
    (item,) = d.store.claim("zombie/w0", T0, 60.0, 1)
    d.workers.run_claimed("zombie/w0", item)
    assert taken == [item.key], "the lease had run out: another worker claimed the work"
    assert out.models == [], "a worker that lost its lease published a version"
    assert d.store.history("rover-v1", "rover-a") == []
    (again,) = [i for i in d.store.queue_items("claimed") if i.key == item.key]
    d.workers.run_claimed("other/w0", again)
    assert [(m.agent_id, m.version) for m in out.models] == [("rover-a", 1)]
    assert [i.key for i in d.store.queue_items("done")] == [item.key]
    d.source.close()
    d.store.close()


def test_the_lease_of_running_work_is_renewed_so_no_other_worker_claims_it(
        tmp_path: Path) -> None:
    """An assessment that takes longer than its lease keeps it: the workers renew the
    leases of what they run every third of ``assessment.lease_s``."""
    now = [T0]
    lease_s = 0.6
    later = T0 + timedelta(seconds=100)
    renewed = threading.Event()
    stolen: list[str] = []

    def slow_agent() -> None:
        now[0] = later  # the assessment has taken far longer than its lease
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            (held,) = d.store.queue_items("claimed")
            if held.lease_until is not None and held.lease_until > later:
                renewed.set()
                break
            time.sleep(0.02)
        stolen.extend(i.key for i in d.store.claim(
            "other/w0", later + timedelta(seconds=lease_s / 2), lease_s, 1))

    d, out = _daemon(tmp_path, Hooked(slow_agent), now, lease_s)
    d.workers.start()
    try:
        deadline = time.monotonic() + 60
        while not out.models and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        d.workers.stop(10.0)
    assert renewed.is_set(), "the running work's lease was not renewed"
    assert stolen == [], "another worker claimed work that was still running"
    assert [(m.agent_id, m.version) for m in out.models] == [("rover-a", 1)]
    d.source.close()
    d.store.close()


def test_a_worker_whose_lease_is_taken_as_it_stores_stores_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lease is checked in the version's own transaction, not just before it: another
    worker that claims the work between the worker's last renewal and its write (the
    replica frozen or cut off for longer than the lease right then) gets it whole."""
    now = [T0]
    d, out = _daemon(tmp_path, Hooked(lambda: None), now, 60.0)
    real_put = d.store.put
    taken: list[str] = []

    def put(*args: Any, **kwargs: Any) -> Any:
        now[0] = T0 + timedelta(seconds=61)  # frozen past the lease, right before storing
        taken.extend(i.key for i in d.store.claim("other/w0", now[0], 60.0, 1))
        return real_put(*args, **kwargs)

    (item,) = d.store.claim("zombie/w0", T0, 60.0, 1)
    monkeypatch.setattr(d.store, "put", put)
    d.workers.run_claimed("zombie/w0", item)
    monkeypatch.setattr(d.store, "put", real_put)
    assert taken == [item.key]
    assert d.store.history("rover-v1", "rover-a") == [], \
        "a worker stored a version for work another worker held"
    assert out.models == []
    (again,) = [i for i in d.store.queue_items("claimed") if i.key == item.key]
    d.workers.run_claimed("other/w0", again)
    (version,) = d.store.history("rover-v1", "rover-a")
    assert version.evidence["assessment_key"] == item.key
    assert [(m.agent_id, m.version) for m in out.models] == [("rover-a", 1)]
    d.source.close()
    d.store.close()


class Scripted:
    """An assessor whose outcomes the test gives, in order; each may do something first."""

    def __init__(self, *steps: Callable[[AssessmentRequest], AssessmentOutcome]) -> None:
        self.steps = list(steps)

    def assess(self, request: AssessmentRequest) -> AssessmentOutcome:
        return self.steps.pop(0)(request)


def test_a_worker_whose_lease_is_taken_ends_nothing_when_it_finds_no_change(
        tmp_path: Path) -> None:
    """"No change" ends the awaiting alert in the work's own completion: a worker that lost
    its lease finds out there and writes no ending, so the one the alert gets is the new
    holder's (here its version), not a "no change" the published version contradicts."""
    now = [T0]

    def frozen_then_no_change(request: AssessmentRequest) -> AssessmentOutcome:
        now[0] = T0 + timedelta(seconds=61)
        d.store.claim("other/w0", now[0], 60.0, 1)
        return AssessmentOutcome(model=request.model, queries=1)

    def finds_the_drift(request: AssessmentRequest) -> AssessmentOutcome:
        return AssessmentOutcome(model=example("rover-sample-drift.pddl"), queries=1)

    d, out = queued_refusal(tmp_path, Hooked(lambda: None), lambda: now[0],
                            {"lease_s": 60.0, "workers": 1},
                            Scripted(frozen_then_no_change, finds_the_drift))
    (item,) = d.store.claim("zombie/w0", T0, 60.0, 1)
    d.workers.run_claimed("zombie/w0", item)
    assert [a for a in d.store.outbox() if a.alert.get("ends_at")] == [], \
        "a worker that lost its lease ended the awaiting alert"
    (again,) = d.store.queue_items("claimed")
    d.workers.run_claimed("other/w0", again)
    assert [(m.agent_id, m.version) for m in out.models] == [("rover-a", 1)]
    (ending,) = [a for a in d.store.outbox() if a.alert.get("ends_at")]
    assert ending.alert["evidence"]["ended"] == "version 1"
    d.source.close()
    d.store.close()


def test_a_worker_that_finds_the_version_stored_publishes_it_only_while_it_holds_the_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry of work whose version was stored but not published (its worker failed
    before publishing) publishes the stored version instead of assessing again; a worker
    frozen past its lease on that path publishes nothing, the work's new holder once."""
    now = [T0]
    d, out = _daemon(tmp_path, Hooked(lambda: None), now, 60.0)
    real_publish = out.model_version

    def down(event: Any) -> None:
        raise OSError("the output is down")

    (item,) = d.store.claim("first/w0", T0, 60.0, 1)
    monkeypatch.setattr(out, "model_version", down)
    d.workers.run_claimed("first/w0", item)  # stored, not published: an outage
    monkeypatch.setattr(out, "model_version", real_publish)
    assert len(d.store.history("rover-v1", "rover-a")) == 1 and out.models == []
    now[0] = T0 + timedelta(seconds=61)
    (retry,) = d.store.claim("zombie/w0", now[0], 60.0, 1)
    real_latest = d.store.latest
    taken: list[str] = []

    def latest(*args: Any) -> Any:
        if not taken:  # frozen past the lease right after finding the stored version
            now[0] = T0 + timedelta(seconds=122)
            taken.extend(i.key for i in d.store.claim("other/w0", now[0], 60.0, 1))
        return real_latest(*args)

    monkeypatch.setattr(d.store, "latest", latest)
    d.workers.run_claimed("zombie/w0", retry)
    monkeypatch.setattr(d.store, "latest", real_latest)
    assert taken == [item.key]
    assert out.models == [], "a worker that lost its lease published the stored version"
    (again,) = [i for i in d.store.queue_items("claimed") if i.key == item.key]
    d.workers.run_claimed("other/w0", again)
    assert [(m.agent_id, m.version) for m in out.models] == [("rover-a", 1)]
    assert [i.key for i in d.store.queue_items("done")] == [item.key]
    assert len(d.store.history("rover-v1", "rover-a")) == 1
    d.source.close()
    d.store.close()
