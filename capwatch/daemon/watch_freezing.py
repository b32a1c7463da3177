"""An idle agent watch held as bytes (:meth:`AgentWatch.freeze
<capwatch.daemon.agent_watch.AgentWatch.freeze>`): its monitor's idle state, its execution
times and its last state in one marshal, compressed when that pays, and back, exactly as
they were.

Compiled (capwatch/native.py): past half of ``limits.max_agents_in_memory`` every agent
idle at a checkpoint is frozen, so this is on the admission path. The read-only
placeholders a frozen watch holds are dict and list subclasses, which mypyc does not
compile: they live in :mod:`capwatch.daemon.watch_records`."""

from __future__ import annotations

import marshal
from collections.abc import Mapping
from itertools import repeat
from typing import Any, Final

import msgspec

from capwatch.contracts.wire_fast import StateMemo, hashed
from capwatch.daemon.watch_records import FROZEN_ALARMS as FROZEN_ALARMS
from capwatch.daemon.watch_records import FROZEN_BACKOFF as FROZEN_BACKOFF
from capwatch.daemon.watch_records import FROZEN_EVIDENCE as FROZEN_EVIDENCE
from capwatch.daemon.watch_records import FROZEN_TIMES as FROZEN_TIMES
from capwatch.model.domain import Domain, GroundAtom
from capwatch.model.grounding import SharedGrounding, decode_bits
from capwatch.monitor.compact_bytes import compress, decompress
from capwatch.monitor.transition_monitor import (
    IDLE_HAD_LAST,
    IDLE_MASK,
    IDLE_OWN,
    MonitorLimits,
    TransitionMonitor,
)

NO_STATE: frozenset[GroundAtom] = frozenset()


RAW_BYTES: Final = 288
"""Bytes up to this many are held as they are: compressing them saved ~30 bytes of a
small one, for ~8 µs a call with zlib (which set up its whole state each time; zstd's
kept context costs ~2 µs, still not worth it). (256 until the decoder memo's key, ~22
bytes, joined them: at 256 it sent 40% of a 40-atom fleet's agents through zlib, at every
freeze and thaw.)

The values are plain (ints, floats, strings, tuples, bools, None, bytes), so marshal
writes them, not pickle: ~11,000 instructions where pickle took ~19,000 for an outside
fleet's agent (callgrind), and reading them back ~10% cheaper; the bytes live in this
process only, so marshal's format being Python's own is no matter. A marshal of the
4-tuple starts with its small-tuple code ``)`` (0x29, 0xa9 with the reference flag), a
zstd frame with 0x28: the first byte tells them apart."""
_FRAME: Final = 0x28
"""A zstd frame's first byte (capwatch.monitor.compact_bytes)."""
_LAST_MASK: Final = True
"""The last state is the monitor's last mask (its idle state holds it already)."""
_ATOMS_OUT: Final = msgspec.msgpack.Encoder().encode
_ATOMS_IN: Final = msgspec.msgpack.Decoder(tuple[tuple[str, ...], ...]).decode
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
    raw = marshal.dumps((state, tuple(last_executed.items()), last, kept))
    # A larger one compressed (an index of the agent's own: a sixth of the size, names
    # repeat), at zstd's fast level: on the admission path past half of
    # limits.max_agents_in_memory (capwatch.monitor.compact_bytes).
    return raw if len(raw) <= RAW_BYTES else compress(raw, fast=True), monitor.shared


def idle_state(frozen: bytes) -> tuple[Any, ...]:
    """(monitor idle state, execution times, last state as bits or atoms, the decoder
    memo's (fingerprint, atom count, generation) or None)."""
    raw = decompress(frozen) if frozen[0] == _FRAME else frozen
    state: tuple[Any, ...] = marshal.loads(raw)
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
