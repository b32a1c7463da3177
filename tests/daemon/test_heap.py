"""settle_heap, in a process of its own (it changes the interpreter's collector)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc, weakref
from capwatch.daemon.heap import FULL_COLLECTION_AFTER, YOUNG_COLLECTION_AFTER, settle_heap
assert gc.get_freeze_count() == 0
settle_heap()
assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
assert gc.get_threshold()[0] == YOUNG_COLLECTION_AFTER
assert gc.get_threshold()[2] == FULL_COLLECTION_AFTER

class Node:
    pass

# A reference cycle made after start is garbage the collector still finds.
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None
print("ok")
"""


def test_the_startup_heap_is_frozen_and_later_cycles_are_still_collected() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


RELEASE = """
import os
from capwatch.daemon.heap import release_freed

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

# Freed blocks amid blocks still in use (agents held as bytes amid those admitted since):
# glibc keeps such memory resident until asked.
kept, freed = [], []
for i in range(4000):
    freed.append(bytearray(16384))
    kept.append(bytearray(600))
before = rss()
del freed
after_free = rss()
assert release_freed()
released = rss()
print(before - after_free, after_free - released)
"""


def test_memory_freed_amid_live_objects_goes_back_to_the_system() -> None:
    out = subprocess.run([sys.executable, "-c", RELEASE], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    kept_resident, released = map(int, out.stdout.split())
    freed = 4000 * 16384
    assert kept_resident < freed / 4  # freeing alone kept it resident
    assert released > freed / 2
