"""The planner facade: what the engine asks of a planner, and a pure-Python one.

The engine needs optimal (shortest, unit-cost) plans for one thing only: checking
whether the known model could have gone between two observed states faster than the
optimal agent did (reduced functionality, papers/daaisy.md §4.1). :class:`Planner` is
that question. :class:`BreadthFirstPlanner` answers it in-process over the grounded
model, bounded in length and in states, which for the sub-traces of a 10-step trace is
far cheaper than starting Fast Downward. ``capwatch.adapters.fast_downward`` implements
the same protocol by running Fast Downward in a subprocess, for large problems.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.grounding import Grounder, GroundOperator, StateMask

State = frozenset[GroundAtom]


@dataclass(frozen=True, slots=True)
class PlanningTask:
    """Reach exactly ``goal`` (every other atom false) from ``init`` over ``objects``."""

    domain: Domain
    objects: Mapping[str, Sequence[str]]
    """Type name → objects of that type (including subtypes)."""
    init: State
    goal: State


class PlannerGaveUp(RuntimeError):
    """The planner hit its time or size limit before deciding."""


class Planner(Protocol):
    def shortest_plan(self, task: PlanningTask, max_length: int) -> list[GroundAction] | None:
        """A shortest plan of at most ``max_length`` steps, or None if there is none.

        Raises :class:`PlannerGaveUp` when it cannot decide within its limits.
        """
        ...


class BreadthFirstPlanner:
    """Bounded breadth-first search over the grounded model; exact for unit costs."""

    def __init__(self, max_states: int = 20_000) -> None:
        self.max_states = max_states
        self._ops: dict[tuple[Domain, tuple[tuple[str, tuple[str, ...]], ...]],
                        tuple[Grounder, list[GroundOperator]]] = {}

    def operators(self, domain: Domain, objects: Mapping[str, Sequence[str]]
                  ) -> tuple[Grounder, list[GroundOperator]]:
        """Every ground operator (no static-fact pruning: the agent's statics may change)."""
        key = (domain, tuple(sorted((t, tuple(v)) for t, v in objects.items())))
        cached = self._ops.get(key)
        if cached is None:
            grounder = Grounder(domain)
            ops = [grounder.operator((a.name, *args)) for a in domain.actions
                   for args in itertools.product(*(objects.get(p.type, ())
                                                    for p in a.parameters))]
            cached = (grounder, ops)
            self._ops[key] = cached
        return cached

    def shortest_plan(self, task: PlanningTask, max_length: int) -> list[GroundAction] | None:
        grounder, ops = self.operators(task.domain, task.objects)
        start = grounder.index.encode(task.init)
        goal = grounder.index.encode(task.goal)
        found, _ = bounded_reach(ops, start, {goal: max_length}, max_length, self.max_states)
        return None if found is None else found[0]


def bounded_reach(ops: Sequence[GroundOperator], start: StateMask,
                  targets: Mapping[StateMask, int], max_depth: int, max_states: int
                  ) -> tuple[tuple[list[GroundAction], StateMask] | None, int]:
    """Shortest path from ``start`` to any target t within ``targets[t]`` steps, and how
    many states the search generated.

    Breadth-first, so the first target met is met at its shortest distance. Raises
    :class:`PlannerGaveUp` after ``max_states`` distinct states.
    """
    if start in targets and targets[start] >= 0:
        return ([], start), 1
    parent: dict[StateMask, tuple[StateMask, int]] = {start: (start, -1)}
    layer = [start]
    for depth in range(1, max_depth + 1):
        nxt_layer: list[StateMask] = []
        for state in layer:
            for i, op in enumerate(ops):
                if not op.applicable(state):
                    continue
                for keep, add in op.effects:
                    nxt = (state & keep) | add
                    if nxt in parent:
                        continue
                    parent[nxt] = (state, i)
                    limit = targets.get(nxt)
                    if limit is not None and depth <= limit:
                        return (_path(parent, ops, nxt), nxt), len(parent)
                    nxt_layer.append(nxt)
            if len(parent) > max_states:
                raise PlannerGaveUp(f"more than {max_states} states within {depth} steps")
        layer = nxt_layer
        if not layer:
            break
    return None, len(parent)


def _path(parent: Mapping[StateMask, tuple[StateMask, int]], ops: Sequence[GroundOperator],
          state: StateMask) -> list[GroundAction]:
    plan: list[GroundAction] = []
    queue: deque[GroundAction] = deque()
    while True:
        prev, i = parent[state]
        if i < 0:
            break
        queue.appendleft((ops[i].action.name, *ops[i].args))
        state = prev
    plan.extend(queue)
    return plan
