"""Which characters an id or a name on the wire may hold (docs/wire-formats.md, "Text").

One rule for every family and episode id and every predicate, action and object name, in
events and in the agent protocol's answers: no code point of Unicode general category Cc
(controls), Cf (format: bidi overrides, zero-width spaces, BOM), Co (private use), Cs
(surrogates), Cn (unassigned) or Zl/Zp (line and paragraph separators). Each of these is
invisible, or shown differently by each terminal and browser, so two names that differ
by one of them look the same in the console and in an alert's evidence, and a bidi
override makes evidence read otherwise than it is ("Trojan Source", CVE-2021-42574).

Both decoders (the pydantic schema and the fast one) call :func:`fault`, so they accept
and refuse the same texts, with the Unicode tables of the one Python that runs them.
Text is not NFC-normalised: a name is kept as sent (normalising would merge names a
producer keeps apart, and silently, where refusing says why); a decomposed accent is
allowed (its combining mark is category Mn).

A name (a predicate, action or object) has a shape besides: 1 to :data:`MAX_NAME`
characters, none of them whitespace or a parenthesis (:data:`NAME_PATTERN`, what the
schema's ``Name`` and the fast decoder match). :func:`name_fault` checks both, for code
that checks a name outside the decoders (the agent-side client's vocabulary).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

REFUSED: Final = frozenset({"Cc", "Cf", "Co", "Cs", "Cn", "Zl", "Zp"})
MAX_NAME: Final = 256
_NAME_CHAR = r"[^\s()\x00-\x1f]"
NAME_PATTERN: Final = rf"^{_NAME_CHAR}+$"
"""A name's characters (with :data:`MAX_NAME`, its shape), as a pydantic pattern."""
NAME: Final = re.compile(rf"{_NAME_CHAR}{{1,{MAX_NAME}}}\Z")
""":data:`NAME_PATTERN` and the length in one compiled expression, anchored at the very
end (``$`` would also match before a final newline)."""


def fault(text: str) -> str | None:
    """None when every character of ``text`` is allowed, else a reason naming the first
    one that is not. Printable ASCII is answered by two string methods in C, without
    a loop over the characters (the hot path's ids and names are ASCII)."""
    if text.isascii() and text.isprintable():
        return None
    for i, char in enumerate(text):
        category = unicodedata.category(char)
        if category in REFUSED:
            name = unicodedata.name(char, "")
            described = f"U+{ord(char):04X}" + (f" {name}" if name else "")
            return (f"character {i} is {described} (category {category}), not allowed"
                    " in an id or name (controls, format, private-use, surrogate,"
                    " unassigned and line/paragraph separators are refused)")
    return None


def allowed(value: object) -> object:
    """A pydantic before-validator: ``value`` itself, or ValueError with :func:`fault`'s
    reason (pydantic adds the field's location). Before, not after, the field's pattern:
    the reason then names the code point (U+2029 is also whitespace, which a name's
    pattern refuses with a message naming no character). Not a string: left to the type."""
    if isinstance(value, str):
        reason = fault(value)
        if reason is not None:
            raise ValueError(reason)
    return value


def name_fault(text: str) -> str | None:
    """None when ``text`` is a valid name on the wire, else why not: :func:`fault`'s
    reason first, as the schema's ``Name`` checks it before its pattern."""
    reason = fault(text)
    if reason is not None or NAME.match(text) is not None:
        return reason
    if not text:
        return "a name is empty"
    if len(text) > MAX_NAME:
        return f"a name is at most {MAX_NAME} characters, not {len(text)}"
    i, char = next((i, c) for i, c in enumerate(text) if c.isspace() or c in "()")
    return (f"character {i} is U+{ord(char):04X} {unicodedata.name(char, '')}".rstrip()
            + ", not allowed in a name (whitespace and parentheses are refused)")


_LAYOUT: Final = frozenset("\t\n\r")
"""Controls a page or a terminal lays out as intended (a PDDL text's lines)."""
_ASCII_REFUSED: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def visible(text: str) -> str:
    """``text`` for a person to read: each code point :func:`fault` refuses (but tab, line
    feed and carriage return) written as its escape, ``\\u202e`` for U+202E. The rule
    keeps such characters off the wire, but names stored before it (session 20) and texts
    that are not names (an agent's error message, a reason) may hold them, and shown raw a
    bidi override reorders the rest of a table row or a terminal line, and a zero-width
    space makes two names look alike. A literal backslash is left as it is, so the text
    ``\\u202e`` (six characters) reads like the escape: what matters is that the escape
    is seen."""
    if text.isascii():
        if text.isprintable():
            return text
        return _ASCII_REFUSED.sub(lambda m: _escape(m.group()), text)
    if fault(text) is None:
        return text
    return "".join(_escape(c) if c not in _LAYOUT and unicodedata.category(c) in REFUSED
                   else c for c in text)
