"""Wiring the alert outbox into the daemon: sinks from the configuration, metrics, and
the outbox keys that make every alert's cause write it exactly once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import structlog

from capwatch.alerts.outbox import AlertOutbox, ending_key, outbox_record
from capwatch.alerts.sinks import (
    AlertDeliveryError,
    AlertmanagerSink,
    AlertSink,
    LogSink,
    alert_event,
)
from capwatch.alerts.types import (
    Alert,
    AlertType,
    Severity,
    drift_not_confirmed_alert,
    inconsistency_alert,
)
from capwatch.contracts.errors import error_text
from capwatch.contracts.ports import Publisher
from capwatch.contracts.store import AlertOutboxStore, OutboxAlert, PendingAssessment
from capwatch.contracts.versions import ModelVersion
from capwatch.daemon.agent_watch import AgentWatch, Evidence
from capwatch.daemon.config import AlertsConfig
from capwatch.daemon.infra import INFRASTRUCTURE_ERRORS, OutageLog
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.work import WorkItem
from capwatch.model.domain import Domain


class PublisherAlertSink:
    """The output's alert stream (Kafka alerts topic, alerts.jsonl, the log) as a sink.

    Named ``output`` whatever the output kind, so deliveries routed before a change of
    output kind still go to the new one after a restart.
    """

    name = "output"
    max_send_s = 20.0
    """A Kafka publisher's flush: up to 10 s for the client, as long again for a record's
    outcome."""

    def __init__(self, publisher: Publisher) -> None:
        self.publisher = publisher

    def send(self, alerts: Sequence[Alert]) -> None:
        try:
            for a in alerts:
                if a.ends_at is not None:
                    # The topic carries events: the version's or the failure's own alert
                    # already says the wait is over.
                    continue
                self.publisher.alert(alert_event(a))
            self.publisher.flush()
        except Exception as e:
            raise AlertDeliveryError(f"output: {error_text(e)}") from e


log = structlog.get_logger("capwatch.daemon")


class AlertRouting:
    """Runs the outbox's routing and delivery, one run at a time.

    Failures are logged, not raised: everything stays in the store's outbox and the next
    run picks it up.

    Runs go on a thread of their own (:meth:`start`), every ``route_s`` counted from the end
    of the previous run, and at once when :meth:`wake` asks (the main loop, when it writes
    an alert that must not wait for the next tick: a hard inconsistency); wakes that come
    while a run is going coalesce into one more run. Until session 14 an APScheduler job
    ran them every ``route_s`` beside this thread: whenever a run took longer (a woken run
    holding the lock, a slow store or sink at load), the job's next run was skipped with a
    warning, "maximum number of running instances reached", that looked like a fault and
    was none. One thread waiting between runs skips nothing and says nothing.
    """

    def __init__(self, config: AlertsConfig, outbox: AlertOutbox,
                 clock: Callable[[], datetime]) -> None:
        self.config = config
        self.outbox = outbox
        self.clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._pruned: datetime | None = None
        self._outage = OutageLog(log, "alert routing")
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._routing, name="capwatch-alerts",
                                            daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Route now (on the routing thread; a no-op until :meth:`start`)."""
        self._wake.set()

    def _routing(self) -> None:
        while True:
            self._wake.wait(self.config.route_s)
            self._wake.clear()
            if self._closed:
                return
            self.run()

    def run(self, force: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            now = self.clock()
            try:
                report = self.outbox.run_once(now, force)
                if self._pruned is None or now - self._pruned >= timedelta(hours=1):
                    self.outbox.prune(now, timedelta(seconds=self.config.keep_s))
                    self._pruned = now
            except INFRASTRUCTURE_ERRORS as e:
                # The outbox keeps the alerts: routing resumes where it stopped.
                self._outage.failed(e)
                return
            except Exception:
                log.exception("alert routing failed; the outbox keeps the alerts")
                return
            self._outage.ok()
        if report.routed or report.failures:
            log.info("alerts routed", routed=len(report.routed),
                     suppressed=len(report.suppressed), delivered=report.delivered,
                     failing_sinks=sorted(report.failures) or None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)


def build_sinks(config: AlertsConfig, publisher: Publisher) -> list[AlertSink]:
    sinks: list[AlertSink] = []
    if config.sinks.output:
        sinks.append(PublisherAlertSink(publisher))
    if config.sinks.log:
        sinks.append(LogSink())
    am = config.sinks.alertmanager
    if am is not None:
        sinks.append(AlertmanagerSink(am.url, timeout_s=am.timeout_s,
                                      resolve_after=timedelta(seconds=am.resolve_after_s),
                                      generator_url=am.generator_url))
    return sinks


def build_outbox(config: AlertsConfig, store: AlertOutboxStore, sinks: Sequence[AlertSink],
                 metrics: DaemonMetrics) -> AlertOutbox:
    def routed(alert: Alert) -> None:
        metrics.alerts.labels(alert.family, alert.type.value).inc()

    def suppressed(row: OutboxAlert) -> None:
        metrics.alerts_suppressed.labels(row.alert_type).inc()

    def failed(sink: str, error: AlertDeliveryError) -> None:
        metrics.alert_delivery_failures.labels(sink).inc()

    def backlog(undelivered: int) -> None:
        metrics.alerts_undelivered.set(undelivered)

    return AlertOutbox(store, sinks, config.policy(),
                       retry_after=timedelta(seconds=config.retry_after_s),
                       max_retry_after=timedelta(seconds=config.max_retry_after_s),
                       lease=timedelta(seconds=config.delivery_lease_s),
                       on_routed=routed, on_suppressed=suppressed, on_failure=failed,
                       on_backlog=backlog)


# Outbox keys: one cause, one key, so a retried or replayed write adds nothing.

def version_alert_key(version: ModelVersion, alert: Alert) -> str:
    return f"version:{version.ref}|{alert.dedup_key}"


def unconfirmed_alert_key(assessment_key: str, action: str) -> str:
    return f"unconfirmed:{assessment_key}|{action}"


def unconfirmed_drifts(drift: Mapping[str, Mapping[str, object]],
                       details: Mapping[str, object]) -> list[tuple[str, str]]:
    """(action, detector) of each drift alarm the work re-estimated whose answers held
    every probability of the model (the assessor's ``agrees_with_current``) or whose
    re-estimate did not explain the alarm's counts (``alarm_unexplained``)."""
    estimates = details.get("estimates")
    if not isinstance(estimates, dict):
        return []
    return [(name, str(drift[name].get("detector", "")))
            for name, est in sorted(estimates.items())
            if name in drift and isinstance(est, dict)
            and (est.get("agrees_with_current") or est.get("alarm_unexplained"))]


def unconfirmed_alerts(key: str, family: str, agent_id: str,
                       drift: Mapping[str, Mapping[str, object]],
                       details: Mapping[str, object], now: datetime,
                       severities: Mapping[AlertType, Severity]) -> list[OutboxAlert]:
    """A ``drift_not_confirmed`` alert for each drift the stream's detector raised and the
    answers did not show. None for the fleet audit's alarms: the audit runs at a 5% false
    discovery rate every minute with no confirmation on the stream before the work is
    queued, so its unconfirmed alarms are expected and only counted
    (``capwatch_drift_not_confirmed_total``)."""
    estimates = details.get("estimates")
    out = []
    for name, detector in unconfirmed_drifts(drift, details):
        if detector == "audit" or not isinstance(estimates, dict):
            continue
        stream = drift[name]
        alert = drift_not_confirmed_alert(
            family=family, agent_id=agent_id, action=name, time=now,
            stream={k: stream.get(k) for k in (
                "detector", "window", "n", "model_probabilities", "estimated_probabilities",
                "estimate_ci", "summary")},
            answers=dict(estimates[name]), evidence={"assessment_key": key},
            severities=severities)
        out.append(outbox_record(alert, unconfirmed_alert_key(key, name)))
    return out


def queued_alert_key(assessment_key: str) -> str:
    return f"queued:{assessment_key}"


def failed_alert_key(assessment_key: str) -> str:
    return f"failed:{assessment_key}"


def ended_alert_key(assessment_key: str) -> str:
    """Outbox key of the ending of the awaiting-assessment alert (see the store's alert
    history, which leaves endings out)."""
    return ending_key(queued_alert_key(assessment_key))


def awaiting_ended(pending: PendingAssessment, now: datetime, how: str,
                   severities: Mapping[AlertType, Severity]) -> list[OutboxAlert]:
    """The ending of ``pending``'s awaiting-assessment alert: written with whatever ends
    the assessment (a version, no change, a failure for good), so a sink that keeps alerts
    open (Alertmanager) closes it. Its dedup key is the awaited alert's: the same type,
    agent and action (the first inconsistency's), no fingerprint. None for work queued
    without an inconsistency (a drift alarm), which had no such alert."""
    item = WorkItem.from_pending(pending)
    if not item.inconsistent:
        return []
    return [ended_alert(item.key, item.family, item.agent_id, item.inconsistent[0].action[0],
                        now, how, severities)]


def ended_alert(key: str, family: str, agent_id: str, action: str, now: datetime, how: str,
                severities: Mapping[AlertType, Severity]) -> OutboxAlert:
    """The ending of the awaiting-assessment alert written under work key ``key``, whose
    labels name ``action`` (the first inconsistency's)."""
    alert = inconsistency_alert(family=family, agent_id=agent_id, action=action, time=now,
                                contradicted=[], evidence={"assessment_key": key, "ended": how},
                                severities=severities)
    alert = replace(alert, summary=f"assessment ended ({how}): {alert.summary}", ends_at=now)
    return outbox_record(alert, ended_alert_key(key))


def queued_alert(item: WorkItem, evidence: Sequence[Evidence], domain: Domain, now: datetime,
                 severities: Mapping[AlertType, Severity]) -> OutboxAlert:
    """The "unexplained inconsistency awaiting assessment" alert for queued work: one per
    work item (written with it unless :func:`prompt_alert` wrote it already), naming the
    contradicted pa-tuples."""
    return awaiting_alert(item.key, item.family, item.agent_id, item.base.version, evidence,
                          domain, now, severities)


def prompt_alert(watch: AgentWatch, now: datetime,
                 severities: Mapping[AlertType, Severity]) -> OutboxAlert | None:
    """The same alert as :func:`queued_alert`, written as soon as the first inconsistency
    of a watch's evidence is buffered rather than when the debounce lets the evidence be
    queued: its outbox key names the work item the evidence will become, so the queued
    work's own write adds nothing and the alert goes out once. Written also while the
    watch awaits other work: the evidence then waits for that work to end, under the
    version in use, which the key and ``model_version`` name. None if the watch has no
    evidence from a record (nothing to name it by)."""
    if watch.first_buffered_offset() is None:
        return None
    return awaiting_alert(watch.work_key(), watch.family, watch.agent_id,
                          watch.version.ref.version, watch.evidence, watch.domain, now,
                          severities)


def awaiting_alert(key: str, family: str, agent_id: str, model_version: int,
                   evidence: Sequence[Evidence], domain: Domain, now: datetime,
                   severities: Mapping[AlertType, Severity]) -> OutboxAlert:
    first = evidence[0].transition
    actions = sorted({e.transition.action[0] for e in evidence})
    contradicted: list[str] = []
    for e in evidence[:10]:  # Table 2 per transition; a few say enough
        for c in e.explanation.contradicted:
            text = f"⟨{c.pa.atom}, {c.pa.action}⟩"
            if text not in contradicted:
                contradicted.append(text)
    alert = inconsistency_alert(
        family=family, agent_id=agent_id, action=first.action[0], time=now,
        contradicted=contradicted, header=domain.action(first.action[0]).header(),
        evidence={"assessment_key": key, "model_version": model_version,
                  "inconsistent": len(evidence), "actions": actions,
                  "transitions": [{"partition": e.transition.partition, "offset": e.offset,
                                   "episode_id": e.transition.episode_id,
                                   "step": e.transition.step} for e in evidence[:10]]},
        severities=severities)
    return outbox_record(alert, queued_alert_key(key))
