"""The hot path's decoder: msgspec for the events that are valid, pydantic for the rest.

:func:`decode` returns exactly what :func:`capwatch.contracts.wire.decode` returns. The
msgspec structs (contracts/wire_structs.py) accept a subset of what the pydantic models
accept (the same strict types, lengths and patterns); whenever they refuse a message, or a
check after parsing fails (message key, size limits, a trace's lengths), the message goes
through :func:`capwatch.contracts.wire.decode`, so a dead letter always carries the
pydantic schema's reason. Only the common case, a valid event, takes the fast way (the
pydantic path costs 3-4 times more per message). ``tests/contracts/test_wire_fast.py``
checks that both decoders agree on valid and invalid inputs.

One module (~530 lines, 25 KB, over the ~400-line guideline): the transition path is
written out in :func:`_fast` rather than split into helpers on purpose (a call costs
~0.1 us on a path of ~10 us), and the state reads it shares with traces belong with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Annotated, Any, Final

import msgspec
from msgspec import UNSET
from pydantic import ConfigDict, TypeAdapter, ValidationError

from capwatch.contracts import wire, wire_atoms, wire_split, wire_text
from capwatch.contracts.wire import (
    AGENT_ID_PATTERN,
    MAX_AGENT_ID,
    AgentTransition,
    DeadLetter,
    DecodeLimits,
)
from capwatch.contracts.wire_keys import trace_keys_unique, transition_keys_unique
from capwatch.contracts.wire_structs import NO_TIME as _NO_TIME
from capwatch.contracts.wire_structs import Trace as _Trace
from capwatch.contracts.wire_structs import Transition as _Transition
from capwatch.model.domain import GroundAtom


def _anchored(pattern: str) -> str:
    # msgspec matches with Python's re.search, where "$" also matches before a final
    # newline; pydantic's Rust regex does not. "\Z" is the end of the text in both senses.
    return pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern


# Ids are plain strings in the structs and checked after decoding, like atoms: the same
# few agent ids and families come in every message.
_IDENTIFIER = re.compile(r"[^\x00-\x1f]{1,256}\Z")
_AGENT_ID = re.compile(_anchored(AGENT_ID_PATTERN))
_VALID_IDS: Final[set[str]] = set()
_VALID_AGENT_IDS: Final[set[str]] = set()
# The names the hot path reads are Final: mypyc keeps them in C statics, where a module
# variable costs a dict lookup by name at each read (~25 of them a message in _fast).
# Those a test patches (_SPLIT, _STATE, _SMALL_STATE, the bounds) stay variables.
_UNSET: Final[Any] = UNSET
_NONE_TIME: Final[Any] = _NO_TIME

_DECODER: Final = msgspec.json.Decoder(_Transition | _Trace)
_TRANSITION: Final = msgspec.json.Decoder(_Transition).decode
"""Transition events alone, tried first: a union's decoder must find the tag before it
knows the struct, and "type" is seldom a message's first key (0.12 µs of 0.8 µs)."""
_FIELDS: Final = msgspec.structs.astuple
_NEW: Final = AgentTransition
_TRANSITION_STRUCT: Final = _Transition
_SPLIT: wire_split.Split | None = wire_split.SPLIT
"""The C splitter, or None (pure Python); a module variable, so that a test may set it."""
_SPLIT_TRACE: wire_split.SplitTrace | None = wire_split.SPLIT_TRACE
"""The C trace splitter, or None (pure Python); a module variable, as :data:`_SPLIT`."""
_TRACE: Final = msgspec.json.Decoder(_Trace).decode
"""Trace events alone, for a trace's envelope (its states cut out by :data:`_SPLIT_TRACE`)."""
_CANONICAL: Callable[[bytes], bytes] | None = wire_split.CANONICAL
"""A state text's canonical form in C (wire_split.canonical: its atoms sorted when they
are out of order), or None (pure Python). Taken for a state its agent's memo does not
recognise, and then for the next state too when the state was out of order: a producer
sending one set of atoms in ever other orders (a hash set's iteration) then sends texts
read before (wire_atoms.known_state). The memo keeps the texts as sent, so a producer
whose order is its own but stable (the memo recognises its states) pays nothing after a
miss: keeping the canonical text there made every later record of such an agent rebuilt
(~10 us for a 13 KB state)."""
_IN_ORDER: Callable[[bytes], bool] | None = wire_split.IN_ORDER
"""Whether a state text is its own canonical form, in C (wire_split.in_order: the check of
:data:`_CANONICAL` without its build), or None (pure Python). A state its agent's memo
does not recognise, when the memo holds ids of this generation, is only checked: out of
order, it is read by its pieces from the memo's set (:func:`_next_state`), and its
canonical text is not built (~19 k instructions a 1 KB text, where the pieces and the
step cost ~11 k; a producer of ever other orders sends the memo's set in another order
at most records, which the step gives as the memo's very set). A module variable, so
that a test may set it."""
_FLIPS: Final = wire_split.FLIPS
"""Two reads' ids lists diffed in C (:func:`reference_flips`), or None (pure Python)."""
_STEP: Final = wire_split.STEP
"""A step's diff and next set made in C (:func:`reference_step`), or None (pure Python)."""
_ATOM_TEXT: Final = msgspec.json.Decoder(tuple[str, ...]).decode
_ACTIONS: Final[dict[bytes, GroundAtom]] = {}
"""An action's text → its interned atom, for the vocabulary's :data:`_actions_generation`
(an atom is interned, and never forgotten, within one generation)."""
_actions_generation = -1
MAX_ACTIONS = 10_000
MAX_ACTION_TEXT: Final = 256
"""Texts up to this long are kept (~10 objects of 20 characters; a longer one is read
each time): the map holds at most ~3 MB, whatever names a producer sends."""
_STATE = msgspec.json.Decoder(list[GroundAtom]).decode

Fingerprint = bytes | tuple[int, int]
StateMemo = tuple[Fingerprint, int, frozenset[GroundAtom], list[int] | None, int]
"""An agent's last next-state: the fingerprint of its JSON text (:func:`_fingerprint`),
its number of atoms as sent, the set decoded from it, and its atoms' ids (wire_atoms: a
list, 8 bytes an atom where a set of them took 40) with their generation (None: not
known). A pure function of the text, so it is right whatever else happens to the
message it came in; the caller keeps one per agent and hands it to :func:`decode`."""
_MEMO_TEXT = 512
"""A state's text up to this many bytes is its own fingerprint; a longer one is
fingerprinted by the state reads' table's own copy of the text when it is kept there
(wire_atoms.STATES: one copy shared by every agent's memo; a memo may keep it alive a
while after the table dropped it, until its agent's next record or the watch's
compaction), else by its length and its hash, so that a watch does not hold a copy of
a large state of its own (15 KB for 200 atoms)."""


def _fingerprint(text: msgspec.Raw | bytes) -> Fingerprint:
    raw = bytes(text)
    if len(raw) <= _MEMO_TEXT:
        return raw
    # Python's keyed 64-bit SipHash: two different texts of one length match by chance
    # once in 2**64 comparisons, and only ever within one agent's own records (a
    # producer could send any state it likes anyway). BLAKE2b-128 cost ~0.04 µs per atom,
    # as much as the rest of a known atom's decoding.
    return len(raw), hash(raw)


def hashed(fingerprint: Fingerprint) -> tuple[int, int]:
    """The fingerprint as its text's length and hash, whatever the text's size: what a
    memo is kept by while its agent is held as bytes (daemon.watch_freezing), where a
    text of up to :data:`_MEMO_TEXT` bytes would cost as much as the rest of the agent.
    A memo so kept still recognises its text (:func:`decode`)."""
    if type(fingerprint) is bytes:
        return len(fingerprint), hash(fingerprint)
    assert type(fingerprint) is tuple
    return fingerprint


# _fast and _trace read the structs' fields by position (astuple, one C call).
if tuple(f.name for f in msgspec.structs.fields(_Transition)) != (
        "agent_id", "family", "state", "action", "next_state", "v", "episode_id", "time",
        "optimal", "step", "executed") \
        or tuple(f.name for f in msgspec.structs.fields(_Trace)) != (
            "agent_id", "family", "states", "actions", "v", "episode_id", "time", "optimal",
            "start_step", "executed"):
    raise ImportError("wire_structs' fields moved: wire_fast reads them by position")


_TIME_FIELD = wire.TransitionEvent.model_fields["time"]
# The schema's own type for the field (whatever it becomes), validated as the model does.
_TIME: TypeAdapter[datetime | None] = TypeAdapter(
    Annotated[_TIME_FIELD.annotation, *_TIME_FIELD.metadata]  # type: ignore[arg-type]
    if _TIME_FIELD.metadata else _TIME_FIELD.annotation,
    config=ConfigDict(strict=True))
_TIME_JSON: Final[Callable[[bytes], datetime | None]] = _TIME.validator.validate_json
"""The adapter's compiled validator, called directly: the adapter's Python wrapper cost
as much again as the validation itself on every message."""


_DEFAULT_LIMITS: Final = DecodeLimits()


class _Refused(Exception):
    """The fast path does not take this message; the pydantic path says why."""


def _time(text: bytes) -> datetime | None:
    """A time's JSON text (its callers made it bytes once, for the keys' check) read by
    the schema's validator. ``bytes(text)`` again here cost ~600 instructions a record
    (a generic call of the type, compiled), a fifth of the whole read; reading RFC 3339's
    common shape here instead did not pay (docs/performance.md, "The record's time")."""
    try:
        return _TIME_JSON(text)
    except ValidationError:
        raise _Refused from None


def _ids(agent_id: str, family: str, episode_id: str | None) -> None:
    if agent_id not in _VALID_AGENT_IDS:
        if len(agent_id) > MAX_AGENT_ID or not _AGENT_ID.match(agent_id):
            raise _Refused
        _remember(_VALID_AGENT_IDS, agent_id)
    for text in (family, episode_id):
        if text is not None and text not in _VALID_IDS:
            if not _IDENTIFIER.match(text) or wire_text.fault(text) is not None:
                raise _Refused
            _remember(_VALID_IDS, text)


def _remember(cache: set[str], text: str) -> None:
    if len(cache) >= wire_atoms.MAX_ATOMS:
        cache.clear()  # a bound on memory; the cache refills from valid traffic
    cache.add(text)


def _learn(atoms: Iterable[GroundAtom]) -> None:
    try:
        wire_atoms.learn(atoms)
    except wire_atoms.Invalid:
        raise _Refused from None


# The vocabulary's containers are cleared in place, never replaced: bound once here.
_ID_OF: Final = wire_atoms.ID.__getitem__
_ATOM_OF: Final = wire_atoms.ATOM.__getitem__
_ID_GET: Final = wire_atoms.ID.get
_ATOM_LIST: Final = wire_atoms.ATOM


def reference_flips(before: list[int], after: list[int]) -> list[GroundAtom]:
    """The atoms whose ids are in exactly one of two ids lists of this generation (each
    once): the contract of ``_wire_split.flips``, which returns them in the order of
    ``before`` then ``after``, where this returns them in a set's order (the monitor
    toggles their bits: order does not matter)."""
    return list(map(_ATOM_OF, frozenset(after).symmetric_difference(before)))


def reference_step(state: frozenset[GroundAtom], before: list[int], after: list[int]
                   ) -> tuple[list[GroundAtom], frozenset[GroundAtom]]:
    """A step read by its ids: the atoms that differ (:func:`reference_flips`) and the
    next state's set, made from ``state`` (the set of ``before``'s atoms) by them; the
    state itself, the very object, when none differ. The contract of
    ``_wire_split.step``, which makes the set as ``state`` less the atoms of ids only
    ``before`` holds, with those of ids only ``after`` holds (the same set when ``state``
    is ``before``'s atoms)."""
    flipped = reference_flips(before, after)
    return flipped, state.symmetric_difference(flipped) if flipped else state


def _set_of(ids: list[int]) -> frozenset[GroundAtom]:
    """The atoms of ``ids`` (of this generation) as a set. A list of them first, which
    compiled code fills by indexing the vocabulary's list in C: ``map`` over the list's
    ``__getitem__`` called its method wrapper per id, ~200 of the ~450 instructions an
    atom cost (a new agent's first states, read by their pieces; callgrind, session 18)."""
    atoms = _ATOM_LIST
    return frozenset([atoms[i] for i in ids])


def _atoms(atoms: list[GroundAtom]) -> frozenset[GroundAtom]:
    # The vocabulary also interns: every agent's states hold the same atom objects.
    try:
        return frozenset(map(_ATOM_OF, map(_ID_OF, atoms)))
    except KeyError:
        _learn(atoms)
        return frozenset(map(_ATOM_OF, map(_ID_OF, atoms)))


def decode(
    raw: bytes, limits: DecodeLimits = _DEFAULT_LIMITS, key: bytes | None = None,
    *, partition: int = -1, offset: int = -1, size: int | None = None,
    sha256: str | None = None, memo: list[Any] | None = None,
    known_ids: tuple[str, str] | None = None,
) -> list[AgentTransition] | DeadLetter:
    """:func:`capwatch.contracts.wire.decode`, faster for valid events.

    ``memo``: a list holding the agent's :data:`StateMemo` (or None), replaced by the one
    of this message's next-state when it is a valid transition event. A state whose text
    equals the memo's is not decoded again: the memo's set is used, the very object,
    which the monitor recognises to reuse its encoding too. If the list has a second
    item, it is set to the atoms in exactly one of the event's state and next state when
    the next state was made from the state by them (a list, no atom twice), else None:
    the monitor then encodes the next state by those few atoms. If it has a third, that
    is set, for a ``trace`` event, to such atoms (or None) for each of its steps, in
    order (else None); a trace's last state becomes the memo, as a transition's next
    state does. If it has a fourth, that is set to the message's (first) state's
    :data:`_Came`: the memo's set and the atoms in exactly one of it and that state, when
    the state was made from the memo's set by them (another text than the memo's: a
    reset, a new episode, a gap), else None; the monitor, whose last next-state is that
    set, then encodes the state from its encoding by those atoms, where it encoded the
    state whole (a lookup per atom).

    ``known_ids``: an agent id and a family this decoder found valid before (the caller's
    watch of the agent: both came from a message decoded here). A transition naming
    exactly them is not looked up in the id caches again: those lookups hashed two
    fresh strings and probed sets of up to 200,000 ids at every message (~3% of a
    steady record on the stochastic fleet, perf).
    """
    full = size if size is not None else len(raw)
    if full <= limits.max_message_bytes:
        try:
            return _fast(raw, limits, key, partition, offset, memo, known_ids)
        except (msgspec.DecodeError, _Refused, RecursionError, ValueError):
            # ValueError: UnicodeDecodeError on bytes that are not UTF-8 (in a key, say),
            # which msgspec raises as is. The schema's decoder says why, as a dead letter.
            pass
    return wire.decode(raw, limits, key, partition=partition, offset=offset, size=size,
                       sha256=sha256)


_Read = tuple[int, frozenset[GroundAtom], list[int] | None, int]
"""A state read: its atoms as sent, its set, its atoms' ids (None: not known) and their
generation."""
_Came = tuple[frozenset[GroundAtom], list[GroundAtom]] | None
"""How a message's (first) state was made from the agent's memo's set: that set and the
atoms in exactly one of the two (a list, no atom twice, not empty), or None (not made so,
or the memo's very set)."""

_SMALL_STATE = 256
"""A state's text up to this many bytes (about 8 atoms) is decoded whole: for so few
atoms, cutting it into pieces costs more than msgspec's decoding."""


def _state(raw: bytes, max_atoms: int, remember: bool = True, pieces: bool = True
           ) -> _Read:
    # Its callers made the text bytes once: bytes() of bytes again cost ~600 instructions
    # (a generic call of the type from compiled code), at each record of an agent whose
    # states are small and at each state of a trace.
    seen = wire_atoms.known_state(raw)
    if seen is not None:
        if seen[0] > max_atoms:
            raise _Refused
        return seen[0], seen[1], seen[2], wire_atoms.generation
    read: wire_atoms.State
    known = None
    if pieces and len(raw) > _SMALL_STATE:  # (False: the caller tried them)
        known = wire_atoms.ids(raw)
        if known is None:
            # Pieces never seen (a fleet's first pass, a new agent's own objects): those
            # read alone and learnt, the others looked up, where the whole text was
            # decoded and every atom looked up three times (wire_atoms.learn_pieces).
            try:
                known = wire_atoms.learn_pieces(raw, max_atoms)
            except wire_atoms.Invalid:
                raise _Refused from None
    if known is not None:
        if len(known) > max_atoms:
            raise _Refused
        read = len(known), _set_of(known), known
    else:
        atoms = _STATE(raw)
        if len(atoms) > max_atoms:
            raise _Refused  # before its atoms are learnt
        if len(raw) <= _SMALL_STATE:
            read = len(atoms), _atoms(atoms), None
        else:
            _learn(atoms)
            wire_atoms.teach(raw, atoms)
            ids = list(map(_ID_OF, atoms))
            read = len(atoms), _set_of(ids), ids
    if remember:
        wire_atoms.remember_state(raw, read)
    return read[0], read[1], read[2], wire_atoms.generation  # not (*read, ...): _next_state


_Diff = tuple[list[int], list[int], list[GroundAtom]]
_DIFFS: dict[tuple[int, int], _Diff] = {}
"""Two state reads, by their ids lists' object ids → the lists and the atoms in exactly
one of their sets. The lists are held by the entry, so an object id here is never
another list's; a list always travels with its read's set (or an equal one) and is
never changed, so the atoms are right for as long as the entry lives, whatever the
vocabulary's generation. The atoms' list is shared by every reader: never changed."""
_OLDER_DIFFS: dict[tuple[int, int], _Diff] = {}
_diffs_bytes = 0
MAX_DIFF_BYTES = 4_000_000
"""The memory a generation of :data:`_DIFFS` may take, counted as if no entry's ids
lists were held by anything else (most are, by the state texts' reads and memos)."""


def _told(state: frozenset[GroundAtom], state_ids: list[int],
          after: frozenset[GroundAtom], after_ids: list[int]) -> list[GroundAtom]:
    """The atoms in exactly one of two reads' sets. Agents of a family step between the
    states they share, so a step's two reads were mostly diffed before, by some agent
    (on 46-67 atoms the sets' difference cost 1.7-2.8 us, a lookup 0.15)."""
    global _DIFFS, _OLDER_DIFFS, _diffs_bytes
    key = (id(state_ids), id(after_ids))
    got = _DIFFS.get(key)
    if got is not None and got[0] is state_ids and got[1] is after_ids:
        return got[2]
    if got is None:
        got = _OLDER_DIFFS.get(key)
    if got is not None and got[0] is state_ids and got[1] is after_ids:
        told = got[2]  # the older generation's, kept in the current one
    elif _FLIPS is not None:
        told = _FLIPS(state_ids, after_ids, _ATOM_LIST)
    else:
        told = list(state.symmetric_difference(after))
    cost = 300 + 8 * (len(state_ids) + len(after_ids) + len(told))
    if _diffs_bytes + cost > MAX_DIFF_BYTES:
        _OLDER_DIFFS, _DIFFS = _DIFFS, _OLDER_DIFFS
        _DIFFS.clear()
        _diffs_bytes = 0
    _DIFFS[key] = (state_ids, after_ids, told)
    _diffs_bytes += cost
    return told


_Step = tuple[bytes, int, frozenset[GroundAtom], list[int], list[GroundAtom]]
"""A next state seen read from a state: its text (the state reads' table's own copy,
wire_atoms.Kept's), atom count, set and ids, and the atoms in exactly one of the two
reads' sets (:func:`_told`'s list, shared)."""
_StepsFrom = tuple[list[int], int, list[_Step]]
"""A state read's ids list (held, so that its object id is never another list's), the
vocabulary generation its steps were read in, and its steps, oldest first."""
_STEPS: dict[int, _StepsFrom] = {}
"""A state read, by its ids list's object id → the next states read from it: agents of a
family step between the states they share, so the record's next state is most often
one of the few texts some agent stepped to from this very read, and is found by
comparing it with them (memcmp, stopping at the first difference) where looking it up
in wire_atoms.STATES hashed the whole text (SipHash, ~1.5 instructions a byte) and
then looked the pair's atoms up in :data:`_DIFFS`."""
_OLDER_STEPS: dict[int, _StepsFrom] = {}
_steps_bytes = 0
MAX_STEP_BYTES = 4_000_000
"""The memory a generation of :data:`_STEPS` may take: a step's tuple and the atoms
that differ, a read's entry and its ids. Not a step's text, set and ids: they are
wire_atoms.STATES' own objects, counted there, and the tables turn whenever STATES'
do (:data:`_steps_turn`), so no step outlives a text STATES let go of by more than one
of STATES' generations. (Counting the text here too held ~1,500 steps of 3 KB states:
on 2,000 agents the table turned before steps came round again, session 14.)"""
_steps_turn = 0
"""wire_atoms.state_turns when the step tables last turned with STATES."""
STEPS_FROM_A_STATE = 8
"""Steps kept per state read (the newest): a lookup compares the text with each."""
_FRESH_IDS: Final[list[list[int] | None]] = [None]
"""The ids list :func:`_next_state` last made and did not remember (a trace's passing
state read by its pieces), until the next call: no step was kept from it yet
(:func:`_keep_step` is called from :func:`_next_state` only), so a call from it skips
:func:`_step_from`, which can only miss (its two lookups at each passing state of a
trace whose texts never repeat)."""
_KEPT_TEXT: Final[list[bytes | None]] = [None]
"""The table's own copy of the text :func:`_next_state` last read from a table (a step
or wire_atoms.STATES), else None: the agent's memo keeps that object (see _fast)."""


def _step_from(state_ids: list[int], generation: int, text: bytes) -> _Step | None:
    """The step from the read whose ids are ``state_ids`` to ``text``, if kept."""
    key = id(state_ids)
    entry = _STEPS.get(key)
    if entry is None or entry[0] is not state_ids:
        entry = _OLDER_STEPS.get(key)
        if entry is None or entry[0] is not state_ids:
            return None
    if entry[1] != generation:
        return None
    for step in entry[2]:
        if step[0] == text:
            return step
    return None


def _keep_step(state_ids: list[int], generation: int, step: _Step) -> None:
    global _STEPS, _OLDER_STEPS, _steps_bytes, _steps_turn
    key = id(state_ids)
    cost = 200 + 8 * len(step[4])
    entry = _STEPS.get(key)
    fresh = entry is None or entry[0] is not state_ids or entry[1] != generation
    if fresh:
        cost += 300 + 8 * len(state_ids)
    if _steps_bytes + cost > MAX_STEP_BYTES or _steps_turn != wire_atoms.state_turns:
        if wire_atoms.state_turns - _steps_turn > 1:
            _STEPS.clear()  # STATES turned twice since: both generations are older
        _OLDER_STEPS, _STEPS = _STEPS, _OLDER_STEPS
        _STEPS.clear()
        _steps_bytes = 0
        _steps_turn = wire_atoms.state_turns
        if not fresh:
            cost += 300 + 8 * len(state_ids)
            fresh = True
    if fresh or entry is None:
        entry = _STEPS[key] = (state_ids, generation, [])
    steps = entry[2]
    if len(steps) >= STEPS_FROM_A_STATE:
        del steps[0]
    steps.append(step)
    _steps_bytes += cost


PASSING_HIT_SHARE: Final = 4
PASSING_PROBE: Final = 16
PASSING_WARM: Final = 32
PASSING_WINDOW: Final = 1024


class _Passing:
    """How often a trace's passing states were found by their texts (wire_atoms.STATES):
    a passing state is not remembered there, so it is found only when some transition or
    trace's last state sent the same text, and a lookup that misses hashed the whole
    text for nothing (SipHash, ~1.5 instructions a byte) where a hit saves reading it by
    its pieces and the step's set (~5 a byte). Worth looking up while at least one in
    :data:`PASSING_HIT_SHARE` is found (the costs' ratio, not a fleet's figure); below
    that, one passing state in :data:`PASSING_PROBE` still is, so that the estimate
    follows a fleet whose agents start sharing states. The counts are halved every
    :data:`PASSING_WINDOW` lookups: recent traffic weighs most."""

    def __init__(self) -> None:
        self.tries = 0
        self.hits = 0
        self.skipped = 0

    def worth(self) -> bool:
        if self.tries < PASSING_WARM or self.hits * PASSING_HIT_SHARE >= self.tries:
            return True
        self.skipped += 1
        if self.skipped >= PASSING_PROBE:
            self.skipped = 0
            return True
        return False

    def tally(self, hit: bool) -> None:
        self.tries += 1
        if hit:
            self.hits += 1
        if self.tries >= PASSING_WINDOW:
            self.tries >>= 1
            self.hits >>= 1


_PASSING: Final = _Passing()


def _next_state(text: bytes, max_atoms: int, state: frozenset[GroundAtom],
                state_ids: list[int], state_generation: int, remember: bool = True
                ) -> tuple[_Read, list[GroundAtom] | None]:
    """:func:`_state`, from the state's set when the next state's atoms are all known:
    a step changes few atoms, and the set is then made from the state's by the
    difference of their ids (the atoms' tuples are not hashed again). One symmetric
    difference, one copy of the state's set: an id only the state has is one of its
    atoms, an id only the next state has is none of them (ids and atoms correspond one
    to one within a generation). A text read before, by any agent, is its earlier read
    (wire_atoms.known_state: 20 -> 15 us a record on 46-atom states). With the read,
    the atoms that differ (None: not known), which the monitor encodes the next state
    from."""
    _KEPT_TEXT[0] = None
    fresh = _FRESH_IDS[0]
    _FRESH_IDS[0] = None  # a step may be kept from it below
    generation = wire_atoms.generation
    if state_generation != generation:
        return _state(text, max_atoms, remember), None
    step = None if state_ids is fresh else _step_from(state_ids, generation, text)
    if step is not None:
        # A step some agent took from this very read: what the lookups below found then.
        n, told = step[1], step[4]
        if n > max_atoms:
            raise _Refused
        _KEPT_TEXT[0] = step[0]
        return (n, step[2] if told else state, step[3], generation), told or None
    seen = None
    if remember:
        seen = wire_atoms.known_state(text)
    elif _PASSING.worth():
        # A trace's passing state: looked up while lookups find enough (_Passing).
        seen = wire_atoms.known_state(text)
        _PASSING.tally(seen is not None)
    if seen is not None:
        # The atoms that differ found by the two sets' own hashes.
        n, after, seen_ids = seen[0], seen[1], seen[2]
        if n > max_atoms:
            raise _Refused
        _KEPT_TEXT[0] = seen[3]
        if after is state:
            told = []
        elif seen_ids is not None:
            told = _told(state, state_ids, after, seen_ids)
        else:
            told = list(state.symmetric_difference(after))
        if seen_ids is not None:
            _keep_step(state_ids, generation, (seen[3], n, after, seen_ids, told))
        return (n, after if told else state, seen_ids, generation), told or None
    known = wire_atoms.ids(text)
    if known is None:
        # Pieces never seen (a fleet's first pass): learnt, and the step made from the
        # state's set as below, with the atoms that differ, which the monitor encodes
        # the next state by (read whole, it was encoded whole). None: the full decoder.
        try:
            known = wire_atoms.learn_pieces(text, max_atoms)
        except wire_atoms.Invalid:
            raise _Refused from None
        if known is None:
            return _state(text, max_atoms, remember, False), None
    if len(known) > max_atoms:
        raise _Refused
    # The ids that differ and the next set made from the state's by them, in C when
    # built (a frozenset of one list and its symmetric difference with the other took
    # ~15% of a trace's decode, session 16; the set's copy ~10%, session 17).
    told, after = (_STEP(state, state_ids, known, _ATOM_LIST) if _STEP is not None
                   else reference_step(state, state_ids, known))
    flipped = told or None
    n = len(known)
    if remember:
        wire_atoms.remember_state(text, (n, after, known))
    else:
        _FRESH_IDS[0] = known
    # The tuple written out: ``(*read, generation)`` compiled to a list, its extension
    # and a tuple made of it (~550 instructions, at each passing state of a trace).
    return (n, after, known, generation), flipped


def _recognised(last: StateMemo | None, text: bytes) -> bool:
    """Whether ``text`` is the memo's (``_fingerprint(text) == last[0]``, without
    building it)."""
    if last is None:
        return False
    kept = last[0]
    if isinstance(kept, bytes):
        return kept == text
    # Also a memo kept by its hashed fingerprint (hashed()), of a short text.
    return kept[0] == len(text) and kept[1] == hash(text)


_ONCE: Final[set[int]] = set()
"""The hashes of out-of-order texts (as sent) read once by their canonical texts: such a
text seen again is remembered as sent (wire_atoms.STATES, the canonical read), so that
an agent whose atoms come in a stable order of its own (not sorted) is not rebuilt at
every record its memo misses (a new episode, a reset: ~10 us a 13 KB state, long-names
+5 to 33%). A text sent once (a hash set's ever other order) is not remembered: it
would push out of STATES the texts in use. A hash shared by chance only remembers a
text earlier (the text itself is the key)."""
MAX_ONCE = 100_000


def _admit(text: bytes, n: int, s: frozenset[GroundAtom], ids: list[int] | None,
           generation: int) -> None:
    """``text``, an out-of-order state as sent, read as ``(n, s, ids)`` from its canonical
    text: remembered as sent the second time it comes (:data:`_ONCE`). Only a read of
    the current generation (reading the next state may have turned the vocabulary, and
    an id from before the turn may name another atom now)."""
    if generation != wire_atoms.generation:
        return
    h = hash(text)
    if h in _ONCE:
        _ONCE.discard(h)
        wire_atoms.remember_state(text, (n, s, ids))
        return
    if len(_ONCE) >= MAX_ONCE:
        _ONCE.clear()  # a bound on memory; a text then waits for a third sighting
    _ONCE.add(h)


def _trace_states(texts: list[bytes], max_atoms: int, last: StateMemo | None
                  ) -> tuple[list[frozenset[GroundAtom]], list[list[GroundAtom] | None],
                             _Read, _Came]:
    """A trace's states, each read from its text as a transition's states are: the first
    one, when it is the agent's memo's text (a trace continuing the agent's last one), is
    the memo's set; a state's atoms seen before are looked up by their texts' pieces, and
    each state is made from the one before by the ids that differ (a step changes few
    atoms); a state whose text repeats the one before is the same set. Parsing them all
    into atoms and looking every atom up cost ~0.2 us an atom, 51 states of a 50-step
    trace. The texts are not remembered whole (wire_atoms.STATES): a trace's passing
    states would push out those many agents' transitions share.

    With the sets, each step's flipped atoms (as :func:`_next_state` gives them: the
    monitor encodes the step's next state from its state by them) and the last state's
    read, which the agent's memo keeps, and the first state's atoms that differ from the memo's set
    (as :func:`_fast` notes them, :data:`_Came`)."""
    out = []
    flips: list[list[GroundAtom] | None] = []
    read: _Read
    came: _Came = None
    first = texts[0]
    if last is not None and _recognised(last, first):
        read = last[1], last[2], last[3], last[4]
        if read[0] > max_atoms:
            raise _Refused  # a memo made under other limits
    elif last is not None and last[3] is not None and len(first) > _SMALL_STATE:
        # Another text of the memo's state (its atoms in another order: a trace after the
        # agent's transition, from a producer iterating a hash set) or another state:
        # made from the memo's set by the ids that differ, as a transition's state is,
        # the memo's very set when none do (the monitor then reuses its encoding),
        # where a set of its own was built from its ids.
        read, told = _next_state(first, max_atoms, last[2], last[3], last[4], False)
        if told is not None:
            came = (last[2], told)
    else:
        read = _state(first, max_atoms, False)
    out.append(read[1])
    before = first
    for raw in texts[1:]:
        flipped = None
        if raw == before:
            pass  # a refused or idle step: one set for both (encoded once)
        elif read[2] is not None and len(raw) > _SMALL_STATE:
            read, flipped = _next_state(raw, max_atoms, read[1], read[2], read[3], False)
        else:
            after = _state(raw, max_atoms, False)
            read = (after[0], read[1], after[2], after[3]) if after[1] == read[1] else after
        out.append(read[1])
        flips.append(flipped)
        before = raw
    return out, flips, read, came


def _tagged(raw: bytes) -> bool:
    """Whether ``raw``, an event msgspec accepted, has its ``"type"`` key spelt without
    escapes (False: it has none, or one with escapes). Outside a key,
    ``"type"`` followed by a colon is not valid JSON (a string's own quote is escaped, so
    one inside a string can only close it), and a key ending in an escaped ``\\"type`` is
    an unknown field, which msgspec refused."""
    at = raw.find(b'"type"')
    while at >= 0:
        at += 6
        while at < len(raw) and raw[at] in b" \t\n\r":
            at += 1
        if raw[at:at + 1] == b":":
            return True
        at = raw.find(b'"type"', at)
    return False


def _fast(raw: bytes, limits: DecodeLimits, key: bytes | None, partition: int,
          offset: int, memo: list[Any] | None = None,
          known_ids: tuple[str, str] | None = None) -> list[AgentTransition]:
    event: Any  # _Transition | _Trace, told apart by type()
    # The states' texts cut out first when the C splitter is built (wire_split): msgspec
    # then parses the rest only, and no key came twice (the splitter compared them).
    cut = None if _SPLIT is None else _SPLIT(raw)
    if cut is not None:
        event = _TRANSITION(cut[0])
    else:
        # A trace's states cut out likewise: msgspec skipped their texts byte by byte for
        # the Raw members, and the key guard counted the colons over them (~15% of a
        # trace's decode on an outside producer's fleet, session 15).
        cut_trace = None if _SPLIT_TRACE is None else _SPLIT_TRACE(raw)
        if cut_trace is not None:
            return _trace(_TRACE(cut_trace[0]), raw, limits, key, partition, offset, memo,
                          cut_trace[1], cut_trace[2])
        # The union, which requires the tag: a lone struct's decoder takes it as given, and
        # the key guard's colon count can miss the tag when a string holds a colon.
        event = _DECODER.decode(raw)
        if type(event) is not _TRANSITION_STRUCT:
            return _trace(event, raw, limits, key, partition, offset, memo)
        if not _tagged(raw):
            # Decoded alone, msgspec takes a missing tag as given, and the key guard
            # below counts it as a key: a key given twice would then balance the count.
            # The union's decoder needs the tag (msgspec.ValidationError without it): a
            # "type" spelt with escapes stays on this path.
            _DECODER.decode(raw)
    # The fields read once (astuple, one C call; a Struct's attribute costs a lookup each
    # time, and the hot path read some three times).
    (agent_id, family, state_raw, action, next_state_raw, v, episode_id, time_raw, optimal,
     step, executed) = _FIELDS(event)
    # msgspec takes true for Literal[1] (True == 1 in Python): leave it to the schema.
    if (v is not _UNSET and type(v) is not int) \
            or (key is not None and key != agent_id.encode()):
        raise _Refused
    action_text = bytes(action)
    interned = _ACTIONS.get(action_text)  # (its generation checked when used)
    if interned is None:
        # Read before anything else, as the envelope's decoder read it: a message whose
        # action is not an array of strings changes nothing (msgspec.ValidationError).
        action = _ATOM_TEXT(action_text)
    fields = 6
    if episode_id is _UNSET:
        episode_id = None
    else:
        fields += 1
    # The caller's known ids compared as strings (no hash), the caches' sets otherwise.
    if (episode_id is not None and episode_id not in _VALID_IDS) \
            or ((known_ids is None or agent_id != known_ids[0] or family != known_ids[1])
                and (agent_id not in _VALID_AGENT_IDS or family not in _VALID_IDS)):
        _ids(agent_id, family, episode_id)
    max_atoms = limits.max_state_atoms
    # Copied once to bytes (the helpers take bytes: bytes() of bytes copies nothing but
    # is a generic call of the type, ~600 instructions), and the
    # helpers the hot path called once a record written out here (~0.1 us a call).
    time = b"" if time_raw is _NONE_TIME else bytes(time_raw)
    fields += (time_raw is not _NONE_TIME) + (step is not _UNSET) + (executed is not _UNSET) \
        + (v is not _UNSET) + (optimal is not _UNSET)
    if cut is not None:
        # Its keys all different, and as many as the fields decoded: each one given (msgspec
        # takes the tag as given when it decodes one struct alone).
        if cut[3] != fields:
            raise _Refused
        state, next_state = cut[1], cut[2]
    else:
        state = bytes(state_raw)
        next_state = bytes(next_state_raw)
        if not transition_keys_unique(raw, fields, state, next_state, time):
            raise _Refused
    # Typed: mypyc then reads its items directly (an Any's cost a generic lookup each).
    last: StateMemo | None = memo[0] if memo is not None else None
    came: _Came = None
    sent = state
    matched = False
    reordered = False
    shuffled = False  # out of order, read as sent from the memo (_IN_ORDER)
    if last is not None:  # _fingerprint(state) == last[0], without building it
        kept = last[0]
        if isinstance(kept, bytes):
            matched = kept == state
        else:  # also a memo kept by its hashed fingerprint (hashed()), of a short text
            matched = kept[0] == len(state) and kept[1] == hash(state)
        if not matched and _CANONICAL is not None \
                and wire_atoms.known_state(state) is None:
            if _IN_ORDER is not None and last[3] is not None \
                    and last[4] == wire_atoms.generation and len(state) > _SMALL_STATE:
                # Both states read as sent, from the memo's set by the ids that differ,
                # and neither remembered when out of order (a text of ever other orders
                # would push out of STATES the texts in use); the state as sent is
                # remembered the second time it comes (_admit), as below.
                shuffled = not _IN_ORDER(state)
            else:
                canon = _CANONICAL(state)
                if canon is not state:
                    # Its atoms out of order: both states read by their canonical texts
                    # (_CANONICAL), the memo kept by the texts as sent. A text as sent
                    # that is read before (_admit) is not rebuilt.
                    state = canon
                    reordered = True
    next_sent = next_state
    if reordered and _CANONICAL is not None:
        next_state = _CANONICAL(next_state)
    if last is not None and matched:
        n, s, ids, generation = last[1], last[2], last[3], last[4]
    elif last is not None and last[3] is not None and len(state) > _SMALL_STATE:
        # Another text: the same atoms in another order or spacing (a producer
        # iterating a hash set), or another of the agent's states (a reset, episodes
        # interleaved). Made from the memo's set by the atoms that differ, it is the
        # memo's very set when none do, whose encoding the monitor then reuses.
        (n, s, ids, generation), state_told = _next_state(
            state, max_atoms, last[2], last[3], last[4], not shuffled)
        if state_told is not None:
            came = (last[2], state_told)
    else:
        n, s, ids, generation = _state(state, max_atoms)
        if last is not None and s == last[2]:
            s = last[2]  # as above; sets of other sizes compare in no time
    # A refused or idle action repeats the state: one set for both (the monitor then
    # encodes it once).
    same = next_state == state
    flipped = None
    kept_text: bytes | None = None
    if same:
        n2, s2, ids2, generation2 = n, s, ids, generation
    elif ids is None or len(next_state) <= _SMALL_STATE:
        n2, s2, ids2, generation2 = _state(next_state, max_atoms, not shuffled)
        if s2 == s:
            s2 = s  # (_next_state does so when the ids are known)
    else:
        (n2, s2, ids2, generation2), flipped = _next_state(
            next_state, max_atoms, s, ids, generation, not shuffled)
        kept_text = _KEPT_TEXT[0]
    if n > max_atoms:
        raise _Refused  # a memo made under other limits
    if reordered or shuffled:
        # Only the state: once it is read as sent, so is the next state (and it is
        # remembered as sent there), and the next state's text is not hashed for a
        # producer of ever other orders.
        _admit(sent, n, s, ids, generation)
    if memo is not None:
        # When they are one text, the state's object: its hash, if taken above, is kept.
        # Read by canonical texts, the next state as sent.
        text = next_sent if reordered else state if same else next_state
        fingerprint: Fingerprint
        if len(text) <= _MEMO_TEXT:
            fingerprint = text
        elif same and matched and last is not None:
            fingerprint = last[0]  # the text the memo holds: the same
        else:
            # A long text read by its canonical form (reordered) is not its own read's.
            # The table's own copy of the text, every agent's memo sharing it: matching
            # the next record's state is then a comparison, where its length and hash
            # took hashing that state (SipHash over 1.4-2.8 KB, ~0.5-1 us) at each
            # record. The read just made found it (a step, or a lookup whose hash the
            # text keeps), else it is looked up.
            if kept_text is not None and not reordered:
                fingerprint = kept_text
            else:
                shared = None if reordered else wire_atoms.STATES.get(text)
                fingerprint = shared[3] if shared is not None else (len(text), hash(text))
        memo[0] = (fingerprint, n2, s2, ids2, generation2)
        if len(memo) > 1:
            memo[1] = flipped
            if len(memo) > 2:
                memo[2] = None
                if len(memo) > 3:
                    memo[3] = came
    when = None if time_raw is _NONE_TIME else _time(time)
    if interned is not None and _actions_generation == wire_atoms.generation:
        action = interned
    else:
        # Kept from an earlier generation, or reading the states turned the vocabulary:
        # the same atom (a pure function of the text), learnt anew.
        action = _text_action(action_text, action if interned is None else interned)
    return [_NEW(
        agent_id, family, episode_id, None if step is _UNSET else step, when,
        s, action, s2, optimal is True,
        None if executed is _UNSET else executed, partition, offset,
    )]


def _text_action(text: bytes, action: GroundAtom) -> GroundAtom:
    """The interned atom of an action's text, ``action`` its atom as decoded (or as
    :data:`_ACTIONS` held it in an earlier generation: a pure function of the text),
    learnt if new and kept by its text: what :func:`_fast` does for a transition's
    action."""
    known = _ID_GET(action)
    if known is None:
        _learn((action,))
    else:
        action = _ATOM_OF(known)
    if _actions_generation != wire_atoms.generation:
        _forget_actions()  # learning it turned the vocabulary
    if len(text) <= MAX_ACTION_TEXT:
        if len(_ACTIONS) >= MAX_ACTIONS:
            _ACTIONS.clear()  # a bound on memory; refilled from the traffic
        _ACTIONS[text] = action
    return action


def _forget_actions() -> None:
    global _actions_generation
    _ACTIONS.clear()
    _actions_generation = wire_atoms.generation


def _trace(event: _Trace, raw: bytes, limits: DecodeLimits, key: bytes | None,
           partition: int, offset: int, memo: list[Any] | None = None,
           cut: list[bytes] | None = None, keys: int = 0) -> list[AgentTransition]:
    """A trace event's transitions. ``cut``: its states' texts as the trace splitter cut
    them (``event`` then decoded from the envelope, its states ``[]``), with the number
    of its members, ``keys``, all different (the splitter compared them)."""
    # The fields read once, in one C call, as _fast reads a transition's (a Struct's
    # attribute read from compiled code is a generic lookup: some twenty a trace, and
    # two more a step for its transitions).
    (agent_id, family, states_raw, actions_raw, v, episode_raw, time_raw, optimal_raw,
     start_raw, executed_raw) = _FIELDS(event)
    # msgspec takes true for Literal[1] (True == 1 in Python): leave it to the schema.
    if (v is not _UNSET and type(v) is not int) \
            or (key is not None and key != agent_id.encode()):
        raise _Refused
    episode_id: str | None = None if episode_raw is _UNSET else episode_raw
    optimal = optimal_raw is True
    if agent_id not in _VALID_AGENT_IDS or family not in _VALID_IDS \
            or (episode_id is not None and episode_id not in _VALID_IDS):
        _ids(agent_id, family, episode_id)
    max_atoms = limits.max_state_atoms
    time = b"" if time_raw is _NONE_TIME else bytes(time_raw)
    fields = 5 + (start_raw is not _UNSET) + (executed_raw is not _UNSET) \
        + (v is not _UNSET) + (episode_raw is not _UNSET) + (time_raw is not _NONE_TIME) \
        + (optimal_raw is not _UNSET)
    texts: list[bytes]
    if cut is not None:
        # As many members as fields decoded, each given (msgspec takes the tag as given
        # when it decodes one struct alone).
        if keys != fields:
            raise _Refused
        texts = cut
    else:
        if not trace_keys_unique(raw, fields, time):
            raise _Refused
        texts = [bytes(text) for text in states_raw]
    executed: list[bool] | None = None if executed_raw is _UNSET else executed_raw
    n = len(actions_raw)
    if not texts or len(texts) != n + 1 \
            or (executed is not None and len(executed) != n) \
            or n > limits.max_trace_steps:
        raise _Refused
    # The actions' texts read before the states, as the envelope's decoder read them when
    # it decoded their atoms: a trace whose action is not an array of strings changes
    # nothing (msgspec.ValidationError). A text seen before is its interned atom, as a
    # transition's action is (_ACTIONS: decoding the strings, hashing their tuple and
    # looking it up in the vocabulary cost ~2,000 instructions a step).
    action_texts = [bytes(text) for text in actions_raw]
    # The generation the kept atoms are of (-1: the map is an earlier one's); an atom
    # read below may turn the vocabulary and start the map anew before the next is used.
    kept_in = wire_atoms.generation if _actions_generation == wire_atoms.generation else -1
    actions: list[GroundAtom | None] = []
    decoded: list[GroundAtom] = []
    for text in action_texts:
        interned = _ACTIONS.get(text)  # (its generation checked when used)
        actions.append(interned)
        decoded.append(_ATOM_TEXT(text) if interned is None else interned)
    when = None if time_raw is _NONE_TIME else _time(time)
    states, flips, last, came = _trace_states(texts, max_atoms,
                                              None if memo is None else memo[0])
    if memo is not None:
        # The agent's memo keeps the trace's last state, as it keeps a transition's next
        # state: a trace continuing this one (or a transition) starts from that set.
        text = texts[-1]
        memo[0] = (text if len(text) <= _MEMO_TEXT else (len(text), hash(text)),
                   last[0], last[1], last[2], last[3])
        if len(memo) > 1:
            memo[1] = None
        if len(memo) > 2:
            memo[2] = flips
            if len(memo) > 3:
                memo[3] = came
    read: list[GroundAtom] = []
    # Read again only after a call that may turn it (a module's variable read from
    # compiled code is a lookup by name, ~270 instructions, once a step before).
    now = wire_atoms.generation
    for i, interned in enumerate(actions):
        # Kept from an earlier generation, or reading the states (or an action) turned
        # the vocabulary: learnt anew, as _fast does.
        if interned is not None and kept_in == now:
            read.append(interned)
        else:
            read.append(_text_action(action_texts[i], decoded[i]))
            now = wire_atoms.generation
    start: int = 0 if start_raw is _UNSET else start_raw
    return [
        _NEW(
            agent_id, family, episode_id, start + i, when,
            states[i], a, states[i + 1], optimal,
            executed[i] if executed is not None else None, partition, offset,
        )
        for i, a in enumerate(read)
    ]
