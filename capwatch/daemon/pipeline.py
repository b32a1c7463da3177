"""The pipeline: records in, model versions and alerts out, nothing lost.

:class:`Pipeline` is the main loop and what wires its parts together; the
:class:`~capwatch.daemon.service.Service` runs it with the HTTP server and the scheduler.
One record travels: source → :func:`~capwatch.contracts.wire.decode` → the agent's
:class:`~capwatch.daemon.agent_watch.AgentWatch` (monitor, drift tables, evidence,
debounce) → when ripe, a :class:`~capwatch.daemon.work.WorkItem` queued in the store →
an :class:`~capwatch.daemon.workers.AssessmentWorkers` thread → a new version, published
with its alerts → back here as a result that the watch adopts.

Threads and who owns what:

- the *main loop* (:meth:`Pipeline.run`) owns the watches and the drift tables: it polls,
  decodes, observes, queues work, applies results and checkpoints
  (:mod:`capwatch.daemon.checkpoint`, which states the commit rule);
- *assessment workers* claim queued work from the store and post results back;
- the *canary prober* (:mod:`capwatch.daemon.canary`) asks agents on a thread of its own;
- the *scheduler* and the HTTP server never touch the watches: jobs post commands that
  the main loop runs between polls (:meth:`Pipeline.submit`), and HTTP reads the store.

Kept whole, past the size where a module is usually split, because this is the one
module that knows every part: the wiring, the loop with its outage retries, the
rebalance callbacks and the scheduler's entry points. Each step's own logic is in the
module named for it (batch, intake, agent_watch, checkpoint, eviction, lag, enqueue,
workers, canary, results, alerting).
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import structlog

from capwatch.alerts.sinks import AlertSink
from capwatch.contracts.ports import (
    AgentDirectory,
    AssignmentLost,
    GroupView,
    Publisher,
    Record,
    ReportsFailingPartitions,
    Source,
)
from capwatch.contracts.store import ModelStore
from capwatch.contracts.wire import DecodeLimits
from capwatch.daemon.agent_watch import AgentWatch, WatchSettings
from capwatch.daemon.alerting import (
    AlertRouting,
    build_outbox,
    build_sinks,
)
from capwatch.daemon.assessor import Assessor
from capwatch.daemon.batch import Batches
from capwatch.daemon.canary import PROBE_THREADS, CanaryProber
from capwatch.daemon.checkpoint import Checkpointer
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.enqueue import EvidenceQueue
from capwatch.daemon.eviction import Eviction
from capwatch.daemon.fleet_drift import FleetDrift
from capwatch.daemon.health import Health
from capwatch.daemon.heap import release_freed
from capwatch.daemon.holds import Holds
from capwatch.daemon.infra import (
    INFRASTRUCTURE_ERRORS,
    Clock,
    component_of,
    describe_outage,
    utc_now,
)
from capwatch.daemon.intake import Intake
from capwatch.daemon.lag import LagGauges
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.pacing import Pacers, StreamPressure
from capwatch.daemon.reassess import Reassessment
from capwatch.daemon.registry import Registry, resume_queued, seed_baselines
from capwatch.daemon.results import ResultApplier
from capwatch.daemon.store_probe import STORE_PROBE_WAIT_S, refused_writes_probe
from capwatch.daemon.work import Result
from capwatch.daemon.workers import AssessmentWorkers
from capwatch.model.domain import Domain, GroundAtom
from capwatch.model.object_types import ObjectTypes
from capwatch.monitor.drift import AuditFinding, DriftConfig, DriftMonitor

log = structlog.get_logger("capwatch.daemon")


SWEEP_EVERY_S = 0.2
"""How often the main loop looks for evidence ripe by time (the debounce's
``debounce_s``, work a failed store write left buffered) among the watches holding some
(:meth:`EvidenceQueue.sweep`). Evidence ripe by count is queued as it arrives."""

FAILING_FETCHES = 2
"""After how many failed fetches in a row (no record of it handed out between) a
partition is said to keep failing (/readyz, ``capwatch_kafka_partitions_failing``): a
batch corrupt only on the wire fails once and reads at the next fetch, one corrupt in the
log fails at every fetch. Both clients fetch a failed partition again after about 0.5 s
(kafka_backoff's first wait, librdkafka's ``fetch.error.backoff.ms``), so it is named
about half a second after its first failure."""

STORE_PROBE_EVERY_S = 2.0
"""During a models store outage's back-off, how often the main loop asks the store whether
it answers again (``unreachable``, bounded by ``store_probe.STORE_PROBE_WAIT_S``, the
bound /readyz's probe has)."""


class Pipeline:
    """Wires a source, the agents' watches, the store, the workers and a publisher."""

    def __init__(self, config: DaemonConfig, *, store: ModelStore, source: Source,
                 publisher: Publisher, agents: AgentDirectory, assessor: Assessor,
                 families: dict[str, Domain] | None = None,
                 metrics: DaemonMetrics | None = None, clock: Clock = utc_now,
                 alert_sinks: list[AlertSink] | None = None,
                 checks: Sequence[Callable[[], str | None]] = (),
                 group_view: Callable[[], GroupView | None] | None = None,
                 object_types: Mapping[str, ObjectTypes] | None = None) -> None:
        """``object_types``: per family, the types its problem declares (checked at
        intake)."""
        self.config = config
        self.checks = list(checks)
        """Watchers of dependencies that can fail without any call raising (a frozen
        broker answers nothing, and a consumer that only polls never notices): each says
        what fails, or None; /readyz reports them."""
        self._member_id: Callable[[], str | None] | None = getattr(source, "member_id", None)
        self.health = Health(
            stall_after_s=config.health.stall_after_s,
            unassigned_after_s=config.health.unassigned_after_s,
            group=config.kafka.group_id if self._member_id is not None else None,
            group_view=group_view)
        """A stalled main loop (/livez) and a replica left without partitions (/readyz)."""
        self.store = store
        self.source = source
        self.publisher = publisher
        self.agents = agents
        self.metrics = metrics or DaemonMetrics()
        self.clock = clock
        self.families = dict(families or {})
        self.alert_policy = config.alerts.policy()
        self.alerts = AlertRouting(config.alerts, build_outbox(
            config.alerts, store,
            alert_sinks if alert_sinks is not None else build_sinks(config.alerts, publisher),
            self.metrics), clock)
        """Alerts go to the store's outbox with what caused them; this routes them."""
        det, lim = config.detection, config.limits
        self.drift = DriftMonitor(DriftConfig(
            false_alarm_rate=det.drift_false_alarm_rate, window=det.drift_window,
            min_samples=min(det.drift_min_samples, det.drift_window), fdr=det.drift_fdr))
        self.registry = Registry(store, WatchSettings.from_config(config), self.drift)
        self.checkpoints = Checkpointer(
            group=config.kafka.group_id, store=store, source=source, publisher=publisher,
            registry=self.registry, drift=self.drift, clock=clock,
            interval_s=config.scheduler.checkpoint_s, replica=config.replica_id,
            queue=store)
        self._results: queue.SimpleQueue[Result] = queue.SimpleQueue()
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._audit_alarms: list[AuditFinding] = []
        """A sliced audit's rejections not yet raised (:meth:`audit_slice`)."""
        self.fleet_drift = FleetDrift(store, self.metrics, self.families)
        """The drift gauges, the fleet's, read from the store off the main loop."""
        self.refused_writes = refused_writes_probe(store)
        """Keeps refused store writes reported while nothing asks /readyz."""
        self.pressure = StreamPressure(config.assessment.behind_s)
        """Whether the stream is behind: background threads then yield (daemon.pacing)."""
        share = config.assessment.behind_cpu_share
        self.workers = AssessmentWorkers(
            config, store=store, agents=agents, assessor=assessor, publisher=publisher,
            metrics=self.metrics, policy=self.alert_policy, clock=clock,
            post=self._results.put, on_version=self.fleet_drift.wake,
            pacers=Pacers(self.pressure, share, config.assessment.workers,
                          self.metrics.yielded.labels("assessment").inc))
        self.canaries = CanaryProber(agents=agents, metrics=self.metrics,
                                     idle_s=config.scheduler.canary_idle_s, clock=clock,
                                     post=self._results.put,
                                     busy_s=config.scheduler.canary_busy_s,
                                     pacers=Pacers(self.pressure, share, PROBE_THREADS,
                                                   self.metrics.yielded.labels("canary").inc))
        self.enqueue = EvidenceQueue(store=store, alerts=self.alerts, metrics=self.metrics,
                                     policy=self.alert_policy, clock=clock,
                                     wake_workers=self.workers.wake)
        self.intake = Intake(limits=DecodeLimits(lim.max_message_bytes, lim.max_state_atoms,
                                                 lim.max_trace_steps),
                             registry=self.registry, checkpoints=self.checkpoints,
                             publisher=publisher, metrics=self.metrics, clock=clock,
                             queue_evidence=self.queue, dropped=self.enqueue.dropped,
                             require_key=config.source.kind == "kafka",
                             object_types=object_types)
        self.results = ResultApplier(registry=self.registry, store=store, queue=self.queue,
                                     dropped=self.enqueue.dropped,
                                     buffered=self.enqueue.note_buffered, clock=clock)
        self._stop = threading.Event()
        self.signalled: int | None = None
        """A signal the process received, set by the handler and nothing else: a handler
        that logs or sets an Event takes a lock, and when the signal landed while the main
        thread held that lock (writing a log line) the handler waited for it forever: a
        daemon that never stopped on SIGTERM (seen twice in test_ingest_e2e under load).
        The main loop says so and stops at its next turn."""
        self._consuming = False
        self.starting: str | None = None
        """What the daemon does before its main loop consumes (seeding the baselines,
        joining the group), for /readyz ("starting: ..."); None once it consumes."""
        self._outage: str | None = None
        """What the daemon stands on that is failing now (the store, the disk, Kafka), with
        the error; None when everything answers."""
        self._store_seen_down = False
        """A probe of this outage found the models store unreachable since the last wait
        cut short by its answering again (see _failed)."""
        self._outage_wait = 0.0
        self._backed_off: Callable[[BaseException], bool] | None = getattr(
            source, "backed_off", None)
        """Whether a failure the source raised was one partition's, which it backs off
        alone (kafka_backoff): see :meth:`_partition_failed`."""
        self._own_failures = 0
        """Such failures in a row, no step of the main loop working between them."""
        self._failing: ReportsFailingPartitions | None = \
            source if isinstance(source, ReportsFailingPartitions) else None
        self._monotonic: Callable[[], float] = time.monotonic
        """The outage waits' clock (a test's fake clock, with a fake :attr:`_stop`)."""
        self._backlog: list[Record] = []
        """Records polled but not handled because the store failed: handled first next."""
        self.eviction = Eviction(limits=config.limits, registry=self.registry,
                                 checkpoints=self.checkpoints, metrics=self.metrics)
        self.batches = Batches(intake=self.intake, registry=self.registry,
                               checkpoints=self.checkpoints, metrics=self.metrics,
                               enqueue=self.enqueue, queue_ripe=self._queue_or_keep,
                               buffered=self.enqueue.note_buffered,
                               holds=Holds(self.metrics))
        self.lag = LagGauges(source, self.metrics, self.batches.newest_stamp)
        self._swept_at = 0.0
        """When :meth:`sweep` last looked at every watch (time.monotonic())."""
        every = config.assessment.reassess_every_s
        self.reassessment = Reassessment(every, store, clock()) if every else None
        self.assigned: set[int] = set()
        """Source partitions this replica owns now (for operators and tests)."""
        self._park_due = False
        """An assignment could not read the store's queue: read it before the next record
        (:meth:`handle_batch`)."""

    @property
    def dead_letters(self) -> int:
        return self.intake.dead_letters

    @property
    def processed(self) -> int:
        """Records handled (dead letters included) since the pipeline was made."""
        return self.batches.processed

    # ------------------------------------------------------------------ lifecycle

    @property
    def group(self) -> str:
        return self.config.kafka.group_id

    @property
    def ready(self) -> bool:
        return not self.problems()

    def problems(self) -> list[str]:
        """Why the daemon is not ready, for /readyz."""
        out = []
        if not self._consuming or self._stop.is_set():
            starting = self.starting
            out.append(f"starting: {starting}" if starting is not None
                       and not self._stop.is_set() else "not consuming")
        if self._outage is not None:
            out.append(self._outage)
        out.extend(p for p in self._failing_checks() if p != self._outage)
        out.extend(self._failing_partitions())
        unassigned, _ = self.health.partitions()
        if unassigned is not None:
            out.append(unassigned)
        return out

    def notes(self) -> list[str]:
        """What /readyz says beside a 200: a replica standing by."""
        _, note = self.health.partitions()
        return [note] if note is not None else []

    def stalled(self) -> list[str]:
        """Why the daemon should be restarted, for /livez."""
        stalled = self.health.stalled()
        return [stalled] if stalled is not None else []

    def _failing_checks(self) -> list[str]:
        return [p for p in (check() for check in self.checks) if p is not None]

    def _failing_partitions(self) -> list[str]:
        """The source's partitions whose fetches keep failing, the same with every
        Kafka client. kafka-python raised each failure out of a poll, an outage /readyz
        named until the next poll worked (about 0.5 s: a flicker); librdkafka raises
        none, so such a partition showed only as lag."""
        source = self._failing
        if source is None:
            return []
        now = time.time()
        return [f"Kafka partition {p} of {self.source.name} keeps failing: {f.failures} "
                f"fetches in a row over {max(0.0, now - f.since):.0f} s, fetched again "
                f"alone after a wait while the others are read (its records after the "
                f"failure wait): {f.error}"
                for p, f in sorted(source.failing().items()) if f.failures >= FAILING_FETCHES]

    def awaiting(self) -> dict[str, str]:
        """Agent id → key of the queued or running work it waits for."""
        return self.registry.awaiting()

    def stop(self) -> None:
        """Ask the main loop to finish; safe from other threads. A signal handler sets
        :attr:`signalled` instead: this takes locks."""
        self._stop.set()
        self.workers.wake()

    def _signal_seen(self) -> bool:
        """The main loop's side of :attr:`signalled`: say so and stop."""
        signum = self.signalled
        if signum is None:
            return False
        log.info("signal received", signal=signal.Signals(signum).name)
        self.stop()
        return True

    def submit(self, command: Callable[[], None]) -> None:
        """Run ``command`` on the main loop (scheduler jobs, HTTP actions)."""
        self._commands.put(command)

    def seed_families(self) -> None:
        """Make each configured family model the baseline, as a new version if it changed."""
        seed_baselines(self.store, self.families, self.clock())

    def _prepare(self) -> None:
        self.starting = "recording the family models as baselines"
        self.seed_families()
        self.starting = "recovering this replica's assessment claims"
        self.workers.recover_claims()
        self.starting = "reading the queued assessments"
        resume_queued(self.registry, self.store, self.clock(),
                      self.config.detection.unexplained_max_backoff_s)

    def open(self) -> None:
        """Everything :meth:`run` does before its loop but start the workers: for callers
        that feed records by hand with :meth:`handle`."""
        self._prepare()
        self.source.start(self.assign, self.revoke, self.checkpoints.resume_offsets())

    def run(self, exit_when_idle: bool = False) -> int:
        """Consume until :meth:`stop` (or, with ``exit_when_idle``, until a finite source is
        exhausted and every queued assessment is done). Returns the exit code."""
        self._prepare()
        try:
            self.starting = f"starting the source {self.source.name}"
            self.source.start(self.assign, self.revoke, self.checkpoints.resume_offsets())
            self.workers.start()
            self.alerts.start()
            self.fleet_drift.start()
            if self.refused_writes is not None:
                self.refused_writes.start()
            self._consuming = True
            self.starting = None
            self.health.running(True)
            log.info("daemon started", replica=self.config.replica_id, source=self.source.name)
            while not self._stop.is_set() and not self._signal_seen():
                self.health.turn(self._member_id() if self._member_id is not None
                                 and not self.assigned else None)
                try:
                    records = self._step()
                    if exit_when_idle and not records and self.source.exhausted() \
                            and self._idle():
                        break
                except INFRASTRUCTURE_ERRORS as e:
                    self._failed(e)
                    continue
                if self._own_failures:
                    self._own_failures = 0
                if self._outage is not None:
                    log.info("dependency back; resuming", was=self._outage)
                    self._outage = None
                    self._outage_wait = 0.0
                    self._store_seen_down = False
        finally:
            self._consuming = False
            self.starting = None
            self.health.running(False)
            self._shutdown()
        return 0

    def _step(self) -> list[Record]:
        """One turn of the main loop; raises an infrastructure error with nothing lost: a
        record not handled stays in the backlog, evidence not queued stays buffered, and
        offsets are committed only by a checkpoint that went through."""
        records = self._backlog or self.source.poll(0.1)
        self._backlog = []
        before = self.processed
        try:
            self.handle_batch(records)
        except INFRASTRUCTURE_ERRORS:
            self._backlog = records[self.processed - before:]  # from the one that failed
            raise
        if records:
            stamps = self.batches.newest_stamp
            self.pressure.handled(max(stamps.values()) if stamps else None, time.time())
        else:
            self.pressure.caught_up()
        self.alert_promptly()  # a retry, if the store failed it in handle_batch
        self.drain()
        if self.auditing:
            try:
                self.audit_slice()
            except INFRASTRUCTURE_ERRORS:
                raise  # an outage: the main loop says so and retries (the round goes on)
            except Exception:
                log.exception("drift audit slice failed")
        if self.canaries.probing:
            try:
                self.canary_slice()
            except Exception:
                # The agent that failed had its turn: the round goes on past it.
                log.exception("canary slice failed")
        now = time.monotonic()
        if now - self._swept_at >= SWEEP_EVERY_S:
            self._swept_at = now
            self.sweep()
        if self.checkpoints.due or self._outage is not None:
            # After an outage a checkpoint proves the store takes writes again.
            self.checkpoint(background=self._outage is None)
        elif self.checkpoints.committing:
            self.commit_flushed()
        return records

    def _failed(self, error: BaseException) -> None:
        """A dependency failed: say so (logs and /readyz), wait, and try again. Only a
        wrong configuration stops the daemon; the store, the disk or the broker coming
        back resumes it with nothing lost."""
        if self._partition_failed(error):
            return
        # No stream to yield to while a dependency is out: paced work runs at full speed
        # (it would otherwise wait out the whole outage at its reduced share).
        self.pressure.caught_up()
        what = describe_outage(error)
        self._outage_wait = min(30.0, max(0.5, self._outage_wait * 2))
        if what != self._outage:
            log.error("dependency failed; retrying", problem=what, retry_in_s=self._outage_wait)
        else:
            log.warning("still failing; retrying", problem=what,
                        retry_in_s=self._outage_wait)
        self._outage = what
        # The back-off grows to 30 s; a store that answers again is retried at once
        # rather than at its end: oper18's PostgreSQL, stopped 30 s, was back 31 s before
        # the main loop resumed, /readyz 503 meanwhile while the workers and the router
        # already worked. Only after a probe of this outage found it unreachable: a store
        # that answers but fails the work keeps the whole back-off.
        unreachable = getattr(self.store, "unreachable", None) \
            if component_of(error) == "models store" else None
        clock = self._monotonic
        probe_at = clock() + STORE_PROBE_EVERY_S
        # In short steps: a signal (see signalled) must not wait out the whole backoff.
        deadline = clock() + self._outage_wait
        while self.signalled is None and not self._stop.is_set():
            now = clock()
            left = deadline - now
            if left <= 0:
                break
            if unreachable is not None and now >= probe_at:
                if unreachable(STORE_PROBE_WAIT_S) is not None:
                    self._store_seen_down = True
                elif self._store_seen_down:
                    # Seen again only by a probe that finds it down: if the retry fails
                    # with the store answering (it fails the work, not the connection),
                    # the next wait is the whole back-off, not a retry every probe.
                    self._store_seen_down = False
                    break
                probe_at = clock() + STORE_PROBE_EVERY_S
            self._stop.wait(min(0.25, left))

    def _partition_failed(self, error: BaseException) -> bool:
        """Whether ``error`` is one partition's own failure, which the source backs off
        alone (the partition paused for a wait of its own, doubling: kafka_backoff), so
        that the main loop polls on at once: True, the failure logged.

        Before, the main loop met it as an outage and waited 0.5 s (its first wait, as
        the next poll that worked reset it) per failure: every partition's records
        waited for one partition's fault, and with a partition failing after each of its
        own waits the loop stood still 0.5 s in every few. Each assigned partition may
        fail once in a row this way (one fetch may bring several partitions' faults, raised
        a poll each); a further failure with no step working between is not paced by a
        partition's wait, and the loop waits as for an outage: no busy loop whatever the
        source raises. /readyz names the partitions that keep failing
        (:meth:`_failing_partitions`)."""
        backed_off = self._backed_off
        if backed_off is None or not backed_off(error):
            return False
        self._own_failures += 1
        if self._own_failures > max(1, len(self.assigned)):
            return False
        log.warning("a Kafka partition's fetch failed; it is fetched again alone after a "
                    "wait of its own, the other partitions are read on",
                    problem=describe_outage(error))
        return True

    def _idle(self) -> bool:
        if any(w.buffered for w in self.registry):
            self.sweep(force=True)
            return False
        pending = self.store.live_queue_items()
        if pending or self.registry.awaiting():
            return False
        # A finite run ends with its alerts out: groups close now instead of after
        # group_wait. Deliveries a sink refused stay in the store for the next start.
        self.route_alerts(force=True)
        return not self._held_deliveries()

    def _held_deliveries(self) -> bool:
        """A delivery claimed and never finished: the replica sending it died (a killed
        earlier run of this one, say). It goes out once its hold
        (alerts.delivery_lease_s) runs out, so a finite run waits for it; one a sink
        refused (it has an error) waits for the next start instead."""
        # A hold runs out on the store's clock (the database's, for PostgreSQL), which
        # this replica's may be apart from or stepped back from by far more than a hold.
        now = self.store.store_now(self.clock())
        return any(d.attempts > 0 and d.last_error is None and d.not_before is not None
                   and d.not_before > now for d in self.store.deliveries("pending"))

    def _shutdown(self) -> None:
        """Stop fetching, give in-flight work a bounded time, then commit and close."""
        log.info("daemon stopping")
        # No stream to yield to any more: running work uses its grace at full speed
        # rather than waiting out a debt to a loop that handles nothing now.
        self.pressure.caught_up()
        self.workers.stop(self.config.shutdown_grace_s)
        self.canaries.close()
        self.fleet_drift.close()
        if self.refused_writes is not None:
            self.refused_writes.close()
        # The figures as this run leaves them (a finite run's versions of its last
        # seconds), for whoever reads the registry after the run.
        self.fleet_drift.refresh_logged()
        try:
            self.drain()
        except INFRASTRUCTURE_ERRORS as e:
            # A command the scheduler queued (its checkpoint, say, whose commit a replica
            # dropped from the group fails) escaped here: the daemon exited 1 and closed
            # neither its source nor its publisher. What it did not write is rebuilt from
            # the last checkpoint, as below.
            log.error("applying queued work at shutdown failed", problem=describe_outage(e))
        try:
            # Groups close now instead of after group_wait: a replica scaled down, or the
            # last one stopped, has no next start to send what still waits in them.
            self.alerts.run(force=True)
            self.alerts.close()  # a late scheduler run must not use a closed sink
            try:
                self.checkpoint()
            except INFRASTRUCTURE_ERRORS as e:
                # Nothing is lost: the next start replays from the last checkpoint.
                log.error("final checkpoint failed; the next start resumes from the last one",
                          problem=describe_outage(e))
        finally:
            self.source.close()
            self.publisher.close()
        log.info("daemon stopped", processed=self.processed, dead_letters=self.dead_letters)

    # ------------------------------------------------------------------ partitions

    def assign(self, partitions: set[int]) -> None:
        """Rebalance callback: ``partitions`` are this replica's now."""
        log.info("partitions assigned", partitions=sorted(partitions))
        self.assigned |= partitions
        self.health.holding(self.assigned)
        self._park_due = True
        try:
            self.checkpoints.load_drift_state(partitions)
            # Without them (the store unreachable) a replay counts its records' activity
            # again: soft state, as before session 21.
            self.checkpoints.load_counted(partitions)
            # Work the partitions' previous owner queued is awaited, not queued again.
            self.registry.park_queued(self.store)
            self._park_due = False
        except INFRASTRUCTURE_ERRORS:
            # Soft state: without it the tables refill from the stream (a longer detection
            # delay, never a wrong count), so an unreachable store must not fail the
            # rebalance; the main loop reports and retries the outage when it meets it.
            # The queue is read again before the next record (handle_batch): replayed
            # evidence queued again meanwhile was assessed twice, by two replicas at once
            # (oper21: a SIGKILL during a PostgreSQL stop).
            log.exception("loading drift state, activity positions or queued work failed; "
                          "starting without")

    def revoke(self, partitions: set[int]) -> None:
        """Rebalance callback: flush what the partitions' agents hold and give them up."""
        log.info("partitions revoked", partitions=sorted(partitions))
        self.assigned -= partitions
        self.health.holding(self.assigned)
        try:
            self.checkpoint(partitions)  # an AssignmentLost drops them there
        except INFRASTRUCTURE_ERRORS as e:
            # The partitions go whatever happens here (confluent-kafka and the consumer
            # process go on with the rebalance; kafka-python does once its member is
            # dropped from the group). Kept, their watches' buffered evidence was queued
            # and their offsets committed later, for records the next owner was
            # replaying: a commit that could pass that owner's own buffered evidence.
            # Dropped without a commit, nothing is lost: every earlier commit stopped
            # at the first record whose effects were not durable, and the next owner
            # (this replica too, see KafkaSource._settle) replays from there.
            log.error("checkpoint at a revoke failed; the partitions' next owner replays "
                      "them from their last commit", partitions=sorted(partitions),
                      problem=describe_outage(e))
        self._give_up(partitions)

    def _lost(self, error: AssignmentLost) -> None:
        """The group no longer counts this replica as the owner of the partitions (a
        commit said so): give them up at once without a commit, as a revoke whose
        checkpoint failed does, rather than go on handling their records until the
        rebalance callback comes at the next poll. The source hands out none of their
        records until the group assigns them again."""
        partitions = set(error.partitions)
        log.warning("dropped from the consumer group; its partitions are given up without "
                    "a commit and replayed by their next owner", partitions=sorted(partitions),
                    problem=str(error)[:300])
        self.assigned -= partitions
        self.health.holding(self.assigned)
        self._give_up(partitions)

    def _give_up(self, partitions: set[int]) -> None:
        self.lag.forget(partitions)
        self._backlog = [r for r in self._backlog if r.partition not in partitions]
        watches = self.registry.in_partitions(partitions)
        for w in watches:
            self.drift.forget(w.agent_id)
        self.registry.drop([w.agent_id for w in watches])
        self.enqueue.forget([w.agent_id for w in watches])
        self.checkpoints.forget(partitions)

    # ------------------------------------------------------------------ records

    def handle(self, record: Record) -> None:
        """Decode and observe one record; bad input becomes a dead letter."""
        self.handle_batch((record,))

    def handle_batch(self, records: Sequence[Record]) -> None:
        """:meth:`handle` each record in order (:class:`~capwatch.daemon.batch.Batches`)."""
        if self._park_due and records:
            # A store error propagates: the main loop keeps the records and retries.
            self.registry.park_queued(self.store)
            self._park_due = False
        self.batches.handle(records)
        self.alert_promptly()
        self.eviction.over_limit()

    # ------------------------------------------------------------------ queueing

    def alert_promptly(self) -> None:
        """The prompt awaiting-assessment alerts (:meth:`EvidenceQueue.alert_promptly`); a
        store failure is an outage the main loop retries."""
        try:
            self.enqueue.alert_promptly()
        except INFRASTRUCTURE_ERRORS as e:
            log.warning("writing the inconsistency alert failed; it goes out with the "
                        "queued assessment", error=str(e)[:300])
            self._outage = describe_outage(e)

    def sweep(self, force: bool = False) -> None:
        """Queue every watch whose evidence is ripe (``force``: whatever is buffered)."""
        self.enqueue.sweep(self.registry, force)

    def _queue_or_keep(self, watch: AgentWatch) -> None:
        """Queue ripe evidence; if the store fails, the evidence stays buffered (and holds
        the commit) and the sweep queues it once the store answers again."""
        try:
            self.queue(watch)
        except INFRASTRUCTURE_ERRORS as e:
            what = describe_outage(e)
            if what != self._outage:
                log.error("dependency failed; retrying", problem=what,
                          retry_in_s=max(0.5, self._outage_wait))
                # Once an outage, not once a ripe agent: every record of an agent with
                # buffered evidence tries again, and a 50 s PostgreSQL stop logged 103 of
                # these for two agents (oper17); a fleet's would bury the log.
                log.warning("queuing failed; the evidence stays buffered until the store "
                            "answers", error=str(e)[:300], agent_id=watch.agent_id)
            self._outage = what

    def queue(self, watch: AgentWatch) -> None:
        """Queue the watch's buffered evidence as a work item, with its alert."""
        self.enqueue.queue(watch)

    # ------------------------------------------------------------------ results

    def drain(self) -> None:
        """Apply what workers and probes posted, then run the scheduler's commands."""
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
            except INFRASTRUCTURE_ERRORS:
                raise  # an outage: the main loop says so and retries
            except Exception:
                log.exception("scheduled command failed")

    def _apply(self, result: Result) -> None:
        self.results.apply(result)

    def poll_results(self) -> None:
        """Pick up what other replicas' workers and operators did for agents this one
        owns (:meth:`~capwatch.daemon.results.ResultApplier.poll`)."""
        self.results.poll()

    # ------------------------------------------------------------------ scheduled jobs

    def checkpoint(self, partitions: set[int] | None = None, *,
                   background: bool = False) -> None:
        """``background``: the scheduled checkpoint, whose flush runs off the main loop
        and whose commit follows at a later turn (:meth:`commit_flushed`)."""
        self.batches.flush_tally()  # counted in batches, added at most once a second
        # The fleet gauges move with assessments too, not only with offsets: a quiet stream
        # must not leave an assessed agent reported as awaiting one.
        self.metrics.agents.set(len(self.registry))
        self.metrics.pending.set(len(self.registry.awaiting()))
        if partitions is None:  # the scheduled checkpoint, not a rebalance's
            now = time.monotonic()
            if self.registry.compact_idle(now, self.eviction.freeze_after_s()):
                release_freed()  # what the agents held before (daemon.heap)
            self.eviction.silent(now)
        try:
            moved = self.checkpoints.checkpoint(partitions, background=background)
        except AssignmentLost as e:
            self._lost(e)
            return
        self.lag.refresh(moved)

    def commit_flushed(self) -> None:
        """Commit a background checkpoint's offsets once its flush is done."""
        try:
            moved = self.checkpoints.finish_commit()
        except AssignmentLost as e:
            self._lost(e)
            return
        self.lag.refresh(moved)

    def audit(self) -> None:
        """The fleet-wide windowed chi-square with BH control, whole, now."""
        self._raise_audit_alarms(self._count_audit(self.drift.audit()))

    def start_audit(self) -> None:
        """The scheduled audit: begun now and done in slices at the next turns
        (:meth:`audit_slice`), or whole with ``scheduler.drift_audit_slice`` 0. One under
        way is left to finish."""
        if self.config.scheduler.drift_audit_slice <= 0:
            self.audit()
        elif not self.auditing and self.drift.start_audit():
            self.audit_slice()

    @property
    def auditing(self) -> bool:
        """Whether a sliced audit is under way (tables to test or rejections to raise)."""
        return self.drift.auditing or bool(self._audit_alarms)

    def audit_slice(self) -> None:
        """The audit's next slice: ``scheduler.drift_audit_slice`` tables tested, or once
        its round is done, its rejections raised, all in the next turn: they are queued in
        one store transaction, whose commit is most of their cost (a few per turn paid it
        once a turn: alert17b measured 0.69 s over 12 turns against 0.12 s whole)."""
        if not self._audit_alarms:
            findings = self.drift.audit_step(self.config.scheduler.drift_audit_slice)
            if findings is not None:
                self._audit_alarms = self._count_audit(findings)
            return
        alarms, self._audit_alarms = self._audit_alarms, []
        self._raise_audit_alarms(alarms)

    def _count_audit(self, findings: list[AuditFinding]) -> list[AuditFinding]:
        """Count the audit's tests; its rejections with evidence (to be raised)."""
        # Every tested table counts as a test of this audit (a result the audit kept from
        # the last one too), added up per label first: a large fleet's audit tests tens of
        # thousands of tables, and a labelled counter's increment costs microseconds.
        tests: dict[tuple[str, str], int] = {}
        rejected = []
        for finding in findings:
            watch = self.registry.get(finding.agent_id)
            labels = (watch.family if watch else "-", finding.action_name)
            tests[labels] = tests.get(labels, 0) + 1
            if finding.rejected and finding.evidence is not None and watch is not None:
                rejected.append(finding)
        for (family, name), n in tests.items():
            self.metrics.drift_tests.labels(family, name, "audit").inc(n)
        return rejected

    def _raise_audit_alarms(self, rejected: list[AuditFinding]) -> None:
        # Queued together, in one store transaction: one each cost a commit's wait for
        # the disk apiece, 0.59 s on the main loop for an audit's 48 rejections (SQLite,
        # docs/performance.md, End of session 17).
        raised: dict[str, AgentWatch] = {}
        for finding in rejected:
            # The agent may have been forgotten since the audit (a sliced one's turns).
            watch = self.registry.get(finding.agent_id)
            name = finding.action_name
            if watch is None or finding.evidence is None:
                continue
            awaiting = watch.awaiting is not None
            if watch.add_audit_alarm(finding.evidence, name) is None:
                if not awaiting:  # awaited work assesses the agent anyway: not a hold
                    self.batches.holds.held(watch, "drift", name, "audit")
                continue
            self.enqueue.note_buffered(watch)  # until queued: the store may fail below
            self.metrics.drift_alarms.labels(watch.family, name).inc()
            log.info("drift audit rejected", agent_id=watch.agent_id, action=name,
                     q=finding.q_value)
            raised[watch.agent_id] = watch
        self.enqueue.queue_many(list(raised.values()))

    def reassess(self) -> None:
        """Queue the scheduled re-assessments now due (``assessment.reassess_every_s``)."""
        if self.reassessment is not None:
            self.reassessment.run(self.registry, self.clock())

    def canary(self, problems: Mapping[str, frozenset[GroundAtom]],
               objects: Mapping[str, Mapping[str, tuple[str, ...]]]) -> None:
        """Probe actions the stream has not shown executing lately (see daemon.canary):
        a round begun now and done in slices at the next turns (:meth:`canary_slice`), or
        whole with ``scheduler.canary_slice_s`` 0. One under way is left to finish."""
        sched = self.config.scheduler
        if sched.canary_slice_s <= 0:
            self.canaries.probe_idle(self.registry, problems, objects)
            self.canaries.check_optimal(self.registry, objects)
        elif self.canaries.start_round(self.registry, problems, objects,
                                       lookup=self.registry.get,
                                       period_s=sched.canary_s / 2, optimal=True):
            # Paced to end within half its period: one still under way when the next is
            # due makes that one wait a whole period.
            self.canary_slice()

    def canary_slice(self) -> None:
        """The canary round's next slice: about ``scheduler.canary_slice_s`` of the main
        loop's time (alert22: a whole round cost ~0.6 ms an agent in one turn, 0.12 s for
        200 agents, seconds for a fleet, while records and alerts waited)."""
        self.canaries.round_slice(self.config.scheduler.canary_slice_s)

    def route_alerts(self, force: bool = False) -> None:
        """Route the alert outbox and deliver what is due (scheduler job; any thread)."""
        self.alerts.run(force)

