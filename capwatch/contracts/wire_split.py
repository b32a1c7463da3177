"""The fast decoder's splitter: a transition event's two state texts cut out of its
message in one pass, so that msgspec parses only the rest (docs/performance.md, "The hot
path").

:func:`reference` is the contract, in Python; :data:`SPLIT` is the same function in C
(``_wire_split.c``, built by ``make compiled`` with the mypyc modules), or None when the
hot path runs pure Python (``COMPILE=0``, ``CAPWATCH_PURE_PYTHON=1``, a stale or missing
build: all or none, as capwatch/native.py decides), and the decoder then takes its other
way, complete on its own (msgspec reads the states' texts as ``Raw`` and the key guard of
wire_keys counts the keys). ``tests/contracts/test_wire_split.py`` checks that both agree.

``split(raw)`` returns ``(envelope, state, next_state, keys)`` or None. It returns a tuple only
when ``raw``, read the way a JSON parser reads a valid message (a backslash in a string
taking the byte after it, as JSON's escapes do), is one object whose members' keys hold
no backslash and are all different (compared as bytes: without escapes, equal bytes are
equal strings), none of them ``"states"`` (a trace's: no transition event has it, and
the trace splitter walks the message next; the walk stops at it, session 16), and whose
``"state"`` and ``"next_state"`` members' values are arrays; ``state`` and
``next_state`` are then those arrays' texts and ``envelope`` is ``raw`` with each of
them replaced by ``[]``; ``keys`` is the number of members. (Until session 12 a
backslash anywhere, an escaped name or a ``\\u`` in any string, left the message uncut.)

``split_trace(raw)`` (:func:`reference_trace`, ``SPLIT_TRACE`` in C) does the same for a
``trace`` event's ``"states"``: ``(envelope, states, keys)``, each state's text cut out,
the envelope holding ``[]`` for the array of them. The decoder calls it when ``split``
returned None (a second walk of a trace's message, SIMD over its arrays: ~1% of a
trace's decode, where msgspec skipping the states' texts for their ``Raw`` members and
the key guard's colon count over them took ~15% on an outside producer's fleet,
session 15).

:func:`canonical` (``CANONICAL`` in C) gives a state's text with its atoms sorted when
they are out of order; the decoder takes it for a text it has not read before.

It validates nothing, and need not: the decoder parses the envelope with msgspec (which
refuses invalid JSON and unknown fields) and reads each state's text as before (a text
known valid, known pieces, or msgspec's parse). If the envelope and both texts are valid,
so is the message, with the same members: each text starts with ``[`` and ends with
``]``, so putting it where the envelope has ``[]`` cannot join it to its neighbours, and
the envelope's parse reads that ``[]`` as the member's value, since up to it the
envelope's bytes are the message's and a parser that accepts them reads them as this
function did. With no key twice in the envelope, msgspec keeps no member over another; the decoder
compares ``keys`` with the fields msgspec decoded, since msgspec takes a struct's tag
(``"type"``) as given when it decodes that struct alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

Split = Callable[[bytes], tuple[bytes, bytes, bytes, int] | None]
SplitTrace = Callable[[bytes], tuple[bytes, list[bytes], int] | None]

_WS = b" \t\n\r"
_SCALAR_END = b",}] \t\n\r"


def _skip_ws(raw: bytes, i: int) -> int:
    while i < len(raw) and raw[i] in _WS:
        i += 1
    return i


def _skip_string(raw: bytes, i: int, end: int) -> int:
    """One past the quote closing the string opening at ``i``, a backslash taking the
    byte after it (as JSON's escapes do); -1 if the text ends first."""
    j = i + 1
    while j < end:
        c = raw[j]
        if c == 34:  # "
            return j + 1
        if c == 92:  # backslash
            if end - j < 2:
                return -1
            j += 1
        j += 1
    return -1


def _skip_array(raw: bytes, i: int) -> int:
    """One past the ``]`` closing the array opening at ``i``, brackets inside strings not
    counted; -1 if none."""
    depth = 0
    inside = False
    j = i
    while j < len(raw):
        c = raw[j]
        if inside:
            if c == 34:  # "
                inside = False
            elif c == 92:  # backslash
                if len(raw) - j < 2:
                    return -1
                j += 1
        elif c == 34:
            inside = True
        elif c == 91:  # [
            depth += 1
        elif c == 93:  # ]
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return -1


def canonical(text: bytes) -> bytes:
    """The canonical form of a state's text (``text``: an array, as :func:`_skip_array`
    delimits one): when it is an array of flat arrays whose bytes outside strings are
    only brackets, commas and whitespace, with one comma between atoms, and those atoms'
    texts are out of order (as bytes), its atoms each without whitespace outside its
    strings but a space after each comma, sorted as bytes, joined by ``", "`` in ``[``
    and ``]``; else ``text`` as it is (sorted, or not such an array).

    The decoder reads the same atoms from it, as many, and refuses it exactly when it
    refuses ``text``: the tokens outside strings are only punctuation and strings, which
    whitespace neither joins nor splits, and an array of values is valid in any order of
    its values (each atom's tokens are read from the same state, after a ``[`` or a
    comma). So a producer's texts of one set of atoms in ever other orders (a hash set's
    iteration order) are one text, which the decoder's memo and known texts recognise;
    a text already in order, the common case, is only checked (~0.3 us for 46 atoms in
    C), not rebuilt."""
    if text[:1] != b"[" or _skip_array(text, 0) != len(text):
        return text
    end = len(text) - 1  # the closing bracket
    atoms: list[bytes] = []
    written: list[bytes] = []
    i = _skip_ws(text, 1)
    while i < end:
        if text[i] != 91:  # [
            return text
        start = i
        out = bytearray(b"[")
        i += 1
        while True:
            i = _skip_ws(text, i)
            if i >= end:
                return text
            c = text[i]
            if c == 34:  # "
                j = _skip_string(text, i, end)
                if j < 0:
                    return text
                out += text[i:j]
                i = j
            elif c == 44:  # ,
                out += b", "
                i += 1
            elif c == 93:  # ]
                out += b"]"
                i += 1
                break
            else:
                return text
        written.append(text[start:i])
        atoms.append(bytes(out))
        i = _skip_ws(text, i)
        if i >= end:
            break
        if text[i] != 44:
            return text
        i = _skip_ws(text, i + 1)
        if i >= end:
            return text
    if written == sorted(written):
        return text
    return b"[" + b", ".join(sorted(atoms)) + b"]"


def _members(raw: bytes, cut: tuple[bytes, ...], stop: bytes | None = None
             ) -> tuple[dict[bytes, tuple[int, int]], int] | None:
    """The spans of the values of the members named in ``cut`` (each an array) and the
    number of members, when ``raw`` is one object whose keys hold no backslash and are
    all different (the splitters' walk) and none of them is ``stop``; None otherwise."""
    keys: set[bytes] = set()
    spans: dict[bytes, tuple[int, int]] = {}
    i = _skip_ws(raw, 0)
    if raw[i:i + 1] != b"{":
        return None
    i = _skip_ws(raw, i + 1)
    while True:
        if raw[i:i + 1] != b'"':
            return None
        k_end = raw.find(b'"', i + 1)
        if k_end < 0 or len(keys) == 32:
            return None
        key = raw[i + 1:k_end]
        if b"\\" in key:
            return None  # its bytes are not its string: compared nowhere
        if key in keys:
            return None
        keys.add(key)
        if key == stop:
            return None
        i = _skip_ws(raw, k_end + 1)
        if raw[i:i + 1] != b":":
            return None
        i = _skip_ws(raw, i + 1)
        if i == len(raw):
            return None
        start = i
        first = raw[i]
        if first == 34:
            i = _skip_string(raw, i, len(raw))
            if i < 0:
                return None
        elif first == 91:
            i = _skip_array(raw, i)
            if i < 0:
                return None
        elif first == 123:  # {
            return None
        else:
            while i < len(raw) and raw[i] not in _SCALAR_END:
                i += 1
        if key in cut:
            if first != 91:
                return None
            spans[key] = (start, i)
        i = _skip_ws(raw, i)
        if i == len(raw):
            return None
        if raw[i] == 125:  # }
            break
        if raw[i] != 44:  # ,
            return None
        i = _skip_ws(raw, i + 1)
    if _skip_ws(raw, i + 1) != len(raw):
        return None
    return spans, len(keys)


def reference(raw: bytes) -> tuple[bytes, bytes, bytes, int] | None:
    """The splitter, in Python (the contract of ``_wire_split.split``; slow)."""
    walked = _members(raw, (b"state", b"next_state"), b"states")
    if walked is None or len(walked[0]) != 2:
        return None
    spans, keys = walked
    (a, b), (c, d) = sorted(spans.values())
    envelope = raw[:a] + b"[]" + raw[b:c] + b"[]" + raw[d:]
    state, next_state = spans[b"state"], spans[b"next_state"]
    return envelope, raw[state[0]:state[1]], raw[next_state[0]:next_state[1]], keys


def reference_trace(raw: bytes) -> tuple[bytes, list[bytes], int] | None:
    """The trace splitter, in Python (the contract of ``_wire_split.split_trace``; slow).

    ``(envelope, states, keys)`` when ``raw`` is one object whose keys hold no backslash
    and are all different and whose ``"states"`` member's value is an array of arrays:
    ``states`` the texts of those arrays in order, ``envelope`` ``raw`` with the value
    replaced by ``[]``, ``keys`` the number of members; else None. What holds for
    :func:`reference` holds here: if the envelope and every state's text are valid JSON,
    so is the message, with the same members (each text starts with ``[`` and ends with
    ``]``, and the texts are joined by commas and whitespace only, as the array was)."""
    walked = _members(raw, (b"states",))
    if walked is None or b"states" not in walked[0]:
        return None
    (a, b), keys = walked[0][b"states"], walked[1]
    last = b - 1  # the array's closing bracket
    states: list[bytes] = []
    i = _skip_ws(raw, a + 1)
    while i < last:
        if raw[i] != 91:  # [
            return None
        j = _skip_array(raw, i)  # inside the array: it closes before the array does
        states.append(raw[i:j])
        i = _skip_ws(raw, j)
        if i == last:
            break
        if raw[i] != 44:  # ,
            return None
        i = _skip_ws(raw, i + 1)
        if i == last:
            return None  # a comma before the closing bracket
    return raw[:a] + b"[]" + raw[b:], states, keys


PieceIds = Callable[[bytes, Any], list[int] | None]
"""``piece_ids(text, pieces)``: ``pieces`` a dict (piece -> id) or an :class:`Index`."""
Flips = Callable[[list[int], list[int], list[Any]], list[Any]]
Step = Callable[[frozenset[Any], list[int], list[int], list[Any]],
                tuple[list[Any], frozenset[Any]]]


class Index(Protocol):
    """``_wire_split.PieceIndex``: wire_atoms.PIECES' current table mirrored for
    ``piece_ids`` (a subset of it, each piece with its id)."""

    def add(self, piece: bytes, known: int, /) -> bool: ...
    def get(self, piece: bytes, /) -> int | None: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...


def in_order(text: bytes) -> bool:
    """Whether ``text`` is its own canonical form (:func:`canonical` returns the very
    object): the contract of ``IN_ORDER``, which decides it by :func:`canonical`'s check
    alone where that decides, without building the canonical text."""
    return canonical(text) is text


def _native() -> tuple[Split, SplitTrace, Callable[[bytes], bytes], PieceIds, Flips,
                       Callable[[], Index], Step, Callable[[bytes], bool]] | None:
    from capwatch import native

    if not native.compiled():
        return None
    from capwatch.contracts._wire_split import (
        PieceIndex,
        flips,
        in_order,
        piece_ids,
        split,
        split_trace,
        step,
    )
    from capwatch.contracts._wire_split import canonical as native_canonical

    return split, split_trace, native_canonical, piece_ids, flips, PieceIndex, step, in_order


_BUILT = _native()
SPLIT: Split | None = None if _BUILT is None else _BUILT[0]
"""The C splitter when the hot path runs compiled, else None."""
SPLIT_TRACE: SplitTrace | None = None if _BUILT is None else _BUILT[1]
"""The C trace splitter (:func:`reference_trace`) when the hot path runs compiled, else
None."""
CANONICAL: Callable[[bytes], bytes] | None = None if _BUILT is None else _BUILT[2]
""":func:`canonical` in C when the hot path runs compiled (the text itself, the very
object, when it is its own canonical form), else None: pure Python does without (the
Python function costs more than the states it would save reading)."""
PIECE_IDS: PieceIds | None = None if _BUILT is None else _BUILT[3]
"""wire_atoms.reference_ids over one table of pieces, in C (``piece_ids``), when the hot
path runs compiled, else None."""
FLIPS: Flips | None = None if _BUILT is None else _BUILT[4]
"""wire_fast.reference_flips in C (``flips``: two state reads' ids lists diffed in a
table of its own, no set built), when the hot path runs compiled, else None."""
PIECE_INDEX: Callable[[], Index] | None = None if _BUILT is None else _BUILT[5]
"""``_wire_split.PieceIndex`` (a table of pieces hashed and compared where they lie in a
state's text) when the hot path runs compiled, else None."""
STEP: Step | None = None if _BUILT is None else _BUILT[6]
"""wire_fast.reference_step in C (``step``: the diff as ``flips`` gives it, and the next
state's set made from the state's by the diff's two halves), when the hot path runs
compiled, else None."""
IN_ORDER: Callable[[bytes], bool] | None = None if _BUILT is None else _BUILT[7]
""":func:`in_order` in C (``in_order``: canonical's check without its build) when the hot
path runs compiled, else None (as :data:`CANONICAL`)."""
