"""Outcome-frequency tables over a window of recent executions of one lifted action.

Windows count executions, not seconds: the core reads no clock, and an action that
is executed rarely should keep its evidence until there is newer evidence to replace
it. Only observations whose pre-state tells every outcome apart are counted; the
others are tallied separately (see capwatch.monitor.attribution for why dropping
them does not bias the counts).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from capwatch.monitor.attribution import Attribution

WindowKind = Literal["sliding", "tumbling"]
IntArray = npt.NDArray[np.int64]

_AMBIGUOUS: Final = -1
_EMPTY: Final = -2
_FIRST_ROOM = 16


def _empty(n: int, dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """``n`` empty slots: ``np.full`` costs ~2 µs a call (Python code around empty and
    copyto), a tenth of making a new agent's drift table; ``empty`` and ``fill`` do it in
    a fraction of that."""
    buffer = np.empty(n, dtype=dtype)
    buffer.fill(_EMPTY)
    return buffer
"""Slots a window starts with; it doubles as executions arrive, up to its size: most
agents of a large fleet run an action far fewer times than the window holds."""
_PACK_HEAD = struct.Struct("<qq?")
_PACKED_COUNTS: dict[int, struct.Struct] = {}
"""A window's counts (2 or 3 times k + 1 of them) as :meth:`OutcomeWindow.pack` writes
them, by their number: int64 in the machine's order, the bytes ``np.array(counts,
np.int64).tobytes()`` made and :meth:`OutcomeWindow.unpack` reads (``np.frombuffer``),
for a fifth of its cost (a numpy array made for a few ints: every idle agent's table is
packed at least once past half of limits.max_agents_in_memory)."""


def _counts_struct(n: int) -> struct.Struct:
    packer = _PACKED_COUNTS.get(n)
    if packer is None:
        packer = _PACKED_COUNTS[n] = struct.Struct(f"={n}q")
    return packer


def _index_dtype(k: int) -> type[np.signedinteger[Any]]:
    return np.int8 if k < 127 else np.int16 if k < 32767 else np.int64


def packed_window_end(k: int, data: bytes | memoryview, at: int = 0) -> tuple[int, int]:
    """Where the bytes ``OutcomeWindow.pack`` made (for ``k`` outcomes) from ``at`` end,
    and the window's ``seen``, read from its header without building the window."""
    seen, room, has_completed = _PACK_HEAD.unpack_from(data, at)
    item = np.dtype(_index_dtype(k)).itemsize
    return (_PACK_HEAD.size + at + min(seen, room) * item
            + 8 * (k + 1) * (3 if has_completed else 2), seen)


class OutcomeWindow:
    """The last ``size`` executions of an action, as outcome indices.

    ``sliding``: ``counts()`` is over the last ``size`` executions, updated every step.
    ``tumbling``: ``counts()`` is over the last *completed* block of ``size`` executions,
    so successive tests see disjoint data and are independent under the model.
    ``counts_since(i)`` always reads the sliding buffer, for estimates after a change
    point. Indices are global: the i-th execution since the table was (re)started.
    """

    __slots__ = ("_block", "_buffer", "_completed", "_counts", "_k", "kind", "seen", "size")

    def __init__(self, k: int, size: int, kind: WindowKind = "sliding") -> None:
        if size < 1:
            raise ValueError("window size must be positive")
        if kind not in ("sliding", "tumbling"):
            raise ValueError(f"unknown window kind {kind!r}")
        self._k = k
        self.size = size
        self.kind: WindowKind = kind
        # The narrowest type that holds an outcome index: the buffer is the biggest part
        # of an agent's drift state (8 KB per action at the default window in int64).
        self._buffer = _empty(min(size, _FIRST_ROOM), _index_dtype(k))
        # Plain lists: adding to one element of a numpy array costs ~0.25 µs, three of
        # them at every execution of a probabilistic action. Last slot: ambiguous ones.
        self._counts = [0] * (k + 1)
        self._block = [0] * (k + 1)
        self._completed: list[int] | None = None
        self.seen = 0

    @property
    def k(self) -> int:
        return self._k

    def add(self, attribution: Attribution | int) -> None:
        # Attribution.counted is _AMBIGUOUS for an observation that does not tell every
        # outcome apart, else its outcome.
        value = attribution if isinstance(attribution, int) else attribution.counted
        if not (value == _AMBIGUOUS or 0 <= value < self._k):
            raise ValueError(f"outcome {value} out of range for {self._k} outcomes")
        slot = self.seen % self.size
        buffer = self._buffer
        if slot >= len(buffer):
            self._room(2 * len(buffer))  # still filling: slot == seen < size
            buffer = self._buffer
        old: int = buffer.item(slot)
        if old != _EMPTY:
            self._counts[old] -= 1
        buffer[slot] = value
        self._counts[value] += 1
        self._block[value] += 1
        self.seen += 1
        if self.kind == "tumbling" and self.seen % self.size == 0:
            self._completed = self._block.copy()
            self._block = [0] * (self._k + 1)

    def _room(self, n: int) -> None:
        """Grow the buffer to ``n`` slots (at most the window's size)."""
        n = min(self.size, n)
        if n > len(self._buffer):
            grown = _empty(n, self._buffer.dtype)
            grown[:len(self._buffer)] = self._buffer
            self._buffer = grown

    def counts(self) -> IntArray:
        """Counts of distinguishable observations in the window the tests use."""
        if self.kind == "tumbling":
            if self._completed is None:
                return np.zeros(self._k, dtype=np.int64)
            return np.array(self._completed[: self._k], dtype=np.int64)
        return np.array(self._counts[: self._k], dtype=np.int64)

    def tested_counts(self) -> tuple[int, ...]:
        """:meth:`counts` as a tuple, without numpy: what the audit's test of this window
        is a function of (with the table's probabilities and settings), so the fleet
        audit keeps a table's result while these stay the same (``DriftMonitor.audit``)."""
        if self.kind == "tumbling":
            if self._completed is None:
                return (0,) * self._k
            return tuple(self._completed[: self._k])
        return tuple(self._counts[: self._k])

    def ambiguous(self) -> int:
        """Observations in the tested window that were set aside as ambiguous."""
        if self.kind == "tumbling":
            return 0 if self._completed is None else int(self._completed[-1])
        return int(self._counts[-1])

    def span(self) -> tuple[int, int]:
        """[start, end) global indices of the window the tests use."""
        if self.kind == "tumbling":
            end = (self.seen // self.size) * self.size
            return (max(0, end - self.size), end)
        return (max(0, self.seen - self.size), self.seen)

    def counts_since(self, start: int) -> tuple[IntArray, int, int]:
        """(counts, ambiguous, first index) over retained observations with index ≥ start."""
        first = max(start, self.seen - self.size, 0)
        idx = np.arange(first, self.seen) % self.size
        values = self._buffer[idx].astype(np.int64)
        counts = np.bincount(values[values >= 0], minlength=self._k).astype(np.int64)
        return counts, int((values == _AMBIGUOUS).sum()), first

    def retained(self) -> IntArray:
        """The retained outcome indices, oldest first (-1 = ambiguous)."""
        if self.seen <= self.size:
            # Not wrapped yet (every agent admitted lately): the first ``seen`` slots.
            return self._buffer[:self.seen].astype(np.int64)
        kept = min(self.seen, self.size)
        idx = np.arange(self.seen - kept, self.seen) % self.size
        return self._buffer[idx].astype(np.int64)

    def export_state(self, *, values_array: bool = False) -> dict[str, Any]:
        """Everything ``counts``, ``counts_since`` and later ``add`` calls depend on, as
        plain values: the retained outcome indices oldest first (-1 = ambiguous).
        ``values_array``: those as an int64 array rather than a list (for the packed
        snapshot, which packs them as an array: a list of 2,000 ints cost ~300 µs)."""
        values = self.retained()
        return {
            "k": self._k, "size": self.size, "kind": self.kind, "seen": self.seen,
            "values": values if values_array else values.tolist(),
            "block": list(self._block),
            "completed": None if self._completed is None else list(self._completed),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Become the window ``export_state`` described; raises ValueError if it does not
        fit this window's shape (outcome count, size or kind differ)."""
        if (state["k"], state["size"], state["kind"]) != (self._k, self.size, self.kind):
            raise ValueError(
                f"window state is for k={state['k']}, size={state['size']}, "
                f"{state['kind']}; this window is k={self._k}, size={self.size}, {self.kind}")
        seen = int(state["seen"])
        values = np.asarray(state["values"], dtype=np.int64)
        block = np.asarray(state["block"], dtype=np.int64)
        completed = state["completed"]
        if seen < 0 or len(values) != min(seen, self.size) or block.shape != (self._k + 1,):
            raise ValueError("window state is inconsistent with its own length")
        if values.size and (values.min() < _AMBIGUOUS or values.max() >= self._k):
            raise ValueError("window state holds an outcome index out of range")
        if completed is not None and len(completed) != self._k + 1:
            raise ValueError("window state's completed block has the wrong length")
        self.clear()
        self.seen = seen
        self._room(seen)
        self._buffer[np.arange(seen - len(values), seen) % self.size] = values
        counts = np.bincount(values + 1, minlength=self._k + 1)
        # bincount put ambiguous (-1) first; the table keeps it in the last slot.
        self._counts = [int(v) for v in np.roll(counts, -1)]
        self._block = [int(v) for v in block]
        self._completed = None if completed is None else [int(v) for v in completed]

    def pack(self) -> bytes:
        """Every field as bytes (see :meth:`unpack`): an idle agent's window held in memory
        costs its bytes rather than an array and three lists of Python integers."""
        kept = min(self.seen, len(self._buffer))
        completed = self._completed
        counts = [*self._counts, *self._block, *(completed or ())]
        return b"".join((_PACK_HEAD.pack(self.seen, len(self._buffer), completed is not None),
                         self._buffer[:kept].tobytes(),
                         _counts_struct(len(counts)).pack(*counts)))

    def unpack(self, data: bytes | memoryview, at: int = 0) -> int:
        """Become the window :meth:`pack` described (for this window's k, size and kind),
        field for field, the buffer's room included; returns where its bytes end."""
        seen, room, has_completed = _PACK_HEAD.unpack_from(data, at)
        at += _PACK_HEAD.size
        dtype = self._buffer.dtype
        kept = min(seen, room)
        buffer = _empty(room, dtype)
        buffer[:kept] = np.frombuffer(data, dtype, kept, at)
        at += kept * dtype.itemsize
        width = self._k + 1
        n = width * (3 if has_completed else 2)
        counts: list[int] = np.frombuffer(data, np.int64, n, at).tolist()
        self._counts = counts[:width]
        self._block = counts[width:2 * width]
        self._completed = counts[2 * width:] if has_completed else None
        self._buffer = buffer
        self.seen = seen
        return at + 8 * n

    def clear(self) -> None:
        self._buffer = _empty(min(self.size, _FIRST_ROOM), self._buffer.dtype)
        self._counts = [0] * (self._k + 1)
        self._block = [0] * (self._k + 1)
        self._completed = None
        self.seen = 0
