"""BrokerLiveness: a Kafka cluster that stops answering (a frozen broker raises nothing in
a consumer that only polls) is reported once silent for the timeout, and not before; a
fake probe and clock stand in for the broker here (the real one: tests/chaos
reproductions/test_kafka_outages.py)."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from capwatch.adapters.io.kafka_liveness import BrokerLiveness


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Probe:
    def __init__(self) -> None:
        self.error: Exception | None = None
        self.calls = 0

    def __call__(self) -> object:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return {"topic"}


@pytest.fixture
def parts() -> tuple[BrokerLiveness, Probe, Clock]:
    clock, probe = Clock(), Probe()
    return BrokerLiveness("b:9092", "t", timeout_s=10, probe=probe, clock=clock), probe, clock


def test_silence_is_reported_only_after_the_timeout_and_names_kafka(
        parts: tuple[BrokerLiveness, Probe, Clock]) -> None:
    live, probe, clock = parts
    assert live.check_once() and live.problem() is None
    probe.error = TimeoutError("no answer")
    clock.now += 9
    assert not live.check_once()
    assert live.problem() is None  # one failed probe is a blip, not an outage
    clock.now += 2
    problem = live.problem()
    assert problem is not None
    assert problem.startswith("Kafka unavailable: no answer from b:9092 for 11 s")
    assert "TimeoutError: no answer" in problem


def test_a_probe_that_hangs_still_ages_the_answer(
        parts: tuple[BrokerLiveness, Probe, Clock]) -> None:
    live, _, clock = parts
    live.check_once()
    clock.now += 60  # no probe returned at all meanwhile
    assert live.problem() is not None


def test_the_outage_and_the_return_are_logged_once_each(
        parts: tuple[BrokerLiveness, Probe, Clock]) -> None:
    live, probe, clock = parts
    probe.error = ConnectionRefusedError("refused")
    with capture_logs() as logs:
        for _ in range(5):
            clock.now += 5
            live.check_once()
        probe.error = None
        live.check_once()
        live.check_once()
    events = [(e["event"], e.get("component")) for e in logs]
    assert events == [("dependency failed; retrying", "Kafka"),
                      ("dependency back; resuming", "Kafka")]
    assert live.problem() is None


def test_the_thread_probes_until_closed() -> None:
    probe = Probe()
    live = BrokerLiveness("b:9092", "t", timeout_s=10, interval_s=0.01, probe=probe).start()
    try:
        deadline = 200
        while probe.calls < 3 and deadline:
            deadline -= 1
            live._stop.wait(0.01)
    finally:
        live.close()
    calls = probe.calls
    assert calls >= 3
    live._stop.wait(0.05)
    assert probe.calls == calls


def test_readyz_seeing_the_silence_first_logs_it_once(
        parts: tuple[BrokerLiveness, Probe, Clock]) -> None:
    live, _, clock = parts
    clock.now += 30  # the probe is stuck in a request meanwhile
    with capture_logs() as logs:
        assert live.problem() is not None
        assert live.problem() is not None
        live.check_once()
    assert [e["event"] for e in logs] == ["dependency failed; retrying",
                                          "dependency back; resuming"]


def test_the_group_view_comes_with_a_successful_probe_and_its_failure_is_not_an_outage(
) -> None:
    clock = Clock()
    topics = [{"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]
    answers: list[object] = [
        {"g": {"group_state": "Stable", "members": [{"member_id": "m-1"},
                                                   {"member_id": "m-2"}]}},
    ]

    def describe(group: str) -> object:
        answer = answers.pop(0) if answers else None
        if answer is None:
            raise PermissionError("GroupAuthorizationFailedError")
        return answer

    live = BrokerLiveness("b:9092", "t", timeout_s=10, probe=lambda: topics, group="g",
                          describe_group=describe, clock=clock)
    assert live.group_view() is None
    assert live.check_once()
    view = live.group_view()
    assert view is not None and view.state == "Stable" and view.partitions == 2
    assert view.members == {"m-1", "m-2"}
    clock.now += 11
    with capture_logs() as logs:
        assert live.check_once()  # the cluster answered: no outage, whatever the group
    assert live.problem() is None
    assert any("could not be described" in e["event"] for e in logs)
    assert live.group_view(max_age_s=10) is None  # the last view is too old to go by
    assert live.group_view() == view
