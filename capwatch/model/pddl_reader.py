"""PDDL and PPDDL reader.

Lenient where real files are sloppy (keyword case, types used without ``:typing``,
``probabilistic`` nested in ``and``, pddlgym action literals kept as predicates) and
strict where a file is wrong: every error names file, line, column and what was
expected. Written here rather than on top of the ``pddl`` package because that
package rejects undeclared requirements and cannot read ``probabilistic`` effects.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

from capwatch.model.domain import (
    ROOT_TYPE,
    Action,
    Domain,
    GroundAtom,
    LiftedAtom,
    Outcome,
    Parameter,
    Predicate,
    Problem,
    TypeHierarchy,
    check_probability,
)
from capwatch.model.errors import ModelError, PDDLError
from capwatch.model.sexpr import SExpr, SList, Token, parse_sexprs


def _pairs(items: tuple[SExpr, ...]) -> Iterator[tuple[SExpr, SExpr]]:
    return zip(items[0::2], items[1::2], strict=True)


class _Ctx:
    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, node: SExpr, message: str) -> PDDLError:
        return PDDLError(message, source=self.source, line=node.line, column=node.column)

    def slist(self, node: SExpr, what: str) -> SList:
        if not isinstance(node, SList):
            raise self.error(node, f"expected {what} in parentheses, found {node.text!r}")
        return node

    def symbol(self, node: SExpr, what: str) -> str:
        if not isinstance(node, Token):
            raise self.error(node, f"expected {what}, found a parenthesised list")
        return node.text

    def head(self, node: SList, what: str) -> str:
        if not node.items:
            raise self.error(node, f"expected {what}, found '()'")
        return self.symbol(node.items[0], what)


def _typed_list(ctx: _Ctx, items: tuple[SExpr, ...], what: str) -> list[Parameter]:
    """``?a ?b - t ?c`` -> typed names; untyped names default to ``object``."""
    result: list[Parameter] = []
    pending: list[str] = []
    it = iter(items)
    for node in it:
        text = ctx.symbol(node, what)
        if text == "-":
            try:
                tnode = next(it)
            except StopIteration:
                raise ctx.error(node, f"expected a type after '-' in {what} list") from None
            if isinstance(tnode, SList):
                # (either t1 t2): PDDL's union type; we keep the first because our
                # pal-tuple typing needs one type per parameter. Rare in practice.
                if ctx.head(tnode, "'either'") != "either" or len(tnode.items) < 2:
                    raise ctx.error(tnode, "expected a type name or (either ...)")
                tname = ctx.symbol(tnode.items[1], "type name")
            else:
                tname = tnode.text
            if not pending:
                raise ctx.error(node, f"'-' with no names before it in {what} list")
            result.extend(Parameter(n, tname) for n in pending)
            pending = []
        else:
            pending.append(text)
    result.extend(Parameter(n, ROOT_TYPE) for n in pending)
    return result


def _atom(ctx: _Ctx, node: SList, predicates: dict[str, Predicate] | None,
          variables: set[str] | None, constants: set[str]) -> LiftedAtom:
    name = ctx.head(node, "a predicate name")
    args = tuple(ctx.symbol(a, "an argument") for a in node.items[1:])
    if predicates is not None:
        pred = predicates.get(name)
        if pred is None:
            raise ctx.error(node, f"unknown predicate {name!r}")
        if pred.arity != len(args):
            raise ctx.error(
                node, f"predicate {name!r} takes {pred.arity} arguments, found {len(args)}"
            )
    if variables is not None:
        for a, arg_node in zip(args, node.items[1:], strict=True):
            if a.startswith("?") and a not in variables:
                raise ctx.error(arg_node, f"unknown parameter {a!r}")
            if not a.startswith("?") and a not in constants:
                raise ctx.error(arg_node, f"unknown constant {a!r}")
    return LiftedAtom(name, args)


def _literals(ctx: _Ctx, node: SExpr, preds: dict[str, Predicate], variables: set[str],
              constants: set[str], what: str) -> Iterator[tuple[bool, SList, LiftedAtom]]:
    """Flatten a conjunction of literals into (positive, node, atom)."""
    lst = ctx.slist(node, what)
    if not lst.items:
        return
    head = ctx.head(lst, what)
    if head == "and":
        for child in lst.items[1:]:
            yield from _literals(ctx, child, preds, variables, constants, what)
    elif head == "not":
        if len(lst.items) != 2:
            raise ctx.error(lst, "expected exactly one atom inside (not ...)")
        inner = ctx.slist(lst.items[1], "an atom inside (not ...)")
        yield False, inner, _atom(ctx, inner, preds, variables, constants)
    elif head in ("or", "imply", "exists", "forall", "when", "probabilistic", "="):
        raise ctx.error(lst, f"'{head}' is not supported in {what}: capwatch models are "
                             "conjunctions of literals")
    else:
        yield True, lst, _atom(ctx, lst, preds, variables, constants)


def _effect(ctx: _Ctx, node: SExpr, preds: dict[str, Predicate], variables: set[str],
            constants: set[str]) -> list[Outcome]:
    """Read an effect into a flat list of outcomes.

    Deterministic literals apply in every branch; several independent
    ``probabilistic`` blocks combine as a product of their branches.
    """
    add: set[LiftedAtom] = set()
    delete: set[LiftedAtom] = set()
    blocks: list[list[Outcome]] = []

    def visit(n: SExpr) -> None:
        lst = ctx.slist(n, "an effect")
        if not lst.items:
            return
        head = ctx.head(lst, "an effect")
        if head == "and":
            for child in lst.items[1:]:
                visit(child)
        elif head == "probabilistic":
            blocks.append(_probabilistic(ctx, lst, preds, variables, constants))
        elif head == "not":
            if len(lst.items) != 2:
                raise ctx.error(lst, "expected exactly one atom inside (not ...)")
            inner = ctx.slist(lst.items[1], "an atom inside (not ...)")
            delete.add(_atom(ctx, inner, preds, variables, constants))
        elif head in ("when", "forall", "increase", "decrease", "assign", "oneof"):
            raise ctx.error(lst, f"'{head}' effects are not supported")
        else:
            add.add(_atom(ctx, lst, preds, variables, constants))

    visit(node)
    outcomes = [Outcome(frozenset(add), frozenset(delete), 1.0)]
    for block in blocks:
        outcomes = [
            Outcome(o.add | b.add, o.delete | b.delete, o.probability * b.probability)
            for o, b in itertools.product(outcomes, block)
        ]
    return outcomes


def _probabilistic(ctx: _Ctx, node: SList, preds: dict[str, Predicate], variables: set[str],
                   constants: set[str]) -> list[Outcome]:
    items = node.items[1:]
    if not items or len(items) % 2:
        raise ctx.error(node, "expected (probabilistic p1 effect1 p2 effect2 ...)")
    branches: list[Outcome] = []
    total = 0.0
    for pnode, enode in _pairs(items):
        ptext = ctx.symbol(pnode, "a probability")
        try:
            p = _probability_value(ptext)
            check_probability(p, "probabilistic effect")
        except (ValueError, ModelError):
            raise ctx.error(pnode, f"expected a probability in [0, 1], found {ptext!r}") from None
        total += p
        for sub in _effect(ctx, enode, preds, variables, constants):
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


def _define(ctx: _Ctx, text: str, kind: str) -> tuple[str, SList]:
    nodes = parse_sexprs(text, ctx.source)
    if not nodes:
        raise PDDLError(f"empty file: expected (define ({kind} ...) ...)", source=ctx.source,
                        line=1, column=1)
    root = ctx.slist(nodes[0], "(define ...)")
    if len(nodes) > 1:
        raise ctx.error(nodes[1], "unexpected text after the closing ')' of (define ...)")
    if ctx.head(root, "'define'") != "define" or len(root.items) < 2:
        raise ctx.error(root, "expected (define (" + kind + " NAME) ...)")
    header = ctx.slist(root.items[1], f"({kind} NAME)")
    if ctx.head(header, kind) != kind or len(header.items) != 2:
        raise ctx.error(header, f"expected ({kind} NAME)")
    return ctx.symbol(header.items[1], f"{kind} name"), root


def parse_domain(text: str, source: str = "<string>") -> Domain:
    ctx = _Ctx(source)
    name, root = _define(ctx, text, "domain")
    requirements: list[str] = []
    type_params: list[Parameter] = []
    constants: list[Parameter] = []
    predicates: dict[str, Predicate] = {}
    action_nodes: list[SList] = []
    for section in root.items[2:]:
        sec = ctx.slist(section, "a domain section such as (:predicates ...)")
        key = ctx.head(sec, "a section keyword")
        if key == ":requirements":
            requirements = [ctx.symbol(r, "a requirement") for r in sec.items[1:]]
        elif key == ":types":
            type_params = _typed_list(ctx, sec.items[1:], ":types")
        elif key == ":constants":
            constants = _typed_list(ctx, sec.items[1:], ":constants")
        elif key == ":predicates":
            for pnode in sec.items[1:]:
                plist = ctx.slist(pnode, "a predicate declaration")
                pname = ctx.head(plist, "a predicate name")
                if pname in predicates:
                    raise ctx.error(plist, f"predicate {pname!r} declared twice")
                params = _typed_list(ctx, plist.items[1:], f"predicate {pname}")
                predicates[pname] = Predicate(pname, tuple(params))
        elif key == ":action":
            action_nodes.append(sec)
        elif key in (":functions", ":derived", ":durative-action", ":constraints"):
            raise ctx.error(sec, f"'{key}' is not supported by capwatch")
        else:
            raise ctx.error(sec, f"unknown domain section {key!r}")
    parents = {p.name: p.type for p in type_params if p.name != ROOT_TYPE}
    types = TypeHierarchy(parents)
    declared = types.names
    for p in [*constants, *(q for pred in predicates.values() for q in pred.parameters)]:
        if p.type not in declared:
            # Types used without being declared are common in hand-written files.
            parents.setdefault(p.type, ROOT_TYPE)
    types = TypeHierarchy(parents)
    try:
        for t in types.names:
            types.ancestors(t)
    except ModelError as e:
        raise PDDLError(str(e), source=source, line=root.line, column=root.column) from None
    const_names = {c.name for c in constants}
    actions = [_action(ctx, a, predicates, const_names, types) for a in action_nodes]
    try:
        return Domain(name, tuple(predicates.values()), tuple(actions), types,
                      tuple(constants), tuple(requirements))
    except ModelError as e:
        raise PDDLError(str(e), source=source, line=root.line, column=root.column) from None


def _action(ctx: _Ctx, node: SList, preds: dict[str, Predicate], constants: set[str],
            types: TypeHierarchy) -> Action:
    if len(node.items) < 2:
        raise ctx.error(node, "expected an action name after :action")
    name = ctx.symbol(node.items[1], "an action name")
    fields: dict[str, SExpr] = {}
    rest = node.items[2:]
    if len(rest) % 2:
        raise ctx.error(node, f"action {name}: expected :keyword value pairs")
    for knode, vnode in _pairs(rest):
        key = ctx.symbol(knode, "an action keyword")
        if key not in (":parameters", ":precondition", ":effect"):
            raise ctx.error(knode, f"action {name}: unknown keyword {key!r}")
        fields[key] = vnode
    params: list[Parameter] = []
    if ":parameters" in fields:
        plist = ctx.slist(fields[":parameters"], "a parameter list")
        params = _typed_list(ctx, plist.items, f"action {name} parameters")
        for p, pnode in zip(params, plist.items, strict=False):
            if not p.name.startswith("?"):
                raise ctx.error(pnode, f"action {name}: parameter {p.name!r} must start with '?'")
    variables = {p.name for p in params}
    pre_pos: set[LiftedAtom] = set()
    pre_neg: set[LiftedAtom] = set()
    if ":precondition" in fields:
        for positive, _, atom in _literals(ctx, fields[":precondition"], preds, variables,
                                           constants, f"the precondition of {name}"):
            (pre_pos if positive else pre_neg).add(atom)
    outcomes = [Outcome()]
    if ":effect" in fields:
        outcomes = _effect(ctx, fields[":effect"], preds, variables, constants)
    try:
        return Action(name, tuple(params), frozenset(pre_pos), frozenset(pre_neg),
                      tuple(outcomes))
    except ModelError as e:
        raise ctx.error(node, str(e)) from None


def _ground_literals(ctx: _Ctx, node: SExpr, what: str) -> tuple[set[GroundAtom], set[GroundAtom]]:
    pos: set[GroundAtom] = set()
    neg: set[GroundAtom] = set()
    def visit(n: SExpr, positive: bool) -> None:
        lst = ctx.slist(n, what)
        if not lst.items:
            return
        head = ctx.head(lst, what)
        if head == "and" and positive:
            for child in lst.items[1:]:
                visit(child, True)
        elif head == "not" and positive:
            if len(lst.items) != 2:
                raise ctx.error(lst, "expected exactly one atom inside (not ...)")
            visit(lst.items[1], False)
        elif head in ("or", "imply", "exists", "forall", "and", "not"):
            raise ctx.error(lst, f"'{head}' is not supported in {what}")
        else:
            atom = (head, *(ctx.symbol(a, "an object name") for a in lst.items[1:]))
            (pos if positive else neg).add(atom)

    visit(node, True)
    return pos, neg


def parse_problem(text: str, source: str = "<string>") -> Problem:
    ctx = _Ctx(source)
    name, root = _define(ctx, text, "problem")
    domain_name = ""
    objects: list[Parameter] = []
    init: set[GroundAtom] = set()
    goal_pos: set[GroundAtom] = set()
    goal_neg: set[GroundAtom] = set()
    for section in root.items[2:]:
        sec = ctx.slist(section, "a problem section such as (:init ...)")
        key = ctx.head(sec, "a section keyword")
        if key == ":domain":
            if len(sec.items) != 2:
                raise ctx.error(sec, "expected (:domain NAME)")
            domain_name = ctx.symbol(sec.items[1], "a domain name")
        elif key == ":objects":
            objects = _typed_list(ctx, sec.items[1:], ":objects")
        elif key == ":init":
            for item in sec.items[1:]:
                pos, neg = _ground_literals(ctx, item, ":init")
                if neg:
                    raise ctx.error(item, "negative literals in :init are implied (closed world)")
                init |= pos
        elif key == ":goal":
            if len(sec.items) != 2:
                raise ctx.error(sec, "expected (:goal FORMULA)")
            goal_pos, goal_neg = _ground_literals(ctx, sec.items[1], ":goal")
        elif key in (":requirements", ":metric"):
            continue
        else:
            raise ctx.error(sec, f"unknown problem section {key!r}")
    return Problem(name, domain_name, tuple(objects), frozenset(init), frozenset(goal_pos),
                   frozenset(goal_neg))


def read_domain(path: str | Path) -> Domain:
    p = Path(path)
    return parse_domain(p.read_text(encoding="utf-8"), str(p))


def read_problem(path: str | Path) -> Problem:
    p = Path(path)
    return parse_problem(p.read_text(encoding="utf-8"), str(p))


def parse_plan(text: str, source: str = "<string>") -> list[tuple[str, ...]]:
    """Read a plan file: one ``(action obj ...)`` per line, ``;`` comments ignored."""
    ctx = _Ctx(source)
    plan: list[tuple[str, ...]] = []
    for node in parse_sexprs(text, source):
        lst = ctx.slist(node, "a plan step such as (pick ball1 rooma left)")
        plan.append(tuple(ctx.symbol(x, "an action or object name") for x in lst.items))
        if not plan[-1]:
            raise ctx.error(lst, "empty plan step")
    return plan
