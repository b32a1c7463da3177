"""Span attributes for agents that report through OpenTelemetry instead of an emitter.

The daemon's OTLP endpoint (``POST /v1/traces``, docs/integrating-an-agent.md) turns every
span carrying ``capwatch.action`` into a transition. :func:`span_attributes` builds those
attributes, checked against the vocabulary when one is given; set them on the span that
covers the step::

    with tracer.start_as_current_span("step") as span:
        next_state = act(...)
        span.set_attributes(span_attributes(state, action, next_state, agent_id="rover-17",
                                            family="rover-v3", executed=True))

No dependency on OpenTelemetry itself: the values are plain strings, bools and ints.
"""

from __future__ import annotations

from collections.abc import Iterable

from capwatch.client.vocabulary import Vocabulary
from capwatch.model.domain import GroundAction, GroundAtom

__all__ = ["format_atom", "span_attributes"]

AttributeValue = str | bool | int | list[str]


def format_atom(atom: tuple[str, ...]) -> str:
    """``("at", "r1", "w1")`` → ``"(at r1 w1)"``."""
    return "(" + " ".join(atom) + ")"


def span_attributes(state: Iterable[GroundAtom], action: GroundAction,
                    next_state: Iterable[GroundAtom], *, agent_id: str | None = None,
                    family: str | None = None, episode_id: str | None = None,
                    step: int | None = None, executed: bool | None = None,
                    optimal: bool | None = None, vocabulary: Vocabulary | None = None
                    ) -> dict[str, AttributeValue]:
    """The ``capwatch.*`` attributes of one step. ``agent_id`` and ``family`` may instead
    be set once on the tracer provider's resource."""
    s = sorted({tuple(a) for a in state})
    s2 = sorted({tuple(a) for a in next_state})
    a = tuple(action)
    if vocabulary is not None:
        vocabulary.check_action(a)
        vocabulary.check_state(s, "state")
        vocabulary.check_state(s2, "next_state")
    attrs: dict[str, AttributeValue] = {
        "capwatch.action": format_atom(a),
        "capwatch.state": [format_atom(x) for x in s],
        "capwatch.next_state": [format_atom(x) for x in s2],
    }
    optional: dict[str, AttributeValue | None] = {
        "capwatch.agent_id": agent_id, "capwatch.family": family,
        "capwatch.episode_id": episode_id, "capwatch.step": step,
        "capwatch.executed": executed, "capwatch.optimal": optimal}
    attrs.update({k: v for k, v in optional.items() if v is not None})
    return attrs
