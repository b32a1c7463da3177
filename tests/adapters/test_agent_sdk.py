"""The agent-side SDK: an executor-backed query answerer and the transition publisher."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kafka import KafkaConsumer

from capwatch.adapters.io.agent_client import HttpAgentClient
from capwatch.adapters.sdk.agent import (
    ExecutorAgent,
    InvalidQuery,
    TransitionPublisher,
    serve_agent,
)
from capwatch.assess.agent import State
from capwatch.contracts.agent_protocol import AgentRejectedQuery
from capwatch.contracts.wire import AgentTransition, decode
from capwatch.model.domain import GroundAction


class Corridor:
    """A developer's own executor: a robot on cells 0..3 that moves right with battery."""

    def __init__(self) -> None:
        self.cell = 0
        self.battery = 0
        self.resets = 0

    def reset(self, state: State) -> None:
        self.resets += 1
        self.cell = next(int(a[1]) for a in state if a[0] == "at")
        self.battery = sum(1 for a in state if a[0] == "charge")

    def step(self, action: GroundAction) -> bool:
        if action[0] != "right":
            raise InvalidQuery(f"unknown action {action[0]!r}")
        if self.battery == 0 or self.cell == 3:
            return False
        self.cell += 1
        self.battery -= 1
        return True

    def observe(self) -> State:
        return frozenset({("at", str(self.cell)), *(("charge", str(i)) for i in
                                                     range(self.battery))})


START = frozenset({("at", "0"), ("charge", "0"), ("charge", "1")})


def test_executor_agent_reports_the_longest_executable_prefix() -> None:
    corridor = Corridor()
    agent = ExecutorAgent(corridor)
    results = agent.query(START, [("right",)] * 4, samples=3)
    assert [r.executed for r in results] == [2, 2, 2]  # battery for two steps only
    assert results[0].state == {("at", "2")}
    assert corridor.resets == 3  # every sample starts from the query's state
    assert (agent.queries, agent.samples) == (1, 3)


def test_served_executor_answers_over_http_and_refuses_unknown_actions() -> None:
    server = serve_agent(ExecutorAgent(Corridor()), port=0, poll_interval=0.02)
    try:
        client = HttpAgentClient(server.url, retries=0)
        [r] = client.query(START, [("right",)])
        assert (r.executed, r.state) == (1, {("at", "1"), ("charge", "0")})
        with pytest.raises(AgentRejectedQuery, match="unknown action 'jump'"):
            client.query(START, [("jump",)])
        with pytest.raises(AgentRejectedQuery) as info:
            client.drift("(define (domain d))")
        assert info.value.code == "drift_disabled"
    finally:
        server.close()


def test_publisher_writes_decodable_events_keyed_by_agent() -> None:
    sent: list[tuple[str, bytes]] = []
    clock = iter(datetime(2026, 11, 25, 21, 0, s, tzinfo=UTC) for s in range(10))
    pub = TransitionPublisher("rover-17", "rover-v3", lambda k, v: sent.append((k, v)),
                              clock=lambda: next(clock))
    s0 = frozenset({("at", "rover1", "wp1")})
    s1 = frozenset({("at", "rover1", "wp2")})
    pub.publish(s0, ("navigate", "rover1", "wp1", "wp2"), s1)
    pub.publish(s1, ("navigate", "rover1", "wp2", "wp1"), s0, optimal=True)
    episode = pub.begin_episode("ep-2")
    pub.publish(s0, ("navigate", "rover1", "wp1", "wp2"), s1)
    assert [k for k, _ in sent] == ["rover-17"] * 3
    decoded = [decode(v, key=k.encode()) for k, v in sent]
    assert all(isinstance(d, list) for d in decoded)
    events: list[AgentTransition] = [t for d in decoded if isinstance(d, list) for t in d]
    assert [(t.episode_id == episode, t.step) for t in events] == [
        (False, 0), (False, 1), (True, 0)]
    assert events[0].episode_id == events[1].episode_id
    assert events[1].optimal and not events[0].optimal
    assert (events[0].state, events[0].next_state) == (s0, s1)
    assert events[2].time == datetime(2026, 11, 25, 21, 0, 2, tzinfo=UTC)


def test_publisher_refuses_bad_names_before_sending() -> None:
    sent: list[tuple[str, bytes]] = []
    pub = TransitionPublisher("rover-17", "rover-v3", lambda k, v: sent.append((k, v)))
    with pytest.raises(ValueError, match="pattern"):
        pub.publish(frozenset({("at", "rover 1")}), ("wait",), frozenset())
    assert sent == []
    assert pub.published == 0


@pytest.mark.integration
def test_publisher_reaches_a_real_kafka_topic(kafka_bootstrap: str, kafka_topic: str) -> None:
    s0 = frozenset({("at", "rover1", "wp1")})
    s1 = frozenset({("at", "rover1", "wp2")})
    with TransitionPublisher.kafka(kafka_bootstrap, "rover-17", "rover-v3",
                                   topic=kafka_topic) as pub:
        for _ in range(3):
            pub.publish(s0, ("navigate", "rover1", "wp1", "wp2"), s1)
    consumer = KafkaConsumer(kafka_topic, bootstrap_servers=kafka_bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    try:
        records = []
        for record in consumer:
            records.append(record)
            if len(records) == 3:
                break
    finally:
        consumer.close()
    assert [r.key for r in records] == [b"rover-17"] * 3
    steps = []
    for r in records:
        decoded = decode(r.value, key=r.key)
        assert isinstance(decoded, list)
        steps.append(decoded[0].step)
    assert steps == [0, 1, 2]
