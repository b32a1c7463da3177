"""The consumer-lag gauges: records behind the partitions' ends, and how late the newest
handled record is (its age while records wait behind it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from capwatch.contracts.ports import Source
from capwatch.daemon.metrics import DaemonMetrics

LAG_EVERY_S = 15.0
"""The lag gauges are refreshed at most this often: asking the broker for the partitions'
ends is a round trip on the main loop that every record arriving meanwhile waits for
(0.1-0.35 s under load, docs/performance.md), and a gauge scraped every 15-30 s gains
nothing from a fresher value."""


class LagGauges:
    """Refreshes the lag gauges after a checkpoint, at most every :data:`LAG_EVERY_S`."""

    def __init__(self, source: Source, metrics: DaemonMetrics,
                 newest_stamp: Mapping[int, float],
                 clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.clock = clock
        self.metrics = metrics
        self.newest_stamp = newest_stamp
        """Per partition, when the newest handled record was written (the batch loop's)."""
        self._at = 0.0
        """When the gauges were last refreshed (time.time())."""
        self._due = False
        """Offsets moved since the last refresh, which the throttle put off."""

    def refresh(self, moved: bool = True) -> None:
        """After a checkpoint; ``moved``: it advanced the offsets. One that did not
        refreshes only a refresh the throttle put off: the last records of a stream that
        then stops arrive within :data:`LAG_EVERY_S` of the previous refresh, and no later
        checkpoint moves, so the gauges kept the lag before them for good (oper18b: 18,
        33 and 9 on three partitions whose commits were at their ends)."""
        if not moved and not self._due:
            return
        now = self.clock()
        if now - self._at < LAG_EVERY_S:
            self._due = True
            return
        self._at = now
        self._due = False
        for p, lag in self.source.lag().items():
            self.metrics.lag.labels(str(p)).set(lag)
            # Records wait behind the newest handled one: its age is how late we are.
            stamp = self.newest_stamp.get(p)
            self.metrics.lag_seconds.labels(str(p)).set(
                max(0.0, now - stamp) if lag > 0 and stamp is not None else 0.0)

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop the gauges of partitions given up (revoked or lost): kept, a replica went
        on reporting the lag it last saw on a partition another replica now owns (at its
        last value, which it no longer refreshes), so a fleet's lag summed over replicas
        counted the partition twice and an alert on it never cleared."""
        for p in partitions:
            self.metrics.lag.metric.remove(str(p))
            self.metrics.lag_seconds.metric.remove(str(p))
