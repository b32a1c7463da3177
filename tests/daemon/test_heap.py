"""settle_heap, in a process of its own (it changes the interpreter's collector)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc, weakref
from capwatch.daemon.heap import FULL_COLLECTION_AFTER, settle_heap
assert gc.get_freeze_count() == 0
settle_heap()
assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
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
