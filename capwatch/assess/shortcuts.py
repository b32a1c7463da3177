"""Reduced functionality: where the known model is faster than the optimal agent.

Successful steps cannot show that an action lost an ability. An *optimal* agent can: if
the known model reaches s_j from s_i in fewer steps than the agent took, something the
known model relies on no longer works (papers/daaisy.md §4.1). For each such shortcut we
walk the known model's plan and the observed steps side by side and blame the first
action where they part (or where the same action led to a different state).

Cost control, so one assessment stays well under a second (issue 3, target 4):
* a pair (i, j) is searched only if a counting bound allows a shorter plan: each known
  action changes at most c atoms, so at least ⌈|s_i △ s_j| / c⌉ steps are needed;
* one bounded breadth-first search from s_i answers every later s_j at once;
* searches share a state budget, and running out is reported, never mistaken for
  "no shortcut".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from capwatch.assess.observations import Trace
from capwatch.assess.planner import BreadthFirstPlanner, Planner, PlannerGaveUp, PlanningTask
from capwatch.assess.search import Targets, breadth_first
from capwatch.model.domain import Domain, GroundAction
from capwatch.model.simulate import execute_plan

__all__ = ["Planner", "Shortcut", "ShortcutReport", "find_shortcuts"]


@dataclass(frozen=True, slots=True)
class Shortcut:
    trace: str
    start: int
    end: int
    known_plan: tuple[GroundAction, ...]
    suspect: GroundAction

    def describe(self) -> str:
        plan = " ".join(f"({' '.join(a)})" for a in self.known_plan)
        return (f"optimal agent took {self.end - self.start} steps from state {self.start} to "
                f"state {self.end} of {self.trace or 'a trace'}; the known model needs "
                f"{len(self.known_plan)} ({plan}); first difference: "
                f"({' '.join(self.suspect)})")


@dataclass(slots=True)
class ShortcutReport:
    shortcuts: list[Shortcut] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    searches: int = 0
    states: int = 0


GROUNDING_WORK_PER_STATE = 10
"""Grounding work (search.DEFAULT_MAX_GROUNDINGS' steps, ~1-3 µs each) allowed per search
state of the budget: with the default 20,000 states, well under a second."""


TESTS_PER_STATE = 20
"""Operator applicability tests (~0.3 µs each, plus the state's bookkeeping) allowed per
search state of the budget: bounds the search's time, not only its size."""


def _max_change(domain: Domain) -> int:
    return max((len(o.add | o.delete) for a in domain.actions for o in a.outcomes), default=0)


def find_shortcuts(known: Domain, traces: Sequence[Trace],
                   objects: Mapping[str, Sequence[str]], *, planner: Planner | None = None,
                   max_states: int = 20_000) -> ShortcutReport:
    report = ShortcutReport()
    c = _max_change(known)
    if c == 0:
        return report
    # Grounding is bounded like the search: a drifted model with few static predicates
    # grounds to the full cross product, which must end in a note, not a long wait.
    bfs = planner if planner is not None else BreadthFirstPlanner(
        max_states, max_groundings=GROUNDING_WORK_PER_STATE * max_states)
    budget = max_states
    for trace in traces:
        states = trace.states
        n = len(states) - 1
        for i in range(n - 1):
            candidates = {j: j - i - 1 for j in range(i + 2, n + 1)
                          if -(-len(states[i] ^ states[j]) // c) < j - i}
            if not candidates:
                continue
            report.searches += 1
            try:
                found, used = _search(known, objects, bfs, states, i, candidates, budget)
            except PlannerGaveUp as exc:
                report.notes.append(f"reduced-functionality search stopped at state {i} of "
                                    f"{trace.source or 'a trace'}: {exc}")
                return report
            budget -= used
            report.states += used
            if found is None:
                continue
            j, plan = found
            suspect = _first_difference(known, states, trace.actions, i, plan)
            if suspect is not None:
                report.shortcuts.append(Shortcut(trace.source, i, j, tuple(plan), suspect))
    return report


def _search(known: Domain, objects: Mapping[str, Sequence[str]], planner: Planner,
            states: Sequence[frozenset[tuple[str, ...]]], i: int, candidates: Mapping[int, int],
            budget: int) -> tuple[tuple[int, list[GroundAction]] | None, int]:
    if isinstance(planner, BreadthFirstPlanner):
        grounder, ops = planner.operators(known, objects, states[i])
        index = grounder.index
        targets: dict[int, int] = {}
        where: dict[int, int] = {}
        for j, limit in candidates.items():
            mask = index.encode(states[j])
            if mask not in targets:
                targets[mask] = limit
                where[mask] = j
        hit = breadth_first(ops, index.encode(states[i]), Targets(targets),
                            max_states=budget, max_depth=max(candidates.values()),
                            max_tests=TESTS_PER_STATE * budget)
        if hit.plan is None or hit.end is None:
            return None, hit.generated
        return (where[hit.end], hit.plan), hit.generated
    for j, limit in sorted(candidates.items()):
        found = planner.shortest_plan(PlanningTask(known, objects, states[i], states[j]), limit)
        if found is not None:
            return (j, found), 0
    return None, 0


def _first_difference(known: Domain, states: Sequence[frozenset[tuple[str, ...]]],
                      actions: Sequence[GroundAction], i: int, plan: Sequence[GroundAction]
                      ) -> GroundAction | None:
    from capwatch.model.grounding import Grounder

    grounder = Grounder(known)
    for k, step in enumerate(plan):
        if i + k >= len(actions):
            return step
        if step != actions[i + k]:
            return step
        _, nxt = execute_plan(grounder, states[i + k], [step])
        if nxt != states[i + k + 1]:
            return step
    return plan[0] if plan else None
