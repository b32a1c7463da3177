"""The one way the assessment engine sees an agent: plan-outcome queries.

A query ⟨s_I, π⟩ puts the agent in state s_I and asks it to execute plan π; the
answer is ⟨n_F, s_F⟩, the length of the longest executable prefix and the state it
ended in (papers/daaisy.md Def. 6). Stochastic agents answer ``samples`` times.
Implementations live in ``capwatch.adapters`` (in-process simulator, HTTP client).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from capwatch.model.domain import GroundAction, GroundAtom

State = frozenset[GroundAtom]


@dataclass(frozen=True, slots=True)
class QueryResult:
    executed: int
    """n_F: how many plan steps the agent executed before the first failure."""
    state: State
    """s_F: the state after the executed prefix."""


class AgentQuery(Protocol):
    """A black-box agent that answers plan-outcome queries."""

    def query(
        self, state: State, plan: Sequence[GroundAction], samples: int = 1
    ) -> list[QueryResult]:
        """Execute ``plan`` from ``state`` ``samples`` times; one result per sample."""
        ...


class AgentUnavailable(RuntimeError):
    """The agent could not be asked (unreachable, timed out, refused)."""


class QueryNotAttempted(AgentUnavailable):
    """The agent answered that it cannot attempt the query at all: a state it cannot be
    put in (an agent bound to one map, whose objects are its cells), vocabulary it
    lacks. Asking again will not help."""


class AgentRefusesQueries(AgentUnavailable):
    """The agent ran no step of an assessment's first queries, although the evidence says
    the first step of many of them runs: it refuses queries (or lost every capability its
    evidence showed). Refusals alone teach no model, so the assessment stops early instead
    of reading each refusal as a precondition until its budget or a final check fails."""
