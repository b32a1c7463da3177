"""Which cases of a parametrized chaos scenario ``make test`` runs, and which only
``make chaos`` (``CAPWATCH_CHAOS=1``) runs.

``make test`` runs each scenario once, over one client kind, and each client kind meets at
least one fault (kafka-python, kafka-python with its consumer process, confluent-kafka):
the whole matrix, every client kind x every scenario and every seed, ran 30-60 s a case
and took a third of the suite (session 13, docs/reliability.md "Running it").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

EVERY = bool(os.environ.get("CAPWATCH_CHAOS"))
"""``make chaos``: every case of every scenario."""

_T = TypeVar("_T")


def cases(default: Sequence[_T], every: Sequence[_T]) -> list[_T]:
    """``every`` under ``make chaos``, else ``default`` (a few of them)."""
    assert all(c in every for c in default), "make test's cases are some of make chaos's"
    return list(every if EVERY else default)
