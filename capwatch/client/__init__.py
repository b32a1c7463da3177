"""capwatch's agent SDK: what an agent team embeds so capwatch can watch and question it.

- :class:`Vocabulary` and :class:`Abstraction`: the agent's raw states and actions in the
  vocabulary of its domain file, checked at start-up and on every use;
- :class:`TransitionEmitter` with a :class:`KafkaTransport`, :class:`HttpTransport` (the
  daemon's ingest endpoint) or :class:`JsonlTransport`: report what the agent does;
- :class:`QueryServer`: answer capwatch's plan-outcome queries from ``set_state``,
  ``execute`` and ``observe`` callables.

``capwatch.client.gym`` wraps a Gymnasium environment with all three (optional extra
``capwatch[gym]``). docs/integrating-an-agent.md walks through a whole integration.
This package depends only on capwatch.contracts and capwatch.model.
"""

from capwatch.client.emitter import (
    BufferFull,
    DeliveryError,
    HttpTransport,
    JsonlTransport,
    KafkaTransport,
    TransitionEmitter,
    Transport,
    TransportError,
)
from capwatch.client.query_server import CallableExecutor, Executor, InvalidQuery, QueryServer
from capwatch.client.vocabulary import Abstraction, Vocabulary, VocabularyError

__all__ = [
    "Abstraction",
    "BufferFull",
    "CallableExecutor",
    "DeliveryError",
    "Executor",
    "HttpTransport",
    "InvalidQuery",
    "JsonlTransport",
    "KafkaTransport",
    "QueryServer",
    "TransitionEmitter",
    "Transport",
    "TransportError",
    "Vocabulary",
    "VocabularyError",
]
