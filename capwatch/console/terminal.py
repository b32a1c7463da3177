"""Text for a terminal: what the command line prints for people, one line at a time.

Apart from the tables (``capwatch.console.text``) so that a command that prints a line or
two imports nothing else of the console."""

from __future__ import annotations

import sys
from typing import TextIO

from capwatch.contracts.wire_text import visible

_LINE_LAYOUT = str.maketrans({"\t": "\\u0009", "\n": "\\u000a", "\r": "\\u000d"})


def line(text: str) -> str:
    """``text`` as (part of) one line of a terminal: each character the wire refuses written
    as its escape (``visible``), and a tab, line feed or carriage return too, which
    ``visible`` keeps for a page's layout. Ids and names stored before the wire refused such
    characters (session 20), an operator's reason, an agent's error message in an alert's
    summary: shown raw, a bidi override reordered the rest of the line, a zero-width space
    made two agents look alike, a carriage return wrote over the line's start and a line
    feed began what read as another line (another alert in ``alerts tail``)."""
    shown = visible(text)
    if shown.isprintable():
        return shown
    return shown.translate(_LINE_LAYOUT)


def echo(*lines: str, file: TextIO | None = None, flush: bool = False) -> None:
    """Print each of ``lines`` as one line for a person, through :func:`line`: the one way
    the command line writes text that is not ``--json`` or an exported file (data, kept as
    stored). A text of several lines is passed as its lines (``text.split("\\n")``), never
    whole, as a line feed inside a line is escaped."""
    out = sys.stdout if file is None else file
    for text in lines:
        print(line(text), file=out, flush=flush)
