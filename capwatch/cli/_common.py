"""What the command modules share: reading model files, and failing with one clear line.

A command that cannot read its input exits with ``capwatch: <what went wrong>`` (status
1 through :class:`SystemExit`) instead of a traceback: the file name and, for a parse
error, the line and column come from the reader's :class:`ModelError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capwatch.console.terminal import line
from capwatch.model.domain import Domain, GroundAction, Problem
from capwatch.model.errors import ModelError
from capwatch.model.pddl_reader import read_domain, read_plan, read_problem


def fail(message: str) -> SystemExit:
    # Python prints the message itself: escaped here as every other line (a name read
    # from a model file is in a parse error's message).
    return SystemExit(f"capwatch: {line(message)}")


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Turn the errors of reading and parsing ``path`` into :func:`fail`."""
    try:
        yield
    except OSError as e:
        raise fail(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise fail(f"cannot read {path}: not UTF-8 text") from None
    except ModelError as e:
        raise fail(str(e)) from None


def load_domain(path: str | Path) -> Domain:
    with reading(path):
        return read_domain(path)


def load_problem(path: str | Path) -> Problem:
    with reading(path):
        return read_problem(path)


def load_plan(path: str | Path) -> list[GroundAction]:
    with reading(path):
        return read_plan(path)
