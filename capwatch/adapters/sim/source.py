"""The simulated fleet as a source: a partitioned, replayable stream of its events.

A simulated source's offset is the position in its (deterministic, seeded) stream per
partition; it resumes from the daemon's checkpoint in the models store.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from capwatch.adapters.sim.fleet import SimulatedFleet
from capwatch.contracts.ports import Rebalance, Record


def stable_partition(key: str, partitions: int) -> int:
    """The same agent always lands in the same partition, across runs and hosts."""
    return zlib.crc32(key.encode()) % partitions


class SimulatedSource:
    """The simulated fleet as a partitioned, replayable stream of ``rounds`` per agent."""

    def __init__(self, fleet: SimulatedFleet, rounds: int, *, partitions: int = 1,
                 batch: int = 200, name: str = "simulated",
                 wait: Callable[[float], None] = time.sleep) -> None:
        self.fleet = fleet
        self._wait = wait
        self.rounds = rounds
        self.partitions = partitions
        self.batch = batch
        self.name = name
        self._events: Iterator[Any] = fleet.events(rounds)
        self._offsets = [0] * partitions
        self._skip: dict[int, int] = {}
        self._done = False

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        self._skip = dict(resume)
        on_assign(set(range(self.partitions)))

    def poll(self, timeout_s: float) -> list[Record]:
        records: list[Record] = []
        while len(records) < self.batch:
            event = next(self._events, None)
            if event is None:
                self._done = True
                if not records:
                    # An empty answer waits out the timeout, as a Kafka poll does: the
                    # daemon's loop must not spin while its workers assess.
                    self._wait(timeout_s)
                break
            p = stable_partition(event.agent_id, self.partitions)
            offset = self._offsets[p]
            self._offsets[p] += 1
            if offset < self._skip.get(p, 0):
                continue
            records.append(Record(self.name, p, offset, event.agent_id.encode(), event.value))
        return records

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Progress lives in the store's checkpoint; the fleet regenerates the stream."""

    def exhausted(self) -> bool:
        return self._done

    def lag(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        self._done = True
