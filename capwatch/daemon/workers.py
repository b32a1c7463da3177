"""Assessment workers: claim queued work from the store, run it, retry or give it up.

Work lives in the store, so queued work survives a restart and any replica may run it.
A worker asks the agent (through the assessor), stores the new version with its alerts
in one transaction, publishes it, and posts the result (:mod:`capwatch.daemon.work`) for
the main loop, which alone touches the per-agent state. A failed attempt goes back to the
queue with a wait that depends on why it failed (:mod:`capwatch.daemon.retry`); the last
allowed failure writes the ``assessment_failed`` alert in the same transaction.

A claim's lease is renewed while its work runs (every third of ``assessment.lease_s``), so
an assessment that takes longer than the lease is not claimed and run a second time by
another worker (which would publish its version again); a worker whose lease did run out
meanwhile (its replica frozen, or cut off from the store) stores and publishes nothing and
leaves the work to its new holder.

Kept whole, past the size where a module is usually split, because a claim's whole life
is one state machine: claiming, renewing, storing, publishing and, after an outage,
reading the work back to say what became of it share the lease and the attempt count,
and split apart each part would need the others' private state.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Protocol

import structlog

from capwatch.alerts.outbox import outbox_record
from capwatch.alerts.policy import AlertPolicy
from capwatch.alerts.types import alerts_for_version, assessment_failed_alert
from capwatch.assess.agent import AgentRefusesQueries, AgentUnavailable
from capwatch.contracts.ports import AgentDirectory, Publisher
from capwatch.contracts.store import (
    AlertOutboxStore,
    Held,
    LeaseLost,
    ModelRegistry,
    OutboxAlert,
    PendingAssessment,
    StoreError,
    VersionConflict,
    WorkQueue,
)
from capwatch.contracts.versions import ModelRef, ModelVersion, build_version, unchecked_summary
from capwatch.daemon.alerting import (
    awaiting_ended,
    failed_alert_key,
    unconfirmed_alerts,
    unconfirmed_drifts,
    version_alert_key,
)
from capwatch.daemon.assessor import AssessmentRequest, Assessor
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.events import model_event
from capwatch.daemon.infra import (
    INFRASTRUCTURE_ERRORS,
    OUTAGE_ERRORS,
    OutageLog,
    component_of,
    describe_outage,
)
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.pacing import Pacers
from capwatch.daemon.retry import Failure, describe_agent_failure, internal_failure, retry_plan
from capwatch.daemon.work import Installed, Result, Settled, Settlement, WorkItem
from capwatch.models_store.lineage import lineage_chain

log = structlog.get_logger("capwatch.daemon")


class WorkerStore(ModelRegistry, WorkQueue, AlertOutboxStore, Protocol):
    """The store roles a worker uses: it reads and writes versions, holds work, and
    writes the alerts of what it stored."""


class AssessmentWorkers:
    def __init__(self, config: DaemonConfig, *, store: WorkerStore, agents: AgentDirectory,
                 assessor: Assessor, publisher: Publisher, metrics: DaemonMetrics,
                 policy: AlertPolicy, clock: Callable[[], datetime],
                 post: Callable[[Result], None],
                 on_version: Callable[[], None] = lambda: None,
                 pacers: Pacers | None = None) -> None:
        self.config = config
        self.store = store
        self.agents = agents
        self.assessor = assessor
        self.publisher = publisher
        self.metrics = metrics
        self.policy = policy
        self.clock = clock
        self.post = post
        """Hands a result to the main loop (thread-safe)."""
        self.on_version = on_version
        """Called after each version published (thread-safe): the drift gauges read the
        store again (fleet_drift.py)."""
        self.pacers = pacers
        """Paces each worker's queries while the stream is behind (daemon.pacing)."""
        self._threads: list[threading.Thread] = []
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._finished = threading.Event()
        """Set once the workers have ended: the leases of running work are renewed until."""
        self._inflight: dict[str, PendingAssessment] = {}
        """Worker name → the item it is running."""
        self._lock = threading.Lock()
        self._interrupted: dict[str, tuple[PendingAssessment, str, BaseException]] = {}
        """Worker name → the work an outage interrupted whose state in the store is not
        known yet: (work, what the worker was doing, the error), settled by that worker
        (:meth:`_settle_interrupted`) before it claims anything else."""

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for i in range(self.config.assessment.workers):
            name = f"{self.config.replica_id}/w{i}"
            t = threading.Thread(target=self._loop, args=(name,), name=f"assess-{i}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        threading.Thread(target=self._renew_leases, name="assess-leases", daemon=True).start()

    def running(self) -> int:
        """How many assessments this replica's workers are running now."""
        with self._lock:
            return len(self._inflight)

    def wake(self) -> None:
        """New work is queued: claim it now rather than at the next poll."""
        self._wake.set()

    def recover_claims(self) -> None:
        """Work this replica held when it died goes back to the queue at once, instead of
        waiting for its lease to run out.

        Claimed more than ``max_attempts`` times, it fails for good instead (work that
        kills its replica every time must not do so forever), with the
        ``assessment_failed`` alert of any failure for good: before, it was failed
        silently, the alert never written."""
        prefix = f"{self.config.replica_id}/"
        limit = self.config.assessment.max_attempts + 1
        for item in self.store.queue_items("claimed"):
            if item.claimed_by and item.claimed_by.startswith(prefix):
                now = self.clock()
                message = (f"the replica running it restarted ({item.attempts} attempts "
                           f"claimed)")
                alert = assessment_failed_alert(
                    family=item.family, agent_id=item.agent_id, time=now, reason="error",
                    message=message, evidence={"assessment_key": item.key,
                                               "attempts": item.attempts},
                    severities=self.policy.severities)
                try:
                    failed = self.store.release(
                        item.key, item.claimed_by, "replica restarted", now, limit,
                        [outbox_record(alert, failed_alert_key(item.key)),
                         *awaiting_ended(item, now, "failed", self.policy.severities)],
                        now=now)
                except StoreError:
                    continue
                if failed:
                    self.metrics.assessments.labels(item.family, "failed").inc()
                    log.warning("assessment failed for good", key=item.key,
                                agent_id=item.agent_id, reason="error", error=message,
                                attempts=item.attempts)

    def stop(self, grace_s: float) -> None:
        """Stop claiming, give running work ``grace_s``, and hand back what is unfinished."""
        self._stopped.set()
        self._wake.set()
        deadline = time.monotonic() + grace_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            unfinished = dict(self._inflight)
        self._finished.set()
        for worker, item in unfinished.items():
            with contextlib.suppress(StoreError):
                at = self.clock()
                self.store.release(item.key, worker, "replica shutting down", at,
                                   self._never_failing(item), now=at)

    def _never_failing(self, item: PendingAssessment) -> int:
        """An attempt limit under which handing ``item`` back does not fail it for good
        (a release fails work whose attempts reached the limit). Claims count attempts
        whatever ended them, outages too, so ``max_attempts + 1`` did: work claimed
        again after several outages was failed silently at a shutdown, with no
        ``assessment_failed`` alert."""
        return max(self.config.assessment.max_attempts, item.attempts) + 1

    def _renew_leases(self) -> None:
        lease_s = self.config.assessment.lease_s
        while not self._finished.wait(lease_s / 3):
            with self._lock:
                running = dict(self._inflight)
            for worker, item in running.items():
                key = item.key
                try:
                    self.store.renew(key, worker, self.clock(), lease_s)
                except LeaseLost:
                    pass  # its worker finds out before storing anything
                except INFRASTRUCTURE_ERRORS:
                    pass  # tried again at the next turn; the outage is logged elsewhere
                except Exception:
                    log.exception("renewing an assessment's lease failed", key=key)

    def _loop(self, name: str) -> None:
        cfg = self.config.assessment
        outage = OutageLog(log, f"claiming queued work ({name})")
        while not self._stopped.is_set():
            interrupted = self._interrupted.pop(name, None)
            if interrupted is not None and not self._settle_interrupted(name, *interrupted):
                self._interrupted[name] = interrupted
                self._stopped.wait(0.5)  # the store still does not answer
                continue
            try:
                items = self.store.claim(name, self.clock(), cfg.lease_s, 1)
                outage.ok()
            except INFRASTRUCTURE_ERRORS as e:
                outage.failed(e)
                items = []
            except Exception:
                log.exception("claiming queued work failed")
                items = []
            if not items:
                self._wake.wait(0.5)
                self._wake.clear()
                continue
            item = items[0]
            with self._lock:
                self._inflight[name] = item
            try:
                self.run_claimed(name, item)
            except Exception:
                # Never let a worker thread die: this replica would assess nothing more.
                # The work's lease runs out and it is claimed again.
                log.exception("assessment worker error; the work is tried again",
                              key=item.key)
            finally:
                with self._lock:
                    self._inflight.pop(name, None)

    # ------------------------------------------------------------------ one item

    def run_claimed(self, worker: str, item: PendingAssessment) -> None:
        """Run work ``worker`` holds the lease of; a failure gives it back to the queue."""
        # The agent names every line of the assessment and none after it: bound to the
        # thread's context and left there, it named the worker's next lines (a claim
        # failing on an outage) and, run on the main thread (a test), every line after.
        with structlog.contextvars.bound_contextvars(agent_id=item.agent_id):
            self._run_claimed(worker, item)

    def _run_claimed(self, worker: str, item: PendingAssessment) -> None:
        stage = ["reading the models the work names"]
        try:
            self._run(worker, item, stage)
        except LeaseLost as e:
            log.warning("assessment's lease lost; its new holder finishes it, nothing was "
                        "stored or published by this worker", key=item.key, problem=str(e))
        except AgentRefusesQueries as e:
            # Answered, and nothing learnt from the answers: retrying would spend the same
            # queries on the same refusals, so the alert goes out now (session 19).
            self.give_up(worker, item, "agent_refuses_queries", str(e), {})
        except AgentUnavailable as e:
            self.give_back(worker, item, describe_agent_failure(e))
        except OUTAGE_ERRORS as e:
            # The store or the output failed, not the assessment: no "assessment crashed"
            # and no give_back (before, a full disk here killed the worker thread, since
            # handing the work back failed as well). A write the store reported failed
            # may still have landed (a timeout after the commit), so what became of the
            # work is read back before anything is said of it.
            if not self._settle_interrupted(worker, item, stage[0], e):
                log.warning("assessment interrupted by an outage; whether its last write "
                            "landed is unknown until the store answers, then it is read "
                            "back (the work stays claimed by this worker meanwhile, until "
                            "its lease runs out)", key=item.key, during=stage[0],
                            problem=describe_outage(e))
                self._interrupted[worker] = (item, stage[0], e)
        except Exception as e:
            log.exception("assessment crashed", key=item.key)
            self.give_back(worker, item, internal_failure(e))

    def _settle_interrupted(self, worker: str, item: PendingAssessment, stage: str,
                            error: BaseException) -> bool:
        """Read back what became of work an outage interrupted, say it, and hand the work
        back at once if it is still this worker's and the store answers again; False if
        the store does not answer yet.

        Handing it back is what the lease's end would do, sooner: the work is claimed
        again (by any replica) and its retry finds a version already stored under the
        work's key and publishes that without asking the agent again, or assesses anew.
        It is handed back for ``retry_after_s`` doubled per attempt (at least 1 s), at
        most the lease: a store that answers reads but keeps failing this work's writes
        retries it no faster than that. Only after an outage of the store: after Kafka's
        (or an output file's disk), the lease's wait stays, as a retry would fail on the
        same broker, each claim counting an attempt, while the store answers at once."""
        try:
            live = {i.key: i for i in self.store.live_queue_items()}
        except INFRASTRUCTURE_ERRORS:
            return False
        now = live.get(item.key)
        problem = describe_outage(error)
        if now is None:
            # Ended by this worker's write, or (its lease run out meanwhile) by the work's
            # next holder: either way nothing is left to retry.
            log.warning("assessment's work ended although the store reported an outage: "
                        "the write landed (or the work's next holder ended it); the agent's "
                        "watch learns the result from the store", key=item.key, during=stage,
                        problem=problem)
            return True
        if now.status != "claimed" or now.claimed_by != worker:
            log.warning("assessment interrupted by an outage; its lease ran out meanwhile "
                        "and its new holder finishes it", key=item.key, during=stage,
                        problem=problem, held_by=now.claimed_by)
            return True
        if component_of(error) != "models store":
            log.warning("assessment interrupted by an outage; tried again after its lease",
                        key=item.key, during=stage, problem=problem,
                        lease_s=self.config.assessment.lease_s)
            return True
        cfg = self.config.assessment
        wait_s = min(cfg.lease_s, max(1.0, cfg.retry_after_s) * 2 ** max(0, now.attempts - 1))
        try:
            # Never failed for good by this: the outage was not the work's failure.
            at = self.clock()
            self.store.release(item.key, worker, problem, at + timedelta(seconds=wait_s),
                               self._never_failing(now), now=at)
        except INFRASTRUCTURE_ERRORS:
            # Answered a read, failed a write (a full disk): the lease runs out instead.
            log.warning("assessment interrupted by an outage; tried again after its lease",
                        key=item.key, during=stage, problem=problem,
                        lease_s=self.config.assessment.lease_s)
            return True
        log.warning("assessment interrupted by an outage; given back to the queue once the "
                    "store answered, not after its lease", key=item.key, during=stage,
                    problem=problem, retry_in_s=wait_s)
        self.wake()
        return True

    def give_back(self, worker: str, item: PendingAssessment, failure: Failure) -> None:
        cfg = self.config.assessment
        now = self.clock()
        # Written by the store only if this release fails the work for good, in the same
        # transaction, so the alert can be neither lost nor raised for a retry.
        alert = assessment_failed_alert(
            family=item.family, agent_id=item.agent_id, time=now, reason=failure.alert_reason,
            message=failure.message[:500], evidence={"assessment_key": item.key,
                                                     "attempts": item.attempts},
            severities=self.policy.severities)
        wait, limit = retry_plan(cfg, item.attempts, item.key,
                                 agent_unreachable=failure.agent_unreachable)
        if failure.final:
            limit = 0
        try:
            failed = self.store.release(
                item.key, worker, failure.message, now + wait, limit,
                [outbox_record(alert, failed_alert_key(item.key)),
                 *awaiting_ended(item, now, "failed", self.policy.severities)], now=now)
        except INFRASTRUCTURE_ERRORS:
            return  # the lease runs out and the work is claimed again
        self.metrics.assessments.labels(item.family, "retry").inc()
        if failed:
            self.metrics.assessments.labels(item.family, "failed").inc()
            log.warning("assessment failed for good", key=item.key, agent_id=item.agent_id,
                        reason=failure.alert_reason, error=failure.message[:500],
                        attempts=item.attempts)
            self.post(Settled(item.agent_id, item.key,
                              Settlement.UNREACHABLE if failure.agent_unreachable
                              else Settlement.FAILED))
        else:
            # Without this line an operator sees only the client's retries and a run with
            # --exit-when-idle seems to hang for the whole retry schedule.
            log.warning("assessment attempt failed; will retry", key=item.key,
                        agent_id=item.agent_id, reason=failure.alert_reason,
                        error=failure.message[:500], attempt=item.attempts,
                        max_attempts=limit, retry_in_s=wait.total_seconds())

    def give_up(self, worker: str, pending: PendingAssessment, reason: str, message: str,
                evidence: dict[str, object]) -> None:
        """End the work for good without a version: retrying would find the same, so the
        ``assessment_failed`` alert goes out with the release, in one transaction."""
        now = self.clock()
        alert = assessment_failed_alert(
            family=pending.family, agent_id=pending.agent_id, time=now, reason=reason,
            message=message[:500], evidence={"assessment_key": pending.key,
                                             "attempts": pending.attempts, **evidence},
            severities=self.policy.severities)
        try:
            self.store.release(pending.key, worker, message, now, 0,
                               [outbox_record(alert, failed_alert_key(pending.key)),
                                *awaiting_ended(pending, now, "failed",
                                                self.policy.severities)], now=now)
        except StoreError:
            return
        self.metrics.assessments.labels(pending.family, "failed").inc()
        log.warning("assessment given up", key=pending.key, reason=reason, message=message)
        self.post(Settled(pending.agent_id, pending.key, Settlement.FAILED))

    def _run(self, worker: str, pending: PendingAssessment, stage: list[str]) -> None:
        """``stage[0]``: what it is doing, for the log of an outage that interrupts it."""
        t0 = time.monotonic()
        item = WorkItem.from_pending(pending)
        family, agent_id = item.family, item.agent_id
        base = self.store.get(item.base)
        if base is None:
            raise StoreError(f"queued work names {item.base}, which the store does not have")
        latest = self.store.latest(family, agent_id)
        version: ModelVersion | None = None
        if latest is not None and latest.evidence.get("assessment_key") == item.key:
            version = latest  # a retry after the version was stored but not acknowledged
        elif latest is not None and (base.agent_id is None
                                     or latest.version > base.version):
            # The agent's lineage moved past the model this work was queued against.
            self._superseded(worker, pending, latest, stage)
            return
        queries = 0
        stored_here = False
        if version is None:
            stage[0] = "asking the agent"
            base_domain = base.domain()
            agent = self.agents.agent(agent_id, family)
            if self.pacers is not None:
                agent = self.pacers.agent(agent)
            try:
                outcome = self.assessor.assess(AssessmentRequest(
                agent_id=agent_id, family=family, model=base_domain,
                    agent=agent,
                    inconsistent=item.inconsistent, executed=item.executed,
                    drifted_actions=item.drifted_actions(), drift_probes=item.probes,
                    drift_evidence=item.drift,
                    query_budget=self.config.assessment.query_budget,
                    confirm_queries=self.config.assessment.confirm_queries,
                    samples=self.config.assessment.samples,
                    min_outcome_probability=self.config.assessment.min_outcome_probability,
                    probability_tolerance=self.config.assessment.probability_tolerance,
                    max_query_atoms=self.config.assessment.max_query_atoms,
                    independent_draws=self.config.assessment.independent_draws,
                    method=item.method))
            finally:
                # Every attempt that asked the agent, ended or not: an agent too slow to
                # answer (timeouts, then agent_unreachable) is the slowest assessment of
                # all, and left out it never showed on the duration's alert (rev13a).
                self.metrics.assessment_seconds.labels(family).observe(time.monotonic() - t0)
            stage[0] = "ending the work"
            queries = outcome.queries
            self.metrics.queries.labels(family).inc(queries)
            if outcome.unexplained:
                # A model contradicting its own evidence is never published; the same
                # evidence will not start another assessment (the watch backs off).
                n = len(outcome.unexplained)
                unchecked = unchecked_summary(outcome.details.get("coverage"))
                self.give_up(worker, pending, "unexplained",
                             f"the assessed model cannot explain {n} of the observations and "
                             f"query answers it was learned from; nothing was published"
                             f"{'; the query budget was spent' if outcome.budget_exhausted else ''}"
                             f"{'; ' + unchecked if unchecked else ''} "
                             f"(first: {outcome.unexplained[0].source}: "
                             f"{outcome.unexplained[0].reason})",
                             {"queries": queries, "assessment": dict(outcome.details)})
                return
            if outcome.model == base_domain and outcome.budget_exhausted:
                self.give_up(worker, pending, "budget_exhausted",
                             f"the query budget ({self.config.assessment.query_budget}) was "
                             f"spent without finding the change",
                             {"queries": queries, "assessment": dict(outcome.details)})
                return
            if outcome.model == base_domain:
                # With the work's end, in one transaction: a worker whose lease another
                # took (which may find a version) must not end the awaiting alert with
                # "no change".
                now = self.clock()
                self.store.complete(item.key, worker, [
                    *awaiting_ended(pending, now, "no change", self.policy.severities),
                    *unconfirmed_alerts(item.key, family, agent_id, item.drift,
                                        outcome.details, now, self.policy.severities)],
                    now=now)
                self._count_unconfirmed(family, item.drift, outcome.details)
                self.metrics.assessments.labels(family, "unchanged").inc()
                log.info("assessment found no change", key=item.key, queries=queries)
                self.post(Settled(agent_id, item.key, Settlement.UNCHANGED))
                return
            ref = ModelRef(family, agent_id, (latest.version if latest else 0) + 1)
            baseline = next((v for v in reversed(lineage_chain(self.store, base.ref))
                             if v.agent_id is None), base)
            evidence = {
                "assessment_key": item.key,
                "queries": queries,
                "transitions": item.evidence_positions(),
                "drift": {name: dict(e) for name, e in item.drift.items()},
                "assessment": dict(outcome.details),
                "replica": self.config.replica_id,
                **({"operator": dict(item.operator)} if item.operator else {}),
            }
            candidate = build_version(ref, outcome.model, self.clock(), parent=base,
                                      baseline=baseline.domain(), evidence=evidence)
            stage[0] = "storing the version"
            try:
                # The version's alerts enter the outbox in the version's own transaction,
                # and only while this worker still holds the work (checked and renewed in
                # that transaction): the assessment took long enough for this replica to
                # have been frozen or cut off past its lease, and the work's new holder
                # stores and publishes the version instead (LeaseLost).
                version = self.store.put(
                    candidate, self._version_alerts(base, candidate, pending),
                    Held(item.key, worker, self.clock(), self.config.assessment.lease_s))
                stored_here = True
            except VersionConflict:
                latest = self.store.latest(family, agent_id)
                if latest is None:
                    raise
                if latest.evidence.get("assessment_key") != item.key:
                    # Another assessment of the agent (another replica's, two replicas
                    # having run work of one agent across a rebalance) stored this number
                    # first. Not a crash, and not to retry: this work was queued against
                    # a model the agent's lineage has moved past, which a retry would only
                    # find out again (counting an attempt, and after enough of them
                    # raising assessment_failed for nothing).
                    log.info("assessment lost a race: another assessment of the agent "
                             "published first; this one ends without a version",
                             key=item.key, agent_id=agent_id, family=family,
                             tried_version=ref.version, published_version=latest.version,
                             published_by=latest.evidence.get("replica"),
                             published_key=latest.evidence.get("assessment_key"),
                             queries=queries)
                    self._superseded(worker, pending, latest, stage)
                    return
                version = latest
        stage[0] = f"publishing version {version.version}"
        if not stored_here:
            # The version was stored under this work's key before (a worker that died or
            # froze before publishing, or a concurrent holder's write). Publish it only
            # while this worker still holds the work, as a version of its own is: this
            # worker may have been frozen past its lease since its claim, and the work's
            # new holder publishes it then (LeaseLost).
            self.store.renew(item.key, worker, self.clock(), self.config.assessment.lease_s)
        # A retry finds the version already stored: writing its alerts again is a no-op
        # (same outbox keys), and covers a version stored without them.
        events = self._version_alerts(base, version, pending)
        self.store.add_alerts(events)
        self.publisher.model_version(model_event(version))
        self.publisher.flush()
        stage[0] = f"marking the work done (version {version.version} published)"
        self.store.complete(item.key, worker, now=self.clock())
        self.metrics.model_versions.labels(family).inc()
        self.metrics.assessments.labels(family, "changed").inc()
        assessment = version.evidence.get("assessment")
        if isinstance(assessment, dict):
            self._count_unconfirmed(family, item.drift, assessment)
        self.on_version()
        # A retry publishing a version stored before asks nothing itself: the line gives
        # the version's own count, or a version confirmed by its queries reads as one
        # published on none (oper20: "queries": 0 after a broker outage, 82 asked).
        asked = version.evidence.get("queries") if not stored_here else queries
        log.info("model version published", version=version.version,
                 delta=version.delta_to_parent, summary=list(version.summary),
                 queries=asked if isinstance(asked, int) else queries, alerts=len(events),
                 stored_before=not stored_here)
        self.post(Installed(agent_id, version))

    def _superseded(self, worker: str, pending: PendingAssessment, latest: ModelVersion,
                    stage: list[str]) -> None:
        """End work whose base the agent's lineage moved past (``latest``), without a
        version of its own: the main loop checks the work's evidence against ``latest``
        and queues what it still contradicts (results.py)."""
        stage[0] = f"ending the work (superseded by version {latest.version})"
        now = self.clock()
        self.store.complete(pending.key, worker, awaiting_ended(
            pending, now, f"superseded by version {latest.version}", self.policy.severities),
            now=now)
        self.metrics.assessments.labels(pending.family, "superseded").inc()
        self.post(Installed(pending.agent_id, latest))

    def _count_unconfirmed(self, family: str, drift: Mapping[str, Mapping[str, object]],
                           details: Mapping[str, object]) -> None:
        for _, detector in unconfirmed_drifts(drift, details):
            self.metrics.drift_not_confirmed.labels(family, detector).inc()

    def _version_alerts(self, parent: ModelVersion, version: ModelVersion,
                        pending: PendingAssessment) -> list[OutboxAlert]:
        out = [outbox_record(a, version_alert_key(version, a))
               for a in alerts_for_version(parent, version, severities=self.policy.severities)]
        out += awaiting_ended(pending, version.created_at, f"version {version.version}",
                              self.policy.severities)
        assessment = version.evidence.get("assessment")
        if isinstance(assessment, dict) and version.agent_id is not None:
            # Another action of the work changed; this one's stream drift was not shown.
            item = WorkItem.from_pending(pending)
            out += unconfirmed_alerts(item.key, version.family, version.agent_id,
                                      item.drift, assessment, version.created_at,
                                      self.policy.severities)
        if isinstance(assessment, dict) and assessment.get("budget_exhausted") \
                and version.agent_id is not None:
            key = str(version.evidence.get("assessment_key", version.ref))
            alert = assessment_failed_alert(
                family=version.family, agent_id=version.agent_id, time=version.created_at,
                reason="budget_exhausted",
                message=f"the query budget was spent before every capability was checked; "
                        f"version {version.version} holds what was learned",
                evidence={"assessment_key": key, "model_version": version.version},
                severities=self.policy.severities)
            out.append(outbox_record(alert, failed_alert_key(key)))
        return out
