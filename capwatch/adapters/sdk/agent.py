"""Agent-side SDK: what an agent developer embeds so capwatch can watch and question the agent.

Two halves, both optional:

- :class:`TransitionPublisher` publishes what the agent does, ⟨s, a, s'⟩, as wire-format
  transition events (design.md §4) keyed by agent id: to Kafka with
  :meth:`TransitionPublisher.kafka`, or to any ``send(key, value)`` callable.
- :class:`ExecutorAgent` turns the agent's own simulator or executor (three callbacks:
  reset to a state, try one action, observe the state) into a plan-outcome query answerer
  with the protocol's semantics built in, and :func:`serve_agent` exposes it over HTTP at
  ``/capwatch/v1/query``. The developer never has to get "longest executable prefix"
  right by hand.

Sketch of use::

    publisher = TransitionPublisher.kafka("kafka:9092", agent_id="rover-17", family="rover-v3")
    ...
    publisher.publish(state_before, ("sample_rock", "rover1", "store1", "wp1"), state_after)

    server = serve_agent(ExecutorAgent(MyTwin()), host="0.0.0.0", port=8085)
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from capwatch.adapters.sim.agent_server import AgentServer
from capwatch.assess.agent import QueryResult, State
from capwatch.contracts.agent_protocol import InvalidQuery
from capwatch.contracts.wire import AgentTransition, encode_transition
from capwatch.model.domain import GroundAction, GroundAtom

__all__ = [
    "ExecutorAgent",
    "InvalidQuery",
    "StepExecutor",
    "TransitionPublisher",
    "serve_agent",
]


class StepExecutor(Protocol):
    """The agent's simulator, digital twin or (carefully) the agent itself.

    ``step`` returns False when the action's precondition does not hold and must then
    leave the state unchanged. Raise :class:`InvalidQuery` for an action or atom the
    agent does not know: capwatch gets a 400 with the message instead of a wrong answer.
    """

    def reset(self, state: State) -> None: ...

    def step(self, action: GroundAction) -> bool: ...

    def observe(self) -> State: ...


class ExecutorAgent:
    """An :class:`~capwatch.assess.agent.AgentQuery` over a :class:`StepExecutor`.

    Queries are serialised by a lock because one executor holds one state; give each
    server its own executor.
    """

    def __init__(self, executor: StepExecutor) -> None:
        self._executor = executor
        self._lock = threading.Lock()
        self.queries = 0
        self.samples = 0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        if samples < 1:
            raise InvalidQuery(f"samples must be a positive integer, got {samples}")
        results = []
        with self._lock:
            for _ in range(samples):
                self._executor.reset(state)
                executed = 0
                for action in plan:
                    if not self._executor.step(action):
                        break
                    executed += 1
                results.append(QueryResult(executed, frozenset(self._executor.observe())))
            self.queries += 1
            self.samples += samples
        return results


def serve_agent(agent: ExecutorAgent, host: str = "127.0.0.1", port: int = 8085,
                **options: Any) -> AgentServer:
    """Serve ``agent`` at ``/capwatch/v1/query`` in a background thread; ``close()`` stops it.

    Drift injection is off: it exists only for the simulated reference agent.
    """
    options.setdefault("allow_drift", False)
    return AgentServer(agent, host, port, **options).start()


class TransitionPublisher:
    """Publishes one agent's transitions as wire-format events, keyed by agent id.

    ``send(key, value)`` receives the agent id and the JSON bytes; :meth:`kafka` builds
    one on a kafka-python producer. Steps are numbered within an episode; call
    :meth:`begin_episode` when the agent starts a new task.
    """

    def __init__(self, agent_id: str, family: str, send: Callable[[str, bytes], None], *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 close: Callable[[], None] | None = None,
                 flush: Callable[[], None] | None = None) -> None:
        if not agent_id or not family:
            raise ValueError("agent_id and family must be non-empty")
        self.agent_id = agent_id
        self.family = family
        self._send = send
        self._clock = clock
        self._close = close
        self._flush = flush
        self._lock = threading.Lock()
        self.episode_id = self._new_episode_id()
        self._step = 0
        self.published = 0

    @classmethod
    def kafka(cls, bootstrap: str, agent_id: str, family: str, *,
              topic: str = "capwatch.transitions", **producer_options: Any
              ) -> TransitionPublisher:
        """A publisher on a Kafka producer (acks=all, idempotent: no lost or doubled steps)."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                 enable_idempotence=True, linger_ms=5, **producer_options)

        def send(key: str, value: bytes) -> None:
            producer.send(topic, key=key.encode(), value=value)

        return cls(agent_id, family, send, flush=lambda: producer.flush(timeout=30),
                   close=lambda: producer.close(timeout=30))

    def _new_episode_id(self) -> str:
        return f"{self.agent_id}-{uuid.uuid4().hex[:12]}"

    def begin_episode(self, episode_id: str | None = None) -> str:
        with self._lock:
            self.episode_id = episode_id or self._new_episode_id()
            self._step = 0
            return self.episode_id

    def publish(self, state: Iterable[GroundAtom], action: GroundAction,
                next_state: Iterable[GroundAtom], *, optimal: bool = False) -> bytes:
        """Send ⟨s, a, s'⟩; returns the bytes sent. Invalid names raise ValueError here,
        in the agent, rather than landing in capwatch's dead-letter topic."""
        with self._lock:
            t = AgentTransition(self.agent_id, self.family, self.episode_id, self._step,
                           self._clock(), frozenset(state), tuple(action),
                           frozenset(next_state), optimal)
            value = encode_transition(t)
            self._send(self.agent_id, value)
            self._step += 1
            self.published += 1
        return value

    def flush(self) -> None:
        if self._flush is not None:
            self._flush()

    def close(self) -> None:
        self.flush()
        if self._close is not None:
            self._close()

    def __enter__(self) -> TransitionPublisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
