"""The main loop's per-record work on one polled batch: decode, observe, count, and move
the positions a checkpoint may commit.

This is the path every transition takes (issue 13: its fixed cost per record bounds the
daemon's throughput), so whatever can be done once per batch is: counters are added up
and added to the metrics at most once a second (:data:`TALLY_EVERY_S`; a Prometheus
increment takes a lock and costs more than a cheap transition's check, and a batch of a
fleet with many families and actions held hundreds of (family, action, verdict) series:
~0.7-1 µs a record), the positions handled and the record times are taken
from the last record of each partition, the log context is one plain slot, and a plain
finding (an execution or a refusal, no alarm, nothing ripe) costs one tally entry.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

import structlog

from capwatch.contracts.errors import error_text
from capwatch.contracts.ports import Record
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.agent_watch import (
    DUPLICATE,
    PLAIN_APPLIED,
    TESTED_APPLIED,
    AgentWatch,
    Finding,
)
from capwatch.daemon.checkpoint import Checkpointer
from capwatch.daemon.enqueue import EvidenceQueue
from capwatch.daemon.holds import Holds
from capwatch.daemon.infra import INFRASTRUCTURE_ERRORS
from capwatch.daemon.intake import Intake
from capwatch.daemon.logs import RECORD, TRANSITION, record_context
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.registry import Registry
from capwatch.model.consistency import Verdict
from capwatch.model.domain import GroundAtom
from capwatch.model.errors import ModelError

log = structlog.get_logger("capwatch.daemon")

_LABEL = {v: v.name.lower() for v in Verdict}
"""Metric label per verdict (computed once: this is on the per-transition path)."""
_INCONSISTENT: Final = Verdict.INCONSISTENT
"""Module constants: reading a member off an enum class costs ~0.15 µs on Python 3.11
(Final: kept in a C static by mypyc, not looked up in the module's dictionary)."""
_APPLIED: Final = Verdict.APPLIED
TALLY_EVERY_S = 1.0
"""How long the per-verdict transition counts may wait before they are added to their
counters (the scheduled checkpoint and the shutdown add them too): far below any scrape
interval."""


class Batches:
    """Handles polled batches for the pipeline (its :meth:`Pipeline.handle_batch`)."""

    def __init__(self, *, intake: Intake, registry: Registry, checkpoints: Checkpointer,
                 metrics: DaemonMetrics, enqueue: EvidenceQueue,
                 queue_ripe: Callable[[AgentWatch], None],
                 buffered: Callable[[AgentWatch], None] = lambda watch: None,
                 holds: Holds | None = None) -> None:
        self.intake = intake
        self.holds = holds if holds is not None else Holds(metrics)
        """Counts and says what a back-off held back (daemon.holds)."""
        self.registry = registry
        self.checkpoints = checkpoints
        self.metrics = metrics
        self.enqueue = enqueue
        self.queue_ripe = queue_ripe
        """Queues a watch whose evidence became ripe (a store failure keeps it buffered)."""
        self.buffered = buffered
        """Told of a watch left holding evidence or an alarm (not ripe yet, or its queuing
        failed): the sweep queues it when it ripens by time."""
        self.processed = 0
        self.newest_stamp: dict[int, float] = {}
        """Per partition, when the newest handled record was written (time-based lag)."""
        self._tally: dict[tuple[str, str, Verdict, bool], int] = {}
        """(family, action, verdict, drift-tested) → transitions handled since the counters
        were last added to (:meth:`flush_tally`)."""
        self._tallied = time.monotonic()
        self._restores = 0
        self.duplicates = 0
        """Steps not observed because the agent had sent them already (:data:`DUPLICATE`)."""
        self._duplicates: dict[str, int] = {}
        """Family → such steps since the counters were last added to."""

    def handle(self, records: Sequence[Record]) -> None:
        """Decode and observe each record in order; bad input becomes a dead letter.

        Raises an infrastructure error (the store is down) at the record it met it on:
        :attr:`processed` counts the records before it, and only those move the positions.
        """
        if not records:
            return
        slot = record_context.slot
        self.intake.slot = slot
        # The key is the agent id (the decoder checks it). A batch holds few keys, many
        # times each: each is decoded once, here, for the prefetch below and for
        # Intake.read.
        names = {k: k.decode("utf-8", "replace") for k in {r.key for r in records}
                 if k is not None}
        self.intake.begin_batch(names)
        read = self.intake.read
        tally = self._tally
        start = self.processed
        done = 0
        counted = self.checkpoints.counted
        # A record the store's activity counted before (replayed after a crash or a
        # rebalance): its watch and the watch's counts before it, settled at the next
        # record (the fast paths below end a record with ``continue``) or the batch's end.
        replayed: tuple[AgentWatch, int, int] | None = None
        try:
            # Agents seen for the first time are looked up in the store together, not
            # one query each.
            new = self.registry.prefetch(names.values())
            self.checkpoints.prefetch_drift(new)
            for record in records:
                if replayed is not None:
                    _counted_already(replayed)
                    replayed = None
                slot[RECORD] = record
                slot[TRANSITION] = None
                try:
                    got = read(record)
                    if got is not None:
                        watch, transitions = got
                        if counted and record.offset < counted.get(record.partition, -1):
                            replayed = (watch, watch.transitions, watch.inconsistent)
                        if len(transitions) == 1:
                            # The monitor checks the vocabulary before it changes anything,
                            # so a single transition needs no separate pass (Intake checks
                            # a trace's steps first).
                            t = transitions[0]
                            try:
                                finding = watch.observe(t, self.intake.flipped,
                                                        self.intake.came)
                            except ModelError as e:
                                self.intake.dead_letter(record, str(e), "vocabulary")
                            else:
                                if finding is DUPLICATE:
                                    self._repeated(watch)
                                    done += 1
                                    continue
                                if finding is PLAIN_APPLIED or finding is TESTED_APPLIED:
                                    # Most records: an execution with nothing else to act
                                    # on, one of two shared findings, told apart without
                                    # reading them (a Finding's attribute read from
                                    # compiled code is a generic lookup: five a record,
                                    # ~800 instructions; callgrind, stochastic fleet).
                                    key = (watch.family, t.action[0], _APPLIED,
                                           finding is TESTED_APPLIED)
                                    tally[key] = tally.get(key, 0) + 1
                                    done += 1
                                    continue
                                key = (watch.family, t.action[0], finding.verdict,
                                       finding.tested)
                                tally[key] = tally.get(key, 0) + 1
                                if finding.alarm is not None or finding.ripe \
                                        or finding.verdict is _INCONSISTENT or finding.held:
                                    self._notable(watch, t, finding)
                        else:
                            # Each step with the atoms the decoder made its next state
                            # by, as a single transition's (Intake checked the steps).
                            flips = self.intake.steps_flipped
                            came = self.intake.came
                            if flips is None or len(flips) != len(transitions):
                                for t in transitions:
                                    self.observe(watch, t, None, came)
                                    came = None
                            else:
                                for t, flipped in zip(transitions, flips, strict=True):
                                    self.observe(watch, t, flipped, came)
                                    came = None
                except INFRASTRUCTURE_ERRORS:
                    raise  # the store is down: stop without committing past this record
                except Exception as e:
                    # A message that trips a bug must not crash-loop the daemon on every
                    # restart: it goes to the dead letters like any other unusable input.
                    log.exception("record handling failed")
                    self.intake.dead_letter(
                        record, f"internal error: {error_text(e)}", "internal")
                done += 1
        finally:
            if replayed is not None:
                _counted_already(replayed)
            slot[RECORD] = slot[TRANSITION] = None
            self.processed = start + done
            self.registry.end_prefetch()
            self.checkpoints.end_prefetch()
            # Only handled records move the positions; one that failed above is unread.
            if done == len(records):
                self._positions(records, whole=True)
            else:
                self._positions(records[:done])
            if time.monotonic() - self._tallied >= TALLY_EVERY_S:
                self.flush_tally()
            restores = self.checkpoints.restores - self._restores
            if restores:
                self.metrics.restores.inc(restores)
                self._restores += restores

    def _positions(self, handled: Sequence[Record], whole: bool = False) -> None:
        """Per partition, the next offset to read and when its newest record was written;
        per source, the records handled and the newest record's time. ``whole``: every
        record of the batch was read and handled, so the intake noted each partition's
        last one as it read it (``Intake.last_read``)."""
        if not handled:
            return
        now = time.time()
        intake = self.intake
        source = intake.read_source
        if whole and source is not None and not intake.mixed_sources:
            last = {(source, p): r for p, r in intake.last_read.items()}
        else:
            # A batch cut short by an infrastructure error (its last record read was not
            # handled), or of several sources: the records themselves.
            last = {(r.source, r.partition): r for r in handled}
        stamps: dict[str, float] = {}
        for (source, partition), r in last.items():
            self.checkpoints.handled(partition, r.offset)
            stamp = r.timestamp if r.timestamp is not None else now
            self.newest_stamp[partition] = stamp
            stamps[source] = max(stamps.get(source, stamp), stamp)
        for source, stamp in stamps.items():
            self.metrics.last_record.child(source).set(stamp)
        if len(stamps) == 1:
            self.metrics.records.child(next(iter(stamps))).inc(len(handled))
        else:
            for source, n in Counter(r.source for r in handled).items():
                self.metrics.records.child(source).inc(n)

    def observe(self, watch: AgentWatch, t: AgentTransition,
                flipped: list[GroundAtom] | None = None,
                came: tuple[frozenset[GroundAtom], list[GroundAtom]] | None = None) -> None:
        """Observe one transition of ``watch``'s agent and act on what it showed;
        ``flipped`` and ``came`` as for ``AgentWatch.observe``."""
        finding = watch.observe(t, flipped, came)
        if finding is DUPLICATE:
            self._repeated(watch)
            return
        if finding is PLAIN_APPLIED or finding is TESTED_APPLIED:
            # A trace's step as a single transition's (handle): the shared findings told
            # apart without reading their attributes (five generic lookups a step).
            key = (watch.family, t.action[0], _APPLIED, finding is TESTED_APPLIED)
            self._tally[key] = self._tally.get(key, 0) + 1
            return
        key = (watch.family, t.action[0], finding.verdict, finding.tested)
        self._tally[key] = self._tally.get(key, 0) + 1
        if finding.alarm is not None or finding.ripe or finding.verdict is _INCONSISTENT \
                or finding.held:
            self._notable(watch, t, finding)

    def _notable(self, watch: AgentWatch, t: AgentTransition, finding: Finding) -> None:
        """What a transition that raised an alarm, was inconsistent or made the evidence
        ripe leads to: metrics, a log line, the prompt alert, queued work."""
        name = t.action[0]
        if finding.held:
            inconsistent = finding.verdict is _INCONSISTENT
            self.holds.held(watch, "inconsistency" if inconsistent else "drift", name,
                            "-" if inconsistent else "sequential")
        if finding.alarm is not None:
            self.metrics.drift_alarms.labels(watch.family, name).inc()
            log.info("drift alarm", summary=finding.alarm.evidence.summary())
        elif finding.verdict is _INCONSISTENT:
            self.metrics.inconsistencies.child(watch.family, name).inc()
            evidence = watch.evidence
            buffered = bool(evidence) and evidence[-1].transition is t
            # While work is awaited, only what was buffered is logged: the rest is what
            # that work assesses, and a drifted agent can show it at every record.
            if watch.awaiting is None or buffered:
                log.info("inconsistent transition", action=list(t.action),
                         model=watch.version.ref.version, awaiting=watch.awaiting)
            # A new buffer, even while other work is awaited: alert at once.
            if buffered and watch.first_buffered_offset() == t.offset:
                self.enqueue.opened(watch)
        if finding.ripe:
            self.queue_ripe(watch)
        if watch.buffered:
            self.buffered(watch)

    def _repeated(self, watch: AgentWatch) -> None:
        """A step the agent already sent (a producer's retry) was not observed again."""
        self.duplicates += 1
        family = watch.family
        self._duplicates[family] = self._duplicates.get(family, 0) + 1

    def flush_tally(self) -> None:
        """Add the transition and drift-test counts tallied so far to their counters."""
        self._tallied = time.monotonic()
        if self._duplicates:
            for family, n in self._duplicates.items():
                self.metrics.duplicates.child(family).inc(n)
            self._duplicates.clear()
        tally = self._tally
        transitions, tests = self.metrics.transitions, self.metrics.drift_tests
        for (family, name, verdict, tested), n in tally.items():
            transitions.child(family, name, _LABEL[verdict]).inc(n)
            if tested:
                tests.child(family, name, "sequential").inc(n)
        tally.clear()


def _counted_already(replayed: tuple[AgentWatch, int, int]) -> None:
    """What a replayed record added to its watch's counts is in the store's activity
    already (``Checkpointer.counted``): the next save adds only what is new."""
    watch, transitions, inconsistent = replayed
    watch.saved_transitions += watch.transitions - transitions
    watch.saved_inconsistent += watch.inconsistent - inconsistent
