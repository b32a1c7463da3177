"""Applying what assessments produced to the agents this replica holds.

Results come from two places: this replica's workers and canary probes post them (the
main loop drains them), and other replicas' workers or an operator's actions leave them
in the store, where :meth:`ResultApplier.poll` finds them. Either way a result is applied
on the main loop, the only thread that touches the watches.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from capwatch.contracts.store import ModelStore, PendingAssessment
from capwatch.contracts.versions import ModelVersion
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.infra import utc_now
from capwatch.daemon.registry import Registry
from capwatch.daemon.retry import ended_unreachable
from capwatch.daemon.work import CanaryFinding, Installed, Result, Settled, Settlement
from capwatch.model.domain import Domain
from capwatch.model.grounding import SharedGrounding

Dropped = Callable[[AgentWatch, str, str, str], None]
"""Told when installing a version dropped unqueued evidence: (watch, the evidence's work
key, its first inconsistency's action, why)."""


class ResultApplier:
    def __init__(self, *, registry: Registry, store: ModelStore,
                 queue: Callable[[AgentWatch], None], dropped: Dropped | None = None,
                 buffered: Callable[[AgentWatch], None] = lambda watch: None,
                 clock: Callable[[], datetime] = utc_now) -> None:
        self.registry = registry
        self.clock = clock
        self.store = store
        self.queue = queue
        """Queues a watch's evidence (a canary finding can make it ripe)."""
        self.dropped = dropped
        self.buffered = buffered
        """Told of a watch a canary finding left holding evidence not ripe yet."""

    def _adopt(self, watch: AgentWatch, version: ModelVersion, domain: Domain | None = None,
               shared: SharedGrounding | None = None) -> None:
        announced = _announced(watch)
        watch.adopt(version, domain, shared)
        if announced is not None and not watch.evidence and self.dropped is not None:
            self.dropped(watch, *announced, f"superseded by version {version.ref.version}")

    def apply(self, result: Result) -> None:
        watch = self.registry.get(result.agent_id)
        family = _family_of(result)
        if watch is not None and family is not None and watch.family != family:
            # The agent moved to another family while this work ran: the result belongs to
            # the old family's lineage (stored and alerted there), not to the new watch.
            return
        if isinstance(result, Installed):
            if watch is None:
                self.registry.unpark(result.agent_id)
            else:
                self._adopt(watch, result.version)
        elif isinstance(result, Settled):
            if watch is None:
                # Its partition moved away while the work ran here: what it assessed is
                # read from the store at the next poll and held for the agent's next load.
                self.registry.unpark_settled(result.agent_id, result.key)
            else:
                watch.settle(result.key, learnt=result.how is not Settlement.UNREACHABLE)
        elif isinstance(result, CanaryFinding) and watch is not None:
            if watch.add_canary_finding(result.transition):
                self.queue(watch)
            if watch.buffered:
                self.buffered(watch)

    def poll(self) -> None:
        """Pick up what other replicas' workers did for agents this one owns.

        Only the live queue (pending and claimed items, a short list) is read: work that
        left it was either stored as a newer version, which is installed, or ended without
        one (no change found, or failed), which releases the agent; how it ended is read
        by key only for the works seen ending.
        """
        # One read: a retried item goes from claimed back to pending, and read status by
        # status it could be in neither, taken for ended (its agent released, its evidence
        # queued again beside it).
        items = self.store.live_queue_items()
        for item in items:
            # Work an operator queued (capwatch.models_store.actions: assess now, the
            # installation of a rollback) for an agent this replica holds: any replica
            # may run it, so this one waits for it like for its own and adopts the result.
            watch = self.registry.get(item.agent_id)
            if item.key.startswith("operator/") and watch is not None \
                    and watch.awaiting is None:
                watch.awaiting = item.key
        self._adopt_baselines()
        live = {i.key for i in items}
        self.registry.unpark_ended(live, self.store.queue_items_by_key,
                                   lambda: self.store.store_now(self.clock()))
        waiting = [w for w in self.registry if w.awaiting is not None]
        if not waiting:
            return
        ended: dict[str, PendingAssessment] | None = None
        for watch in waiting:
            latest = self.store.latest(watch.family, watch.agent_id)
            if latest is not None and (watch.version.agent_id is None
                                       or latest.version > watch.version.version):
                self.apply(Installed(watch.agent_id, latest))
            elif watch.awaiting is not None and watch.awaiting not in live:
                if ended is None:
                    # One read for every work seen ending in this poll, only when some did.
                    ended = self.store.queue_items_by_key(
                        [w.awaiting for w in waiting
                         if w.awaiting is not None and w.awaiting not in live])
                end = ended.get(watch.awaiting)
                # Failed elsewhere because the agent was not reached: nothing was learnt,
                # the first wait only, as the replica that ran it does (before session 20
                # such an end doubled the wait here).
                how = Settlement.UNREACHABLE if end is not None and ended_unreachable(end) \
                    else Settlement.LEFT_QUEUE
                self.apply(Settled(watch.agent_id, watch.awaiting, how))

    def _adopt_baselines(self) -> None:
        """Agents running their family's baseline move to a newer baseline version (an
        operator's promotion, another replica's configuration) without waiting for a
        reload: one store read per family, one parsed model shared by its agents."""
        watches = [w for w in self.registry
                   if w.version.agent_id is None and w.awaiting is None]
        newest = self.registry.refresh_baselines({w.family for w in watches})
        for watch in watches:
            latest = newest.get(watch.family)
            if latest is not None and latest[0].version > watch.version.version:
                self._adopt(watch, *latest)


def _announced(watch: AgentWatch) -> tuple[str, str] | None:
    """(work key, first inconsistency's action) of the evidence the watch buffered from
    records, not queued yet, whose prompt alert may have gone out (awaiting other work or
    not); None if it holds none."""
    if watch.first_buffered_offset() is None:
        return None
    return watch.work_key(), watch.evidence[0].transition.action[0]


def _family_of(result: Result) -> str | None:
    """The family a result belongs to; None where it does not say (any watch takes it)."""
    if isinstance(result, Installed):
        return result.version.ref.family
    if isinstance(result, CanaryFinding):
        return result.transition.family
    return None
