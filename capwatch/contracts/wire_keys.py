"""The fast decoder's guard against repeated keys: msgspec keeps the last of a key given
twice without a word, while another reader may keep the first, so the fast path takes
an event only when no key can have come twice (the schema's decoder says why otherwise).

Two exact counts, the cheaper first:

- colons: outside strings, a ``:`` in JSON only ever ends an object's key. msgspec
  checked that the event's values are strings, numbers, booleans, null or arrays of
  strings, but for those it kept as text (the states, the time), which may hold anything:
  their colons are counted in their texts, each the text of one member's value, none
  overlapping. The colons of the message less theirs are therefore the event's keys plus
  the colons inside its other strings, never fewer; as many as the fields decoded means
  each key came once. A colon in another string (a family ``a:b``) only makes the count
  too high: then the second count decides.
- ``":``: every key ends with ``":`` when no whitespace follows its closing quote, so a
  message without a quote followed by whitespace holds at least one ``":`` per key (with
  one, a quote, whitespace and a colon, :func:`_spaced_keys`).

Counting one byte cost ~0.55 ns per byte, a two-byte needle ~1.5 ns and the
quote-then-whitespace pattern ~3.8 ns (2 cores, CPython 3.11): the colons are counted
first, and in a large message only outside the states' texts.
"""

from __future__ import annotations

import re

_QUOTE_THEN_SPACE = re.compile(rb'"[ \t\n\r]')


def keys_unique(raw: bytes, fields: int) -> bool:
    """Whether no key of the event in ``raw`` can be repeated (False: leave it to the
    schema's decoder, which says why).

    msgspec keeps the last of repeated keys without a word. Every key ends with ``":`` when
    no whitespace follows a closing quote, so then ``raw`` holds at least one ``":`` per
    key; as many as the fields decoded means no key came twice. With whitespace after a
    quote the keys are counted by :func:`_spaced_keys` instead. A count too high (``\\":``
    inside a string) takes the schema's decoder, which checks exactly.
    """
    # Searching for two-byte needles cost ~2 µs per message: the quote-then-whitespace
    # search runs only if there is ASCII whitespace at all, which one split pass tells
    # (it also stops at \v and \f, for which the search then finds nothing).
    if len(raw.split(None, 1)) < 2 or _QUOTE_THEN_SPACE.search(raw) is None:
        return raw.count(b'":') == fields
    return _spaced_keys(raw, 0, len(raw)) == fields


_KEY_END = re.compile(rb'"[ \t\n\r]*:')


def _spaced_keys(raw: bytes, start: int, end: int) -> int:
    """The keys in ``raw[start:end]``, or more, when whitespace may follow a key's closing
    quote (``"key" : value``, as Jackson's pretty printer and hand-spaced writers put it).

    Every key ends with a quote, JSON whitespace and a colon, so each key's closing quote
    starts one match of :data:`_KEY_END`; a match holds only one quote, so no two keys
    share one. Matches that are no key's end (inside a string) only make the count too
    high, never too low: as many as the fields decoded still means no key came twice."""
    return len(_KEY_END.findall(raw, start, end))


def trace_keys_unique(raw: bytes, fields: int, time: bytes) -> bool:
    """:func:`keys_unique` for a trace event whose time's text is ``time`` (empty if
    none): its other values are arrays of strings, strings, numbers, booleans or null, so
    its colons less the time's are its keys plus colons inside strings."""
    return raw.count(b":") - time.count(b":") == fields or keys_unique(raw, fields)


FIND_STATES = 2_048
"""States' bytes from which the states are found in a message, and the keys counted
outside them only (below, finding them costs more than counting them: with the usual
layout written out, counting a whole message's colons at ~0.3 ns a byte costs as much
as finding its states at about 2-3 KB of states; on fleets of 0.7-16 KB messages the
check cost 1.76 / 1.58 us a message on average at 768 / 2,500 bytes, alike at 8 KB)."""

_WS = rb"[ \t\n\r]*"
_STATE_KEY = re.compile(rb'"state"' + _WS + b":" + _WS)
_NEXT_STATE_KEY = re.compile(rb'"next_state"' + _WS + b":" + _WS)


def transition_keys_unique(raw: bytes, fields: int, state: bytes, next_state: bytes,
                           time: bytes) -> bool:
    """:func:`keys_unique` for a transition event whose states' texts (as msgspec kept
    them, as bytes) are ``state`` and ``next_state`` and whose time's is ``time`` (empty
    if none).

    In a large message the states are found after the first ``"state":`` and
    ``"next_state":``; the bytes there must be the decoded states' texts, the two places
    apart, each text an array. A place that starts at a key is exactly that key's value
    (a JSON array ends at its closing bracket), so it holds no key of the event and a
    ``:`` or ``":`` cannot straddle its edges (``[`` and ``]``): the keys are counted
    outside both. Scanning a whole message cost twice what decoding it does."""
    if len(state) + len(next_state) < FIND_STATES:
        # The states' colons are counted only when there are too many: fewer would
        # still be the keys plus colons inside strings.
        colons = raw.count(b":") - time.count(b":")
        if colons != fields:
            colons -= state.count(b":") + next_state.count(b":")
        return colons == fields or keys_unique(raw, fields)
    # The usual writers' layout written out first (state, then next_state, each key
    # followed by ":" or ": "): exactly what _value_at finds for it, without its calls
    # and slices (~1 us of ~2 a message). Anything else takes the general way below.
    try:  # (an index past the end: not that layout)
        a = raw.find(b'"state"') + 7
        if a > 6 and raw[a] == 58:  # ":"
            a += 2 if raw[a + 1] == 32 else 1  # ": "
            if state[0] == 91 and state[-1] == 93 and raw.startswith(state, a):  # [ ]
                b = a + len(state)
                c = raw.find(b'"next_state"', b) + 12
                if c > 11 and raw[c] == 58:
                    c += 2 if raw[c + 1] == 32 else 1
                    if next_state[0] == 91 and next_state[-1] == 93 \
                            and raw.startswith(next_state, c):
                        d = c + len(next_state)
                        return raw.count(b":", 0, a) + raw.count(b":", b, c) \
                            + raw.count(b":", d) - time.count(b":") == fields \
                            or _keys_outside(raw, fields, a, b, c, d)
    except IndexError:
        pass
    return _found_keys_unique(raw, fields, state, next_state, time)


def _found_keys_unique(raw: bytes, fields: int, state: bytes, next_state: bytes,
                       time: bytes) -> bool:
    """:func:`transition_keys_unique` for a large message, its states found by
    :func:`_value_at` wherever the keys are and however they are spaced."""
    where = _value_at(raw, _STATE_KEY, b'"state"', state, 0)
    there = None if where is None else _value_at(raw, _NEXT_STATE_KEY, b'"next_state"',
                                                    next_state, where[1])
    if there is None and where is not None:
        there = _value_at(raw, _NEXT_STATE_KEY, b'"next_state"', next_state, 0, where[0])
    if where is None or there is None:
        return keys_unique(raw, fields)
    (a, b), (c, d) = sorted((where, there))
    if b > c:
        return keys_unique(raw, fields)
    colons = raw.count(b":", 0, a) + raw.count(b":", b, c) + raw.count(b":", d)
    return colons - time.count(b":") == fields \
        or _keys_outside(raw, fields, a, b, c, d)


def _keys_outside(raw: bytes, fields: int, a: int, b: int, c: int, d: int) -> bool:
    """:func:`keys_unique` for the bytes of ``raw`` outside ``[a, b)`` and ``[c, d)``."""
    search = _QUOTE_THEN_SPACE.search
    if search(raw, 0, a) or search(raw, b, c) or search(raw, d):
        # A match of _KEY_END straddles no place's edge either (it holds no bracket).
        return _spaced_keys(raw, 0, a) + _spaced_keys(raw, b, c) \
            + _spaced_keys(raw, d, len(raw)) == fields
    return raw.count(b'":', 0, a) + raw.count(b'":', b, c) + raw.count(b'":', d) == fields


def _value_at(raw: bytes, key: re.Pattern[bytes], name: bytes, value: bytes, start: int,
              end: int | None = None) -> tuple[int, int] | None:
    """Where ``value`` (an array's text) is, as the value of the first ``name`` key in
    ``raw[start:end]``; None if it is not there."""
    if value[:1] != b"[" or value[-1:] != b"]":
        return None
    i = raw.find(name, start) if end is None else raw.find(name, start, end)
    if i < 0:
        return None
    # The separators the usual writers put after a key, before the general pattern.
    i += len(name)
    after = raw[i:i + 2]
    if after == b": ":
        i += 2
    elif after[:1] == b":":
        i += 1
    else:
        found = key.match(raw, i - len(name))
        if found is None:
            return None
        i = found.end()
    if not raw.startswith(value, i):
        return None
    return i, i + len(value)
