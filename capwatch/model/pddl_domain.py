"""PDDL/PPDDL domain files: predicates, typed actions with conjunctive preconditions,
(probabilistic) add/delete effects, equality constraints and action costs.

What capwatch does not model is refused with the construct's name and position, never
approximated: a model silently weaker than the file would be a wrong model.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

from capwatch.model.domain import (
    NUMBER_TYPE,
    ROOT_TYPE,
    Action,
    Domain,
    Function,
    LiftedAtom,
    NumericEffect,
    NumericValue,
    Outcome,
    Parameter,
    Predicate,
    TypeHierarchy,
    check_probability,
    type_members,
)
from capwatch.model.errors import ModelError, PDDLError
from capwatch.model.pal import DEFAULT_MAX_PAL_TUPLES, TooManyPalTuples, count_pal_tuples
from capwatch.model.pddl_syntax import Ctx, define, pairs, typed_list
from capwatch.model.sexpr import SExpr, SList, Token

_NOT_CONJUNCTIVE = {
    "or": "disjunction 'or'", "imply": "'imply'", "exists": "quantifier 'exists'",
    "forall": "quantifier 'forall'", "when": "conditional effect 'when'",
    "oneof": "'oneof'", "probabilistic": "'probabilistic'",
    "<": "numeric condition '<'", ">": "numeric condition '>'",
    "<=": "numeric condition '<='", ">=": "numeric condition '>='",
}
_NUMERIC_FLUENT_EFFECTS = ("decrease", "assign", "scale-up", "scale-down")
DEFAULT_MAX_PARAMETERS = 100
"""Real actions have a dozen parameters at most; grounding recurses once per parameter."""

_UNSUPPORTED_SECTIONS = {
    ":derived": "derived predicates (:derived)",
    ":durative-action": "durative actions (:durative-action)",
    ":constraints": "state trajectory constraints (:constraints)",
    ":process": "PDDL+ processes (:process)", ":event": "PDDL+ events (:event)",
}


@dataclass
class _Scope:
    """What an action's formulas may name."""

    predicates: dict[str, Predicate]
    functions: dict[str, Function]
    variables: set[str]
    constants: set[str]
    action: str


@dataclass
class _Precondition:
    pos: set[LiftedAtom] = field(default_factory=set)
    neg: set[LiftedAtom] = field(default_factory=set)
    equal: set[tuple[str, str]] = field(default_factory=set)
    distinct: set[tuple[str, str]] = field(default_factory=set)


def _args(ctx: Ctx, node: SList, scope: _Scope) -> tuple[str, ...]:
    args = []
    for a in node.items[1:]:
        name = ctx.symbol(a, "an argument (a parameter or a constant)")
        if name.startswith("?") and name not in scope.variables:
            raise ctx.error(a, f"unknown parameter {name!r}")
        if not name.startswith("?") and name not in scope.constants:
            raise ctx.error(a, f"unknown constant {name!r}")
        args.append(name)
    return tuple(args)


def _atom(ctx: Ctx, node: SList, scope: _Scope) -> LiftedAtom:
    name = ctx.head(node, "a predicate name")
    pred = scope.predicates.get(name)
    if pred is None:
        if name in scope.functions:
            raise ctx.error(node, f"{name!r} is a numeric function, not a predicate")
        raise ctx.error(node, f"unknown predicate {name!r}")
    if pred.arity != len(node.items) - 1:
        raise ctx.error(node, f"predicate {name!r} takes {pred.arity} arguments, "
                              f"found {len(node.items) - 1}")
    return LiftedAtom(name, _args(ctx, node, scope))


def _term(ctx: Ctx, node: SExpr, scope: _Scope) -> LiftedAtom:
    lst = ctx.slist(node, "a function term such as (total-cost)")
    name = ctx.head(lst, "a function name")
    fn = scope.functions.get(name)
    if fn is None:
        raise ctx.error(lst, f"unknown function {name!r} (declare it in :functions)")
    if len(fn.parameters) != len(lst.items) - 1:
        raise ctx.error(lst, f"function {name!r} takes {len(fn.parameters)} arguments, "
                             f"found {len(lst.items) - 1}")
    return LiftedAtom(name, _args(ctx, lst, scope))


def _equality(ctx: Ctx, node: SList, scope: _Scope) -> tuple[str, str]:
    if len(node.items) != 3 or not all(isinstance(x, Token) for x in node.items[1:]):
        raise ctx.unsupported(node, "numeric condition '='",
                              f"in the precondition of {scope.action}")
    a, b = _args(ctx, node, scope)
    return a, b


def _precondition(ctx: Ctx, node: SExpr, scope: _Scope, into: _Precondition) -> None:
    where = f"the precondition of {scope.action}"
    lst = ctx.slist(node, where)
    if not lst.items:
        return
    head = ctx.head(lst, where)
    if head == "and":
        for child in lst.items[1:]:
            _precondition(ctx, child, scope, into)
    elif head == "not":
        if len(lst.items) != 2:
            raise ctx.error(lst, "expected exactly one atom inside (not ...)")
        inner = ctx.slist(lst.items[1], "an atom inside (not ...)")
        ihead = ctx.head(inner, "an atom inside (not ...)")
        if ihead == "=":
            into.distinct.add(_equality(ctx, inner, scope))
        elif ihead in _NOT_CONJUNCTIVE or ihead in ("and", "not"):
            raise ctx.unsupported(inner, f"'not' over '{ihead}'", f"in {where}")
        else:
            into.neg.add(_atom(ctx, inner, scope))
    elif head == "=":
        into.equal.add(_equality(ctx, lst, scope))
    elif head in _NOT_CONJUNCTIVE:
        raise ctx.unsupported(lst, _NOT_CONJUNCTIVE[head], f"in {where}")
    else:
        into.pos.add(_atom(ctx, lst, scope))


def _effect(ctx: Ctx, node: SExpr, scope: _Scope, numeric: list[NumericEffect] | None
            ) -> list[Outcome]:
    """Read an effect into a flat list of outcomes (numeric effects into ``numeric``).

    Deterministic literals apply in every branch; several independent
    ``probabilistic`` blocks combine as a product of their branches. ``numeric`` is
    None inside a probabilistic branch, where a cost would depend on the outcome.
    """
    add: set[LiftedAtom] = set()
    delete: set[LiftedAtom] = set()
    blocks: list[list[Outcome]] = []
    where = f"in the effect of {scope.action}"

    def visit(n: SExpr) -> None:
        lst = ctx.slist(n, "an effect")
        if not lst.items:
            return
        head = ctx.head(lst, "an effect")
        if head == "and":
            for child in lst.items[1:]:
                visit(child)
        elif head == "probabilistic":
            blocks.append(_probabilistic(ctx, lst, scope))
        elif head == "not":
            if len(lst.items) != 2:
                raise ctx.error(lst, "expected exactly one atom inside (not ...)")
            inner = ctx.slist(lst.items[1], "an atom inside (not ...)")
            ihead = ctx.head(inner, "an atom inside (not ...)")
            if ihead in _NOT_CONJUNCTIVE or ihead in ("and", "not"):
                raise ctx.unsupported(inner, f"'not' over '{ihead}'", where)
            delete.add(_atom(ctx, inner, scope))
        elif head == "increase":
            if numeric is None:
                raise ctx.unsupported(lst, "an action cost inside 'probabilistic'", where)
            if len(lst.items) != 3:
                raise ctx.error(lst, "expected (increase (FUNCTION ...) VALUE)")
            value: NumericValue
            vnode = lst.items[2]
            value = (ctx.number(vnode, "a cost") if isinstance(vnode, Token)
                     else _term(ctx, vnode, scope))
            numeric.append(NumericEffect(_term(ctx, lst.items[1], scope), value))
        elif head in _NUMERIC_FLUENT_EFFECTS:
            raise ctx.unsupported(lst, f"numeric fluent effect '{head}'", where)
        elif head in _NOT_CONJUNCTIVE or head == "=":
            raise ctx.unsupported(lst, _NOT_CONJUNCTIVE.get(head, "'='"), where)
        else:
            add.add(_atom(ctx, lst, scope))

    visit(node)
    outcomes = [Outcome(frozenset(add), frozenset(delete), 1.0)]
    for block in blocks:
        outcomes = [
            Outcome(o.add | b.add, o.delete | b.delete, o.probability * b.probability)
            for o, b in itertools.product(outcomes, block)
        ]
    return outcomes


def _probabilistic(ctx: Ctx, node: SList, scope: _Scope) -> list[Outcome]:
    items = node.items[1:]
    if not items or len(items) % 2:
        raise ctx.error(node, "expected (probabilistic p1 effect1 p2 effect2 ...)")
    branches: list[Outcome] = []
    total = 0.0
    for pnode, enode in pairs(items):
        ptext = ctx.symbol(pnode, "a probability")
        try:
            p = _probability_value(ptext)
            check_probability(p, "probabilistic effect")
        except (ValueError, ZeroDivisionError, ModelError):
            raise ctx.error(pnode, f"expected a probability in [0, 1], found {ptext!r}") from None
        total += p
        for sub in _effect(ctx, enode, scope, None):
            branches.append(Outcome(sub.add, sub.delete, p * sub.probability))
    if total > 1 + 1e-6:
        raise ctx.error(node, f"branch probabilities sum to {total:g} > 1")
    if total < 1 - 1e-9:
        branches.append(Outcome(frozenset(), frozenset(), 1.0 - total))
    return branches


def _probability_value(text: str) -> float:
    if "/" in text:
        num, den = text.split("/", 1)
        return float(num) / float(den)
    return float(text)


def _functions(ctx: Ctx, sec: SList) -> Iterator[Function]:
    """``(:functions (total-cost) - number (f ?a - t))``: untyped functions are numbers."""
    pending: list[SList] = []
    items = iter(sec.items[1:])
    for node in items:
        if isinstance(node, Token) and node.text == "-":
            tnode = next(items, None)
            if tnode is None or not pending:
                raise ctx.error(node, "expected (FUNCTION ...) - number in :functions")
            ftype = ctx.symbol(tnode, "a function type")
            if ftype != NUMBER_TYPE:
                raise ctx.unsupported(tnode, f"object fluents ('- {ftype}')", "in :functions")
            yield from (_function(ctx, f) for f in pending)
            pending = []
        else:
            pending.append(ctx.slist(node, "a function declaration such as (total-cost)"))
    yield from (_function(ctx, f) for f in pending)


def _function(ctx: Ctx, node: SList) -> Function:
    name = ctx.head(node, "a function name")
    return Function(name, tuple(typed_list(ctx, node.items[1:], f"function {name}")))


def parse_domain(text: str, source: str = "<string>", *,
                 max_pal_tuples: int = DEFAULT_MAX_PAL_TUPLES,
                 max_parameters: int = DEFAULT_MAX_PARAMETERS) -> Domain:
    """Read a domain; refuse one with an action of more than ``max_parameters``
    parameters or more than ``max_pal_tuples`` pal-tuples (clear error, no hang)."""
    ctx = Ctx(source)
    name, root = define(ctx, text, "domain")
    requirements: list[str] = []
    type_params: list[Parameter] = []
    constants: list[Parameter] = []
    predicates: dict[str, Predicate] = {}
    functions: dict[str, Function] = {}
    action_nodes: list[SList] = []
    for section in root.items[2:]:
        sec = ctx.slist(section, "a domain section such as (:predicates ...)")
        key = ctx.head(sec, "a section keyword")
        if key == ":requirements":
            requirements = [ctx.symbol(r, "a requirement") for r in sec.items[1:]]
        elif key == ":types":
            type_params = typed_list(ctx, sec.items[1:], ":types", allow_either=False)
        elif key == ":constants":
            constants = typed_list(ctx, sec.items[1:], ":constants", allow_either=False)
        elif key == ":predicates":
            for pnode in sec.items[1:]:
                plist = ctx.slist(pnode, "a predicate declaration")
                pname = ctx.head(plist, "a predicate name")
                if pname in predicates:
                    raise ctx.error(plist, f"predicate {pname!r} declared twice")
                params = typed_list(ctx, plist.items[1:], f"predicate {pname}")
                predicates[pname] = Predicate(pname, tuple(params))
        elif key == ":functions":
            for fn in _functions(ctx, sec):
                if fn.name in functions:
                    raise ctx.error(sec, f"function {fn.name!r} declared twice")
                functions[fn.name] = fn
        elif key == ":action":
            action_nodes.append(sec)
        elif key in _UNSUPPORTED_SECTIONS:
            raise ctx.unsupported(sec, _UNSUPPORTED_SECTIONS[key], "in a domain")
        else:
            raise ctx.error(sec, f"unknown domain section {key!r}")
    parents = {p.name: p.type for p in type_params if p.name != ROOT_TYPE}
    used = [*constants, *(q for pred in predicates.values() for q in pred.parameters),
            *(q for fn in functions.values() for q in fn.parameters)]
    declared = TypeHierarchy(parents).names
    for p in used:
        for t in type_members(p.type):
            if t not in declared:
                # Types used without being declared are common in hand-written files.
                parents.setdefault(t, ROOT_TYPE)
    types = TypeHierarchy(parents)
    try:
        for t in types.names:
            types.ancestors(t)
    except ModelError as e:
        raise PDDLError(str(e), source=source, line=root.line, column=root.column) from None
    const_names = {c.name for c in constants}
    actions = [_action(ctx, a, predicates, functions, const_names, max_parameters)
               for a in action_nodes]
    try:
        domain = Domain(name, tuple(predicates.values()), tuple(actions), types,
                        tuple(constants), tuple(requirements), tuple(functions.values()))
    except ModelError as e:
        raise PDDLError(str(e), source=source, line=root.line, column=root.column) from None
    try:
        count_pal_tuples(domain, max_pal_tuples)
    except TooManyPalTuples as e:
        culprit = next(n for n, a in zip(action_nodes, actions, strict=True)
                       if str(e).startswith(f"action {a.name} "))
        raise ctx.error(culprit, str(e)) from None
    return domain


def _action(ctx: Ctx, node: SList, preds: dict[str, Predicate],
            functions: dict[str, Function], constants: set[str], max_parameters: int) -> Action:
    if len(node.items) < 2:
        raise ctx.error(node, "expected an action name after :action")
    name = ctx.symbol(node.items[1], "an action name")
    fields: dict[str, SExpr] = {}
    rest = node.items[2:]
    if len(rest) % 2:
        raise ctx.error(node, f"action {name}: expected :keyword value pairs")
    for knode, vnode in pairs(rest):
        key = ctx.symbol(knode, "an action keyword")
        if key not in (":parameters", ":precondition", ":effect"):
            raise ctx.error(knode, f"action {name}: unknown keyword {key!r}")
        fields[key] = vnode
    params: list[Parameter] = []
    if ":parameters" in fields:
        plist = ctx.slist(fields[":parameters"], "a parameter list")
        params = typed_list(ctx, plist.items, f"action {name} parameters")
        if len(params) > max_parameters:
            raise ctx.error(plist, f"action {name} has {len(params)} parameters, more than "
                                   f"the {max_parameters} capwatch accepts")
        for p in params:
            if not p.name.startswith("?"):
                bad = next(x for x in plist.items if isinstance(x, Token) and x.text == p.name)
                raise ctx.error(bad, f"action {name}: parameter {p.name!r} must start with '?'")
    scope = _Scope(preds, functions, {p.name for p in params}, constants, name)
    pre = _Precondition()
    if ":precondition" in fields:
        _precondition(ctx, fields[":precondition"], scope, pre)
    outcomes = [Outcome()]
    numeric: list[NumericEffect] = []
    if ":effect" in fields:
        outcomes = _effect(ctx, fields[":effect"], scope, numeric)
    try:
        return Action(name, tuple(params), frozenset(pre.pos), frozenset(pre.neg),
                      tuple(outcomes), frozenset(pre.equal), frozenset(pre.distinct),
                      tuple(numeric))
    except ModelError as e:
        raise ctx.error(node, str(e)) from None
