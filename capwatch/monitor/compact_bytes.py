"""Compression of bytes a replica holds in memory only (never stored or sent): idle
agents' watches (daemon.watch_freezing) and drift tables (DriftMonitor.pack).

Zstandard at level 1, not zlib: on an agent with its own atom index (~5 KB of names to
hold, the largest thing freezing does) zlib's level 1 took ~29 µs and ~1,000 bytes,
zstd ~12 µs and ~870 bytes, and inflating ~12 against ~7 µs; the cost of both grows with
the bytes, so with the size of the agents' states. The contexts are kept, one per thread
(zstandard's are not thread-safe): making one costs ~15 µs, more than compressing a few
KB with it. A frame starts with zstd's magic number 0x28 (never a pickle's 0x80).

``fast``: zstd's level -1 instead of 1, for bytes made often and held briefly or in
bulk. An idle watch on an index of its own (~5 KB pickle, most of it its atoms' names)
is frozen at the first checkpoint past half of limits.max_agents_in_memory, so on the
admission path of every agent naming objects of its own: -1 took 9.8-10.9 µs against
14.2-15.5 and ~4% more bytes (946 against 908 on own-objects-bursty's; -3 and -5 were
no faster and 45-100% larger). Inflating either takes the same decoder."""

from __future__ import annotations

import threading

import zstandard

_LOCAL = threading.local()


LEVEL = 1
FAST_LEVEL = -1


def compress(raw: bytes, fast: bool = False) -> bytes:
    """``raw`` as one zstd frame (holding its size, which :func:`decompress` needs), at
    :data:`FAST_LEVEL` if ``fast`` (see the module doc)."""
    try:
        pack: zstandard.ZstdCompressor = _LOCAL.fast if fast else _LOCAL.pack
    except AttributeError:
        _LOCAL.pack = zstandard.ZstdCompressor(level=LEVEL)
        _LOCAL.fast = zstandard.ZstdCompressor(level=FAST_LEVEL)
        pack = _LOCAL.fast if fast else _LOCAL.pack
    # Copied: zstandard hands back a bytes object of the worst case's size, only its
    # length set to the frame's (the allocation stays: ~5 KB held for a 900-byte frame
    # of a 5 KB pickle, more than the uncompressed bytes).
    return bytes(memoryview(pack.compress(raw)))


def decompress(frame: bytes | memoryview) -> bytes:
    """The bytes :func:`compress` was given."""
    try:
        unpack: zstandard.ZstdDecompressor = _LOCAL.unpack
    except AttributeError:
        unpack = _LOCAL.unpack = zstandard.ZstdDecompressor()
    return unpack.decompress(frame)
