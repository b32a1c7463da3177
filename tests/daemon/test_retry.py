"""Assessments whose agent cannot be reached are retried with backoff, then given up."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentUnavailable, QueryResult
from capwatch.contracts.agent_protocol import AgentRejectedQuery
from capwatch.daemon.config import AgentRetryConfig, AssessmentConfig
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.retry import backoff_s, retry_plan
from capwatch.model.domain import GroundAction, GroundAtom
from tests.daemon.helpers import example, queued_refusal

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
WORKER = "test/w0"


def test_backoff_grows_geometrically_up_to_its_cap_with_bounded_jitter() -> None:
    cfg = AgentRetryConfig(backoff_s=5, multiplier=2, max_backoff_s=60, jitter=0.1)
    waits = [backoff_s(cfg, n, "rover-v1/rover-a@x#3") for n in range(1, 8)]
    for n, w in enumerate(waits, 1):
        base = min(60.0, 5.0 * 2 ** (n - 1))
        assert base * 0.9 <= w <= base * 1.1
    assert waits[3] > waits[2] > waits[1] > waits[0]
    assert backoff_s(cfg, 2, "k") == backoff_s(cfg, 2, "k")  # the same failure, the same wait
    spread = {round(backoff_s(cfg, 1, f"agent-{i}"), 6) for i in range(50)}
    assert len(spread) > 40  # agents that went down together come back spread out
    exact = AgentRetryConfig(backoff_s=5, multiplier=3, max_backoff_s=100, jitter=0)
    assert [backoff_s(exact, n, "k") for n in (1, 2, 3, 4)] == [5, 15, 45, 100]


def test_unreachable_agents_get_the_backoff_other_errors_the_fixed_retry() -> None:
    cfg = AssessmentConfig(max_attempts=2, retry_after_s=7,
                           agent_retry=AgentRetryConfig(attempts=6, backoff_s=1, jitter=0))
    assert retry_plan(cfg, 3, "k", agent_unreachable=True) == (timedelta(seconds=4), 6)
    assert retry_plan(cfg, 3, "k", agent_unreachable=False) == (timedelta(seconds=7), 2)


class Flaky:
    """The drifted rover, unreachable for its first ``failures`` queries."""

    def __init__(self, failures: int, error: AgentUnavailable | None = None) -> None:
        self.failures = failures
        self.error = error or AgentUnavailable("connection refused")
        self.sim = SimulatedAgent(example("rover-sample-drift.pddl"), seed=1)
        self.calls = 0

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise self.error
        return self.sim.query(state, plan, samples)



def _daemon(tmp_path: Path, agent: Flaky, max_attempts: int = 5, **retry: float
            ) -> tuple[Pipeline, list[datetime], MemoryPublisher]:
    now = [T0]
    d, out = queued_refusal(tmp_path, agent, lambda: now[0], {
        "max_attempts": max_attempts, "retry_after_s": 7,
        "lease_s": 60,  # as _attempt claims: the renewal keeps it
        "agent_retry": {"backoff_s": 10, "multiplier": 2, "jitter": 0, **retry}})
    return d, now, out


def _failed_alerts(d: Pipeline, out: MemoryPublisher) -> list[Any]:
    """assessment_failed alerts published so far (routed first where alerts are routed)."""
    route = getattr(d, "route_alerts", None)
    if route is not None:
        route(force=True)
    return [a for a in out.alerts if a.alert_type == "assessment_failed"]


def _attempt(d: Pipeline, now: list[datetime], at: datetime) -> bool:
    """Claim and run the queued work at ``at``; False if none is due yet."""
    now[0] = at
    items = d.store.claim(WORKER, at, 60.0, 1)
    if not items:
        return False
    d.workers.run_claimed(WORKER, items[0])
    return True


def test_an_unreachable_agent_is_retried_with_backoff_until_it_answers(tmp_path: Path) -> None:
    agent = Flaky(failures=3)
    d, now, out = _daemon(tmp_path, agent)
    t = T0
    for wait in (10, 20, 40):  # after the 1st, 2nd and 3rd failure
        assert _attempt(d, now, t)
        assert d.store.queue_items("pending")[0].last_error == \
            "agent unavailable: connection refused"
        assert not _attempt(d, now, t + timedelta(seconds=wait - 1)), "retried before its backoff"
        t += timedelta(seconds=wait)
    assert _attempt(d, now, t)
    assert d.store.queue_items("pending") == d.store.queue_items("failed") == []
    # Each attempt's time is in the duration histogram, the unreachable ones too.
    assert d.metrics.registry.get_sample_value(
        "capwatch_assessment_duration_seconds_count", {"family": "rover-v1"}) == 4
    (version,) = d.store.history("rover-v1", "rover-a")
    assert version.evidence["assessment_key"] == d.store.queue_items("done")[0].key
    assert _failed_alerts(d, out) == []
    d.source.close()
    d.store.close()


@pytest.mark.parametrize("attempts", [1, 3])
def test_the_alert_comes_after_the_last_allowed_attempt(tmp_path: Path, attempts: int) -> None:
    d, now, out = _daemon(tmp_path, Flaky(failures=100), attempts=attempts)
    t = T0
    for n in range(1, attempts + 1):
        assert _failed_alerts(d, out) == []
        assert _attempt(d, now, t), f"attempt {n} was not due"
        t += timedelta(seconds=10 * 2 ** (n - 1))
    (failed,) = d.store.queue_items("failed")
    assert failed.attempts == attempts
    (alert,) = _failed_alerts(d, out)
    assert alert.evidence["attempts"] == attempts
    assert "agent unreachable" in alert.summary
    assert not _attempt(d, now, t + timedelta(days=1))  # given up for good
    d.source.close()
    d.store.close()


@pytest.mark.parametrize("error", [AgentUnavailable("connection refused"),
                                   AgentRejectedQuery(400, "bad_request", "no")],
                         ids=["unreachable", "refused"])
def test_work_given_up_on_an_unreachable_agent_does_not_count_as_unexplained(
        tmp_path: Path, error: AgentUnavailable) -> None:
    # No answer said the model was right: the evidence waits the first back-off and its
    # count of unexplained ends stays 0, so an outage cannot double the hold to hours. An
    # agent that answered (here with a refusal) counts, and doubles as before.
    d, now, _ = _daemon(tmp_path, Flaky(100, error), max_attempts=1, attempts=1)
    assert _attempt(d, now, T0)
    assert d.store.queue_items("failed")
    d.drain()
    watch = d.registry.get("rover-a")
    assert watch is not None and watch.awaiting is None
    ((until, count),) = watch.backoff.values()
    assert count == (1 if isinstance(error, AgentRejectedQuery) else 0)
    assert 0 < until - watch.clock() <= d.config.detection.unexplained_backoff_s
    d.source.close()
    d.store.close()


def test_an_agent_that_refuses_the_query_fails_at_its_first_refusal(tmp_path: Path) -> None:
    """It answered (400): asking again asks the same and is refused again, so the work
    ends at once with its alert. oper20: agent m5, refusing every query, was asked 12
    times over 3 assessments (the ordinary retries, up to max_attempts each); the
    assessment_failed alert came only after the last."""
    agent = Flaky(100, AgentRejectedQuery(400, "bad_request", "no"))
    d, now, out = _daemon(tmp_path, agent, max_attempts=5)
    assert _attempt(d, now, T0)
    (failed,) = d.store.queue_items("failed")
    assert failed.attempts == 1 and agent.calls == 1
    assert (failed.last_error or "").startswith("agent refused the query")
    (alert,) = _failed_alerts(d, out)
    assert alert.evidence["attempts"] == 1
    assert "agent unreachable" not in alert.summary
    assert not _attempt(d, now, T0 + timedelta(days=1))  # given up for good
    d.source.close()
    d.store.close()


def test_every_failed_attempt_is_logged_with_its_cause_and_next_try(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    d, now, _ = _daemon(tmp_path, Flaky(failures=100), attempts=2)
    with capture_logs() as logs:
        assert _attempt(d, now, T0)
        assert _attempt(d, now, T0 + timedelta(seconds=10))
    lines = [e for e in logs if e["event"].startswith("assessment")]
    first, last = lines
    assert first["event"] == "assessment attempt failed; will retry"
    assert (first["reason"], first["attempt"], first["max_attempts"],
            first["retry_in_s"]) == ("agent_unreachable", 1, 2, 10.0)
    assert "connection refused" in first["error"]
    assert last["event"] == "assessment failed for good"
    assert last["attempts"] == 2
    d.source.close()
    d.store.close()


def test_a_store_outage_while_a_version_is_written_spends_no_attempt_and_kills_no_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Red-team rerun of issue 12 (session 3): the store's disk filled up just as a
    version was written; handing the work back failed too, the exception escaped and the
    worker thread died (2 of 2 workers in one run): that replica assessed nothing more."""
    import sqlite3

    d, now, out = _daemon(tmp_path, Flaky(failures=0), max_attempts=1)
    full = sqlite3.OperationalError("database or disk is full")
    real_put, real_release = d.store.put, d.store.release

    def put(*args: Any, **kwargs: Any) -> Any:
        raise full

    def release(*args: Any, **kwargs: Any) -> Any:
        raise full

    monkeypatch.setattr(d.store, "put", put)
    monkeypatch.setattr(d.store, "release", release)
    assert _attempt(d, now, T0)  # must not raise: the outage is the store's, not the work's
    monkeypatch.setattr(d.store, "put", real_put)
    monkeypatch.setattr(d.store, "release", real_release)
    assert not _attempt(d, now, T0 + timedelta(seconds=30)), "claimed again within its lease"
    assert _attempt(d, now, T0 + timedelta(seconds=61))  # the lease (60 s) ran out
    (version,) = d.store.history("rover-v1", "rover-a")
    assert version.evidence["assessment_key"] == d.store.queue_items("done")[0].key
    assert _failed_alerts(d, out) == [], "the outage spent the only attempt"
    d.source.close()
    d.store.close()


# ---------------------------------------------------------------------- outages mid-work


def _landing_then_failing(real: Any) -> Any:
    """A store write that lands and then reports a failure (a timeout after the commit)."""
    import sqlite3

    def call(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        raise sqlite3.OperationalError("the answer timed out")
    return call


def _outage_events(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [e["event"] for e in logs if "outage" in e["event"]]


def test_marking_work_done_that_lands_but_reports_a_timeout_is_not_called_interrupted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The version was stored and published, and the write that ends the work landed
    although the store answered with an error: the log said "interrupted; tried again
    after its lease" while nothing was to be tried again."""
    from structlog.testing import capture_logs

    d, now, out = _daemon(tmp_path, Flaky(failures=0))
    monkeypatch.setattr(d.store, "complete", _landing_then_failing(d.store.complete))
    with capture_logs() as logs:
        assert _attempt(d, now, T0)
    (event,) = [e for e in logs if "outage" in e["event"]]
    assert event["event"].startswith("assessment's work ended although the store reported")
    assert event["during"] == "marking the work done (version 1 published)"
    assert len(d.store.queue_items("done")) == 1 and len(out.models) == 1
    assert d.workers._interrupted == {}
    d.source.close()
    d.store.close()


def test_a_version_stored_before_a_store_outage_is_claimed_again_at_once_not_after_the_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The version's write landed and reported a timeout: the work is handed back as soon
    as the store answers (here at once), due after ``retry_after_s`` (7 s) rather than
    the lease (60 s), and its retry publishes the stored version without asking the
    agent again. One version, published once, no attempt failed."""
    from structlog.testing import capture_logs

    agent = Flaky(failures=0)
    d, now, out = _daemon(tmp_path, agent, max_attempts=1)
    real_put = d.store.put
    monkeypatch.setattr(d.store, "put", _landing_then_failing(real_put))
    with capture_logs() as logs:
        assert _attempt(d, now, T0)
    assert _outage_events(logs) == [
        "assessment interrupted by an outage; given back to the queue once the store "
        "answered, not after its lease"]
    assert out.models == []
    monkeypatch.setattr(d.store, "put", real_put)
    asked = agent.calls
    assert not _attempt(d, now, T0 + timedelta(seconds=6))
    assert _attempt(d, now, T0 + timedelta(seconds=7)), "still held until its lease ran out"
    assert agent.calls == asked
    (version,) = d.store.history("rover-v1", "rover-a")
    assert [m.version for m in out.models] == [version.version]
    assert version.evidence["assessment_key"] == d.store.queue_items("done")[0].key
    assert _failed_alerts(d, out) == []
    d.source.close()
    d.store.close()


def test_work_interrupted_while_the_store_is_down_is_settled_once_it_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store down for reads too: what became of the work is unknown, and said so;
    the worker reads it back before claiming anything else, once the store answers."""
    import sqlite3

    from structlog.testing import capture_logs

    d, now, out = _daemon(tmp_path, Flaky(failures=0))
    down = sqlite3.OperationalError("unable to open database file")

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise down

    real_put, real_live = d.store.put, d.store.live_queue_items
    monkeypatch.setattr(d.store, "put", fail)
    monkeypatch.setattr(d.store, "live_queue_items", fail)
    with capture_logs() as logs:
        assert _attempt(d, now, T0)
    (event,) = [e for e in logs if "outage" in e["event"]]
    assert "unknown until the store answers" in event["event"]
    assert event["during"] == "storing the version"
    item, stage, error = d.workers._interrupted.pop(WORKER)
    assert not d.workers._settle_interrupted(WORKER, item, stage, error)
    monkeypatch.setattr(d.store, "put", real_put)
    monkeypatch.setattr(d.store, "live_queue_items", real_live)
    assert d.workers._settle_interrupted(WORKER, item, stage, error)
    assert _attempt(d, now, T0 + timedelta(seconds=7))  # handed back: no wait for the lease
    assert len(d.store.history("rover-v1", "rover-a")) == 1 and len(out.models) == 1
    d.source.close()
    d.store.close()


def test_work_interrupted_by_kafka_keeps_its_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After Kafka's outage a retry claimed at once would fail on the same broker (each
    claim counting an attempt): the lease's wait stays."""
    from kafka.errors import KafkaTimeoutError

    d, now, out = _daemon(tmp_path, Flaky(failures=0))
    real_flush = out.flush

    def flush(*args: Any, **kwargs: Any) -> None:
        raise KafkaTimeoutError("no answer from the broker")

    monkeypatch.setattr(out, "flush", flush)
    assert _attempt(d, now, T0)
    monkeypatch.setattr(out, "flush", real_flush)
    assert not _attempt(d, now, T0 + timedelta(seconds=30)), "claimed again within its lease"
    assert _attempt(d, now, T0 + timedelta(seconds=61))
    assert len(d.store.history("rover-v1", "rover-a")) == 1
    assert len(d.store.queue_items("done")) == 1
    d.source.close()
    d.store.close()


def test_work_claimed_more_often_than_allowed_fails_at_a_restart_with_its_alert(
        tmp_path: Path) -> None:
    """Work whose replica died while running it more often than ``max_attempts`` (work
    that kills its replica) fails for good when that replica restarts, as before, but now
    with the assessment_failed alert; it failed silently."""
    d, _, out = _daemon(tmp_path, Flaky(failures=0), max_attempts=2)
    worker = "test/w0"  # this replica's (replica_id "test")
    for n in range(3):  # each lease (60 s) runs out: 3 claims > max_attempts
        (item,) = d.store.claim(worker, T0 + timedelta(seconds=61 * n), 60.0, 1)
    assert item.attempts == 3
    d.workers.recover_claims()
    assert [i.key for i in d.store.queue_items("failed")] == [item.key]
    (alert,) = _failed_alerts(d, out)
    assert alert.evidence["assessment_key"] == item.key
    assert "the replica running it restarted (3 attempts claimed)" in alert.summary
    d.source.close()
    d.store.close()


def test_work_handed_back_at_a_shutdown_is_never_failed_by_it(tmp_path: Path) -> None:
    """Claims count attempts whatever ended them (here leases run out, as after outages):
    handing work back at a graceful stop with the limit ``max_attempts + 1`` failed it for
    good, silently."""
    d, _, out = _daemon(tmp_path, Flaky(failures=0), max_attempts=2)
    worker = "test/w0"
    for n in range(4):
        (item,) = d.store.claim(worker, T0 + timedelta(seconds=61 * n), 60.0, 1)
    d.workers._inflight[worker] = item
    d.workers.stop(0.0)
    assert d.store.queue_items("failed") == []
    (back,) = d.store.queue_items("pending")
    assert back.key == item.key and back.attempts == 4
    assert _failed_alerts(d, out) == []
    d.source.close()
    d.store.close()


def test_an_answer_outside_the_protocol_is_not_called_a_refusal() -> None:
    """An operator's agent answered HTML to a query: the alert said 'agent refused the
    query: agent at ... answered outside the protocol: : Invalid JSON ...', a refusal
    (4xx) it was not, and an empty field name."""
    from capwatch.adapters.io.agent_client import HttpAgentClient
    from capwatch.contracts.agent_protocol import AgentProtocolError, QueryResponse
    from capwatch.daemon.retry import describe_agent_failure

    broken = describe_agent_failure(AgentProtocolError("agent at u answered HTTP 302: x"))
    assert broken.message.startswith("agent broke the query protocol: ")
    refused = describe_agent_failure(AgentRejectedQuery(400, "bad_request", "no"))
    assert refused.message.startswith("agent refused the query: ")
    client = HttpAgentClient("http://127.0.0.1:9")
    with pytest.raises(AgentProtocolError) as info:
        client._decode(200, b"<html>oops</html>", QueryResponse)
    assert ": :" not in str(info.value) and "the answer: Invalid JSON" in str(info.value)


class RefusesAll:
    """Answers every query, running nothing (``executed: false``, the state unchanged)."""

    def __init__(self) -> None:
        self.calls = 0

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.calls += 1
        return [QueryResult(0, state)] * samples


def test_an_agent_refusing_every_query_fails_at_once_without_a_version(
        tmp_path: Path) -> None:
    """Session 19, gap 2: an agent that ran no step of its REFUSED_QUERIES or more queries,
    the model learnt not explaining its evidence, is named; the daemon gives the work up on
    the first attempt (retrying asks the same refusals again) with reason
    agent_refuses_queries, and publishes no version. Three refused samples and no observed
    run leave the engine no step to check early: named after its loop (75 queries; 12
    before assess19b, a count that also named honest agents)."""
    from capwatch.assess.engine import REFUSED_QUERIES

    agent = RefusesAll()
    now = [T0]
    d, out = queued_refusal(tmp_path, agent, lambda: now[0], {"max_attempts": 5})
    assert _attempt(d, now, T0)
    (failed,) = d.store.queue_items("failed")
    assert failed.attempts == 1
    (alert,) = _failed_alerts(d, out)
    assert alert.detail["reason"] == "agent_refuses_queries"
    assert "ran no step of" in alert.summary
    assert agent.calls >= REFUSED_QUERIES
    assert d.store.history("rover-v1", "rover-a") == []
    assert out.models == []
    d.source.close()
    d.store.close()


def test_a_stored_version_published_by_a_retry_is_logged_with_its_own_queries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """oper20: a version stored before a broker outage was published by the retry after
    its lease, and its 'model version published' line said queries 0 (the retry asked
    nothing), read as a version published unconfirmed; the version had asked 82. The
    line gives the version's own count and says the retry asked nothing."""
    from kafka.errors import KafkaTimeoutError
    from structlog.testing import capture_logs

    d, now, out = _daemon(tmp_path, Flaky(failures=0))
    real_flush = out.flush

    def flush(*args: Any, **kwargs: Any) -> None:
        raise KafkaTimeoutError("no answer from the broker")

    monkeypatch.setattr(out, "flush", flush)
    assert _attempt(d, now, T0)
    monkeypatch.setattr(out, "flush", real_flush)
    with capture_logs() as logs:
        assert _attempt(d, now, T0 + timedelta(seconds=61))
    (version,) = d.store.history("rover-v1", "rover-a")
    (line,) = [e for e in logs if e["event"] == "model version published"]
    assert version.evidence["queries"] > 0
    assert line["queries"] == version.evidence["queries"]
    assert line["stored_before"] is True
    d.source.close()
    d.store.close()
