"""Pure-Python optimal planning for small problems: full grounding plus breadth-first search.

Used by the reference agent's optimal mode and available to the assessment engine for
tiny problems where starting Fast Downward would cost more than the search itself.
All actions cost 1, so breadth-first search returns a shortest (optimal) plan.

Probabilistic actions are planned over the all-outcomes determinisation (every outcome
with p > 0 becomes its own deterministic successor): the plan is optimal in the best
case, and a caller executing it must replan when the sampled outcome differs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom, LiftedAtom, Problem
from capwatch.model.grounding import Grounder, GroundOperator, StateMask

DEFAULT_MAX_EXPANSIONS = 500_000


class SearchLimitExceeded(RuntimeError):
    """The search gave up before deciding whether a plan exists."""


@dataclass(frozen=True, slots=True)
class Goal:
    """A conjunctive goal over ground literals, as bitmasks of one grounder's atom index."""

    pos: StateMask
    neg: StateMask

    @classmethod
    def of(cls, grounder: Grounder, pos: Iterable[GroundAtom],
           neg: Iterable[GroundAtom] = ()) -> Goal:
        idx = grounder.index
        pmask = 0
        for atom in pos:
            pmask |= idx.bit(atom)
        nmask = 0
        for atom in neg:
            nmask |= idx.bit(atom)
        return cls(pmask, nmask)

    def satisfied(self, state: StateMask) -> bool:
        return (state & self.pos) == self.pos and not (state & self.neg)


def static_predicates(domain: Domain) -> frozenset[str]:
    """Predicates no action ever adds or deletes: their truth is fixed by the initial state."""
    changed = {atom.predicate for a in domain.actions for o in a.outcomes
               for atom in o.add | o.delete}
    return frozenset(p.name for p in domain.predicates if p.name not in changed)


def _bindings(action: Action, objects: Mapping[str, tuple[str, ...]],
              static_true: frozenset[GroundAtom], static: frozenset[str]
              ) -> Iterator[tuple[str, ...]]:
    """Argument tuples for ``action`` that satisfy its static preconditions.

    Static literals are checked as soon as their last parameter is bound, so the
    backtracking never enumerates the full cross product for actions whose parameters
    are linked by static facts (roads, floors above one another, ...).
    """
    names = action.parameter_names
    position = {n: i for i, n in enumerate(names)}
    checks: list[list[tuple[LiftedAtom, bool]]] = [[] for _ in range(max(1, len(names)))]
    for atoms, positive in ((action.pre_pos, True), (action.pre_neg, False)):
        for atom in atoms:
            if atom.predicate not in static:
                continue
            depth = max((position[a] for a in atom.args if a in position), default=0)
            checks[depth].append((atom, positive))
    domains = [objects.get(p.type, ()) for p in action.parameters]
    binding: dict[str, str] = {}

    def extend(i: int) -> Iterator[tuple[str, ...]]:
        if i == len(names):
            yield tuple(binding[n] for n in names)
            return
        for obj in domains[i]:
            binding[names[i]] = obj
            if all((atom.ground(binding) in static_true) == positive
                   for atom, positive in checks[i]):
                yield from extend(i + 1)
        binding.pop(names[i], None)

    if not names:
        if all((atom.ground({}) in static_true) == positive for atom, positive in checks[0]):
            yield ()
        return
    yield from extend(0)


def ground_operators(grounder: Grounder, objects: Mapping[str, tuple[str, ...]],
                     init: Iterable[GroundAtom]) -> list[GroundOperator]:
    """Every ground operator whose static preconditions hold in ``init``.

    ``objects`` maps each type to its objects (``Problem.objects_by_type``). Operators
    ruled out by static facts can never apply in any state reachable from ``init``.
    """
    domain = grounder.domain
    static = static_predicates(domain)
    static_true = frozenset(a for a in init if a and a[0] in static)
    ops = []
    for action in domain.actions:
        for args in _bindings(action, objects, static_true, static):
            ops.append(grounder.operator((action.name, *args)))
    return ops


def breadth_first_plan(operators: Sequence[GroundOperator], init: StateMask, goal: Goal, *,
                       max_expansions: int = DEFAULT_MAX_EXPANSIONS
                       ) -> list[GroundAction] | None:
    """A shortest plan from ``init`` to ``goal``, or None when the goal is unreachable.

    Raises :class:`SearchLimitExceeded` after ``max_expansions`` expanded states, so a
    caller never mistakes "gave up" for "impossible".
    """
    if goal.satisfied(init):
        return []
    parent: dict[StateMask, tuple[StateMask, int]] = {init: (init, -1)}
    frontier: deque[StateMask] = deque([init])
    expansions = 0
    while frontier:
        state = frontier.popleft()
        expansions += 1
        if expansions > max_expansions:
            raise SearchLimitExceeded(
                f"breadth-first search expanded {max_expansions} states without an answer"
            )
        for i, op in enumerate(operators):
            if not op.applicable(state):
                continue
            for keep, add in op.effects:
                nxt = (state & keep) | add
                if nxt in parent:
                    continue
                parent[nxt] = (state, i)
                if goal.satisfied(nxt):
                    return _extract(parent, operators, nxt)
                frontier.append(nxt)
    return None


def _extract(parent: Mapping[StateMask, tuple[StateMask, int]],
             operators: Sequence[GroundOperator], state: StateMask) -> list[GroundAction]:
    plan: list[GroundAction] = []
    while True:
        prev, i = parent[state]
        if i < 0:
            break
        op = operators[i]
        plan.append((op.action.name, *op.args))
        state = prev
    plan.reverse()
    return plan


def optimal_plan(domain: Domain, problem: Problem, *, grounder: Grounder | None = None,
                 init: Iterable[GroundAtom] | None = None,
                 max_expansions: int = DEFAULT_MAX_EXPANSIONS) -> list[GroundAction] | None:
    """A shortest plan for ``problem`` (from ``init`` if given, else the problem's)."""
    g = grounder if grounder is not None else Grounder(domain)
    start = problem.init if init is None else frozenset(init)
    ops = ground_operators(g, problem.objects_by_type(domain), start)
    goal = Goal.of(g, problem.goal_pos, problem.goal_neg)
    return breadth_first_plan(ops, g.index.encode(start), goal, max_expansions=max_expansions)
