"""The daemon process's garbage collector, set for a heap of many long-lived agents.

CPython's cyclic collector rescans every tracked object at each full collection, and
triggers one whenever the long-lived objects grew by a quarter. A replica admitting
tens of thousands of agents (each a handful of tracked objects: its watch, monitor,
buffers) was spending about a third of its admission time rescanning the same agents
and the startup heap (modules, schemas, family models), none of which is garbage.

:func:`settle_heap` runs once, in ``capwatch run`` before the main loop starts:

- everything alive after startup is moved out of the collector's sight
  (``gc.freeze``): it lives as long as the process, and reference counting still frees
  anything of it that is released without a cycle;
- a full collection waits for 100 middle-generation collections instead of 10, so a
  burst of new agents does not rescan the whole heap every ~70,000 allocations; cyclic
  garbage is still collected by the young generations or, later, by a full collection;
- a young collection waits for 10,000 new container objects instead of 700. Each record
  leaves a few behind for a while (the decoder's memo and the sets of a state not seen
  before live until the agent's next record, a state's read until its cache turns), and
  a collection visits every item of each: at 700, a record's sets were visited about
  once in the young and once in the middle generation before most of them died anyway,
  a cost that grows with the state (100-atom states: ~10 us of ~65 us a record; 46
  atoms: ~1.5 us of ~25). With 10,000 most of them are freed by reference counting
  before any collection sees them (~2 us and ~1 us). Cyclic garbage waits a little
  longer; a young collection takes a few milliseconds at most.

Not done by ``build_service`` or ``Pipeline`` themselves: a process that runs many
daemons in turn (the test suite) would keep each one's reference cycles forever.

:func:`release_freed` hands memory freed in the middle of the heap back to the system
(glibc's ``malloc_trim``), which glibc does by itself only at the heap's top: an agent
held as bytes or evicted frees its monitor, index and sets, tens of KB for an agent on
an index of its own, amid the long-lived watches admitted meanwhile, and the process
kept it resident (3.6 KB of RSS per idle agent held as bytes where the agent holds 1 KB).
The pipeline calls it after a checkpoint or an eviction that made agents smaller:
~10-20 ms for a heap of 300 MB.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable

FULL_COLLECTION_AFTER = 100
"""Middle-generation collections before a full one (CPython's default is 10)."""
YOUNG_COLLECTION_AFTER = 10_000
"""New container objects (less those freed) before a young collection (CPython's
default is 700)."""


def settle_heap() -> None:
    """Freeze the startup heap and space out full collections (see the module doc)."""
    gc.collect()
    gc.freeze()
    _, middle, _ = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_AFTER, middle, FULL_COLLECTION_AFTER)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc: nothing to call (its allocator returns memory its way)
    return trim


_TRIM = _malloc_trim()


def release_freed() -> bool:
    """Return the heap's free pages to the system (see the module doc); False where the
    C library has no ``malloc_trim``."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
