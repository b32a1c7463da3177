"""capwatch's one in-process optimal planner: grounding plus breadth-first search.

Two kinds of caller share it. The reference agent's optimal mode plans to a problem's
goal (a :class:`Goal`: some literals must hold, the rest is free) with no length bound.
:class:`~capwatch.assess.planner.BreadthFirstPlanner` and the reduced-functionality
check ask whether the known model reaches one of several *exact* observed states within
a number of steps (:class:`Targets`). All actions cost 1, so the first goal state the
search generates is at its shortest distance: the plan is optimal.

Probabilistic actions are planned over the all-outcomes determinisation (every outcome
with p > 0 becomes its own deterministic successor): the plan is optimal in the best
case, and a caller executing it must replan when the sampled outcome differs.

Grounding keeps only operators whose static preconditions hold in the start state: no
action changes a static fact, so the others can never apply on the way. The search is
bounded in generated states and raises :class:`PlannerGaveUp` past that bound, so a
caller never mistakes "gave up" for "no plan".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom, LiftedAtom, Problem
from capwatch.model.grounding import Grounder, GroundOperator, StateMask, bit_positions

DEFAULT_MAX_STATES = 500_000


class PlannerGaveUp(RuntimeError):
    """The planner hit its time or size limit before deciding whether a plan exists."""


class GroundingLimitExceeded(PlannerGaveUp):
    """Grounding every operator would enumerate more argument tuples than allowed."""


DEFAULT_MAX_GROUNDINGS = 10_000_000
"""Work allowed to ground one model over one object set, in steps: one per (partial)
argument tuple tried, plus, per operator built, its parameters and atoms; roughly 1-3 µs
a step. The shipped IPC problems need up to 4.5 million (sokoban: static facts prune late).
An action with dozens of parameters over a few objects has astronomically many groundings;
this bound turns that hang into an answer within seconds."""


class GoalTest(Protocol):
    def reached(self, state: StateMask, depth: int) -> bool:
        """Whether ``state``, first generated ``depth`` steps from the start, ends the search."""
        ...


@dataclass(frozen=True, slots=True)
class Goal:
    """A conjunctive goal over ground literals, as bitmasks of one grounder's atom index."""

    pos: StateMask
    neg: StateMask

    @classmethod
    def of(cls, grounder: Grounder, pos: Iterable[GroundAtom],
           neg: Iterable[GroundAtom] = ()) -> Goal:
        idx = grounder.index
        return cls(idx.encode(pos), idx.encode(neg))

    def satisfied(self, state: StateMask) -> bool:
        return (state & self.pos) == self.pos and not (state & self.neg)

    def reached(self, state: StateMask, depth: int) -> bool:
        return self.satisfied(state)


@dataclass(frozen=True, slots=True)
class Targets:
    """Exact states to reach, each within its own number of steps."""

    limits: Mapping[StateMask, int]

    def reached(self, state: StateMask, depth: int) -> bool:
        limit = self.limits.get(state)
        return limit is not None and depth <= limit


@dataclass(frozen=True, slots=True)
class SearchResult:
    plan: list[GroundAction] | None
    """A shortest plan, or None when no goal state is reachable (within the depth bound)."""
    end: StateMask | None
    """The goal state the plan reaches (which target, for :class:`Targets`)."""
    generated: int
    """Distinct states the search generated, the start included."""


def static_predicates(domain: Domain) -> frozenset[str]:
    """Predicates no action ever adds or deletes: their truth is fixed by the initial state."""
    changed = {atom.predicate for a in domain.actions for o in a.outcomes
               for atom in o.add | o.delete}
    return frozenset(p.name for p in domain.predicates if p.name not in changed)


def _binding_order(action: Action, static: frozenset[str]) -> list[int]:
    """The order to bind the parameters in: each next one the parameter that completes the
    most static literals, then the one sharing the most static literals with those bound
    (so roads and floors are followed from a bound end), then declaration order. Binding
    ``?from ?to ?dir`` of ``(MOVE-DIR ?from ?to ?dir)`` before the other parameters of a
    sokoban push prunes at once instead of after the cross product of everything before."""
    names = action.parameter_names
    literals = [frozenset(a for a in atom.args if a in names)
                for atom in (*action.pre_pos, *action.pre_neg) if atom.predicate in static]
    order: list[int] = []
    bound: set[str] = set()
    remaining = list(range(len(names)))
    while remaining:
        def score(i: int) -> tuple[int, int, int]:
            n = names[i]
            with_n = [lit for lit in literals if n in lit and not lit <= bound]
            completes = sum(lit <= bound | {n} for lit in with_n)
            touches = sum(bool(lit & bound) for lit in with_n)
            return completes, touches, -i
        best = max(remaining, key=score)
        remaining.remove(best)
        order.append(best)
        bound.add(names[best])
    return order


class _StaticLookup:
    """The objects a parameter can take given one positive static literal that its binding
    completes, e.g. the ``?to`` with ``(road ?from ?to)`` for the bound ``?from``: looked up
    from the static facts instead of trying every object of its type. Candidates keep the
    type's object order; the literal is still checked with the others."""

    __slots__ = ("_by_key", "_domain", "_found", "_key")

    def __init__(self, key: tuple[str, ...], by_key: dict[tuple[str, ...], set[str]],
                 domain: Sequence[str]) -> None:
        self._key = key
        self._by_key = by_key
        self._domain = domain
        self._found: dict[tuple[str, ...], list[str]] = {}

    @classmethod
    def of(cls, name: str, checks: Sequence[tuple[LiftedAtom, bool]],
           static_true: frozenset[GroundAtom], domain: Sequence[str]) -> _StaticLookup | None:
        for atom, positive in checks:
            if not positive or atom.args.count(name) != 1:
                continue
            at = atom.args.index(name)
            others = tuple(a for k, a in enumerate(atom.args) if k != at)
            by_key: dict[tuple[str, ...], set[str]] = {}
            for fact in static_true:
                if fact[0] == atom.predicate and len(fact) == len(atom.args) + 1:
                    rest = fact[1:]
                    by_key.setdefault(rest[:at] + rest[at + 1:], set()).add(rest[at])
            return cls(others, by_key, domain)
        return None

    def candidates(self, binding: Mapping[str, str]) -> list[str]:
        key = tuple(binding.get(a, a) for a in self._key)
        found = self._found.get(key)
        if found is None:
            allowed = self._by_key.get(key, set())
            found = self._found[key] = [o for o in self._domain if o in allowed]
        return found


def _bindings(action: Action, objects: Mapping[str, Sequence[str]],
              static_true: frozenset[GroundAtom], static: frozenset[str],
              budget: list[int]) -> Iterator[tuple[str, ...]]:
    """Argument tuples for ``action`` that satisfy its static preconditions, in the order
    of the cross product of ``objects`` (the first parameter varying slowest).

    Static literals are checked as soon as their last parameter is bound, and parameters
    are bound in an order that completes static literals early (:func:`_binding_order`),
    so the backtracking never enumerates the full cross product for actions whose
    parameters are linked by static facts (roads, floors above one another, ...). When
    that order is not the declared one, the tuples are sorted back into cross-product
    order.
    """
    names = action.parameter_names
    order = _binding_order(action, static)
    rank = {i: depth for depth, i in enumerate(order)}
    checks: list[list[tuple[LiftedAtom, bool]]] = [[] for _ in range(max(1, len(names)))]
    for atoms, positive in ((action.pre_pos, True), (action.pre_neg, False)):
        for atom in atoms:
            if atom.predicate not in static:
                continue
            depth = max((rank[names.index(a)] for a in atom.args if a in names), default=0)
            checks[depth].append((atom, positive))
    domains = [objects.get(p.type, ()) for p in action.parameters]
    binding: dict[str, str] = {}
    leaf_cost = len(names) + len(action.all_atoms())
    lookups = [_StaticLookup.of(names[order[depth]], checks[depth], static_true,
                                domains[order[depth]]) for depth in range(len(names))]

    def extend(depth: int) -> Iterator[tuple[str, ...]]:
        if depth == len(names):
            args = tuple(binding[n] for n in names)
            if action.admits(args):
                budget[0] -= leaf_cost
                yield args
            return
        i = order[depth]
        lookup = lookups[depth]
        for obj in domains[i] if lookup is None else lookup.candidates(binding):
            budget[0] -= 1
            if budget[0] < 0:
                raise GroundingLimitExceeded(
                    f"grounding {action.name} ({len(names)} parameters over "
                    f"{sum(len(d) for d in domains)} object slots) enumerates more "
                    f"argument tuples than the limit; raise max_groundings or use fewer "
                    f"objects")
            binding[names[i]] = obj
            if all((atom.ground(binding) in static_true) == positive
                   for atom, positive in checks[depth]):
                yield from extend(depth + 1)
        binding.pop(names[i], None)

    if not names:
        if all((atom.ground({}) in static_true) == positive
               for atom, positive in checks[0]) and action.admits(()):
            yield ()
        return
    if order == sorted(order):
        yield from extend(0)
        return
    position = [{obj: k for k, obj in reversed(list(enumerate(d)))} for d in domains]
    yield from sorted(extend(0), key=lambda args: [p[a] for p, a in zip(position, args,
                                                                          strict=True)])


def ground_actions(domain: Domain, objects: Mapping[str, Sequence[str]],
                   init: Iterable[GroundAtom], *,
                   max_groundings: int = DEFAULT_MAX_GROUNDINGS) -> list[GroundAction]:
    """The ground actions :func:`ground_operators` makes operators of, in its order: they
    depend on no atom index, so callers grounding one problem for many indexes (a fleet's
    agents) can share them."""
    static = static_predicates(domain)
    static_true = frozenset(a for a in init if a and a[0] in static)
    out: list[GroundAction] = []
    budget = [max_groundings]
    for action in domain.actions:
        for args in _bindings(action, objects, static_true, static, budget):
            out.append((action.name, *args))
    return out


def ground_operators(grounder: Grounder, objects: Mapping[str, Sequence[str]],
                     init: Iterable[GroundAtom], *,
                     max_groundings: int = DEFAULT_MAX_GROUNDINGS) -> list[GroundOperator]:
    """Every ground operator whose static preconditions and equality constraints hold in
    ``init``; :class:`GroundingLimitExceeded` once more than ``max_groundings`` steps of
    work (see ``DEFAULT_MAX_GROUNDINGS``) were spent.

    ``objects`` maps each type to its objects (``Problem.objects_by_type``). Operators
    ruled out by static facts can never apply in any state reachable from ``init``.
    Order is the domain's action order, then arguments in the order of ``objects``: the
    same as the unpruned cross product, so pruning never changes which plan is found.
    """
    return [grounder.operator(a) for a in ground_actions(
        grounder.domain, objects, init, max_groundings=max_groundings)]


def breadth_first(operators: Sequence[GroundOperator], start: StateMask, goal: GoalTest, *,
                  max_states: int = DEFAULT_MAX_STATES, max_depth: int | None = None,
                  max_tests: int | None = None) -> SearchResult:
    """A shortest plan from ``start`` to a state ``goal`` accepts.

    Explores layer by layer (states in the order generated, operators in the given
    order, outcomes in the action's order), testing the goal as states are generated.
    ``max_depth`` bounds the plan length (None: unbounded). Raises
    :class:`PlannerGaveUp` once more than ``max_states`` distinct states were generated
    without an answer, or once more than ``max_tests`` operator applicability tests were
    spent (None: no such bound; states of real domains differ a lot in how many
    operators they trigger, so a caller bounding time bounds tests too).
    """
    if goal.reached(start, 0):
        return SearchResult([], start, 1)
    reached = goal.reached
    successors = SuccessorIndex(operators)
    tests = 0
    parent: dict[StateMask, tuple[StateMask, int]] = {start: (start, -1)}
    layer = [start]
    depth = 0
    while layer and (max_depth is None or depth < max_depth):
        depth += 1
        next_layer: list[StateMask] = []
        for state in layer:
            candidates = successors.candidates(state)
            tests += len(candidates)
            if max_tests is not None and tests > max_tests:
                raise PlannerGaveUp(f"more than {max_tests} operator tests within {depth} "
                                    f"steps")
            for i in candidates:
                op = operators[i]
                if not op.applicable(state):
                    continue
                for keep, add in op.effects:
                    nxt = (state & keep) | add
                    if nxt in parent:
                        continue
                    parent[nxt] = (state, i)
                    if reached(nxt, depth):
                        return SearchResult(_path(parent, operators, nxt), nxt, len(parent))
                    next_layer.append(nxt)
            if len(parent) > max_states:
                raise PlannerGaveUp(f"more than {max_states} states within {depth} steps")
        layer = next_layer
    return SearchResult(None, None, len(parent))


class SuccessorIndex:
    """Operators filed under one of their positive precondition atoms, the one fewest
    operators require (the most specific), so a state only tests the operators one of
    its true atoms triggers instead of every operator: the cost per state follows the
    state's size, not the grounding's. Candidates come back in operator order, so the
    plan found is the same."""

    __slots__ = ("by_bit", "count", "dynamic", "free", "small")

    def __init__(self, operators: Sequence[GroundOperator]) -> None:
        self.by_bit: dict[int, list[int]] = {}
        self.free: list[int] = []
        self.count = len(operators)
        self.small = self.count <= 64
        self.dynamic = 0
        if self.small:
            return
        # Atoms no operator changes (static facts, kept true by grounding's pruning)
        # trigger nothing useful: filing under them would test their operators always.
        width = max((max(op.pre_pos.bit_length(), *(a.bit_length() for _, a in op.effects))
                     for op in operators), default=0)
        full = (1 << width) - 1
        for op in operators:
            for keep, add in op.effects:
                self.dynamic |= add | (~keep & full)
        uses: dict[int, int] = {}
        bits_of: list[list[int]] = []
        for op in operators:
            bits = bit_positions(op.pre_pos & self.dynamic)
            bits_of.append(bits)
            for b in bits:
                uses[b] = uses.get(b, 0) + 1
        for i, bits in enumerate(bits_of):
            if bits:
                self.by_bit.setdefault(min(bits, key=uses.__getitem__), []).append(i)
            else:
                self.free.append(i)

    def candidates(self, state: StateMask) -> list[int]:
        if self.small:
            return list(range(self.count))
        found = list(self.free)
        by_bit = self.by_bit
        bits = state & self.dynamic
        offset = 0
        while bits:
            word = bits & 0xFFFFFFFFFFFFFFFF
            while word:
                low = word & -word
                group = by_bit.get(offset + low.bit_length() - 1)
                if group is not None:
                    found.extend(group)
                word ^= low
            bits >>= 64
            offset += 64
        found.sort()
        return found


def _path(parent: Mapping[StateMask, tuple[StateMask, int]],
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
                 max_states: int = DEFAULT_MAX_STATES) -> list[GroundAction] | None:
    """A shortest plan for ``problem`` (from ``init`` if given, else the problem's)."""
    g = grounder if grounder is not None else Grounder(domain)
    start = problem.init if init is None else frozenset(init)
    ops = ground_operators(g, problem.objects_by_type(domain), start)
    goal = Goal.of(g, problem.goal_pos, problem.goal_neg)
    return breadth_first(ops, g.index.encode(start), goal, max_states=max_states).plan
