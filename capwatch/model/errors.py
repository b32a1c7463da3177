"""Errors raised by the model core."""

from __future__ import annotations


class ModelError(ValueError):
    """A model is inconsistent with itself (unknown predicate, wrong arity, ...)."""


class PDDLError(ModelError):
    """A PDDL/PPDDL text could not be read.

    Carries the file, line and column so an operator can fix the file without guessing.
    """

    def __init__(self, message: str, *, source: str = "<string>", line: int = 0, column: int = 0):
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        super().__init__(f"{source}:{line}:{column}: {message}")
