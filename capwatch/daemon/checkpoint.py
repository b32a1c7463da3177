"""Checkpoints: source positions, drift-table snapshots, and the commit rule.

The commit rule: a partition's committed offset never passes a record whose effects are
not durable. Consistent transitions leave nothing to keep; an inconsistent one sits in
its agent's evidence buffer until the work it triggers is queued in the store, so the
commit waits for that (:meth:`Checkpointer.commit_offsets`); what was published (dead
letters above all) is flushed before a commit. After a crash the source replays from the
commit and the replay rebuilds exactly what was lost.

The scheduled checkpoint's flush runs in a thread of its own (:class:`PendingCommit`):
it waits for the broker's acknowledgements (and, as the publisher's flushes are one at a
time, for the alert routing's or a worker's flush), and the main loop read nothing
meanwhile, so a record arriving during it waited (docs/performance.md, "Alert latency").
The offsets are taken on the main loop before the flush starts, so every output of the
records before them was handed to the publisher already; the flush acknowledges at least
those, and only then does the main loop commit them (:meth:`Checkpointer.finish_commit`).
A crash between the two replays from the previous commit: the rule holds as before.

Drift tables are soft state saved alongside: each snapshot carries the position it
reflects and is written before the offsets, so a committed offset is never past a
snapshot's position and a replay can skip exactly the records the snapshot counted (the
activity rows likewise carry, in their own transaction, the positions they count up to, in
a table of their own: :meth:`Checkpointer.load_counted`). The
scheduled checkpoint takes the snapshots and the activity rows on the main loop (the
tables change there) and writes them in the flush's thread, before the flush: at load the
write took 0.04-0.77 s (p99) of the main loop's time (docs/performance.md, "Alert
latency"). Eviction assumes that a saved agent's tables are in the store (it writes only
those changed since a checkpoint took them, and the agent's next record reads them back),
so whatever writes drift tables or activity on the main loop (an eviction, a synchronous
checkpoint, a partition given up) first waits for a write in flight
(:meth:`Checkpointer.await_writes`); if that write failed, what it held is marked unsaved
again and written by the next one. Everything here runs on the main loop but
:meth:`PendingCommit.run`, in :class:`Writer`'s thread.

Kept whole, past the size where a module is usually split: the commit rule is the order
of four things (snapshots taken, written, flushed, committed) across the main loop and
the writer's thread, and every path that waits for a write in flight (eviction, a
synchronous checkpoint, a partition given up) must see the same pending state; split
across modules, that ordering would be read in two places.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from capwatch.contracts.ports import (
    CommitsInBackground,
    DeliveryError,
    KnowsTopicId,
    Publisher,
    SkipsRecordless,
    Source,
)
from capwatch.contracts.store import Checkpoints, DriftSnapshot, WorkQueue
from capwatch.contracts.versions import ModelRef
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.registry import Registry, ended_ago
from capwatch.model.domain import Action
from capwatch.models_store.actions import ActionStore, AgentActivity
from capwatch.monitor.drift import DriftConfig, DriftMonitor
from capwatch.monitor.snapshot import (
    SnapshotError,
    restore_agent,
    snapshot_agent,
    snapshot_frozen,
)

log = structlog.get_logger("capwatch.daemon")

SYNC_WAIT_S = 30.0
"""How long a synchronous checkpoint (a revoke, the shutdown) waits for a background
checkpoint's write and flush already running. A revoke holds the whole group's rebalance:
no replica consumes until every member has rejoined, so a flush waiting on a broker that
does not answer held every partition of the group for as long (unbounded before session
16). Three of the publisher's 10 s flush timeouts: a flush still running after that waits
on a broker or store that is not answering. The partitions are then given up without a
commit (never committed early): their next owner replays them from their last commit."""


@dataclass(frozen=True, slots=True)
class TakenSnapshot:
    """An agent's drift tables as bytes, taken at a checkpoint on the main loop
    (``DriftMonitor.frozen``), with the position they reflect: :meth:`snapshot` makes the
    :class:`DriftSnapshot` of exactly those tables in any thread, whatever the agent did
    since."""

    agent_id: str
    model: ModelRef
    partition: int
    next_offset: int
    tables: tuple[bytes, list[tuple[Action, DriftConfig]]]
    backoff: dict[str, Any] | None

    def snapshot(self, source: str, now: datetime, topic_id: str | None) -> DriftSnapshot:
        state = snapshot_frozen(self.tables, self.model.to_json())
        if self.backoff is not None:
            state[BACKOFF] = self.backoff
        return DriftSnapshot(self.agent_id, self.model, source, self.partition,
                             self.next_offset, state, now, topic_id)


BACKOFF = "backoff"
"""The snapshot's key for the watch's back-off (:func:`backoff_state`). Optional, so a
snapshot without it (written before session 18) reads as one of an agent with none, and a
capwatch that does not know it restores the tables and ignores it
(``capwatch.monitor.snapshot.check_snapshot`` reads ``actions`` only)."""


def _backoff_wait(watch: AgentWatch, times: int) -> float:
    """The back-off after ``times`` assessments ended unexplained (``AgentWatch.back_off``)
    under the watch's settings; the first wait for 0 (held, the agent not reached, without
    an unexplained end counted)."""
    cfg = watch.settings
    return float(min(cfg.unexplained_max_backoff_s,
                     cfg.unexplained_backoff_s * 2.0 ** min(max(times, 1) - 1, 64)))


def backoff_state(watch: AgentWatch) -> dict[str, Any] | None:
    """The watch's back-off as JSON, for its drift snapshot: per kind (an evidence kind,
    or an action's drift) how many times it was backed off and how many seconds ago the
    last one began, and per action the outcome counts its last drift alarm was assessed
    on (an alarm within the back-off over counts like them is held:
    ``AgentWatch._drift_held``) and whether that work is still awaited. A work that ended
    "no change" leaves nothing in the store's queue to read back (``resume_queued`` reads
    the failed ones'), so without this a restarted replica asked an agent the same
    questions again at its next audit. When it began, not when it ends: the replica that
    reads it back works the wait out under its own settings, as ``resume_queued`` does
    (an operator who shortened the back-off and restarted gets the shorter one); and in
    seconds ago, as the watch's monotonic clock starts afresh with the process
    (:meth:`Checkpointer.restore` adds the time since the snapshot's ``updated_at``)."""
    backoff = watch.backoff
    if not backoff and watch.awaiting is None:
        return None
    now = watch.clock()
    tested = watch.drift_tested or {}
    state: dict[str, Any] = {
        "kinds": {kind: {"times": n, "ago_s": now - (until - _backoff_wait(watch, n))}
                  for kind, (until, n) in backoff.items() if math.isfinite(until) and n >= 0},
        "tested": {name: [[int(c) for c in counts], awaited]
                   for name, (counts, awaited) in tested.items()},
    }
    if watch.awaiting is not None:
        # The work's end may come while no replica holds the agent (its partition moved
        # away): its next holder reads how it ended by this key (Checkpointer.restore).
        state["awaiting"] = watch.awaiting
    return state


def restore_backoff(watch: AgentWatch, saved: Any, elapsed_s: float) -> str | None:
    """Give a newly loaded watch the back-off :func:`backoff_state` saved ``elapsed_s``
    seconds ago, beside what it holds already (the store's queue's, ``resume_queued``):
    per kind the one backed off more times (the later end if as many). A saved work
    still awaited stays so only if the watch awaits a work (the same one, from the
    queue). Returns the key of the work the snapshot's watch awaited and this one does
    not: it ended since, maybe while no replica held the agent, and what it assessed is
    not in the counts (the caller reads how it ended). Raises ValueError (changing
    nothing) if ``saved`` is malformed."""
    if not isinstance(saved, Mapping):
        raise ValueError(f"back-off is not an object: {type(saved).__name__}")
    awaited_key = saved.get("awaiting")
    if awaited_key is not None and not isinstance(awaited_key, str):
        raise ValueError(f"awaited work is not a key: {awaited_key!r}")
    kinds: dict[str, tuple[float, int]] = {}
    now = watch.clock()
    for kind, entry in dict(saved.get("kinds") or {}).items():
        n, ago = entry["times"], float(entry["ago_s"])
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"back-off count of {kind!r} is not a count: {n!r}")
        if not math.isfinite(ago):
            raise ValueError(f"back-off start of {kind!r} is not a number of seconds: {ago!r}")
        kinds[str(kind)] = (now + _backoff_wait(watch, n) - ago - elapsed_s, n)
    tested: dict[str, tuple[tuple[int, ...], bool]] = {}
    for name, entry in dict(saved.get("tested") or {}).items():
        counts, awaited = entry
        tested[str(name)] = (tuple(int(c) for c in counts),
                             bool(awaited) and watch.awaiting is not None)
    if kinds:
        watch.thaw()  # a frozen watch without a back-off holds a shared, read-only one
    for kind, (until, n) in kinds.items():
        mine = watch.backoff.get(kind)
        if mine is None or (n, until) > (mine[1], mine[0]):
            watch.backoff[kind] = (until, n)
    if tested:
        watch.keep_drift_tested(tested)
    return awaited_key if awaited_key is not None and watch.awaiting != awaited_key else None


class PendingCommit:
    """A scheduled checkpoint's store writes and the publisher's flush, which run in the
    checkpoints' thread (:class:`Writer`), and the offsets waiting for them."""

    def __init__(self, offsets: dict[int, int], publisher: Publisher,
                 write: Callable[[], None] | None = None,
                 snaps: Sequence[TakenSnapshot] = (),
                 rows: Sequence[AgentActivity] = (), activity_mark: int = 0) -> None:
        self.offsets = offsets
        self.publisher = publisher
        self.write = write
        self.snaps = snaps
        self.rows = rows
        """What ``write`` writes: put back (:meth:`Checkpointer.await_writes`) if it fails."""
        self.activity_mark = activity_mark
        """The registry's ``tick`` of the activity save before this one."""
        self.error: BaseException | None = None
        self.write_failed = False
        self.settled = False
        """The main loop has seen the write end (and put back what a failed one held)."""
        self.written = threading.Event()
        if write is None:
            # Nothing to write: what waits for the write (an eviction on the main loop)
            # must not wait for the flush, which waits on the broker.
            self.written.set()
        self.done = threading.Event()

    def run(self) -> None:
        try:
            if self.write is not None:
                try:
                    self.write()
                except BaseException:
                    self.write_failed = True  # no flush: these offsets are not committed
                    raise
                finally:
                    self.written.set()
            if self.offsets:
                self.publisher.flush()
        except BaseException as e:  # handed to the main loop, which raises it there
            self.error = e
        finally:
            self.written.set()
            self.done.set()


class Writer:
    """The thread that runs the scheduled checkpoints' writes and flushes, one at a time.

    One thread kept between checkpoints, not one started for each: ``Thread.start`` waits
    until the new thread runs, which at load cost the main loop ~5-15 ms a checkpoint (the
    new thread took the interpreter lock first). It ends after ``idle_s`` without work (a
    pipeline a test drops keeps no thread) and starts again with the next.
    """

    def __init__(self, idle_s: float = 60.0) -> None:
        self.idle_s = idle_s
        self._wake = threading.Condition()
        self._jobs: list[PendingCommit] = []
        self._running = False

    def submit(self, job: PendingCommit) -> None:
        with self._wake:
            self._jobs.append(job)
            if self._running:
                self._wake.notify()
                return
            self._running = True
        threading.Thread(target=self._run, name="capwatch-checkpoint", daemon=True).start()

    def _run(self) -> None:
        while True:
            with self._wake:
                if not self._jobs:
                    self._wake.wait(self.idle_s)
                if not self._jobs:
                    self._running = False
                    return
                job = self._jobs.pop(0)
            job.run()


class Checkpointer:
    def __init__(self, *, group: str, store: Checkpoints, source: Source, publisher: Publisher,
                 registry: Registry, drift: DriftMonitor, clock: Callable[[], datetime],
                 interval_s: float, replica: str = "", queue: WorkQueue | None = None
                 ) -> None:
        self.group = group
        self.replica = replica
        self.store = store
        self.queue = queue
        """The store's work queue: how a work a snapshot's watch awaited ended
        (:meth:`restore`)."""
        self.source = source
        self.publisher = publisher
        self.registry = registry
        self.drift = drift
        self.clock = clock
        self.interval_s = interval_s
        self._next: dict[int, int] = {}
        """Per owned partition: the offset after the last record handled."""
        self._committed: dict[int, int] = {}
        self._pending: PendingCommit | None = None
        self.sync_wait_s = SYNC_WAIT_S
        self._writer = Writer()
        self._activity_store = store if isinstance(store, ActionStore) else None
        """The store as an ActionStore, if it is one (a Protocol's isinstance is slow)."""
        """The scheduled checkpoint's offsets while its flush runs (at most one)."""
        self._refused: dict[int, int] = {}
        """Offsets an asynchronous commit did not get through, committed again
        synchronously at the next turn (which raises AssignmentLost if the group went on
        without this member)."""
        self.saved_drift: dict[str, DriftSnapshot] = {}
        """Saved drift state of the batch's new agents (:meth:`prefetch_drift`), applied at
        their first record (:meth:`restore`)."""
        self._drift_partitions: set[int] = set()
        """Owned partitions: an agent first seen in one gets the tables saved for it there."""
        self._drift_checked: set[str] = set()
        """Agents whose saved state :meth:`prefetch_drift` looked up for this batch."""
        self._last = time.monotonic()
        self._activity_mark = 0
        """The registry's ``tick`` at the last full :meth:`save_activity`."""
        self.evicted: dict[str, bool] = {}
        """Agents evicted to the store (:meth:`evict`) → whether they had drift tables,
        read back at their next record."""
        self.evictions = 0
        self.restores = 0
        self.topic_id: str | None = None
        """The id of the topic's incarnation the partitions were last assigned on (a
        source that knows it: :class:`KnowsTopicId`), saved with the activity positions:
        a topic deleted and created again has another, and the positions saved on the
        earlier one are not used (:meth:`load_counted`)."""
        self.counted: dict[int, int] = {}
        """Per newly assigned partition, the offset below which the store's activity
        counts every record already (:meth:`load_counted`): a replayed record below it
        is observed but not counted again (``Batches.handle``). Emptied as the
        partition's position passes it, so most batches never look."""

    # ------------------------------------------------------------------ positions

    def handled(self, partition: int, offset: int) -> None:
        """Every effect of the record at ``offset`` is applied (or buffered)."""
        if offset >= self._next.get(partition, 0):
            self._next[partition] = offset + 1
        counted = self.counted
        if counted and offset + 1 >= counted.get(partition, 0):
            counted.pop(partition, None)

    def resume_offsets(self) -> dict[int, int]:
        """The committed positions in the store, for sources that keep none themselves."""
        return {p: o for (topic, p), o in self.store.load_offsets(self.group).items()
                if topic == self.source.name}

    def commit_offsets(self, partitions: set[int] | None = None) -> dict[int, int]:
        """Per partition, the offset every earlier record's effects are durable up to."""
        held: dict[int, int] = {}
        for watch in self.registry:
            if not watch.evidence:
                continue  # most watches, at fleet scale
            first = watch.first_buffered_offset()
            if first is not None:
                held[watch.partition] = min(held.get(watch.partition, first), first)
        # Past offsets that hold no record (a transaction's marker after the last record):
        # every record before them handled, so nothing they stand for is left behind.
        skips = self.source.recordless() if isinstance(self.source, SkipsRecordless) else {}
        offsets = {}
        for p, nxt in self._next.items():
            if partitions is not None and p not in partitions:
                continue
            skip = skips.get(p)
            if skip is not None and skip[0] <= nxt < skip[1]:
                nxt = skip[1]
            offsets[p] = min(nxt, held.get(p, nxt))
        return offsets

    @property
    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval_s

    def checkpoint(self, partitions: set[int] | None = None, *,
                   background: bool = False) -> bool:
        """Save drift state and activity, then commit what is durable; True if an offset
        moved.

        ``background`` (the scheduled checkpoint): the snapshots and rows are taken here
        and written, then flushed, in a thread of their own; the commit waits for
        :meth:`finish_commit`. Otherwise (a revoke, the shutdown, a test) everything is
        done before returning, an earlier checkpoint's thread finished first.
        """
        self._last = time.monotonic()
        if not background:
            moved = False
            pending = self._pending
            if pending is not None:
                if not pending.done.wait(self.sync_wait_s):
                    raise DeliveryError(
                        f"the background checkpoint's write and flush did not finish within "
                        f"{self.sync_wait_s:g} s; nothing more is committed until it has")
                self.await_writes()
                if pending.error is not None:
                    # Done again here: a failed write's tables and activity were put
                    # back (await_writes), and these offsets are flushed and committed
                    # below. Raised, a revoke or the shutdown coming before the main
                    # loop's next turn gave its partitions up uncommitted and unsaved on
                    # an error the store or broker may be over by now.
                    log.warning("background checkpoint failed; the synchronous one does "
                                "its work", problem=str(pending.error)[:300])
                    self._pending = None
                moved = self.finish_commit()
            # A revoke or the shutdown: the snapshot of an agent awaiting a work keeps its
            # key (backoff_state), for whichever replica holds the agent when the work has
            # ended; written even if its tables did not change since the last one (a
            # quiet agent's audit alarm queued the work), or if it has none (no action of
            # two outcomes counted: an inconsistency queued the work), a snapshot of no
            # table then, as after a work's end dropped them.
            self.drift.mark_changed(
                w.agent_id for w in (self.registry if partitions is None
                                     else self.registry.in_partitions(partitions))
                if w.awaiting is not None)
            self.save_drift_state(partitions)
            self.save_activity(partitions)
            offsets = self._changed(self.commit_offsets(partitions))
            if not offsets:
                return moved
            self.publisher.flush()
            self._commit(offsets)
            return True
        moved = self.finish_commit()
        if self._pending is not None:
            # Its thread still runs: what changed since and these offsets wait for the
            # next checkpoint (one write in flight at a time keeps them in order).
            return moved
        # The tables' bytes only: encoding them (0.25 ms an agent, a third of it zlib's)
        # is the writer's, beside the main loop (docs/performance.md, "Alert latency").
        snaps = self._drift_taken(None)
        now = self.clock()
        mark = self._activity_mark
        rows = self._activity_rows(None)
        counted = self._counted_positions(None) if rows else {}
        topic_id = self.topic_id
        offsets = self._changed(self.commit_offsets())
        if snaps or rows or offsets:
            self._pending = PendingCommit(
                offsets, self.publisher,
                (lambda: self._write(snaps, rows, counted, topic_id, now))
                if snaps or rows else None,
                snaps, rows, mark)
            self._writer.submit(self._pending)
        return moved

    def _write(self, snaps: Sequence[TakenSnapshot], rows: Sequence[AgentActivity],
               counted: dict[tuple[str, int], int], topic_id: str | None,
               now: datetime) -> None:
        """The background checkpoint's store writes (its thread): the snapshots before the
        offsets, as on the main loop."""
        if snaps:
            source = self.source.name
            self.store.save_drift_snapshots(self.group, [s.snapshot(source, now, topic_id)
                                                         for s in snaps])
        if rows and self._activity_store is not None:
            self._activity_store.save_activity(rows, self.group, counted, topic_id)

    def await_writes(self) -> None:
        """Wait for a background checkpoint's store writes (not its flush); if they failed,
        mark its agents' tables unsaved and their activity unwritten again, so that the
        next write (this caller's, an eviction's) writes them. Called before anything on
        the main loop writes or drops drift tables or activity: an agent must never be
        evicted, or read back, on a write not yet in the store, and an older snapshot
        must not land after a newer one."""
        pending = self._pending
        if pending is None or pending.settled:
            return
        pending.written.wait()
        pending.settled = True
        if not pending.write_failed:
            return
        self.drift.mark_changed(s.agent_id for s in pending.snaps
                                if self.registry.get(s.agent_id) is not None)
        # The next save visits the watches this one did (only those seen since its mark).
        self._activity_mark = min(self._activity_mark, pending.activity_mark)
        for row in pending.rows:
            watch = self.registry.get(row.agent_id)
            if watch is not None:
                watch.saved_transitions = max(0, watch.saved_transitions - row.transitions)
                watch.saved_inconsistent = max(0, watch.saved_inconsistent - row.inconsistent)

    def finish_commit(self) -> bool:
        """Commit the offsets of a background checkpoint whose flush is done (the main
        loop asks at every turn); raise what the flush raised (nothing is committed then,
        and the next checkpoint tries again). True if an offset moved."""
        moved = False
        if self._refused:
            refused, self._refused = self._refused, {}
            # Unless a later commit got through meanwhile.
            offsets = {p: o for p, o in refused.items()
                       if p in self._next and o > self._committed.get(p, -1)}
            if offsets:
                self._commit(offsets)
                moved = True
        pending = self._pending
        if pending is None or not pending.done.is_set():
            return moved
        self.await_writes()  # done: returns at once, a failed write put back
        self._pending = None
        if pending.error is not None:
            raise pending.error
        # Partitions given up since (forget) are not this replica's to commit any more.
        offsets = self._changed({p: o for p, o in pending.offsets.items() if p in self._next})
        if not offsets:
            return moved
        self._commit(offsets, background=True)
        return True

    @property
    def committing(self) -> bool:
        """A background checkpoint's flush has finished and its commit waits, or an
        asynchronous commit was refused."""
        pending = self._pending
        return bool(self._refused) or (pending is not None and pending.done.is_set())

    def _changed(self, offsets: dict[int, int]) -> dict[int, int]:
        return {p: o for p, o in offsets.items() if self._committed.get(p) != o}

    def _commit(self, offsets: dict[int, int], background: bool = False) -> None:
        """Record the offsets in the store, then commit them to the source: without
        waiting for the broker's answer if ``background`` and the source can."""
        self.store.save_offsets(self.group, {(self.source.name, p): o
                                             for p, o in offsets.items()}, self.clock())
        log.debug("checkpoint", offsets=offsets)
        source = self.source
        if background and isinstance(source, CommitsInBackground):
            source.commit_async(offsets, lambda error: self._answered(offsets, error))
            return
        source.commit(offsets)
        self._committed.update(offsets)

    def _answered(self, offsets: dict[int, int], error: BaseException | None) -> None:
        """An asynchronous commit's answer (at a later poll of the source)."""
        owned = {p: o for p, o in offsets.items() if p in self._next}
        if error is None:
            # Never back: a synchronous commit of later offsets may have been answered first.
            self._committed.update({p: o for p, o in owned.items()
                                    if o >= self._committed.get(p, o)})
            return
        log.warning("commit not taken; committing again", offsets=owned,
                    problem=str(error)[:300])
        for p, o in owned.items():
            self._refused[p] = max(o, self._refused.get(p, o))

    def save_activity(self, partitions: set[int] | None = None) -> int:
        """Add what agents did since the last save to the store's per-agent activity (the
        operator console lists every agent from it); soft state, so a store without it is
        skipped."""
        rows = self._activity_rows(partitions)
        if rows and self._activity_store is not None:
            self._activity_store.save_activity(rows, self.group,
                                               self._counted_positions(partitions),
                                               self.topic_id)
        return len(rows)

    def _counted_positions(self, partitions: set[int] | None) -> dict[tuple[str, int], int]:
        """Taken with :meth:`_activity_rows`: per partition, the offset below which the
        store's activity counts every record once these rows are added, written in the
        same transaction, so that a replay after a crash or a rebalance skips exactly
        what was counted (the commit waits for buffered evidence: oper20's agents
        awaiting an assessment had 15 transitions more than records). A partition whose
        replay has not yet passed the position it was assigned with keeps that one: the
        records up to it were counted by the replica before."""
        topic = self.source.name
        counted = self.counted
        return {(topic, p): max(o, counted.get(p, o)) for p, o in self._next.items()
                if partitions is None or p in partitions}

    def load_counted(self, partitions: set[int]) -> None:
        """Newly assigned ``partitions``: the offsets below which the store's activity
        counts their records already (:meth:`_counted_positions`, as saved)."""
        source = self.source
        now_id = source.topic_id() if isinstance(source, KnowsTopicId) else None
        if now_id is not None:
            self.topic_id = now_id
        if self._activity_store is None:
            return
        topic = source.name
        stale: dict[int, tuple[int, str]] = {}
        for (t, p), (o, saved_id) in self._activity_store.activity_positions_of(
                self.group).items():
            if t != topic or p not in partitions:
                continue
            if saved_id is not None and now_id is not None and saved_id != now_id:
                stale[p] = (o, saved_id)
            elif o > self._next.get(p, 0):
                self.counted[p] = o
        if stale:
            # Counted on the topic before it was deleted and created again under the same
            # name: the new topic's offsets start again from 0, and taken as this topic's
            # the positions would read its records up to them as replays, not counted.
            log.warning("activity positions saved on an earlier topic of the same name "
                        "(deleted and created again): not used, the new topic's records "
                        "are counted from its start", topic=topic, topic_id=now_id,
                        saved_topic_ids=sorted({i for _, i in stale.values()}),
                        positions={p: o for p, (o, _) in sorted(stale.items())})

    def _activity_rows(self, partitions: set[int] | None) -> list[AgentActivity]:
        """What agents did since the last save, marked saved (put back by
        :meth:`await_writes` if the write fails)."""
        if self._activity_store is None:
            return []
        now = self.clock()
        rows = []
        # A watch's counts change only in a record's handling, which hands it out (and
        # moves its ``seen``) first: the scheduled save visits only those handed out since.
        mark = self.registry.tick
        for watch in (self.registry.seen_since(self._activity_mark) if partitions is None
                      else self.registry):
            if partitions is not None and watch.partition not in partitions:
                continue
            t, i = watch.transitions, watch.inconsistent
            if t == watch.saved_transitions and i == watch.saved_inconsistent:
                continue
            rows.append(AgentActivity(
                watch.family, watch.agent_id, max(0, t - watch.saved_transitions),
                max(0, i - watch.saved_inconsistent), now, self.replica))
            watch.saved_transitions, watch.saved_inconsistent = t, i
        if partitions is None:
            self._activity_mark = mark
        return rows

    # ------------------------------------------------------------------ drift snapshots

    def save_drift_state(self, partitions: set[int] | None = None) -> int:
        """Write the drift tables of agents that changed since they were last written.

        Each snapshot carries the position it reflects: the next offset of the agent's
        partition (every record before it handled).
        """
        snaps = self._drift_snapshots(partitions)
        if snaps:
            try:
                self.store.save_drift_snapshots(self.group, snaps)
            except BaseException:
                self.drift.mark_changed(s.agent_id for s in snaps)
                raise
        return len(snaps)

    def _drift_snapshots(self, partitions: set[int] | None) -> list[DriftSnapshot]:
        """The snapshots of agents whose tables changed since they were last taken (of
        ``partitions`` only, if given; the others stay marked changed)."""
        now = self.clock()
        source = self.source.name
        return [s.snapshot(source, now, self.topic_id) for s in self._drift_taken(partitions)]

    def _drift_taken(self, partitions: set[int] | None) -> list[TakenSnapshot]:
        """:meth:`_drift_snapshots`' tables as bytes, not yet encoded."""
        changed = self.drift.take_changed()
        later: set[str] = set()
        snaps: list[TakenSnapshot] = []
        for agent_id in sorted(changed):
            watch = self.registry.get(agent_id)
            if watch is None:
                continue  # dropped (partition revoked): its state was saved before that
            if partitions is not None and watch.partition not in partitions:
                later.add(agent_id)
                continue
            nxt = self._next.get(watch.partition)
            if nxt is None:
                later.add(agent_id)
                continue
            restored = watch.drift_restored
            if restored is not None and restored[0] == watch.partition:
                nxt = max(nxt, restored[1])
            snaps.append(TakenSnapshot(agent_id, watch.version.ref, watch.partition, nxt,
                                       self.drift.frozen(agent_id), backoff_state(watch)))
        self.drift.mark_changed(later)
        return snaps

    def load_drift_state(self, partitions: set[int]) -> None:
        """Newly assigned ``partitions``: their agents get the tables saved for them at their
        first record, read with their batch (:meth:`prefetch_drift`). Reading every snapshot
        of the partitions here held them all in memory until each agent's next record: at
        fleet scale hundreds of MB, every agent evicted before back in memory as a snapshot
        after each rebalance."""
        self._drift_partitions |= partitions

    def prefetch_drift(self, agent_ids: Sequence[str]) -> None:
        """Read the saved drift state of ``agent_ids`` (agents about to be loaded) in one
        query per 500; valid until :meth:`end_prefetch`."""
        ids = [a for a in agent_ids if a not in self._drift_checked]
        if not ids or not self._drift_partitions:
            return
        for i in range(0, len(ids), 500):
            for snap in self.store.load_drift_snapshots(self.group, self.source.name,
                                                        self._drift_partitions, ids[i:i + 500]):
                self.saved_drift[snap.agent_id] = snap
        self._drift_checked.update(ids)

    def end_prefetch(self) -> None:
        """The batch is handled: what :meth:`prefetch_drift` read and did not apply goes."""
        self.saved_drift.clear()
        self._drift_checked.clear()

    def evict(self, keep: int) -> int:
        """Drop the least recently seen idle agents until at most ``keep`` are held, their
        drift tables and activity written to the store first; returns how many went.

        An idle watch buffers no evidence, so it holds no commit back, and what else it
        keeps (the monitor's recent executions, timers) is rebuilt by its next records.
        """
        return self.evict_watches(self.registry.idle(len(self.registry) - keep))

    def evict_watches(self, watches: list[AgentWatch]) -> int:
        """Evict these idle watches (see :meth:`evict`); returns how many went."""
        if not watches:
            return 0
        # A checkpoint's write in flight may hold these agents' tables, which the test
        # below then takes as saved: they must be in the store before the agents go.
        self.await_writes()
        self.save_activity()
        snaps = []
        had: set[str] = set()
        now = self.clock()
        for watch in watches:
            if not self.drift.has(watch.agent_id) and not watch.backoff:
                # Neither tables nor a back-off (whose snapshot a restart reads back; the
                # registry keeps it across the eviction in this process).
                continue
            had.add(watch.agent_id)
            if not self.drift.changed(watch.agent_id):
                # Saved since they last changed (a checkpoint, or an earlier eviction),
                # as a checkpoint leaves them: the store holds them already. Most agents
                # evicted are the least recently seen, whose tables a checkpoint saved
                # long ago; writing them again unpacked and encoded every one of them.
                continue
            nxt = self._next.get(watch.partition, 0)
            restored = watch.drift_restored
            if restored is not None and restored[0] == watch.partition:
                nxt = max(nxt, restored[1])
            state = snapshot_agent(self.drift, watch.agent_id, watch.version.ref.to_json())
            backoff = backoff_state(watch)
            if backoff is not None:
                state[BACKOFF] = backoff
            snaps.append(DriftSnapshot(watch.agent_id, watch.version.ref, self.source.name,
                                       watch.partition, nxt, state, now, self.topic_id))
        if snaps:
            self.store.save_drift_snapshots(self.group, snaps)
        ids = [w.agent_id for w in watches]
        for agent_id in ids:
            self.drift.forget(agent_id)
        self.drift.take_changed_of(ids)
        self.registry.drop(ids)
        self.evicted.update((a, a in had) for a in ids)
        self.evictions += len(ids)
        return len(ids)

    def restore(self, watch: AgentWatch) -> None:
        """Give a newly loaded agent the drift tables saved for it, if they still apply
        (once per watch: :attr:`AgentWatch.restore_tried`)."""
        watch.restore_tried = True
        agent_id = watch.agent_id
        had_tables = self.evicted.pop(agent_id, None)
        if had_tables is not None:
            self.restores += 1
        snap = self.saved_drift.pop(agent_id, None)
        if snap is None and agent_id not in self._drift_checked and (
                had_tables or (had_tables is None and watch.partition in self._drift_partitions)):
            # Not looked up with its batch (its record had no key naming it): read it alone.
            found = self.store.load_drift_snapshots(self.group, self.source.name,
                                                    {watch.partition}, [agent_id])
            snap = found[0] if found else None
        if snap is None or watch.transitions:
            return  # an agent already live keeps its own, newer tables
        if snap.model != watch.version.ref:
            log.info("drift state is for another model version; starting afresh",
                     saved=str(snap.model), current=str(watch.version.ref))
            return
        try:
            skipped = restore_agent(self.drift, agent_id, watch.domain.action_map,
                                    snap.state)
        except SnapshotError as e:
            log.warning("drift state unreadable; starting afresh", error=str(e))
            return
        if snap.topic_id is not None and self.topic_id is not None \
                and snap.topic_id != self.topic_id:
            # Counted on the topic before it was deleted and created again under its
            # name: the tables are the agent's still, but no record of the new topic is
            # in them, whatever its offset (the position would skip them).
            log.info("drift state was counted on an earlier topic of the same name; its "
                     "tables are restored, every record of the new topic counted",
                     saved_topic_id=snap.topic_id, topic_id=self.topic_id)
        else:
            watch.drift_restored = (snap.partition, snap.next_offset)
        saved = snap.state.get(BACKOFF)
        if saved is not None:
            elapsed = (self.clock() - snap.updated_at).total_seconds()
            try:
                ended = restore_backoff(watch, saved, elapsed)
            except (KeyError, TypeError, ValueError) as e:
                log.warning("drift back-off unreadable; the agent's tables are restored "
                            "without it", agent=agent_id, error=str(e)[:300])
            else:
                if ended is not None and self.queue is not None:
                    self._hold_ended(ended, elapsed)
        log.info("drift state restored", position=snap.next_offset,
                 skipped=skipped or None)

    def _hold_ended(self, key: str, elapsed_s: float) -> None:
        """The work ``key``, awaited by the agent's watch when its snapshot was taken
        ``elapsed_s`` seconds ago, is not awaited by the watch loaded now: if it ended
        without a version (one stored would be the watch's model, and the snapshot not
        restored), back off what it assessed, as a watch that awaited it would (work that
        ended after its partition moved away, before this replica was assigned it: no
        replica saw it end), from its end. A work that ended before the store kept when
        (schema 7) counts from the snapshot, the earliest its end can have been: never
        held longer than by a watch that awaited it."""
        queue = self.queue
        assert queue is not None
        item = queue.queue_items_by_key([key]).get(key)
        if item is None or item.status not in ("done", "failed"):
            return
        # The snapshot's time is the writer's clock: the end's, the store's, when known.
        ago = (ended_ago(item, queue.store_now(self.clock())) if item.ended_at is not None
               else elapsed_s)
        self.registry.hold_ended(item, ago)

    def forget(self, partitions: set[int]) -> None:
        """The partitions moved away (after a final checkpoint of them)."""
        # Their agents are read back from the store if the partitions come back.
        self.await_writes()
        for p in partitions:
            self._next.pop(p, None)
            self._committed.pop(p, None)
            self.counted.pop(p, None)
            if self._pending is not None:
                self._pending.offsets.pop(p, None)
        self._drift_partitions -= partitions
        self.end_prefetch()
        # Evicted agents' snapshots stay in the store for whichever replica gets them.
        self.evicted.clear()
