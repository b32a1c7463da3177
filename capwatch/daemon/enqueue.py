"""Evidence becomes work: a watch's buffered evidence is queued in the store as an
assessment, with its alert, and a newly opened buffer gets its awaiting-assessment alert
at once (docs/daemon.md, "Alerts"). Runs on the main loop, which owns the watches."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from capwatch.alerts.policy import AlertPolicy
from capwatch.contracts.store import ModelStore, PendingAssessment
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.alerting import AlertRouting, prompt_alert, queued_alert
from capwatch.daemon.infra import Clock
from capwatch.daemon.metrics import DaemonMetrics

log = structlog.get_logger("capwatch.daemon")


class EvidenceQueue:
    def __init__(self, *, store: ModelStore, alerts: AlertRouting, metrics: DaemonMetrics,
                 policy: AlertPolicy, clock: Clock, wake_workers: Callable[[], None]) -> None:
        self.store = store
        self.alerts = alerts
        self.metrics = metrics
        self.policy = policy
        self.clock = clock
        self.wake_workers = wake_workers
        self._prompt: dict[str, AgentWatch] = {}
        """Watches whose first inconsistency was buffered and whose alert is not written
        yet (:meth:`alert_promptly`)."""

    def opened(self, watch: AgentWatch) -> None:
        """The watch's evidence buffer was just opened: alert at the next call."""
        self._prompt[watch.agent_id] = watch

    def alert_promptly(self) -> None:
        """Write the awaiting-assessment alert of every buffer opened since the last call,
        in one store transaction, and wake the alert routing, so a hard inconsistency is
        published within a second instead of after the debounce. A store error propagates
        and the watches stay listed for the next call; meanwhile the evidence holds the
        commit until its queued work writes the same alert anyway."""
        if not self._prompt:
            return
        now = self.clock()
        alerts = [a for a in (prompt_alert(w, now, self.policy.severities)
                              for w in self._prompt.values()) if a is not None]
        if alerts:
            self.store.add_alerts(alerts)
        self._prompt.clear()
        if alerts:
            self.alerts.wake()

    def queue(self, watch: AgentWatch) -> None:
        """Queue the watch's buffered evidence as a work item, with its alert."""
        item = watch.work_item()
        now = self.clock()
        evidence = list(watch.evidence)
        alerts = [queued_alert(item, evidence, watch.domain, now, self.policy.severities)
                  ] if evidence else []
        created = self.store.enqueue(PendingAssessment(
            key=item.key, agent_id=item.agent_id, family=item.family, payload=item.to_json(),
            enqueued_at=now), alerts)
        if alerts:
            self.alerts.wake()
        if created:
            watch.queued(item.key)
            self.metrics.assessments_queued.labels(watch.family).inc()
            log.info("assessment queued", key=item.key, agent_id=watch.agent_id,
                     inconsistent=len(evidence), drift=sorted(item.drift))
        else:
            # A replay of evidence whose work is queued already, or even finished (then
            # there is nothing to wait for).
            live = {i.key for i in (*self.store.queue_items("pending"),
                                    *self.store.queue_items("claimed"))}
            watch.queued(item.key, awaiting=item.key in live)
        self.wake_workers()
