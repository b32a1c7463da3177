"""An idle agent watch held as bytes (:meth:`AgentWatch.freeze
<capwatch.daemon.agent_watch.AgentWatch.freeze>`): its monitor's idle state, its execution
times and its last state in one pickle, compressed when that pays, and back, exactly as they
were."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from itertools import repeat
from typing import Any, NoReturn

import msgspec

from capwatch.contracts.wire_fast import StateMemo, hashed
from capwatch.daemon.watch_records import Evidence
from capwatch.model.domain import Domain, GroundAtom
from capwatch.model.grounding import SharedGrounding, decode_bits
from capwatch.monitor.compact_bytes import compress, decompress
from capwatch.monitor.drift import DriftAlarm
from capwatch.monitor.transition_monitor import (
    IDLE_HAD_LAST,
    IDLE_MASK,
    IDLE_OWN,
    MonitorLimits,
    TransitionMonitor,
)

NO_STATE: frozenset[GroundAtom] = frozenset()


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError("a frozen watch's containers are read-only: thaw the watch first")


class _ReadOnlyDict(dict[Any, Any]):
    """An empty dict that refuses every write. A dict, not a mapping proxy cast to one:
    compiled modules (capwatch/native.py) check a value's declared type at run time."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse


class _ReadOnlyList(list[Any]):
    """An empty list that refuses every write (a list, as :class:`_ReadOnlyDict`)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = remove = pop = clear = sort = reverse = _refuse


FROZEN_TIMES: dict[str, float] = _ReadOnlyDict()
FROZEN_EVIDENCE: list[Evidence] = _ReadOnlyList()
FROZEN_ALARMS: dict[str, DriftAlarm] = _ReadOnlyDict()
FROZEN_BACKOFF: dict[str, tuple[float, int]] = _ReadOnlyDict()
"""What a frozen watch holds instead of its own empty containers: read-only (a write by
mistake fails loudly), and never written, because a watch thaws before it changes."""

RAW_PICKLE = 288
"""A pickle up to this many bytes is held as it is: compressing it saved ~30 bytes of a
small one, for ~8 µs a call with zlib (which set up its whole state each time; zstd's
kept context costs ~2 µs, still not worth it). A pickle starts with its protocol's 0x80,
a zstd frame with 0x28: the first byte tells them apart. (256 until the decoder memo's
key, ~22 bytes, joined the pickle: at 256 it sent 40% of a 40-atom fleet's agents
through zlib, at every freeze and thaw.)"""
_LAST_MASK = True
"""The last state is the monitor's last mask (its idle state holds it already)."""
_ATOMS_OUT = msgspec.msgpack.Encoder().encode
_ATOMS_IN = msgspec.msgpack.Decoder(tuple[tuple[str, ...], ...]).decode
"""An index of the agent's own, its atoms in bit order, as msgpack: a third of what
pickling its tuples cost (~120 atoms for an agent naming objects of its own, frozen at
the first checkpoint past half of limits.max_agents_in_memory, so on the admission
path)."""


def freeze_bytes(monitor: TransitionMonitor,
                 last_state: frozenset[GroundAtom] | tuple[GroundAtom, ...],
                 last_executed: Mapping[str, float], memo: StateMemo | None = None
                 ) -> tuple[bytes, SharedGrounding | None] | None:
    """The bytes of an idle watch and the family grounding they refer to (None for a
    monitor given none); None for a monitor not held as bytes (``idle_state``).

    ``memo``: the decoder's memo of the watch's last state (wire_fast.StateMemo). Its
    fingerprint, atom count and generation are kept (~20 bytes) when its set is
    ``last_state``: the memo is made again at the thaw from the last state the bytes
    hold (:func:`thaw_bytes`), so that the agent's next record, whose state most likely
    repeats its last next-state, is neither parsed nor encoded again. Past half of
    limits.max_agents_in_memory every agent idle at a checkpoint is frozen, and a fleet
    of many agents each sending now and then paid that parse on nearly every record."""
    state = monitor.idle_state(last_state)
    if state is None:
        return None
    last: int | bool | tuple[GroundAtom, ...] | None = None
    if last_state:
        # Its atoms are in the index in use (checked against the model when seen), so
        # its bitset there holds it exactly.
        if state[IDLE_HAD_LAST]:
            # The monitor's own encoding of this very set (idle_state checked it is the
            # one the monitor saw last): exact, nothing to check, and not held twice.
            # Past half of limits.max_agents_in_memory every agent admitted is frozen at
            # the next checkpoint (Registry.compact_idle keeps the mask for it), so this
            # is on the admission path.
            last = _LAST_MASK
        else:
            # Looked up, not interned: looking must not intern anything in an index
            # other agents share (0 for an atom not in it).
            last = sum(map(monitor.index.bits.get, last_state, repeat(0)))
            # A set's atoms are distinct, and so are their bits in the index, unless one
            # is not in it (bit 0): all are in it iff the bitset has as many bits as the
            # set.
            if last.bit_count() != len(last_state):
                last = tuple(last_state)
    own = state[IDLE_OWN]
    if own is not None:
        state = (*state[:IDLE_OWN], (_ATOMS_OUT(own[0]), own[1]), *state[IDLE_OWN + 1:])
    kept = None
    if memo is not None and memo[2] is last_state and last_state:
        kept = (hashed(memo[0]), memo[1], memo[4])
    raw = pickle.dumps((state, tuple(last_executed.items()), last, kept),
                       pickle.HIGHEST_PROTOCOL)
    # A larger one compressed (an index of the agent's own: a sixth of the size, names
    # repeat), at zstd's fast level: on the admission path past half of
    # limits.max_agents_in_memory (capwatch.monitor.compact_bytes).
    return raw if len(raw) <= RAW_PICKLE else compress(raw, fast=True), monitor.shared


def idle_state(frozen: bytes) -> tuple[Any, ...]:
    """(monitor idle state, execution times, last state as bits or atoms, the decoder
    memo's (fingerprint, atom count, generation) or None)."""
    raw = frozen if frozen[0] == 0x80 else decompress(frozen)
    state: tuple[Any, ...] = pickle.loads(raw)
    monitor = state[0]
    own = monitor[IDLE_OWN]
    if own is None:
        return state
    monitor = (*monitor[:IDLE_OWN], (_ATOMS_IN(own[0]), own[1]), *monitor[IDLE_OWN + 1:])
    return monitor, *state[1:]


def frozen_last_state(frozen: tuple[Any, ...], shared: SharedGrounding | None
                      ) -> frozenset[GroundAtom]:
    """The last state in :func:`idle_state`'s ``frozen``: bits of the index the monitor
    used (its own, held in the bytes, or the family's), or atoms."""
    last = frozen[2]
    if last is None:
        return NO_STATE
    if last is _LAST_MASK:
        last = frozen[0][IDLE_MASK]
    if not isinstance(last, int):
        return frozenset(last)
    own = frozen[0][IDLE_OWN]
    if own is not None:
        return decode_bits(own[0], last)
    assert shared is not None
    return shared.index.decode(last)


def thaw_bytes(frozen: bytes, domain: Domain, limits: MonitorLimits,
               shared: SharedGrounding | None
               ) -> tuple[TransitionMonitor, dict[str, float], frozenset[GroundAtom],
                          StateMemo | None]:
    """The monitor, execution times, last state and decoder memo (None: none kept)
    :func:`freeze_bytes` held. The memo's set is the last state itself, the set the
    monitor holds the encoding of; its atoms' ids are not kept (the decoder reads the
    next state whole, as it does for a memo without them)."""
    held = idle_state(frozen)
    state, times, kept = held[0], held[1], held[3]
    last_state = frozen_last_state(held, shared)
    monitor = TransitionMonitor.from_idle_state(domain, limits, shared, state, last_state)
    memo = None if kept is None else (kept[0], kept[1], last_state, None, kept[2])
    return monitor, dict(times), last_state, memo
