"""The fast decoder's tests run both ways it can take a transition event: through the C
splitter (wire_split, when the hot path is compiled) and without it; when it is not built,
through the splitter's pure-Python reference instead, so that the splitter's way is tested
on every run, compiled or not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from capwatch.contracts import wire_fast, wire_split

_WAYS: dict[str, wire_split.Split | None] = (
    {"split in C": wire_split.SPLIT, "not split": None} if wire_split.SPLIT is not None
    else {"not split": None, "split in Python": wire_split.reference})


@pytest.fixture(scope="module", params=list(_WAYS))
def splitter(request: pytest.FixtureRequest) -> Iterator[str]:
    """Sets the fast decoder's splitter for a module's tests (``usefixtures``)."""
    kept = wire_fast._SPLIT
    wire_fast._SPLIT = _WAYS[request.param]
    try:
        yield request.param
    finally:
        wire_fast._SPLIT = kept
