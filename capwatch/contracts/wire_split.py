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
when ``raw`` holds no backslash and, read the way a JSON parser reads a valid message, is
one object whose members' keys are all different (compared as bytes: without escapes,
equal bytes are equal strings) and whose ``"state"`` and ``"next_state"`` members' values
are arrays; ``state`` and ``next_state`` are then those arrays' texts and ``envelope`` is
``raw`` with each of them replaced by ``[]``; ``keys`` is the number of members.

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

Split = Callable[[bytes], tuple[bytes, bytes, bytes, int] | None]

_WS = b" \t\n\r"
_SCALAR_END = b",}] \t\n\r"


def _skip_ws(raw: bytes, i: int) -> int:
    while i < len(raw) and raw[i] in _WS:
        i += 1
    return i


def _skip_array(raw: bytes, i: int) -> int:
    """One past the ``]`` closing the array opening at ``i``, brackets inside strings not
    counted (a string ends at the next quote: there is no backslash); -1 if none."""
    depth = 0
    inside = False
    for j in range(i, len(raw)):
        c = raw[j]
        if inside:
            inside = c != 34  # "
        elif c == 34:
            inside = True
        elif c == 91:  # [
            depth += 1
        elif c == 93:  # ]
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


def reference(raw: bytes) -> tuple[bytes, bytes, bytes, int] | None:
    """The splitter, in Python (the contract of ``_wire_split.split``; slow)."""
    if b"\\" in raw:
        return None
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
        if key in keys:
            return None
        keys.add(key)
        i = _skip_ws(raw, k_end + 1)
        if raw[i:i + 1] != b":":
            return None
        i = _skip_ws(raw, i + 1)
        if i == len(raw):
            return None
        start = i
        first = raw[i]
        if first == 34:
            i = raw.find(b'"', i + 1)
            if i < 0:
                return None
            i += 1
        elif first == 91:
            i = _skip_array(raw, i)
            if i < 0:
                return None
        elif first == 123:  # {
            return None
        else:
            while i < len(raw) and raw[i] not in _SCALAR_END:
                i += 1
        if key in (b"state", b"next_state"):
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
    if _skip_ws(raw, i + 1) != len(raw) or len(spans) != 2:
        return None
    (a, b), (c, d) = sorted(spans.values())
    envelope = raw[:a] + b"[]" + raw[b:c] + b"[]" + raw[d:]
    state, next_state = spans[b"state"], spans[b"next_state"]
    return envelope, raw[state[0]:state[1]], raw[next_state[0]:next_state[1]], len(keys)


def _native() -> Split | None:
    from capwatch import native

    if not native.compiled():
        return None
    from capwatch.contracts._wire_split import split

    return split


SPLIT: Split | None = _native()
"""The C splitter when the hot path runs compiled, else None."""
