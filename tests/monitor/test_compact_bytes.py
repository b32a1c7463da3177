"""Bytes held in memory compressed (capwatch.monitor.compact_bytes) come back exactly,
from any thread (each keeps its own zstd contexts)."""

from __future__ import annotations

import os
import pickle
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

from capwatch.monitor.compact_bytes import compress, decompress


def test_bytes_come_back_exactly_and_repeats_shrink() -> None:
    names = pickle.dumps([("at", f"key{k}-7e18c6d1", f"node{k % 5}-7e18c6d1")
                          for k in range(200)], pickle.HIGHEST_PROTOCOL)
    for raw in (b"", b"\x00", os.urandom(3_000), names):
        for fast in (False, True):
            frame = compress(raw, fast)
            assert frame[0] == 0x28  # zstd's magic, never a pickle's 0x80
            assert decompress(frame) == raw
            assert decompress(memoryview(b"\x01" + frame)[1:]) == raw
    assert len(compress(names)) < len(names) / 4
    assert len(compress(names, fast=True)) < len(names) / 4


def test_threads_compress_at_once_without_mixing_their_bytes() -> None:
    blobs = [os.urandom(512) * (1 + k % 7) for k in range(400)]

    def round_trip(raw: bytes) -> bool:
        return decompress(compress(raw, fast=len(raw) % 3 == 0)) == raw

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(round_trip, blobs))


def test_a_frame_holds_no_more_memory_than_its_bytes() -> None:
    raw = (b"abc" * 100 + os.urandom(200)) * 10  # 5,000 bytes, ~240 compressed
    tracemalloc.start()
    try:
        frames = [compress(raw) for _ in range(100)]
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # The frames and the list: not 100 buffers of the worst case's size.
    assert held < 100 * (len(frames[0]) + 200)
