"""What the PDDL domain, problem and plan readers share: error positions, typed lists,
the ``(define ...)`` header."""

from __future__ import annotations

from collections.abc import Iterator

from capwatch.model.domain import ROOT_TYPE, Parameter, either_type
from capwatch.model.errors import PDDLError
from capwatch.model.sexpr import SExpr, SList, Token, parse_sexprs


def pairs(items: tuple[SExpr, ...]) -> Iterator[tuple[SExpr, SExpr]]:
    return zip(items[0::2], items[1::2], strict=True)


class Ctx:
    """The file being read, so every error names file, line and column."""

    def __init__(self, source: str) -> None:
        self.source = source

    def error(self, node: SExpr, message: str) -> PDDLError:
        return PDDLError(message, source=self.source, line=node.line, column=node.column)

    def unsupported(self, node: SExpr, construct: str, where: str) -> PDDLError:
        return self.error(node, f"{construct} is not supported {where}: capwatch models "
                                "conjunctions of literals (with action costs and equality)")

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

    def number(self, node: SExpr, what: str) -> float:
        text = self.symbol(node, what)
        try:
            value = float(text)
        except ValueError:
            raise self.error(node, f"expected {what} (a number), found {text!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise self.error(node, f"expected {what} (a finite number), found {text!r}")
        return value


def typed_list(ctx: Ctx, items: tuple[SExpr, ...], what: str, *,
               allow_either: bool = True) -> list[Parameter]:
    """``?a ?b - t ?c`` -> typed names; untyped names default to ``object``.

    ``(either t1 t2)`` becomes one union type name (see ``either_type``); it makes sense
    for parameters, not for declaring what an object or a type is.
    """
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
                if ctx.head(tnode, "'either'") != "either" or len(tnode.items) < 2:
                    raise ctx.error(tnode, "expected a type name or (either ...)")
                if not allow_either:
                    raise ctx.unsupported(tnode, "'either'", f"in {what}")
                tname = either_type(ctx.symbol(t, "type name") for t in tnode.items[1:])
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


def define(ctx: Ctx, text: str, kind: str) -> tuple[str, SList]:
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
