"""PDDL problem files and plan files."""

from __future__ import annotations

from capwatch.model.domain import GroundAtom, Parameter, Problem
from capwatch.model.pddl_syntax import Ctx, define, typed_list
from capwatch.model.sexpr import SExpr, SList, parse_sexprs, to_text

_NOT_CONJUNCTIVE = ("or", "imply", "exists", "forall", "when", "preference")


def _ground_atom(ctx: Ctx, node: SList) -> GroundAtom:
    return tuple(ctx.symbol(a, "an object name") for a in node.items)


def _ground_literals(ctx: Ctx, node: SExpr, what: str) -> tuple[set[GroundAtom], set[GroundAtom]]:
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
        elif head in (*_NOT_CONJUNCTIVE, "and", "not", "="):
            raise ctx.unsupported(lst, f"'{head}'", f"in {what}")
        else:
            (pos if positive else neg).add(_ground_atom(ctx, lst))

    visit(node, True)
    return pos, neg


def _numeric_fact(ctx: Ctx, node: SList) -> tuple[GroundAtom, float]:
    """``(= (road-length a b) 3)`` in :init."""
    if len(node.items) != 3:
        raise ctx.error(node, "expected (= (FUNCTION obj ...) NUMBER)")
    term = ctx.slist(node.items[1], "a function term such as (total-cost)")
    if not term.items:
        raise ctx.error(term, "expected a function name, found '()'")
    return _ground_atom(ctx, term), ctx.number(node.items[2], "the function's value")


def parse_problem(text: str, source: str = "<string>") -> Problem:
    ctx = Ctx(source)
    name, root = define(ctx, text, "problem")
    domain_name = ""
    objects: list[Parameter] = []
    init: set[GroundAtom] = set()
    numeric: dict[GroundAtom, float] = {}
    goal_pos: set[GroundAtom] = set()
    goal_neg: set[GroundAtom] = set()
    metric = ""
    for section in root.items[2:]:
        sec = ctx.slist(section, "a problem section such as (:init ...)")
        key = ctx.head(sec, "a section keyword")
        if key == ":domain":
            if len(sec.items) != 2:
                raise ctx.error(sec, "expected (:domain NAME)")
            domain_name = ctx.symbol(sec.items[1], "a domain name")
        elif key == ":objects":
            objects = typed_list(ctx, sec.items[1:], ":objects", allow_either=False)
        elif key == ":init":
            for item in sec.items[1:]:
                lst = ctx.slist(item, "an :init fact")
                if lst.items and ctx.head(lst, "an :init fact") == "=":
                    term, value = _numeric_fact(ctx, lst)
                    if term in numeric:
                        raise ctx.error(lst, f"({' '.join(term)}) is given a value twice")
                    numeric[term] = value
                    continue
                pos, neg = _ground_literals(ctx, item, ":init")
                if neg:
                    raise ctx.error(item, "negative literals in :init are implied (closed world)")
                init |= pos
        elif key == ":goal":
            if len(sec.items) != 2:
                raise ctx.error(sec, "expected (:goal FORMULA)")
            goal_pos, goal_neg = _ground_literals(ctx, sec.items[1], ":goal")
        elif key == ":metric":
            if len(sec.items) != 3 or ctx.symbol(sec.items[1], "minimize or maximize") not in (
                    "minimize", "maximize"):
                raise ctx.error(sec, "expected (:metric minimize|maximize EXPRESSION)")
            metric = " ".join(to_text(x) for x in sec.items[1:])
        elif key == ":requirements":
            continue
        elif key == ":constraints":
            raise ctx.unsupported(sec, "state trajectory constraints (:constraints)",
                                  "in a problem")
        else:
            raise ctx.error(sec, f"unknown problem section {key!r}")
    return Problem(name, domain_name, tuple(objects), frozenset(init), frozenset(goal_pos),
                   frozenset(goal_neg), tuple(numeric.items()), metric)


def parse_plan(text: str, source: str = "<string>") -> list[tuple[str, ...]]:
    """Read a plan file: one ``(action obj ...)`` per line, ``;`` comments ignored."""
    ctx = Ctx(source)
    plan: list[tuple[str, ...]] = []
    for node in parse_sexprs(text, source):
        lst = ctx.slist(node, "a plan step such as (pick ball1 rooma left)")
        plan.append(tuple(ctx.symbol(x, "an action or object name") for x in lst.items))
        if not plan[-1]:
            raise ctx.error(lst, "empty plan step")
    return plan
