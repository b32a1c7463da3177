"""PDDL and PPDDL reader: the file entry points, and the text parsers re-exported.

Lenient where real files are sloppy (keyword case, types used without ``:typing``,
``probabilistic`` nested in ``and``, pddlgym action literals kept as predicates) and
strict where a file is wrong: every error names file, line, column and what was
expected. Written here rather than on top of the ``pddl`` package because that
package rejects undeclared requirements and cannot read ``probabilistic`` effects.
The parsing itself lives in ``pddl_domain`` and ``pddl_problem``; this module is the
only place in the model core that opens a file.
"""

from __future__ import annotations

from pathlib import Path

from capwatch.model.domain import Domain, Problem
from capwatch.model.errors import PDDLError
from capwatch.model.pddl_domain import parse_domain
from capwatch.model.pddl_problem import parse_plan, parse_problem


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        # Point at the byte, as for a syntax error, so it can be found and fixed.
        before = data[:e.start]
        line = before.count(b"\n") + 1
        column = e.start - (before.rfind(b"\n") + 1) + 1
        raise PDDLError(f"not UTF-8 text: byte 0x{data[e.start]:02x} cannot be decoded "
                        "(save the file as UTF-8)", source=str(path), line=line,
                        column=column) from None


def read_domain(path: str | Path, **limits: int) -> Domain:
    """``limits``: ``max_pal_tuples``, ``max_parameters`` (see :func:`parse_domain`)."""
    p = Path(path)
    return parse_domain(_read_text(p), str(p), **limits)


def read_problem(path: str | Path) -> Problem:
    p = Path(path)
    return parse_problem(_read_text(p), str(p))


def read_plan(path: str | Path) -> list[tuple[str, ...]]:
    p = Path(path)
    return parse_plan(_read_text(p), str(p))


__all__ = ["parse_domain", "parse_plan", "parse_problem", "read_domain", "read_plan",
           "read_problem"]
