"""Objects to ground a canary probe with when the family's problem has none of a type.

A canary grounds an action with objects of its parameters' types. Until session 20 they
came from the family's ``problem`` only, so a family without one was never probed, nor an
action with a parameter type the problem declares no object of: a change to such an
action stayed unknown until a scheduled or requested assessment. Two other sources are
always at hand, tried in this order for a type the problem lacks:

- the objects of the states the agent itself reported (its trace), typed by where they
  appear (as :func:`~capwatch.assess.observations.infer_object_types` does: an object
  that is argument k of a predicate whose k-th parameter is a ``t`` is a ``t``), and the
  domain's constants: objects the agent knows;
- fresh names, as the assessment's own probes use (an agent can be put in any state,
  design.md G20): a type nothing names yet still gets objects, and a type with fewer
  objects than the action has parameters of it gets enough for them all to differ.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from random import Random

from capwatch.assess.atoms import equality_roots
from capwatch.model.domain import Action, Domain, GroundAtom, TypeHierarchy, type_members

FRESH_PREFIX = "canary-"
"""Fresh objects are named ``canary-<type>-<n>`` (a union type by its first member):
names outside what a problem or a trace uses, so a finding on one is told at a glance."""

Pools = Mapping[str, tuple[str, ...]]


def missing_types(action: Action, known: Pools | None) -> bool:
    """Whether some parameter of ``action`` has no object of its type in ``known``."""
    return known is None or any(not known.get(p.type) for p in action.parameters)


_Slots = dict[str, tuple[tuple[str, ...], ...]]
_SLOTS: dict[int, tuple[Domain, _Slots, tuple[tuple[str, tuple[str, ...]], ...]]] = {}


def _slots(domain: Domain) -> tuple[_Slots, tuple[tuple[str, tuple[str, ...]], ...]]:
    """Per predicate, the types (each with its ancestors) of its argument positions, and
    the model's union types with their members; per model, not per state: a state's
    objects are then one lookup an argument. infer_object_types walks the type hierarchy
    for every argument of every atom, and this runs on the main loop for every agent of
    such a family each round (about 10 times its work on ferry's 112-atom state)."""
    hit = _SLOTS.get(id(domain))
    if hit is not None and hit[0] is domain:
        return hit[1], hit[2]
    slots = {p.name: tuple(domain.types.ancestors(q.type) for q in p.parameters)
             for p in domain.predicates}
    unions = tuple((u, type_members(u)) for u in sorted(domain.union_types()))
    if len(_SLOTS) > 64:
        _SLOTS.clear()
    _SLOTS[id(domain)] = (domain, slots, unions)
    return slots, unions


def probe_pools(domain: Domain, known: Pools | None,
                states: Iterable[Collection[GroundAtom]]) -> dict[str, tuple[str, ...]]:
    """Objects per type: the problem's (``known``) where it has some of the type, else
    those of the agent's reported ``states`` and the domain's constants. A type none of
    them names is left out (:func:`with_fresh` names some)."""
    slots, unions = _slots(domain)
    seen: dict[str, set[str]] = {}
    # An object is argument k of a predicate whose k-th parameter is a t: it is a t (and
    # an ancestor of t). An atom in words the model lacks says nothing.
    for atom in {a for state in states for a in state}:
        types = slots.get(atom[0])
        if types is None or len(types) != len(atom) - 1:
            continue
        for obj, ts in zip(atom[1:], types, strict=True):
            for t in ts:
                seen.setdefault(t, set()).add(obj)
    for const in domain.constants:
        for t in domain.types.ancestors(const.type):
            seen.setdefault(t, set()).add(const.name)
    for union, of in unions:
        # A union parameter of an action takes any member's objects.
        members = {o for m in of for o in seen.get(m, ())}
        if members:
            seen.setdefault(union, set()).update(members)
    pools = {t: tuple(sorted(objs)) for t, objs in seen.items()}
    for t, objs in (known or {}).items():
        if objs:
            pools[t] = tuple(objs)
    return pools


def fresh_objects(type_name: str, count: int, taken: Collection[str]) -> tuple[str, ...]:
    """``count`` new object names of ``type_name``, none of them in ``taken``."""
    stem = type_members(type_name)[0]
    out: list[str] = []
    n = 0
    while len(out) < count:
        n += 1
        name = f"{FRESH_PREFIX}{stem}-{n}"
        if name not in taken:
            out.append(name)
    return tuple(out)


Taken = Callable[[], Collection[str]]
"""Names a fresh object must not take, asked for only when one is made."""


def with_fresh(action: Action, pools: Pools, taken: Taken) -> list[tuple[str, ...]]:
    """Each parameter's pool, padded with fresh objects up to the number of the action's
    parameters of its type, so that they can all differ: a state the agent reported may
    name one object of a type (gripper's one room, the robot's), and every grounding of
    ``move ?from ?to`` on it was ``move rooma rooma``, where a lost delete of
    ``(at-robby ?from)`` shows nothing."""
    count: dict[str, int] = {}
    for p in action.parameters:
        count[p.type] = count.get(p.type, 0) + 1
    short = {t: k - len(pools.get(t, ())) for t, k in count.items()
             if len(pools.get(t, ())) < k}
    if not short:
        return [pools[p.type] for p in action.parameters]
    names = taken()
    padded = {t: (*pools.get(t, ()), *fresh_objects(t, k, names)) for t, k in short.items()}
    return [padded.get(p.type) or pools[p.type] for p in action.parameters]


def distinct_grounding(action: Action, pools: Pools, taken: Taken,
                       rng: Random) -> tuple[str, ...] | None:
    """Arguments naming different objects wherever the action's ``(= ?a ?b)`` constraints
    allow: drawn from the pools, fresh names once a pool runs out. Two literals of one
    precondition then fall on one ground atom only where the model itself ties them, so
    each literal can be made false alone. None when the constraints admit none."""
    roots = equality_roots(action)
    chosen: dict[str, str] = {}
    used: set[str] = set()
    args: list[str] = []
    for p in action.parameters:
        r = roots[p.name]
        if not r.startswith("?"):
            args.append(r)
            continue
        if r not in chosen:
            free = [o for o in pools.get(p.type, ()) if o not in used]
            obj = rng.choice(free) if free else fresh_objects(p.type, 1, {*taken(), *used})[0]
            chosen[r] = obj
            used.add(obj)
        args.append(chosen[r])
    return tuple(args) if action.admits(args) else None


def can_hold(action: Action, binding: Mapping[str, str]) -> bool:
    """Whether some state satisfies ``action``'s precondition grounded with ``binding``:
    no positive and negative literal fall on one ground atom (a repeated object can put
    ``(p ?a)`` and ``(not (p ?b))`` on one). Static constraints are not looked at."""
    if not action.pre_neg:
        return True
    pos = {a.ground(binding) for a in action.pre_pos}
    return pos.isdisjoint(a.ground(binding) for a in action.pre_neg)


_TAKES: dict[int, tuple[Action, TypeHierarchy, tuple[tuple[bool, ...], ...]]] = {}


def _takes(action: Action, types: TypeHierarchy) -> tuple[tuple[bool, ...], ...]:
    """Per parameter j, per parameter i: whether i's type is a subtype of j's (so any
    object of i's is one of j's). Per action and hierarchy, not per probe: is_subtype
    walks the hierarchy, and on the main loop these pairs were most of ``repeated``'s
    work (hiking's six-parameter ``walk_together``: ~3 ms a call, ~0.1 ms cached)."""
    hit = _TAKES.get(id(action))
    if hit is not None and hit[0] is action and hit[1] is types:
        return hit[2]
    ts = [p.type for p in action.parameters]
    out = tuple(tuple(types.is_subtype(ti, tj) for ti in ts) for tj in ts)
    if len(_TAKES) > 1024:
        _TAKES.clear()
    _TAKES[id(action)] = (action, types, out)
    return out


def repeated(action: Action, pools: Sequence[tuple[str, ...]], args: Sequence[str],
             rng: Random, types: TypeHierarchy | None = None) -> tuple[str, ...] | None:
    """``args`` with some parameters given another's object, or None if the pools, the
    types, the action's constraints and its precondition allow no repeat at all.

    An agent whose action now needs two parameters to differ, or whose effect now depends
    on whether they do, shows it only on a grounding that names one object twice, which
    canaries drawn on distinct objects never make. The parameters are taken in a random
    order; the first that can takes the object of another (drawn), and each later one
    does with even odds. One pair drawn among all would leave a given pair to one probe
    in 42 on a seven-parameter untyped action (freecell's ``homefromfreecell``); so each
    pair is tied in about one probe in ``parameters - 1`` or better.

    Parameter j may take the object of parameter i when i's type is a subtype of j's
    (``types``: a fresh object of a subtype is in no pool of the supertype) or j's pool
    holds it. A repeat the model's ``(not (= ?a ?b))`` forbids is left, and one that puts
    a positive and a negative literal of the precondition on one atom: the model says the
    action never applies there, and the agent refusing it says nothing."""
    names = action.parameter_names
    n = len(names)
    takes = _takes(action, types) if types is not None else None
    held: dict[int, frozenset[str]] = {}
    trial = list(args)
    order = list(range(n))
    rng.shuffle(order)
    merged = False
    for j in order:
        if merged and rng.random() < 0.5:
            continue
        others = []
        for i in range(n):
            if i == j or trial[i] == trial[j]:
                continue
            if takes is None or not takes[j][i]:
                pool = held.get(j)
                if pool is None:
                    pool = held[j] = frozenset(pools[j])
                if trial[i] not in pool:
                    continue
            others.append(i)
        rng.shuffle(others)
        for i in others:
            before = trial[j]
            trial[j] = trial[i]
            binding = dict(zip(names, trial, strict=True))
            if action.admits_binding(binding) and can_hold(action, binding):
                merged = True
                break
            trial[j] = before
    return tuple(trial) if merged else None
