"""What the simulated agents' random walks share and reuse: a problem's ground actions for
every agent of a fleet, and the blocked operators of a state without listing them."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from capwatch.assess.search import ground_actions
from capwatch.model.domain import Domain, GroundAction, GroundAtom, Problem
from capwatch.model.grounding import GroundOperator


class SharedGroundings:
    """The ground actions of a problem per model and set of static facts, for several
    agents: every agent of a fleet family grounds the same problem (seconds on IPC domains
    whose actions take many parameters), while the operators made from them are each
    agent's own, numbered in its own atom index. Thread-safe; bounded."""

    def __init__(self, limit: int = 64) -> None:
        self._lock = threading.Lock()
        self._limit = limit
        self._found: dict[tuple[int, int, frozenset[GroundAtom]],
                          tuple[Domain, Problem, list[GroundAction]]] = {}

    def get(self, domain: Domain, problem: Problem, statics: frozenset[GroundAtom]
            ) -> list[GroundAction]:
        # Keyed by identity (hashing a model or a problem costs what the cache saves); the
        # entry holds both, so the ids cannot be reused while it lives.
        key = (id(domain), id(problem), statics)
        with self._lock:
            found = self._found.get(key)
        if found is not None:
            return found[2]
        actions = ground_actions(domain, problem.objects_by_type(domain), statics)
        with self._lock:
            if len(self._found) >= self._limit:
                self._found.clear()
            self._found[key] = (domain, problem, actions)
        return actions


class Blocked(Sequence[GroundOperator]):
    """The operators not at ``applicable`` (sorted positions), in operator order, without
    listing them: ``random.choice`` needs only a length and the k-th one."""

    def __init__(self, ops: Sequence[GroundOperator], applicable: Sequence[int]) -> None:
        self._ops = ops
        self._applicable = applicable

    def __len__(self) -> int:
        return len(self._ops) - len(self._applicable)

    def __getitem__(self, k: int) -> GroundOperator:  # type: ignore[override]
        if not 0 <= k < len(self):
            raise IndexError(k)
        # The k-th blocked operator is at position k + j, where j applicable ones come
        # before it: the smallest j with k + j < applicable[j] (or all of them).
        lo, hi = 0, len(self._applicable)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._applicable[mid] <= k + mid:
                lo = mid + 1
            else:
                hi = mid
        return self._ops[k + lo]
