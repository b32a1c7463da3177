"""The daemon's pipeline: records in, model versions and alerts out, nothing lost.

Threads and who owns what:

- the *main loop* owns the per-agent registry and the drift tables: it polls the
  source, decodes, checks transitions, debounces and queues assessments, and commits;
- *assessment workers* claim queued work from the models store (so queued work
  survives a restart and any replica may run it), ask the agent, store the new version,
  publish it with its alerts, and hand the result back to the main loop via a queue;
- the *scheduler* (APScheduler) and the HTTP server never touch the registry: jobs post
  commands that the main loop runs between polls, and HTTP reads the store and
  snapshots.

The commit rule: a partition's committed offset never passes a record whose effects
are not durable. Consistent transitions leave nothing to keep; an inconsistent one sits
in its agent's debounce buffer until the assessment it triggers is queued in the store,
so the commit waits for that; dead letters are flushed before a commit. After a crash
the source replays from the commit and the replay rebuilds exactly what was lost, while
queue keys (agent + base version) make re-queuing the same work a no-op.
"""

from __future__ import annotations

import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from capwatch.alerts.outbox import outbox_record
from capwatch.alerts.sinks import AlertSink
from capwatch.alerts.types import alerts_for_version, assessment_failed_alert, inconsistency_alert
from capwatch.assess.agent import AgentUnavailable
from capwatch.contracts.ports import AgentDirectory, Publisher, Record, Source
from capwatch.contracts.wire import (
    DeadLetter,
    DecodeLimits,
    Transition,
    dead_letter_record,
    decode,
    vocabulary_error,
)
from capwatch.daemon.alerting import (
    build_outbox,
    build_sinks,
    failed_alert_key,
    queued_alert_key,
    version_alert_key,
)
from capwatch.daemon.assessor import AssessmentRequest, Assessor, ObservedTransition
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.events import model_event
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.registry import AgentState, Registry
from capwatch.daemon.retry import describe_agent_failure, retry_plan
from capwatch.model.consistency import Verdict, check, explain
from capwatch.model.domain import Domain
from capwatch.model.errors import ModelError
from capwatch.model.grounding import Grounder
from capwatch.model.serialize import domain_from_json, domain_to_json
from capwatch.models_store.base import (
    DriftSnapshot,
    ModelRef,
    ModelStore,
    ModelVersion,
    OutboxAlert,
    PendingAssessment,
    StoreError,
    VersionConflict,
    build_version,
    lineage_chain,
)
from capwatch.monitor.attribution import attribution_from_mask
from capwatch.monitor.drift import DriftAlarm, DriftConfig, DriftMonitor
from capwatch.monitor.snapshot import SnapshotError, restore_agent, snapshot_agent
from capwatch.monitor.transition_monitor import MonitorLimits

log = structlog.get_logger("capwatch.daemon")


def _infrastructure_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [StoreError, sqlite3.Error, OSError]
    try:
        import psycopg

        errors.append(psycopg.Error)
    except ImportError:  # pragma: no cover - psycopg is a dependency
        pass
    return tuple(errors)


INFRASTRUCTURE_ERRORS = _infrastructure_errors()
"""Failures of what the daemon stands on rather than of the message it was handling."""

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Installed:
    agent_id: str
    version: ModelVersion


@dataclass(frozen=True, slots=True)
class _Cleared:
    agent_id: str
    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class _CanaryEvidence:
    agent_id: str
    observed: ObservedTransition


_Result = _Installed | _Cleared | _CanaryEvidence


class Daemon:
    """Wires a source, the per-agent monitors, the store, the assessor and a publisher."""

    def __init__(self, config: DaemonConfig, *, store: ModelStore, source: Source,
                 publisher: Publisher, agents: AgentDirectory, assessor: Assessor,
                 families: dict[str, Domain] | None = None,
                 metrics: DaemonMetrics | None = None, clock: Clock = utc_now,
                 alert_sinks: list[AlertSink] | None = None) -> None:
        self.config = config
        self.store = store
        self.source = source
        self.publisher = publisher
        self.agents = agents
        self.assessor = assessor
        self.metrics = metrics or DaemonMetrics()
        self.clock = clock
        self.alert_policy = config.alerts.policy()
        self.alerts = build_outbox(
            config.alerts, store,
            alert_sinks if alert_sinks is not None else build_sinks(config.alerts, publisher),
            self.metrics)
        """Alerts go to the store's outbox with what caused them; this routes them."""
        self._alert_lock = threading.Lock()
        self._alerts_closed = False
        self._alerts_pruned: datetime | None = None
        self.registry = Registry(store, MonitorLimits(
            max_inconsistencies=config.detection.max_evidence,
            max_state_atoms=config.limits.max_state_atoms))
        self.limits = DecodeLimits(config.limits.max_message_bytes,
                                   config.limits.max_state_atoms,
                                   config.limits.max_trace_steps)
        det = config.detection
        self.drift = DriftMonitor(DriftConfig(
            false_alarm_rate=det.drift_false_alarm_rate, window=det.drift_window,
            min_samples=min(det.drift_min_samples, det.drift_window), fdr=det.drift_fdr))
        self.families = dict(families or {})
        self._stop = threading.Event()
        self._stopped_workers = threading.Event()
        self._work = threading.Event()
        self._results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._next: dict[int, int] = {}
        """Per owned partition: the offset after the last record handled."""
        self._committed: dict[int, int] = {}
        self._awaiting_keys: dict[str, str] = {}
        self._drift_snapshots: dict[str, DriftSnapshot] = {}
        """Saved drift state of agents in owned partitions, applied at their first record."""
        self._workers: list[threading.Thread] = []
        self._inflight: dict[str, str] = {}
        """Worker name → key of the item it is running."""
        self._inflight_lock = threading.Lock()
        self._canary_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="canary")
        self._last_checkpoint = time.monotonic()
        self._started = threading.Event()
        self._consuming = False
        self.dead_letters = 0
        self.processed = 0
        self.assigned: set[int] = set()
        """Source partitions this replica owns now (for operators and tests)."""
        self._children: dict[tuple[str, ...], Any] = {}

    def _count(self, metric: str, *labels: str) -> None:
        """Increment a per-record counter; children are cached because resolving labels
        (with the cardinality guard) costs more than the consistency check itself."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = getattr(self.metrics, metric).labels(*labels)
            self._children[key] = child
        child.inc()

    # ------------------------------------------------------------------ lifecycle

    @property
    def group(self) -> str:
        return self.config.kafka.group_id

    @property
    def ready(self) -> bool:
        return self._consuming and not self._stop.is_set()

    def stop(self) -> None:
        """Ask the main loop to finish; safe from signal handlers and other threads."""
        self._stop.set()
        self._work.set()

    def submit(self, command: Callable[[], None]) -> None:
        """Run ``command`` on the main loop (scheduler jobs, HTTP actions)."""
        self._commands.put(command)

    def seed_families(self) -> None:
        """Make each configured family model the baseline, as a new version if it changed."""
        now = self.clock()
        for family, domain in self.families.items():
            latest = self.store.latest(family, None)
            if latest is not None and latest.domain() == domain:
                continue
            ref = ModelRef(family, None, latest.version + 1 if latest else 1)
            v = build_version(ref, domain, now, parent=latest,
                              evidence={"source": "configuration"})
            # VersionConflict: another replica seeded the same family at the same moment.
            with contextlib.suppress(VersionConflict):
                self.store.put(v)
            log.info("family baseline", family=family, version=ref.version)

    def run(self, exit_when_idle: bool = False) -> int:
        """Consume until :meth:`stop` (or, with ``exit_when_idle``, until a finite source is
        exhausted and every queued assessment is done). Returns the exit code."""
        self.seed_families()
        self._recover_claims()
        for item in (*self.store.queue_items("pending"), *self.store.queue_items("claimed")):
            self._awaiting_keys[item.agent_id] = item.key
        try:
            resume = {p: o for (topic, p), o in self.store.load_offsets(self.group).items()
                      if topic == self.source.name}
            self.source.start(self._on_assign, self._on_revoke, resume)
            self._start_workers()
            self._consuming = True
            self._started.set()
            log.info("daemon started", replica=self.config.replica_id, source=self.source.name)
            while not self._stop.is_set():
                records = self.source.poll(0.1)
                for r in records:
                    self._handle(r)
                self._drain()
                self._sweep()
                if time.monotonic() - self._last_checkpoint >= self.config.scheduler.checkpoint_s:
                    self.checkpoint()
                if exit_when_idle and not records and self.source.exhausted() and self._idle():
                    break
        finally:
            self._consuming = False
            self._shutdown()
        return 0

    def _idle(self) -> bool:
        if any(a.evidence or a.alarms for a in self.registry):
            self._sweep(force=True)
            return False
        pending = self.store.queue_items("pending") + self.store.queue_items("claimed")
        if pending or self._awaiting_keys:
            return False
        # A finite run ends with its alerts out: groups close now instead of after
        # group_wait. Deliveries a sink refused stay in the store for the next start.
        self.route_alerts(force=True)
        return True

    def _recover_claims(self) -> None:
        """Work this replica held when it died goes back to the queue at once, instead of
        waiting for its lease to run out."""
        prefix = f"{self.config.replica_id}/"
        for item in self.store.queue_items("claimed"):
            if item.claimed_by and item.claimed_by.startswith(prefix):
                with contextlib.suppress(StoreError):
                    self.store.release(item.key, item.claimed_by, "replica restarted",
                                       self.clock(), self.config.assessment.max_attempts + 1)

    def _shutdown(self) -> None:
        """Stop fetching, give in-flight work a bounded time, then commit and close."""
        log.info("daemon stopping")
        self._stopped_workers.set()
        self._work.set()
        deadline = time.monotonic() + self.config.shutdown_grace_s
        for t in self._workers:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._inflight_lock:
            unfinished = dict(self._inflight)
        for worker, key in unfinished.items():
            with contextlib.suppress(StoreError):
                self.store.release(key, worker, "replica shutting down", self.clock(),
                                   self.config.assessment.max_attempts + 1)
        self._canary_pool.shutdown(wait=False, cancel_futures=True)
        self._drain()
        try:
            self.route_alerts()
            with self._alert_lock:
                self._alerts_closed = True  # a late scheduler run must not use a closed sink
            self.checkpoint()
        finally:
            self.source.close()
            self.publisher.close()
        log.info("daemon stopped", processed=self.processed, dead_letters=self.dead_letters)

    # ------------------------------------------------------------------ alerts

    def route_alerts(self, force: bool = False) -> None:
        """Route the alert outbox and deliver what is due (scheduler job; any thread).

        Failures are logged, not raised: everything stays in the store's outbox and the
        next run picks it up.
        """
        with self._alert_lock:
            if self._alerts_closed:
                return
            now = self.clock()
            try:
                report = self.alerts.run_once(now, force)
                if self._alerts_pruned is None or now - self._alerts_pruned >= timedelta(
                        hours=1):
                    self.alerts.prune(now, timedelta(seconds=self.config.alerts.keep_s))
                    self._alerts_pruned = now
            except Exception:
                log.exception("alert routing failed; the outbox keeps the alerts")
                return
        if report.routed or report.failures:
            log.info("alerts routed", routed=len(report.routed),
                     suppressed=len(report.suppressed), delivered=report.delivered,
                     failing_sinks=sorted(report.failures) or None)

    # ------------------------------------------------------------------ partitions

    def _on_assign(self, partitions: set[int]) -> None:
        log.info("partitions assigned", partitions=sorted(partitions))
        self.assigned |= partitions
        try:
            snapshots = self.store.load_drift_snapshots(self.group, self.source.name,
                                                        partitions)
        except INFRASTRUCTURE_ERRORS:
            # Soft state: without it the tables refill from the stream (a longer detection
            # delay, never a wrong count), so an unreachable store must not fail the
            # rebalance; the next store call that matters stops the daemon instead.
            log.exception("loading drift state failed; drift tables start empty")
            return
        for snap in snapshots:
            self._drift_snapshots[snap.agent_id] = snap

    def _restore_drift(self, agent: AgentState) -> None:
        """Give a newly loaded agent the drift tables saved for it, if they still apply."""
        snap = self._drift_snapshots.pop(agent.agent_id, None)
        if snap is None or agent.transitions:
            return  # an agent already live keeps its own, newer tables
        if snap.model != agent.version.ref:
            log.info("drift state is for another model version; starting afresh",
                     saved=str(snap.model), current=str(agent.version.ref))
            return
        try:
            skipped = restore_agent(self.drift, agent.agent_id, agent.domain.action_map,
                                    snap.state)
        except SnapshotError as e:
            log.warning("drift state unreadable; starting afresh", error=str(e))
            return
        agent.drift_restored = (snap.partition, snap.next_offset)
        log.info("drift state restored", position=snap.next_offset,
                 skipped=skipped or None)

    def _on_revoke(self, partitions: set[int]) -> None:
        """Flush what the revoked partitions' agents hold and give them up."""
        log.info("partitions revoked", partitions=sorted(partitions))
        self.assigned -= partitions
        self.checkpoint(partitions)
        agents = self.registry.in_partitions(partitions)
        for a in agents:
            self.drift.forget(a.agent_id)
        self.registry.drop([a.agent_id for a in agents])
        for p in partitions:
            self._next.pop(p, None)
            self._committed.pop(p, None)
        for agent_id in [a for a, s in self._drift_snapshots.items()
                         if s.partition in partitions]:
            del self._drift_snapshots[agent_id]

    # ------------------------------------------------------------------ records

    def _dead_letter(self, record: Record, reason: str, kind: str) -> None:
        self.dead_letters += 1
        self.metrics.dead_letters.labels(kind).inc()
        self.publisher.dead_letter(dead_letter_record(
            DeadLetter(reason, record.value), record.source, record.partition, record.offset,
            self.clock()))
        log.warning("dead letter", reason=reason)

    def _handle(self, record: Record) -> None:
        structlog.contextvars.bind_contextvars(partition=record.partition, offset=record.offset)
        try:
            self._count("records", record.source)
            try:
                self._handle_record(record)
            except INFRASTRUCTURE_ERRORS:
                raise  # the store is down: stop without committing past this record
            except Exception as e:
                # A message that trips a bug must not crash-loop the daemon on every
                # restart: it goes to the dead letters like any other unusable input.
                log.exception("record handling failed")
                self._dead_letter(record, f"internal error: {type(e).__name__}: {e}",
                                  "internal")
            self.processed += 1
            # Only a handled record moves the position; a failure above leaves it unread.
            self._next[record.partition] = max(self._next.get(record.partition, 0),
                                               record.offset + 1)
        finally:
            structlog.contextvars.unbind_contextvars("partition", "offset", "agent_id",
                                                     "episode")

    def _handle_record(self, record: Record) -> None:
        decoded = decode(record.value, self.limits, key=record.key)
        if isinstance(decoded, DeadLetter):
            self._dead_letter(record, decoded.reason, "decode")
            return
        if not decoded:
            return
        first = decoded[0]
        structlog.contextvars.bind_contextvars(agent_id=first.agent_id,
                                               episode=first.episode_id)
        if any(t.agent_id != first.agent_id or t.family != first.family for t in decoded):
            self._dead_letter(record, "a trace mixes agents or families", "decode")
            return
        agent = self.registry.load(first.agent_id, first.family, record.partition)
        if agent is None:
            self._dead_letter(record, f"unknown family {first.family!r}: no baseline model",
                              "vocabulary")
            return
        if agent.awaiting is None and agent.agent_id in self._awaiting_keys:
            agent.awaiting = self._awaiting_keys[agent.agent_id]
        if self._drift_snapshots:
            self._restore_drift(agent)
        if len(decoded) == 1:
            # The monitor checks the vocabulary before it changes anything, so a single
            # transition needs no separate pass.
            try:
                self._observe(agent, first, record)
            except ModelError as e:
                self._dead_letter(record, str(e), "vocabulary")
            return
        for t in decoded:  # a trace is applied whole or not at all
            problem = vocabulary_error(agent.domain, t)
            if problem is not None:
                self._dead_letter(record, f"step {t.step}: {problem}", "vocabulary")
                return
        for t in decoded:
            self._observe(agent, t, record)

    def _observe(self, agent: AgentState, t: Transition, record: Record) -> None:
        obs = agent.monitor.observe(t.state, t.action, t.next_state, record.offset)
        verdict = obs.verdict
        agent.transitions += 1
        agent.last_offset = record.offset
        agent.last_state = t.next_state
        self._count("transitions", agent.family, t.action[0], verdict.name.lower())
        if verdict is Verdict.APPLIED:
            agent.last_executed[t.action[0]] = time.monotonic()
            op = agent.monitor.grounder.operator(t.action)
            restored = agent.drift_restored
            replayed = restored is not None and record.partition == restored[0] \
                and record.offset < restored[1]
            # A replayed record the restored tables already counted is not counted again.
            if not op.action.is_deterministic and not replayed:
                s = agent.monitor.index.encode(t.state)
                attribution = attribution_from_mask(op, s, obs.outcomes)
                if attribution is not None:
                    alarm = self.drift.observe(agent.agent_id, op.action, attribution)
                    if alarm is not None and agent.awaiting is None:
                        self.metrics.drift_alarms.labels(agent.family, op.action.name).inc()
                        agent.alarms[op.action.name] = alarm
                        log.info("drift alarm", summary=alarm.evidence.summary())
                        self._maybe_queue(agent, force=True)
            return
        if verdict is not Verdict.INCONSISTENT:
            return
        agent.inconsistent += 1
        self.metrics.inconsistencies.labels(agent.family, t.action[0]).inc()
        if agent.awaiting is not None:
            return  # the queued assessment will settle it; the new model re-checks
        if len(agent.evidence) < self.config.detection.max_evidence:
            agent.evidence.append(ObservedTransition(t, record.partition, record.offset))
        if agent.evidence_since is None:
            agent.evidence_since = time.monotonic()
        log.info("inconsistent transition", action=list(t.action), model=agent.version.ref.version)
        self._maybe_queue(agent)

    # ------------------------------------------------------------------ debounce + queue

    def _sweep(self, force: bool = False) -> None:
        for agent in self.registry:
            if agent.awaiting is None and (agent.evidence or agent.alarms):
                self._maybe_queue(agent, force=force)

    def _maybe_queue(self, agent: AgentState, force: bool = False) -> None:
        if agent.awaiting is not None:
            return
        det = self.config.detection
        ripe = force or bool(agent.alarms) or len(agent.evidence) >= det.debounce_transitions
        if not ripe and agent.evidence_since is not None:
            ripe = time.monotonic() - agent.evidence_since >= det.debounce_s
        if not ripe:
            return
        # The key names the model the evidence contradicts and where the evidence starts:
        # a replay after a crash rebuilds the same key (and enqueue is a no-op), while new
        # evidence after an assessment that changed nothing gets a fresh one.
        first = agent.first_buffered_offset()
        since = first if first is not None else agent.last_offset
        key = f"{agent.family}/{agent.agent_id}@{agent.version.ref}#{since}"
        n_evidence = len(agent.evidence)
        provisional = agent.domain
        drift: dict[str, Any] = {}
        probes: dict[str, Any] = {}
        decode = agent.monitor.index.decode
        for name, alarm in agent.alarms.items():
            provisional = provisional.replace_action(alarm.updated_action)
            drift[name] = alarm.evidence.to_dict()
            buf = agent.monitor.executed.get(name)
            if buf:
                # A state the action ran in is a state to ask it to run in again.
                last = buf[-1]
                probes[name] = {"state": sorted(list(a) for a in decode(last.state)),
                                "action": list(last.action)}
        executed = self._executed_evidence(agent)
        payload = {
            "agent_id": agent.agent_id, "family": agent.family, "partition": agent.partition,
            "base": agent.version.ref.to_json(),
            "inconsistent": [o.to_json() for o in agent.evidence],
            "executed": executed,
            "drift": drift,
            "provisional_model": domain_to_json(provisional) if drift else None,
            "drift_probes": probes,
        }
        now = self.clock()
        alerts = [self._awaiting_alert(agent, key, now)] if agent.evidence else []
        created = self.store.enqueue(PendingAssessment(
            key=key, agent_id=agent.agent_id, family=agent.family, payload=payload,
            enqueued_at=now), alerts)
        agent.awaiting = key
        self._awaiting_keys[agent.agent_id] = key
        agent.evidence.clear()
        agent.evidence_since = None
        agent.alarms.clear()
        if created:
            self.metrics.assessments_queued.labels(agent.family).inc()
            log.info("assessment queued", key=key, agent_id=agent.agent_id,
                     inconsistent=n_evidence, drift=sorted(drift))
        elif key not in {i.key for i in (*self.store.queue_items("pending"),
                                         *self.store.queue_items("claimed"))}:
            # A replay of evidence whose assessment already finished: nothing to wait for.
            agent.awaiting = None
            self._awaiting_keys.pop(agent.agent_id, None)
        self._work.set()

    def _awaiting_alert(self, agent: AgentState, key: str, now: datetime) -> OutboxAlert:
        """The "unexplained inconsistency awaiting assessment" alert for queued work: one
        per queued assessment (written with it), naming the contradicted pa-tuples."""
        first = agent.evidence[0].transition
        actions = sorted({o.transition.action[0] for o in agent.evidence})
        contradicted: list[str] = []
        for o in agent.evidence[:10]:  # Table 2 per transition; a few say enough
            t = o.transition
            for c in explain(agent.domain, t.action, t.state, t.next_state).contradicted:
                text = f"⟨{c.pa.atom}, {c.pa.action}⟩"
                if text not in contradicted:
                    contradicted.append(text)
        alert = inconsistency_alert(
            family=agent.family, agent_id=agent.agent_id, action=first.action[0], time=now,
            contradicted=contradicted, header=agent.domain.action(first.action[0]).header(),
            evidence={"assessment_key": key, "model_version": agent.version.ref.version,
                      "inconsistent": len(agent.evidence), "actions": actions,
                      "transitions": [{"partition": o.partition, "offset": o.offset,
                                       "episode_id": o.transition.episode_id,
                                       "step": o.transition.step}
                                      for o in agent.evidence[:10]]},
            severities=self.alert_policy.severities)
        return outbox_record(alert, queued_alert_key(key))

    def _executed_evidence(self, agent: AgentState) -> list[dict[str, Any]]:
        """Executed transitions since the first buffered inconsistency.

        Older ones may predate the drift: they show the old behaviour, and handing them to
        the assessment would contradict what the agent does now.
        """
        keep = self.config.detection.max_executed_evidence
        first = agent.first_buffered_offset()
        if not keep or first is None:
            return []
        decode = agent.monitor.index.decode
        recent = sorted((t for buf in agent.monitor.executed.values() for t in buf
                         if t.position >= first), key=lambda t: t.position)[-keep:]
        return [{"state": sorted(list(a) for a in decode(t.state)), "action": list(t.action),
                 "next_state": sorted(list(a) for a in decode(t.next_state))} for t in recent]

    # ------------------------------------------------------------------ results

    def _drain(self) -> None:
        while True:
            try:
                result = self._results.get_nowait()
            except queue.Empty:
                break
            self._apply(result)
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                break
            try:
                command()
            except Exception:
                log.exception("scheduled command failed")

    def _apply(self, result: _Result) -> None:
        if isinstance(result, _Installed):
            self._awaiting_keys.pop(result.agent_id, None)
            agent = self.registry.get(result.agent_id)
            if agent is not None:
                if result.version.ref.version >= agent.version.ref.version \
                        or result.version.agent_id != agent.version.agent_id:
                    agent.install(result.version)
                    self.drift.forget(agent.agent_id)
                else:
                    agent.awaiting = None
        elif isinstance(result, _Cleared):
            if self._awaiting_keys.get(result.agent_id) == result.key:
                self._awaiting_keys.pop(result.agent_id, None)
            agent = self.registry.get(result.agent_id)
            if agent is not None and agent.awaiting == result.key:
                agent.awaiting = None
                self.drift.forget(agent.agent_id)
        else:
            agent = self.registry.get(result.agent_id)
            if agent is not None and agent.awaiting is None:
                agent.evidence.append(result.observed)
                if agent.evidence_since is None:
                    agent.evidence_since = time.monotonic()
                self._maybe_queue(agent, force=True)

    def poll_results(self) -> None:
        """Pick up what other replicas' workers did for agents this one owns.

        Only the live queue (pending and claimed items, a short list) is read: work that
        left it was either stored as a newer version, which is installed, or ended without
        one (no change found, or failed), which releases the agent.
        """
        waiting = [a for a in self.registry if a.awaiting is not None]
        if not waiting:
            return
        live = {i.key for i in (*self.store.queue_items("pending"),
                                *self.store.queue_items("claimed"))}
        for agent in waiting:
            latest = self.store.latest(agent.family, agent.agent_id)
            if latest is not None and (agent.version.agent_id is None
                                       or latest.version > agent.version.version):
                self._apply(_Installed(agent.agent_id, latest))
            elif agent.awaiting not in live and agent.awaiting is not None:
                self._apply(_Cleared(agent.agent_id, agent.awaiting, "left the queue"))

    # ------------------------------------------------------------------ checkpoint

    def commit_offsets(self, partitions: set[int] | None = None) -> dict[int, int]:
        """Per partition, the offset every earlier record's effects are durable up to."""
        held: dict[int, int] = {}
        for agent in self.registry:
            first = agent.first_buffered_offset()
            if first is not None:
                held[agent.partition] = min(held.get(agent.partition, first), first)
        offsets = {}
        for p, nxt in self._next.items():
            if partitions is not None and p not in partitions:
                continue
            offsets[p] = min(nxt, held.get(p, nxt))
        return offsets

    def save_drift_state(self, partitions: set[int] | None = None) -> int:
        """Write the drift tables of agents that changed since they were last written.

        Each snapshot carries the position it reflects: the next offset of the agent's
        partition (every record before it handled). Called before the offsets are saved,
        so a committed offset is never past a snapshot's position and a replay from it
        can skip exactly the records the snapshot counted.
        """
        changed = self.drift.take_changed()
        later: set[str] = set()
        snaps: list[DriftSnapshot] = []
        now = self.clock()
        for agent_id in sorted(changed):
            agent = self.registry.get(agent_id)
            if agent is None:
                continue  # dropped (partition revoked): its state was saved before that
            if partitions is not None and agent.partition not in partitions:
                later.add(agent_id)
                continue
            nxt = self._next.get(agent.partition)
            if nxt is None:
                later.add(agent_id)
                continue
            restored = agent.drift_restored
            if restored is not None and restored[0] == agent.partition:
                nxt = max(nxt, restored[1])
            snaps.append(DriftSnapshot(
                agent_id, agent.version.ref, self.source.name, agent.partition, nxt,
                snapshot_agent(self.drift, agent_id, agent.version.ref.to_json()), now))
        self.drift.mark_changed(later)
        if snaps:
            try:
                self.store.save_drift_snapshots(self.group, snaps)
            except BaseException:
                self.drift.mark_changed(s.agent_id for s in snaps)
                raise
        return len(snaps)

    def checkpoint(self, partitions: set[int] | None = None) -> None:
        self._last_checkpoint = time.monotonic()
        self.save_drift_state(partitions)
        offsets = {p: o for p, o in self.commit_offsets(partitions).items()
                   if self._committed.get(p) != o}
        if not offsets:
            return
        self.publisher.flush()
        self.store.save_offsets(self.group, {(self.source.name, p): o
                                             for p, o in offsets.items()}, self.clock())
        self.source.commit(offsets)
        self._committed.update(offsets)
        for p, lag in self.source.lag().items():
            self.metrics.lag.labels(str(p)).set(lag)
        self.metrics.agents.set(len(self.registry))
        self.metrics.pending.set(len(self._awaiting_keys))
        log.debug("checkpoint", offsets=offsets)

    # ------------------------------------------------------------------ drift audit

    def audit(self) -> None:
        """The fleet-wide windowed chi-square with BH control (scheduler job, main loop)."""
        for finding in self.drift.audit():
            family_agent = self.registry.get(finding.agent_id)
            self.metrics.drift_tests.labels(family_agent.family if family_agent else "-",
                                            finding.action.split("(", 1)[0]).inc()
            if not finding.rejected or finding.evidence is None:
                continue
            agent = self.registry.get(finding.agent_id)
            if agent is None or agent.awaiting is not None:
                continue
            name = finding.action.split("(", 1)[0]
            mon = self.drift.monitor(agent.agent_id, agent.domain.action(name))
            alarm = DriftAlarm(finding.evidence, mon.updated_action(finding.evidence.estimate))
            agent.alarms[name] = alarm
            self.metrics.drift_alarms.labels(agent.family, name).inc()
            log.info("drift audit rejected", agent_id=agent.agent_id, action=name,
                     q=finding.q_value)
            self._maybe_queue(agent, force=True)

    # ------------------------------------------------------------------ workers

    def _start_workers(self) -> None:
        for i in range(self.config.assessment.workers):
            name = f"{self.config.replica_id}/w{i}"
            t = threading.Thread(target=self._worker, args=(name,), name=f"assess-{i}",
                                 daemon=True)
            t.start()
            self._workers.append(t)

    def _worker(self, name: str) -> None:
        cfg = self.config.assessment
        while not self._stopped_workers.is_set():
            try:
                items = self.store.claim(name, self.clock(), cfg.lease_s, 1)
            except Exception:
                log.exception("claiming queued work failed")
                items = []
            if not items:
                self._work.wait(0.5)
                self._work.clear()
                continue
            item = items[0]
            with self._inflight_lock:
                self._inflight[name] = item.key
            try:
                self._run_item(name, item)
            except Exception as e:
                log.exception("assessment crashed", key=item.key)
                self._give_back(name, item, f"{type(e).__name__}: {e}")
            finally:
                with self._inflight_lock:
                    self._inflight.pop(name, None)

    def _give_back(self, worker: str, item: PendingAssessment, error: str) -> None:
        cfg = self.config.assessment
        now = self.clock()
        reason = "agent_unreachable" if error.startswith("agent unavailable") else "error"
        # Written by the store only if this release fails the work for good, in the same
        # transaction, so the alert can be neither lost nor raised for a retry.
        alert = assessment_failed_alert(
            family=item.family, agent_id=item.agent_id, time=now, reason=reason,
            message=error[:500], evidence={"assessment_key": item.key,
                                           "attempts": item.attempts},
            severities=self.alert_policy.severities)
        wait, limit = retry_plan(cfg, item.attempts, item.key,
                                 agent_unreachable=reason == "agent_unreachable")
        try:
            failed = self.store.release(
                item.key, worker, error, now + wait, limit,
                [outbox_record(alert, failed_alert_key(item.key))])
        except StoreError:
            return
        self.metrics.assessments.labels(item.family, "retry").inc()
        if failed:
            self.metrics.assessments.labels(item.family, "failed").inc()
            self._results.put(_Cleared(item.agent_id, item.key, "failed"))

    def _run_item(self, worker: str, item: PendingAssessment) -> None:
        t0 = time.monotonic()
        payload = item.payload
        base_ref = ModelRef.from_json(payload["base"])
        family, agent_id = item.family, item.agent_id
        structlog.contextvars.bind_contextvars(agent_id=agent_id)
        base = self.store.get(base_ref)
        if base is None:
            raise StoreError(f"queued work names {base_ref}, which the store does not have")
        latest = self.store.latest(family, agent_id)
        version: ModelVersion | None = None
        if latest is not None and latest.evidence.get("assessment_key") == item.key:
            version = latest  # a retry after the version was stored but not acknowledged
        elif latest is not None and (base.agent_id is None
                                     or latest.version > base.version):
            # The agent's lineage moved past the model this work was queued against.
            self.store.complete(item.key, worker)
            self._results.put(_Installed(agent_id, latest))
            return
        queries = 0
        if version is None:
            base_domain = base.domain()
            provisional = payload.get("provisional_model")
            request = AssessmentRequest(
                agent_id=agent_id, family=family,
                model=base_domain,
                agent=self.agents.agent(agent_id, family),
                inconsistent=[(frozenset(tuple(a) for a in o["state"]), tuple(o["action"]),
                               frozenset(tuple(a) for a in o["next_state"]))
                              for o in payload.get("inconsistent", [])],
                inconsistent_executed=[o.get("executed") for o in payload.get("inconsistent", [])],
                executed=[(frozenset(tuple(a) for a in o["state"]), tuple(o["action"]),
                           frozenset(tuple(a) for a in o["next_state"]))
                          for o in payload.get("executed", [])],
                drifted_actions={name: domain_from_json(provisional).action(name)
                                 for name in payload.get("drift", {})} if provisional else {},
                drift_probes={name: (tuple(p["action"]), frozenset(tuple(a) for a in p["state"]))
                              for name, p in payload.get("drift_probes", {}).items()},
                query_budget=self.config.assessment.query_budget,
                samples=self.config.assessment.samples,
            )
            try:
                outcome = self.assessor.assess(request)
            except AgentUnavailable as e:
                self._give_back(worker, item, describe_agent_failure(e))
                return
            queries = outcome.queries
            self.metrics.queries.labels(family).inc(queries)
            self.metrics.assessment_seconds.labels(family).observe(time.monotonic() - t0)
            if outcome.model == base_domain:
                self.store.complete(item.key, worker)
                self.metrics.assessments.labels(family, "unchanged").inc()
                log.info("assessment found no change", key=item.key, queries=queries)
                self._results.put(_Cleared(agent_id, item.key, "unchanged"))
                return
            ref = ModelRef(family, agent_id, (latest.version if latest else 0) + 1)
            baseline = next((v for v in reversed(lineage_chain(self.store, base.ref))
                             if v.agent_id is None), base)
            evidence = {
                "assessment_key": item.key,
                "queries": queries,
                "transitions": [{"partition": o["partition"], "offset": o["offset"],
                                 "episode_id": o.get("episode_id"), "step": o.get("step")}
                                for o in payload.get("inconsistent", [])],
                "drift": payload.get("drift", {}),
                "assessment": dict(outcome.details),
                "replica": self.config.replica_id,
            }
            candidate = build_version(ref, outcome.model, self.clock(), parent=base,
                                      baseline=baseline.domain(), evidence=evidence)
            try:
                # The version's alerts enter the outbox in the version's own transaction.
                version = self.store.put(candidate, self._version_alerts(base, candidate))
            except VersionConflict:
                latest = self.store.latest(family, agent_id)
                if latest is None or latest.evidence.get("assessment_key") != item.key:
                    raise
                version = latest
        # A retry finds the version already stored: writing its alerts again is a no-op
        # (same outbox keys), and covers a version stored without them.
        events = self._version_alerts(base, version)
        self.store.add_alerts(events)
        self.publisher.model_version(model_event(version))
        self.publisher.flush()
        self.store.complete(item.key, worker)
        self.metrics.model_versions.labels(family).inc()
        self.metrics.assessments.labels(family, "changed").inc()
        self.metrics.observe_model_delta(family, agent_id, version.delta_to_baseline)
        log.info("model version published", version=version.version, delta=version.delta_to_parent,
                 summary=list(version.summary), queries=queries, alerts=len(events))
        self._results.put(_Installed(agent_id, version))

    def _version_alerts(self, parent: ModelVersion, version: ModelVersion) -> list[OutboxAlert]:
        return [outbox_record(a, version_alert_key(version, a))
                for a in alerts_for_version(parent, version,
                                            severities=self.alert_policy.severities)]

    # ------------------------------------------------------------------ canaries

    def canary(self, problems: dict[str, frozenset[tuple[str, ...]]],
               objects: dict[str, dict[str, tuple[str, ...]]]) -> None:
        """Probe actions the stream has not shown executing lately (scheduler job).

        For each such action, ground it with the family's objects, make its precondition
        true in the agent's last reported state (or the family problem's initial state),
        and ask the agent to execute it. An answer the model cannot explain becomes
        evidence, exactly like an inconsistent transition from the stream.
        """
        idle_s = self.config.scheduler.canary_idle_s
        now = time.monotonic()
        for agent in self.registry:
            if agent.awaiting is not None or agent.family not in objects:
                continue
            base_state = agent.last_state or problems.get(agent.family, frozenset())
            for action in agent.domain.actions:
                if now - agent.last_executed.get(action.name, -1e18) < idle_s:
                    continue
                args = []
                for p in action.parameters:
                    candidates = objects[agent.family].get(p.type, ())
                    pick = next((c for c in candidates if c not in args), None)
                    if pick is None:
                        break
                    args.append(pick)
                if len(args) != action.arity:
                    continue
                ground = (action.name, *args)
                binding = dict(zip(action.parameter_names, args, strict=True))
                state = (set(base_state) | {a.ground(binding) for a in action.pre_pos}) - {
                    a.ground(binding) for a in action.pre_neg}
                agent.last_executed[action.name] = now  # one probe per idle period
                self._canary_pool.submit(self._probe, agent.agent_id, agent.family,
                                         agent.domain, frozenset(state), ground)

    def _probe(self, agent_id: str, family: str, domain: Domain,
               state: frozenset[tuple[str, ...]], ground: tuple[str, ...]) -> None:
        try:
            answer = self.agents.agent(agent_id, family).query(state, [ground], 1)[0]
        except AgentUnavailable as e:
            self.metrics.canaries.labels(family, "unavailable").inc()
            log.warning("canary failed", agent_id=agent_id, error=str(e))
            return
        grounder = Grounder(domain)
        op = grounder.operator(ground)
        verdict, _ = check(op, grounder.index.encode(state), grounder.index.encode(answer.state))
        if answer.executed == 0 and verdict is not Verdict.INCONSISTENT:
            # Refused although the model says it applies, and nothing changed: the check
            # above calls that NOT_APPLICABLE only if the precondition failed, so a
            # refusal of an applicable action is a finding too.
            verdict = Verdict.INCONSISTENT if op.applicable(grounder.index.encode(state)) \
                else verdict
        self.metrics.canaries.labels(family, verdict.name.lower()).inc()
        if verdict is Verdict.INCONSISTENT:
            t = Transition(agent_id, family, "canary", None, self.clock(), state, ground,
                           answer.state, False, answer.executed > 0)
            log.info("canary found an inconsistency", agent_id=agent_id, action=list(ground))
            self._results.put(_CanaryEvidence(agent_id, ObservedTransition(t, -1, -1)))
