"""When held agents are evicted to the store: past ``limits.max_agents_in_memory`` (down
to 90% of it, so that eviction runs now and then rather than at every new agent), and
after ``limits.evict_idle_after_s`` of silence. The eviction itself (drift state saved,
watch dropped, restored exactly at the agent's next record) is the checkpointer's.

Also when idle agents are held as bytes: after ``limits.freeze_idle_after_s``, or, while
more than half of ``limits.max_agents_in_memory`` are held, at the first checkpoint that
finds them idle. The limit counts agents, and agents differ in size tenfold (an agent
naming objects of its own holds an atom index of its own, ~10 KB, where one sharing its
family's holds ~2 KB), so a count alone does not bound memory; held as bytes, either is
~1 KB. Exact, so an agent's next record only pays the unpacking (tens of µs)."""

from __future__ import annotations

import structlog

from capwatch.daemon.checkpoint import Checkpointer
from capwatch.daemon.config import LimitsConfig
from capwatch.daemon.heap import release_freed
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.registry import Registry

log = structlog.get_logger("capwatch.daemon")


class Eviction:
    def __init__(self, *, limits: LimitsConfig, registry: Registry,
                 checkpoints: Checkpointer, metrics: DaemonMetrics) -> None:
        self.limits = limits
        self.registry = registry
        self.checkpoints = checkpoints
        self.metrics = metrics

    def freeze_after_s(self) -> float | None:
        """Seconds of silence after which a held agent is held as bytes (None: never)."""
        limits = self.limits
        after = limits.freeze_idle_after_s
        if after is not None and len(self.registry) > limits.max_agents_in_memory // 2:
            return 0.0
        return after

    def over_limit(self) -> int:
        """Evict idle agents down to 90% of the limit if more are held; how many."""
        limit = self.limits.max_agents_in_memory
        if len(self.registry) <= limit:
            return 0
        n = self.checkpoints.evict(limit * 9 // 10)
        if n:
            release_freed()  # what they held, amid the agents admitted since (daemon.heap)
            self.metrics.evictions.inc(n)
            log.info("idle agents evicted", evicted=n, held=len(self.registry))
        return n

    def silent(self, now: float) -> int:
        """Evict agents silent for ``limits.evict_idle_after_s`` at ``now`` (monotonic
        seconds, the registry's marks' clock); how many."""
        age = self.limits.evict_idle_after_s
        if age is None:
            return 0
        n = self.checkpoints.evict_watches(self.registry.not_seen_for(age, now))
        if n:
            release_freed()
            self.metrics.evictions.inc(n)
            log.info("agents idle for limits.evict_idle_after_s evicted", evicted=n,
                     idle_s=age, held=len(self.registry))
        return n
