"""An idle agent watch held as bytes (:meth:`AgentWatch.freeze
<capwatch.daemon.agent_watch.AgentWatch.freeze>`): its monitor's idle state, its execution
times and its last state in one zlib'd pickle, and back, exactly as they were."""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Mapping
from typing import Any

from capwatch.model.domain import Domain, GroundAtom
from capwatch.model.grounding import SharedGrounding
from capwatch.monitor.transition_monitor import MonitorLimits, TransitionMonitor

NO_STATE: frozenset[GroundAtom] = frozenset()


def freeze_bytes(monitor: TransitionMonitor, last_state: frozenset[GroundAtom],
                 last_executed: Mapping[str, float]) -> tuple[bytes, SharedGrounding] | None:
    """The bytes of an idle watch and the grounding they refer to; None for a monitor
    that does not share its family's grounding (nothing compact to refer to)."""
    shared = monitor.shared
    state = monitor.idle_state(last_state)
    if state is None or shared is None:
        return None
    last: int | tuple[GroundAtom, ...] | None = None
    if last_state:
        # Its atoms are in the shared index (checked against the model when seen): its
        # bitset, decoded again, is an equal set of the index's own atoms. (known_bit:
        # looking must not intern anything in an index other agents share.)
        index = shared.index
        last = state[3] if state[4] else sum(map(index.known_bit, last_state))
        if index.decode(last) != last_state:
            last = tuple(last_state)
    # zlib level 1: a third smaller (names and bitsets repeat), ~2 µs to inflate.
    return zlib.compress(pickle.dumps((state, tuple(last_executed.items()), last),
                                      pickle.HIGHEST_PROTOCOL), 1), shared


def idle_state(frozen: bytes) -> tuple[Any, ...]:
    """(monitor idle state, execution times, last state as bits or atoms)."""
    state: tuple[Any, ...] = pickle.loads(zlib.decompress(frozen))
    return state


def frozen_last_state(last: int | tuple[GroundAtom, ...] | None,
                      shared: SharedGrounding | None) -> frozenset[GroundAtom]:
    if last is None or shared is None:
        return NO_STATE
    return shared.index.decode(last) if isinstance(last, int) else frozenset(last)


def thaw_bytes(frozen: bytes, domain: Domain, limits: MonitorLimits, shared: SharedGrounding
               ) -> tuple[TransitionMonitor, dict[str, float], frozenset[GroundAtom]]:
    """The monitor, execution times and last state :func:`freeze_bytes` held."""
    state, times, last = idle_state(frozen)
    last_state = frozen_last_state(last, shared)
    monitor = TransitionMonitor.from_idle_state(domain, limits, shared, state, last_state)
    return monitor, dict(times), last_state
