"""The hot path's decoder: msgspec for the events that are valid, pydantic for the rest.

:func:`decode` returns exactly what :func:`capwatch.contracts.wire.decode` returns. The
msgspec structs below accept a subset of what the pydantic models accept (the same
strict types, lengths and patterns); whenever they refuse a message, or a check after
parsing fails (message key, size limits, a trace's lengths), the message goes through
:func:`capwatch.contracts.wire.decode`, so a dead letter always carries the pydantic
schema's reason. Only the common case, a valid event, takes the fast way (the pydantic
path costs 3-4 times more per message). ``tests/contracts/test_wire_fast.py`` checks that
both decoders agree on valid and invalid inputs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType
from pydantic import ConfigDict, TypeAdapter, ValidationError

from capwatch.contracts import wire
from capwatch.contracts.wire import (
    AGENT_ID_PATTERN,
    MAX_AGENT_ID,
    MAX_STEP,
    AgentTransition,
    DeadLetter,
    DecodeLimits,
)
from capwatch.model.domain import GroundAtom


def _anchored(pattern: str) -> str:
    # msgspec matches with Python's re.search, where "$" also matches before a final
    # newline; pydantic's Rust regex does not. "\Z" is the end of the text in both senses.
    return pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern


# Ids are plain strings here and checked after decoding, like atoms below: the same few
# agent ids and families come in every message.
_Identifier = str
_AgentId = str
_IDENTIFIER = re.compile(r"[^\x00-\x1f]{1,256}\Z")
_AGENT_ID = re.compile(_anchored(AGENT_ID_PATTERN))
_VALID_IDS: set[str] = set()
_VALID_AGENT_IDS: set[str] = set()
# Atoms are plain string lists here and checked after decoding against a cache of atoms
# seen valid before (a C-level subset test): a fleet's vocabulary is small and repeats
# in every message, and a regex per name cost more than the rest of the decode.
# Tuples straight from the decoder: an atom is a tuple in the model's types, and
# converting lists afterwards cost a tenth of the decode.
_Atom = tuple[str, ...]
_NAME = re.compile(r"[^\s()\x00-\x1f]{1,256}\Z")
"""wire.Name: 1-256 characters, no whitespace, parentheses or control characters."""
_MAX_ATOM_LENGTH = 33
_VALID_ATOMS: dict[GroundAtom, GroundAtom] = {}
_MAX_VALID_ATOMS = 200_000
_Step = Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]

_NO_TIME = msgspec.Raw(b"null")


# Optional fields default to UNSET so that the fields a message gave can be counted: with
# the keys counted in its bytes, that shows a key given twice (see _keys_unique).
class _Transition(msgspec.Struct, tag_field="type", tag="transition", forbid_unknown_fields=True):
    agent_id: _AgentId
    family: _Identifier
    # The states are kept as their JSON text and decoded by _state: a state equal to the
    # agent's previous next-state (every step of an episode after the first) is then
    # recognised by its bytes and not decoded again (see StateMemo).
    state: msgspec.Raw
    action: _Atom
    next_state: msgspec.Raw
    v: Literal[1] | UnsetType = UNSET
    episode_id: _Identifier | UnsetType | None = UNSET
    # The time is handed to pydantic's own datetime parser (strict), so both decoders
    # read the same instants from the same strings.
    time: msgspec.Raw = _NO_TIME
    optimal: bool | UnsetType = UNSET
    step: _Step | UnsetType | None = UNSET
    executed: bool | UnsetType | None = UNSET


class _Trace(msgspec.Struct, tag_field="type", tag="trace", forbid_unknown_fields=True):
    agent_id: _AgentId
    family: _Identifier
    states: list[list[_Atom]]
    actions: list[_Atom]
    v: Literal[1] | UnsetType = UNSET
    episode_id: _Identifier | UnsetType | None = UNSET
    time: msgspec.Raw = _NO_TIME
    optimal: bool | UnsetType = UNSET
    start_step: _Step | UnsetType = UNSET
    executed: list[bool] | UnsetType | None = UNSET


_DECODER = msgspec.json.Decoder(_Transition | _Trace)
_STATE = msgspec.json.Decoder(list[_Atom]).decode

StateMemo = tuple[bytes, int, frozenset[GroundAtom]]
"""An agent's last next-state: the fingerprint of its JSON text (:func:`_fingerprint`),
its number of atoms as sent, and the set decoded from it. A pure function of the text, so
it is right whatever else happens to the message it came in; the caller keeps one per
agent and hands it to :func:`decode`."""
_MEMO_TEXT = 512
"""A state's text up to this many bytes is its own fingerprint; a longer one is
fingerprinted by its BLAKE2b-128 digest, so a watch does not hold a copy of a large state
(15 KB for 200 atoms) and the memo costs ~1 µs per KB of state instead of ~0.3 µs per atom."""


def _fingerprint(text: msgspec.Raw) -> bytes:
    raw = bytes(text)
    if len(raw) <= _MEMO_TEXT:
        return raw
    # A leading NUL never begins JSON text: a digest can never equal a short text.
    return b"\0" + hashlib.blake2b(raw, digest_size=16).digest()
_TIME_FIELD = wire.TransitionEvent.model_fields["time"]
# The schema's own type for the field (whatever it becomes), validated as the model does.
_TIME: TypeAdapter[datetime | None] = TypeAdapter(
    Annotated[_TIME_FIELD.annotation, *_TIME_FIELD.metadata]  # type: ignore[arg-type]
    if _TIME_FIELD.metadata else _TIME_FIELD.annotation,
    config=ConfigDict(strict=True))
_TIME_JSON: Callable[[bytes], datetime | None] = _TIME.validator.validate_json
"""The adapter's compiled validator, called directly: the adapter's Python wrapper cost
as much again as the validation itself on every message."""


_DEFAULT_LIMITS = DecodeLimits()


class _Refused(Exception):
    """The fast path does not take this message; the pydantic path says why."""


def _time(raw: msgspec.Raw) -> datetime | None:
    if raw is _NO_TIME:
        return None
    try:
        return _TIME_JSON(bytes(raw))
    except ValidationError:
        raise _Refused from None


def _ids(agent_id: str, family: str, episode_id: str | None) -> None:
    if agent_id not in _VALID_AGENT_IDS:
        if len(agent_id) > MAX_AGENT_ID or not _AGENT_ID.match(agent_id):
            raise _Refused
        _remember(_VALID_AGENT_IDS, agent_id)
    for text in (family, episode_id):
        if text is not None and text not in _VALID_IDS:
            if not _IDENTIFIER.match(text):
                raise _Refused
            _remember(_VALID_IDS, text)


def _remember(cache: set[str], text: str) -> None:
    if len(cache) >= _MAX_VALID_ATOMS:
        cache.clear()  # a bound on memory; the cache refills from valid traffic
    cache.add(text)


def _atoms(atoms: list[GroundAtom]) -> frozenset[GroundAtom]:
    # The cache also interns: every agent's states hold the same atom objects.
    try:
        return frozenset(map(_VALID_ATOMS.__getitem__, atoms))
    except KeyError:
        _learn(atoms)
        return frozenset(map(_VALID_ATOMS.__getitem__, atoms))


def _action(atom: GroundAtom) -> GroundAtom:
    known = _VALID_ATOMS.get(atom)
    if known is None:
        _learn((atom,))
        return atom
    return known


def _learn(atoms: Iterable[GroundAtom]) -> None:
    every = list(atoms)
    new = [a for a in every if a not in _VALID_ATOMS]
    for atom in new:
        if not 0 < len(atom) <= _MAX_ATOM_LENGTH \
                or not all(_NAME.match(name) for name in atom):
            raise _Refused
    if len(_VALID_ATOMS) + len(new) > _MAX_VALID_ATOMS:
        _VALID_ATOMS.clear()  # a bound on memory; the cache refills from valid traffic
        # The caller looks up every atom of the message next, the known ones too: before,
        # they were gone after the clear and a valid event became an "internal error".
        new = every
    _VALID_ATOMS.update((a, a) for a in new)


def _common_fields(event: _Transition | _Trace) -> int:
    return ((event.v is not UNSET) + (event.episode_id is not UNSET)
            + (event.time is not _NO_TIME) + (event.optimal is not UNSET))


_QUOTE_THEN_SPACE = re.compile(rb'"[ \t\n\r]')


def _keys_unique(raw: bytes, fields: int) -> None:
    """Refuse (to the schema's decoder, which says why) unless no key can be repeated.

    msgspec keeps the last of repeated keys without a word. Every key ends with ``":`` when
    no whitespace follows a closing quote, so then ``raw`` holds at least one ``":`` per
    key; as many as the fields decoded means no key came twice. Anything else (whitespace
    after a quote, ``\\":`` inside a string) takes the schema's decoder, which checks exactly.
    """
    # Searching for two-byte needles cost ~2 µs per message: the quote-then-whitespace
    # search runs only if there is ASCII whitespace at all, which one split pass tells
    # (it also stops at \v and \f, for which the search then finds nothing).
    if raw.count(b'":') != fields or (
            len(raw.split(None, 1)) > 1 and _QUOTE_THEN_SPACE.search(raw) is not None):
        raise _Refused


def decode(
    raw: bytes, limits: DecodeLimits = _DEFAULT_LIMITS, key: bytes | None = None,
    *, partition: int = -1, offset: int = -1, size: int | None = None,
    sha256: str | None = None, memo: list[StateMemo | None] | None = None,
) -> list[AgentTransition] | DeadLetter:
    """:func:`capwatch.contracts.wire.decode`, faster for valid events.

    ``memo``: a one-item list holding the agent's :data:`StateMemo` (or None), replaced
    by the one of this message's next-state when it is a valid transition event. A state
    whose text equals the memo's is not decoded again: the memo's set is used, the very
    object, which the monitor recognises to reuse its encoding too.
    """
    full = size if size is not None else len(raw)
    if full <= limits.max_message_bytes:
        try:
            return _fast(raw, limits, key, partition, offset, memo)
        except (msgspec.DecodeError, _Refused, RecursionError, ValueError):
            # ValueError: UnicodeDecodeError on bytes that are not UTF-8 (in a key, say),
            # which msgspec raises as is. The schema's decoder says why, as a dead letter.
            pass
    return wire.decode(raw, limits, key, partition=partition, offset=offset, size=size,
                       sha256=sha256)


def _state(text: msgspec.Raw, max_atoms: int) -> tuple[int, frozenset[GroundAtom]]:
    atoms = _STATE(text)
    if len(atoms) > max_atoms:
        raise _Refused  # before its atoms are learnt
    return len(atoms), _atoms(atoms)


def _fast(raw: bytes, limits: DecodeLimits, key: bytes | None, partition: int,
          offset: int, memo: list[StateMemo | None] | None = None) -> list[AgentTransition]:
    event = _DECODER.decode(raw)
    # msgspec takes true for Literal[1] (True == 1 in Python): leave it to the schema.
    if (event.v is not UNSET and type(event.v) is not int) \
            or (key is not None and key != event.agent_id.encode()):
        raise _Refused
    agent_id, family = event.agent_id, event.family
    episode_id = None if event.episode_id is UNSET else event.episode_id
    optimal = event.optimal is True
    if agent_id not in _VALID_AGENT_IDS or family not in _VALID_IDS \
            or (episode_id is not None and episode_id not in _VALID_IDS):
        _ids(agent_id, family, episode_id)
    max_atoms = limits.max_state_atoms
    if type(event) is _Transition:
        _keys_unique(raw, 6 + (event.step is not UNSET) + (event.executed is not UNSET)
                     + _common_fields(event))
        state, next_state = event.state, event.next_state
        last = memo[0] if memo is not None else None
        seen = _fingerprint(state) if last is not None else None
        if last is not None and last[0] == seen:
            n, s = last[1], last[2]
        else:
            n, s = _state(state, max_atoms)
        # A refused or idle action repeats the state: one set for both (the monitor then
        # encodes it once).
        same = next_state == state
        n2, s2 = (n, s) if same else _state(next_state, max_atoms)
        if n > max_atoms:
            raise _Refused  # a memo made under other limits
        if memo is not None:
            memo[0] = (seen if same and seen is not None else _fingerprint(next_state), n2, s2)
        return [AgentTransition(
            agent_id, family, episode_id, None if event.step is UNSET else event.step,
            None if event.time is _NO_TIME else _time(event.time),
            s, _action(event.action), s2, optimal,
            None if event.executed is UNSET else event.executed, partition, offset,
        )]
    _keys_unique(raw, 5 + (event.start_step is not UNSET) + (event.executed is not UNSET)
                 + _common_fields(event))
    executed = None if event.executed is UNSET else event.executed
    n = len(event.actions)
    if not event.states or len(event.states) != n + 1 \
            or (executed is not None and len(executed) != n) \
            or n > limits.max_trace_steps or any(len(s) > max_atoms for s in event.states):
        raise _Refused
    when = _time(event.time)
    states = [_atoms(s) for s in event.states]
    start = 0 if event.start_step is UNSET else event.start_step
    return [
        AgentTransition(
            event.agent_id, event.family, episode_id, start + i, when,
            states[i], _action(a), states[i + 1], optimal,
            executed[i] if executed is not None else None, partition, offset,
        )
        for i, a in enumerate(event.actions)
    ]
