"""A frozen watch's shared empty containers (daemon/watch_freezing.py) are of the types
declared, which compiled modules check at run time, and refuse every write: they are
shared by every frozen watch, and a watch thaws before it changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from capwatch.daemon.watch_freezing import (
    FROZEN_ALARMS,
    FROZEN_BACKOFF,
    FROZEN_EVIDENCE,
    FROZEN_TIMES,
)

DICT_WRITES: list[Callable[[dict[Any, Any]], object]] = [
    lambda d: d.__setitem__("a", 1), lambda d: d.__delitem__("a"), lambda d: d.update(a=1),
    lambda d: d.setdefault("a", 1), lambda d: d.pop("a"), lambda d: d.popitem(),
    lambda d: d.clear(), lambda d: d.__ior__({"a": 1}),
]
LIST_WRITES: list[Callable[[list[Any]], object]] = [
    lambda x: x.append(1), lambda x: x.extend([1]), lambda x: x.insert(0, 1),
    lambda x: x.__setitem__(slice(0, 0), [1]), lambda x: x.__iadd__([1]),
    lambda x: x.__imul__(2), lambda x: x.remove(1), lambda x: x.pop(), lambda x: x.clear(),
    lambda x: x.sort(), lambda x: x.reverse(), lambda x: x.__delitem__(slice(None)),
]


@pytest.mark.parametrize("write", DICT_WRITES)
def test_the_dicts_refuse_every_write(write: Callable[[dict[Any, Any]], object]) -> None:
    for frozen in (FROZEN_TIMES, FROZEN_ALARMS, FROZEN_BACKOFF):
        assert isinstance(frozen, dict) and frozen == {}
        with pytest.raises(TypeError, match="read-only"):
            write(frozen)
        assert frozen == {}


@pytest.mark.parametrize("write", LIST_WRITES)
def test_the_list_refuses_every_write(write: Callable[[list[Any]], object]) -> None:
    assert isinstance(FROZEN_EVIDENCE, list) and FROZEN_EVIDENCE == []
    with pytest.raises(TypeError, match="read-only"):
        write(FROZEN_EVIDENCE)
    assert FROZEN_EVIDENCE == []
