"""The fast decoder's guard against repeated keys: msgspec keeps the last of a key given
twice without a word, while another reader may keep the first, so the fast path takes
an event only when no key can have come twice (the schema's decoder says why otherwise).
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


_WS = rb"[ \t\n\r]*"
_STATE_KEY = re.compile(rb'"state"' + _WS + b":" + _WS)
_NEXT_STATE_KEY = re.compile(rb'"next_state"' + _WS + b":" + _WS)


def transition_keys_unique(raw: bytes, fields: int, state: bytes, next_state: bytes
                           ) -> bool:
    """:func:`keys_unique` for a transition event, looking only at its bytes outside the
    two states: scanning a whole message cost ~2.3 ns per byte, twice what decoding it
    does, and a state's text holds no key of the event.

    The states are found after the first ``"state":`` and ``"next_state":``; the bytes
    there must be the decoded states' texts, the two places apart, each text an array.
    A ``":`` can then not straddle a place's edge (``[`` and ``]``), so the count outside
    both is the whole count less the states' own, wherever equal bytes were found; and
    a place that starts at a key is exactly that key's value (a JSON array ends at its
    closing bracket), so the keys outside both are all of the event's. Otherwise the
    whole message is scanned."""
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
    if not (value.startswith(b"[") and value.endswith(b"]")):
        return None
    i = raw.find(name, start) if end is None else raw.find(name, start, end)
    if i < 0:
        return None
    # The separators the usual writers put after a key, before the general pattern.
    i += len(name)
    if raw.startswith(b": ", i):
        i += 2
    elif raw.startswith(b":", i):
        i += 1
    else:
        found = key.match(raw, i - len(name))
        if found is None:
            return None
        i = found.end()
    if not raw.startswith(value, i):
        return None
    return i, i + len(value)
