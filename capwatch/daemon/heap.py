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
  garbage is still collected by the young generations or, later, by a full collection.

Not done by ``build_service`` or ``Pipeline`` themselves: a process that runs many
daemons in turn (the test suite) would keep each one's reference cycles forever.
"""

from __future__ import annotations

import gc

FULL_COLLECTION_AFTER = 100
"""Middle-generation collections before a full one (CPython's default is 10)."""


def settle_heap() -> None:
    """Freeze the startup heap and space out full collections (see the module doc)."""
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTION_AFTER)
