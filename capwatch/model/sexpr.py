"""S-expression reader with source positions, the lexical layer of the PDDL reader."""

from __future__ import annotations

from dataclasses import dataclass

from capwatch.model.errors import PDDLError


@dataclass(frozen=True, slots=True)
class Token:
    """An atom of the s-expression: a lower-cased symbol with its position."""

    text: str
    line: int
    column: int


@dataclass(frozen=True, slots=True)
class SList:
    """A parenthesised list with the position of its opening parenthesis."""

    items: tuple[SExpr, ...]
    line: int
    column: int


SExpr = Token | SList

DEFAULT_MAX_DEPTH = 100
"""Real PDDL nests a dozen levels at most; the readers above this layer recurse on the
tree, so a hostile file nested thousands deep is refused here, with its position."""


def parse_sexprs(text: str, source: str = "<string>", *,
                 max_depth: int = DEFAULT_MAX_DEPTH) -> list[SExpr]:
    """Read every top-level s-expression of ``text`` (iteratively).

    Symbols are lower-cased because PDDL is case-insensitive and real files mix
    ``:INIT`` and ``:init``; ``;`` starts a comment to the end of the line. Nesting
    deeper than ``max_depth`` parentheses is a :class:`PDDLError`.
    """
    stack: list[tuple[list[SExpr], int, int]] = []
    top: list[SExpr] = []
    line, col = 1, 1
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line, col, i = line + 1, 1, i + 1
            continue
        if ch in " \t\r\f\v":
            col, i = col + 1, i + 1
            continue
        if ch == ";":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == "(":
            if len(stack) >= max_depth:
                raise PDDLError(f"parentheses nested deeper than {max_depth} levels",
                                source=source, line=line, column=col)
            stack.append(([], line, col))
            col, i = col + 1, i + 1
            continue
        if ch == ")":
            if not stack:
                raise PDDLError("unbalanced ')'", source=source, line=line, column=col)
            items, l0, c0 = stack.pop()
            node = SList(tuple(items), l0, c0)
            (stack[-1][0] if stack else top).append(node)
            col, i = col + 1, i + 1
            continue
        start, c0 = i, col
        while i < n and text[i] not in " \t\r\n\f\v();":
            i += 1
        col += i - start
        tok = Token(text[start:i].lower(), line, c0)
        (stack[-1][0] if stack else top).append(tok)
    if stack:
        _, l0, c0 = stack[-1]
        raise PDDLError(
            "unclosed '(' (missing ')' before end of file)", source=source, line=l0, column=c0
        )
    return top


def to_text(node: SExpr) -> str:
    """One-line PDDL text of a node, e.g. ``(total-cost)``; iterative like the reader."""
    out: list[str] = []
    todo: list[SExpr | str] = [node]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, Token):
            out.append(item.text)
        else:
            todo.append(")")
            for i, child in enumerate(reversed(item.items)):
                todo.append(child)
                if i < len(item.items) - 1:
                    todo.append(" ")
            todo.append("(")
    return "".join(out)
