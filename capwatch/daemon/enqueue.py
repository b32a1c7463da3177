"""Evidence becomes work: a watch's buffered evidence is queued in the store as an
assessment, with its alert, and a newly opened buffer gets its awaiting-assessment alert
at once (docs/daemon.md, "Alerts"). Runs on the main loop, which owns the watches."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from capwatch.alerts.policy import AlertPolicy
from capwatch.contracts.store import ModelStore, OutboxAlert, PendingAssessment
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.alerting import (
    AlertRouting,
    ended_alert,
    ended_alert_key,
    prompt_alert,
    queued_alert,
    queued_alert_key,
)
from capwatch.daemon.infra import Clock
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.registry import Registry

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
        self._announced: dict[str, str] = {}
        """Agent → work key of a prompt alert written for evidence not queued yet: the
        alert announces an assessment, so evidence dropped unqueued must end it."""
        self._endings: list[OutboxAlert] = []
        """Endings of announced alerts whose evidence was dropped, not written yet."""
        self._buffered: dict[str, AgentWatch] = {}
        """Watches that buffered evidence or an alarm and may not be queued yet: all
        :meth:`sweep` looks at, instead of every held watch (0.3 us each, five times a
        second: 6% of a core with 40,000 held). Entries leave at the sweep once their
        watch holds nothing (queued, or a new model installed) or is no longer held."""

    def opened(self, watch: AgentWatch) -> None:
        """The watch's evidence buffer was just opened: alert at the next call."""
        self._prompt[watch.agent_id] = watch

    def alert_promptly(self) -> None:
        """Write the awaiting-assessment alert of every buffer opened since the last call,
        in one store transaction, and wake the alert routing, so a hard inconsistency is
        published within a second instead of after the debounce. A store error propagates
        and the watches stay listed for the next call; meanwhile the evidence holds the
        commit until its queued work writes the same alert anyway."""
        if not self._prompt and not self._endings:
            return
        self._resume_announced()
        now = self.clock()
        written = [(w, a) for w, a in ((w, prompt_alert(w, now, self.policy.severities))
                                       for w in self._prompt.values()) if a is not None]
        alerts = [a for _, a in written] + self._endings
        if alerts:
            self.store.add_alerts(alerts)
        self._prompt.clear()
        self._endings.clear()
        for w, _ in written:
            self._announced[w.agent_id] = w.work_key()
        if alerts:
            self.alerts.wake()

    def _resume_announced(self) -> None:
        """Evidence buffered while the agent awaited an assessment that then installed a
        version is kept under its first key, which names the parent version (see
        ``AgentWatch.install``). Replayed from the commit it held (a restart, another
        replica after a rebalance), it is buffered again under the new version: where the
        alert written under the parent's key is open, that key is taken again, so that
        the alert goes out once and gets its ending."""
        candidates = {w.agent_id: k for w in self._prompt.values()
                      if (k := w.parent_work_key()) is not None}
        if not candidates:
            return
        found = self.store.outbox_keys([key for k in candidates.values()
                                        for key in (queued_alert_key(k), ended_alert_key(k))])
        for agent_id, k in candidates.items():
            if queued_alert_key(k) in found and ended_alert_key(k) not in found:
                self._prompt[agent_id].resume_work_key(k)

    def dropped(self, watch: AgentWatch, key: str, action: str, how: str) -> None:
        """The evidence buffered under work key ``key`` was dropped before it was queued
        (a newer version was installed meanwhile): if its prompt alert went out, that
        alert announced an assessment that will not come, so it gets an ending (written
        at the next :meth:`alert_promptly`). ``action``: the first inconsistency's, which
        the alert's labels name."""
        self._prompt.pop(watch.agent_id, None)
        if self._announced.get(watch.agent_id) != key:
            return
        del self._announced[watch.agent_id]
        self._endings.append(ended_alert(key, watch.family, watch.agent_id, action,
                                         self.clock(), how, self.policy.severities))

    def forget(self, agent_ids: list[str]) -> None:
        """The agents left this replica (a rebalance): the next owner replays their
        evidence and writes the same alert under the same key."""
        for agent_id in agent_ids:
            self._announced.pop(agent_id, None)
            self._prompt.pop(agent_id, None)

    def note_buffered(self, watch: AgentWatch) -> None:
        """``watch`` buffered evidence or an alarm: :meth:`sweep` looks at it until it is
        queued."""
        self._buffered[watch.agent_id] = watch

    def sweep(self, registry: Registry, force: bool = False) -> None:
        """Queue every watch whose evidence is ripe (``force``: whatever is buffered, in
        every watch ``registry`` holds), in one store transaction. A store failure
        propagates; what it left buffered is looked at again next time."""
        held = registry.lookup
        watches = [w for w in registry if w.buffered] if force \
            else list(self._buffered.values())
        ripe = [w for w in watches if held(w.agent_id) is w and w.ripe(force)]
        if ripe:
            self._queue_all(ripe)
        for watch in watches:
            if held(watch.agent_id) is not watch or not watch.buffered:
                self._buffered.pop(watch.agent_id, None)

    def queue(self, watch: AgentWatch) -> None:
        """Queue the watch's buffered evidence as a work item, with its alert."""
        self._queue_all([watch])

    def queue_many(self, watches: list[AgentWatch]) -> None:
        """:meth:`queue` for each of ``watches``, in one store transaction."""
        if watches:
            self._queue_all(watches)

    def _queue_all(self, watches: list[AgentWatch]) -> None:
        """Queue each watch's buffered evidence as a work item, with its alert: one
        transaction for all (a commit waits for the disk, ~0.4-4 ms: agents whose
        evidence ripened by time since the last sweep paid one each)."""
        now = self.clock()
        queued = []
        for watch in watches:
            item = watch.work_item()
            evidence = list(watch.evidence)
            alerts = [queued_alert(item, evidence, watch.domain, now, self.policy.severities)
                      ] if evidence else []
            queued.append((watch, item, evidence, (PendingAssessment(
                key=item.key, agent_id=item.agent_id, family=item.family,
                payload=item.to_json(), enqueued_at=now, finite=item.floatless), alerts)))
        if len(queued) == 1:
            created = [self.store.enqueue(*queued[0][3])]
        else:
            created = self.store.enqueue_many([q[3] for q in queued])
        if any(q[3][1] for q in queued):
            self.alerts.wake()
        live: set[str] | None = None
        for (watch, item, evidence, _), new in zip(queued, created, strict=True):
            self._announced.pop(watch.agent_id, None)
            if new:
                watch.queued(item.key)
                self.metrics.assessments_queued.labels(watch.family).inc()
                log.info("assessment queued", key=item.key, agent_id=watch.agent_id,
                         inconsistent=len(evidence), drift=sorted(item.drift))
            else:
                # A replay of evidence whose work is queued already, or even finished
                # (then there is nothing to wait for).
                if live is None:
                    live = {i.key for i in self.store.live_queue_items()}
                watch.queued(item.key, awaiting=item.key in live)
        self.wake_workers()
