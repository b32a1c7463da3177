"""The planner facade: what the engine asks of a planner, and a pure-Python one.

The engine needs optimal (shortest, unit-cost) plans for one thing only: checking
whether the known model could have gone between two observed states faster than the
optimal agent did (reduced functionality, papers/daaisy.md §4.1). :class:`Planner` is
that question. :class:`BreadthFirstPlanner` answers it in-process with
:mod:`capwatch.assess.search`, bounded in length and in states, which for the sub-traces
of a 10-step trace is far cheaper than starting Fast Downward.
``capwatch.adapters.io.fast_downward`` implements the same protocol by running Fast
Downward in a subprocess, for large problems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from capwatch.assess.search import (
    DEFAULT_MAX_GROUNDINGS,
    PlannerGaveUp,
    Targets,
    breadth_first,
    ground_operators,
    static_predicates,
)
from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.grounding import Grounder, GroundOperator

__all__ = ["BreadthFirstPlanner", "Planner", "PlannerGaveUp", "PlanningTask", "State"]

State = frozenset[GroundAtom]


@dataclass(frozen=True, slots=True)
class PlanningTask:
    """Reach exactly ``goal`` (every other atom false) from ``init`` over ``objects``."""

    domain: Domain
    objects: Mapping[str, Sequence[str]]
    """Type name → objects of that type (including subtypes)."""
    init: State
    goal: State


class Planner(Protocol):
    def shortest_plan(self, task: PlanningTask, max_length: int) -> list[GroundAction] | None:
        """A shortest plan of at most ``max_length`` steps, or None if there is none.

        Raises :class:`PlannerGaveUp` when it cannot decide within its limits.
        """
        ...


@dataclass(slots=True)
class _Grounding:
    grounder: Grounder
    static: frozenset[str]
    by_statics: dict[frozenset[GroundAtom], list[GroundOperator]]
    """Operators left after static-fact pruning, per set of true static facts."""


class BreadthFirstPlanner:
    """Bounded breadth-first search over the grounded model; exact for unit costs."""

    def __init__(self, max_states: int = 20_000,
                 max_groundings: int = DEFAULT_MAX_GROUNDINGS) -> None:
        self.max_states = max_states
        self.max_groundings = max_groundings
        self._groundings: dict[tuple[Domain, tuple[tuple[str, tuple[str, ...]], ...]],
                               _Grounding] = {}

    def operators(self, domain: Domain, objects: Mapping[str, Sequence[str]], init: State
                  ) -> tuple[Grounder, list[GroundOperator]]:
        """The ground operators that can apply in some state reachable from ``init``.

        Pruned by the static facts of ``init`` itself, not of a problem file: an observed
        agent may report static facts that differ from one trace to the next.
        """
        key = (domain, tuple(sorted((t, tuple(v)) for t, v in objects.items())))
        g = self._groundings.get(key)
        if g is None:
            g = self._groundings[key] = _Grounding(Grounder(domain),
                                                   static_predicates(domain), {})
        statics = frozenset(a for a in init if a and a[0] in g.static)
        ops = g.by_statics.get(statics)
        if ops is None:
            ops = g.by_statics[statics] = ground_operators(
                g.grounder, objects, statics, max_groundings=self.max_groundings)
        return g.grounder, ops

    def shortest_plan(self, task: PlanningTask, max_length: int) -> list[GroundAction] | None:
        grounder, ops = self.operators(task.domain, task.objects, task.init)
        start = grounder.index.encode(task.init)
        goal = grounder.index.encode(task.goal)
        return breadth_first(ops, start, Targets({goal: max_length}),
                             max_states=self.max_states, max_depth=max_length).plan
