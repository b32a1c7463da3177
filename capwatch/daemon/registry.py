"""The agents this replica watches, loaded lazily from the store on first sight.

An agent whose work is queued but that is not loaded (after a restart, or after its
partition moved away and back) is *parked* with the work's key, so the watch created for
it later starts out awaiting that work instead of queuing it again.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import structlog

from capwatch.contracts.store import ModelRegistry, PendingAssessment, VersionConflict, WorkQueue
from capwatch.contracts.versions import ModelRef, ModelVersion, build_version
from capwatch.daemon.agent_watch import AgentWatch, WatchSettings, drift_kind
from capwatch.daemon.retry import ended_unreachable
from capwatch.model.domain import Domain
from capwatch.model.grounding import SharedGrounding
from capwatch.monitor.drift import DriftMonitor

log = structlog.get_logger("capwatch.daemon")

_T = TypeVar("_T")


def seed_baselines(store: ModelRegistry, families: Mapping[str, Domain], now: datetime) -> None:
    """Make each configured family model the baseline, as a new version if it changed."""
    for family, domain in families.items():
        latest = store.latest(family, None)
        if latest is not None and latest.domain() == domain:
            continue
        if latest is not None and "promoted_from" in latest.evidence:
            # An operator promoted a version since the configuration's model was seeded
            # (capwatch.models_store.actions): a restart with the same configuration
            # keeps the promotion; only a changed configuration replaces it.
            seeded = next((v for v in reversed(store.history(family, None))
                           if "promoted_from" not in v.evidence), None)
            if seeded is not None and seeded.domain() == domain:
                log.info("family baseline promoted by an operator; kept", family=family,
                         version=latest.version)
                continue
        ref = ModelRef(family, None, latest.version + 1 if latest else 1)
        v = build_version(ref, domain, now, parent=latest, evidence={"source": "configuration"})
        # VersionConflict: another replica seeded the same family at the same moment.
        with contextlib.suppress(VersionConflict):
            store.put(v)
        log.info("family baseline", family=family, version=ref.version)


def drift_counts(payload: Any) -> dict[str, tuple[int, ...]] | None:
    """Action → the outcome counts a work item's drift evidence was handed (its payload's
    ``drift``); None if it holds none or they do not read (then the work's end backs no
    drift off: the next alarm is assessed, the safe side)."""
    drift = payload.get("drift") if isinstance(payload, dict) else None
    if not isinstance(drift, dict) or not drift:
        return None
    out: dict[str, tuple[int, ...]] = {}
    for name, entry in drift.items():
        counts = entry.get("counts") if isinstance(entry, dict) else None
        if isinstance(counts, list) and all(isinstance(c, int) for c in counts):
            out[str(name)] = tuple(counts)
    return out or None


def resume_queued(registry: Registry, queue: WorkQueue, now: datetime,
                  horizon_s: float) -> None:
    """At a start, what the store's work queue means for watches not loaded yet: work
    pending or claimed parks its agent (its watch starts out awaiting it), and work that
    ended unexplained within ``horizon_s`` still backs its evidence off (watch.back_off),
    from its end, oldest first so repeated failures double the wait again."""
    for item in queue.live_queue_items():
        kinds = item.payload.get("evidence_kinds") or ()
        registry.park(item.agent_id, item.key, tuple(str(k) for k in kinds),
                      drift_counts(item.payload))
    failed = queue.queue_items("failed")
    store_now = queue.store_now(now) if any(i.ended_at is not None for i in failed) else now
    ended = []
    for item in failed:
        # A work failed before the store kept its end (schema 7): from its queuing, the
        # earliest the end can have been (its retries took minutes to hours after it).
        ago = ((store_now - item.ended_at) if item.ended_at is not None
               else (now - item.enqueued_at)).total_seconds()
        if ago <= horizon_s:
            ended.append((ago, item))
    for ago, item in sorted(ended, key=lambda e: -e[0]):
        registry.hold_ended(item, max(0.0, ago))


Held = tuple[ModelRef, tuple[str, ...], dict[str, tuple[int, ...]] | None, float, bool, str]
"""What an assessment that ended unexplained for an agent not loaded backs off: (the model
it assessed against, its evidence kinds, its drift: action → the counts it was handed,
when it ended on :attr:`Registry.clock`, whether it learnt anything: False if the agent
was not reached, the first wait only; the work's key, "" if not known)."""

HELD_LIMIT = 10_000
"""Agents not loaded whose back-off the registry keeps (:attr:`Registry._held`, and
:attr:`Registry._backoff`'s dropped watches), each: past it, those whose back-off passed
go, then those ending soonest, down to half (bounded whatever the fleet does: the hints
name every replica's agents, and a partition may move away for good)."""


def _ended_hold(item: PendingAssessment, ended: float) -> Held | None:
    """What the work ``item``, ended unexplained at ``ended`` (no version, or failed),
    backs off for its agent; None if it assessed nothing it says (an operator's work)."""
    payload = item.payload
    kinds = payload.get("evidence_kinds") if isinstance(payload, dict) else None
    drift = drift_counts(payload)
    if not kinds and not drift:
        return None
    try:
        base = ModelRef.from_json(payload["base"])
    except (KeyError, TypeError, ValueError):
        return None
    return (base, tuple(str(k) for k in kinds or ()), drift, ended,
            not ended_unreachable(item), item.key)


def ended_ago(item: PendingAssessment, store_now: datetime | None) -> float:
    """Seconds since the work ``item`` ended, on the store's clock (``store_now``, the
    store's time now, and ``item.ended_at`` its time then: another replica's clock, or
    this one's, apart from it does not move the end); 0 when either is unknown (work that
    ended before the store kept when: migration 0008)."""
    if store_now is None or item.ended_at is None:
        return 0.0
    return max(0.0, (store_now - item.ended_at).total_seconds())


class Registry:
    def __init__(self, store: ModelRegistry, settings: WatchSettings | None = None,
                 drift: DriftMonitor | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        """The watches' monotonic clock: when held back-offs began."""
        self.held_limit = HELD_LIMIT
        self.settings = settings or WatchSettings()
        self.drift = drift if drift is not None else DriftMonitor()
        self._agents: dict[str, AgentWatch] = {}
        self._parked: dict[str, str] = {}
        self._parked_kinds: dict[str, frozenset[str]] = {}
        """Agent id → the evidence kinds its parked work assesses (AgentWatch.await_work)."""
        self._parked_drift: dict[str, dict[str, tuple[int, ...]]] = {}
        """Agent id → the drift its parked work assesses: action → the outcome counts the
        work was handed (AgentWatch.await_work)."""
        self._hinted: set[str] = set()
        """Parked agents released once their work leaves the queue (:meth:`unpark_ended`):
        those :meth:`park_queued` parked as hints, and those :meth:`drop` parked."""
        self._baselines: dict[str, tuple[ModelVersion, Domain, SharedGrounding]] = {}
        self._checked: set[str] = set()
        self.next_tick: Callable[[], int] = itertools.count(1).__next__
        """Hands out the next ``seen``: counts loads, so a watch's ``seen`` orders watches
        by their last record. A C call, for the per-record path (``Intake.read`` hands out
        a loaded watch itself)."""
        self.lookup: Callable[[str], AgentWatch | None] = self._agents.get
        """The watch of a loaded agent, or None: :meth:`get` without a Python call, for the
        per-record path."""
        self._backoff: dict[str, tuple[ModelRef, dict[str, tuple[float, int]],
                                       dict[str, tuple[tuple[int, ...], bool]] | None]] = {}
        """Dropped agent → the back-off its watch had (same process, same clock); bounded
        (:data:`HELD_LIMIT`)."""
        self._held: dict[str, list[Held]] = {}
        """Agent not loaded → the assessments of it that ended unexplained, oldest first
        (from the store at start, or seen ending while no watch of it was loaded here):
        its watch, when loaded against the same model, backs them off from their ends.
        Bounded (:data:`HELD_LIMIT`)."""
        self._held_applied: dict[str, str] = {}
        """Agent → the key of the last ended work its watch backed off from
        :attr:`_held`: the same end read again (with the agent's drift snapshot,
        ``Checkpointer.restore``) does not double the wait. Bounded (:data:`HELD_LIMIT`)."""
        self._own: set[tuple[str, str]] = set()
        self._compacted_at = 0
        """The tick at the last :meth:`compact_idle`."""
        self._marks: deque[tuple[float, int]] = deque(maxlen=4096)
        """(monotonic time, tick) at each :meth:`compact_idle`: a watch whose ``seen``
        is at most a mark's tick had no record since that mark's time."""

    def __len__(self) -> int:
        return len(self._agents)

    def __iter__(self) -> Iterator[AgentWatch]:
        return iter(list(self._agents.values()))

    @property
    def tick(self) -> int:
        """A ``seen`` above every watch's so far, below every later one's (see
        :meth:`seen_since`)."""
        return self.next_tick()

    def seen_since(self, tick: int) -> list[AgentWatch]:
        """The watches handed out (by :meth:`load`) after ``tick``."""
        return [w for w in self._agents.values() if w.seen > tick]

    def get(self, agent_id: str) -> AgentWatch | None:
        return self._agents.get(agent_id)

    def current_version(self, agent_id: str, family: str) -> ModelVersion | None:
        """The agent's own newest version, else its family's baseline."""
        own = self.store.latest(family, agent_id)
        return own if own is not None else self.store.latest(family, None)

    def prefetch(self, agent_ids: Iterable[str]) -> list[str]:
        """Find out in one store query which of the agents not loaded yet have a lineage
        of their own; :meth:`load` then reads the store only for those, and gives the
        others their family's baseline (admitting a fleet at thousands of agents a
        second instead of two queries each). Valid until :meth:`end_prefetch`. Returns the
        agents looked up (those not loaded)."""
        new = [a for a in agent_ids if a not in self._agents and a not in self._checked]
        if new:
            self._own.update(self.store.own_lineages(new))
            self._checked.update(new)
        return new

    def end_prefetch(self) -> None:
        """Forget what :meth:`prefetch` found: lineages may be created meanwhile."""
        self._own.clear()
        self._checked.clear()

    def baseline(self, family: str) -> tuple[ModelVersion, Domain, SharedGrounding] | None:
        """The family's baseline version and its model, read once and shared by every
        agent that runs it (``refresh_baselines`` moves it on)."""
        cached = self._baselines.get(family)
        if cached is None:
            version = self.store.latest(family, None)
            if version is None:
                return None
            domain = version.domain()
            cached = self._baselines[family] = (version, domain, SharedGrounding(domain))
        return cached

    def refresh_baselines(self, families: Iterable[str] = ()
                          ) -> dict[str, tuple[ModelVersion, Domain, SharedGrounding]]:
        """Re-read the baseline of every family in use and of ``families``; family → the
        newest."""
        for family in {*self._baselines, *families}:
            old = self._baselines.get(family)
            latest = self.store.latest(family, None)
            if latest is not None and (old is None or latest.version != old[0].version):
                domain = latest.domain()
                self._baselines[family] = (latest, domain, SharedGrounding(domain))
        return dict(self._baselines)

    def load(self, agent_id: str, family: str, partition: int) -> AgentWatch | None:
        """The agent's watch, built from the store when first seen; None: unknown family."""
        tick = self.next_tick()
        watch = self._agents.get(agent_id)
        if watch is not None and watch.family == family:
            watch.partition = partition
            watch.seen = tick
            return watch
        own = None
        if agent_id not in self._checked or (family, agent_id) in self._own:
            own = self.store.latest(family, agent_id)
        shared = None
        if own is not None:
            version, domain = own, own.domain()
        else:
            base = self.baseline(family)
            if base is None:
                return None
            version, domain, shared = base
        # The family's name as the record's decoder made it is a string of its own per
        # record: interned, every watch of the family holds the same one.
        watch = AgentWatch(agent_id, sys.intern(family), partition, version, self.drift,
                           self.settings, domain=domain, shared=shared)
        parked = self._parked.pop(agent_id, None)
        queued_kinds = self._parked_kinds.pop(agent_id, frozenset())
        parked_drift = self._parked_drift.pop(agent_id, None)
        self._hinted.discard(agent_id)
        if parked is not None:
            watch.await_work(parked, queued_kinds, parked_drift)
        watch.seen = tick
        kept = self._backoff.pop(agent_id, None)
        if kept is not None and kept[0] == version.ref:
            watch.backoff.update(kept[1])
            if kept[2]:
                watch.keep_drift_tested(kept[2])
        held = self._held.pop(agent_id, None)
        if held is not None:
            # After the back-off the dropped watch kept: the ends held since come later
            # (they double its waits, and what it awaited awaits no more).
            self._hold(watch, held)
        self._agents[agent_id] = watch
        return watch

    def idle(self, count: int) -> list[AgentWatch]:
        """Up to ``count`` of the least recently seen watches that hold nothing (no
        evidence or alarm buffered, no awaited work): what eviction may drop."""
        quiet = [w for w in self._agents.values() if w.awaiting is None and not w.buffered]
        quiet.sort(key=lambda w: w.seen)
        return quiet[:count]

    def _cutoff(self, age_s: float, now: float) -> int | None:
        """The newest tick handed out at least ``age_s`` seconds before ``now`` (to the
        resolution of the :meth:`compact_idle` calls); None if none is that old."""
        cutoff = None
        for at, tick in self._marks:
            if at > now - age_s:
                break
            cutoff = tick
        return cutoff

    def not_seen_for(self, age_s: float, now: float) -> list[AgentWatch]:
        """Watches with no record for at least ``age_s`` seconds (to the resolution of the
        :meth:`compact_idle` calls) that hold nothing: what idle eviction may drop."""
        cutoff = self._cutoff(age_s, now)
        if cutoff is None:
            return []
        return [w for w in self._agents.values()
                if w.seen <= cutoff and w.awaiting is None and not w.buffered]

    def compact_idle(self, now: float | None = None, freeze_after_s: float | None = None
                     ) -> int:
        """Trim the monitors of watches not handed out since the last call and with no
        evidence buffered (``TransitionMonitor.compact``): an idle agent keeps its drift
        tables and the last execution of each action, not 64 of them. Returns how many
        watches were trimmed or frozen.

        With ``freeze_after_s`` (and ``now``), those also idle for that long are held as
        bytes (``AgentWatch.freeze``, ``DriftMonitor.pack``) until their next record or
        any other use: about 1 KB an agent, where a trimmed watch keeps a few KB.
        Nothing they do changes; their next record pays the unpacking (tens of µs)."""
        tick = self.next_tick()
        since, self._compacted_at = self._compacted_at, tick
        if now is not None:
            self._marks.append((now, tick))
        frozen = -1
        if freeze_after_s is not None and now is not None:
            cutoff = self._cutoff(freeze_after_s, now)
            frozen = -1 if cutoff is None else min(cutoff, since)
        n = 0
        for watch in self._agents.values():
            if watch.seen <= since and not watch.evidence and not watch.frozen:
                # The decoder's memo: a speed-up for active agents, kept in brief in the
                # bytes of a frozen one (AgentWatch.freeze).
                memo, watch.state_memo = watch.state_memo, None
                if watch.seen > frozen:
                    n += watch.compact()
                    continue
                # The last state's encoding kept for the bytes (freeze_bytes): encoding
                # the set again cost more than the rest of freezing a shared-index agent.
                trimmed = watch.compact(keep_last=True)
                if watch.freeze(memo):
                    self.drift.pack(watch.agent_id)
                    trimmed = True
                else:
                    trimmed = watch.compact() or trimmed
                n += trimmed
        return n

    def in_partitions(self, partitions: set[int]) -> list[AgentWatch]:
        return [a for a in self._agents.values() if a.partition in partitions]

    def drop(self, agent_ids: list[str]) -> None:
        for agent_id in agent_ids:
            watch = self._agents.pop(agent_id, None)
            if watch is not None and watch.awaiting is not None:
                self._parked[agent_id] = watch.awaiting
                self._parked_kinds[agent_id] = watch.queued_kinds
                awaited = {name: counts for name, (counts, waits)
                           in (watch.drift_tested or {}).items() if waits}
                if awaited:
                    self._parked_drift[agent_id] = awaited
                # Its partition may have moved away (a rebalance), and the work be ended by
                # another replica's worker, which tells this one nothing: released like a
                # hint once the work leaves the queue, or it stays awaited here forever.
                self._hinted.add(agent_id)
            if watch is not None and watch.backoff:
                # Evicted or moved away: a reload must not assess held-back evidence again.
                tested = watch.drift_tested
                self._backoff[agent_id] = (watch.version.ref, dict(watch.backoff),
                                           dict(tested) if tested else None)
                self._bound(self._backoff, lambda e: max(u for u, _ in e[1].values()))

    # ------------------------------------------------------------------ awaited work

    def park(self, agent_id: str, key: str, kinds: tuple[str, ...] = (),
             drift: dict[str, tuple[int, ...]] | None = None) -> None:
        """Work ``key``, assessing evidence of ``kinds`` and the drift of ``drift``'s
        actions (:func:`drift_counts`), is queued for ``agent_id`` (found in the store at
        start, or at an assignment)."""
        watch = self._agents.get(agent_id)
        if watch is not None:
            watch.await_work(key, kinds, drift)
        else:
            self._parked[agent_id] = key
            self._parked_kinds[agent_id] = frozenset(kinds)
            if drift:
                self._parked_drift[agent_id] = drift
            else:  # an earlier parked work's drift is not this one's
                self._parked_drift.pop(agent_id, None)

    def park_queued(self, queue: WorkQueue) -> None:
        """Partitions moved here: park the agent of every pending or claimed work item
        that is neither loaded nor parked, because the partitions' previous owner may have
        queued it before it died or gave them up; awaited, it is not queued a second time
        when the evidence is replayed here. Which agent is in which partition is known only
        from its records, so agents of other replicas' partitions are parked too, as
        hints: :meth:`unpark_ended` releases a hint once its work left the queue."""
        for item in queue.live_queue_items():
            if item.agent_id not in self._agents and item.agent_id not in self._parked:
                kinds = item.payload.get("evidence_kinds") or ()
                self.park(item.agent_id, item.key, tuple(str(k) for k in kinds),
                          drift_counts(item.payload))
                self._hinted.add(item.agent_id)

    def unpark_ended(self, live: Collection[str],
                     read: Callable[[list[str]], Mapping[str, PendingAssessment]] | None = None,
                     store_now: Callable[[], datetime] | None = None) -> None:
        """Release the hints (:meth:`park_queued`, :meth:`drop`) whose work is no longer
        among the ``live`` keys: done by some replica. Loaded later, the agent's watch
        reads the outcome from the store (a version); with ``read`` (the queue's items by
        key: ``WorkQueue.queue_items_by_key``, one call for every hint released) it also
        backs off what a work that ended without one assessed, as a watch that awaited it
        would (:meth:`hold_ended`): without, the agent's next holder queued the same
        evidence again, asking it the same questions. The wait counts from the work's
        ``ended_at``, with ``store_now`` (what time it is on the store's clock, read once
        and only when some work ended): before session 22 from now, when this replica
        noticed, a poll or a whole outage of the store later than the end, so the
        back-off lasted longer here than on the replica that ran the work."""
        ended = {agent_id: key for agent_id in self._hinted
                 if (key := self._parked.get(agent_id)) is None or key not in live}
        if not ended:
            return
        items = read([k for k in ended.values() if k is not None]) if read is not None else {}
        # The store's clock read before any hint is released: a store failing between
        # the two reads then leaves every hint for the next poll (rev22b: released first,
        # an agent lost its back-off and its next holder queued the same evidence again).
        now: datetime | None = None
        if store_now is not None:
            for key in ended.values():
                item = items.get(key) if key is not None else None
                if item is not None and item.status in ("done", "failed") \
                        and item.ended_at is not None:
                    now = store_now()
                    break
        for agent_id, key in ended.items():
            self.unpark(agent_id)
            item = items.get(key) if key is not None else None
            if item is not None and item.status in ("done", "failed"):
                self.hold_ended(item, ended_ago(item, now))

    def unpark_settled(self, agent_id: str, key: str) -> None:
        """The parked work ``key`` of ``agent_id``, not loaded, ended without a version
        (this replica's worker said so): released at the next :meth:`unpark_ended`, which
        reads what it assessed from the store, as for a hint."""
        if self._parked.get(agent_id) == key:
            self._hinted.add(agent_id)

    def hold_back(self, agent_id: str, base: ModelRef, kinds: tuple[str, ...],
                  ago_s: float) -> None:
        """An assessment of ``agent_id``'s evidence against ``base`` ended unexplained
        ``ago_s`` seconds ago (found in the store at start): no loop across a restart."""
        self._keep_held(agent_id, (base, kinds, None, self.clock() - ago_s, True, ""))

    def hold_ended(self, item: PendingAssessment, ago_s: float = 0.0) -> None:
        """The work ``item`` left the queue ``ago_s`` seconds ago, done (with or without a
        version) or failed: its agent's watch, loaded against the model it assessed (so
        not after a version it stored), backs off its evidence kinds and its drift with
        the counts it was handed, the first wait only if the agent was not reached."""
        held = _ended_hold(item, self.clock() - ago_s)
        if held is not None:
            self._keep_held(item.agent_id, held)

    def _keep_held(self, agent_id: str, held: Held) -> None:
        key = held[5]
        watch = self._agents.get(agent_id)
        if watch is not None:
            if not key or self._held_applied.get(agent_id) != key:
                self._hold(watch, (held,))
            return
        entries = self._held.setdefault(agent_id, [])
        if key and any(e[5] == key for e in entries):
            return  # seen ending twice (released here, and read with a snapshot)
        entries.append(held)
        entries.sort(key=lambda h: h[3])  # oldest end first: a later one doubles the wait
        del entries[:-8]  # the wait is at its longest after a few doublings
        horizon = self.settings.unexplained_max_backoff_s
        self._bound(self._held, lambda e: e[-1][3] + horizon)

    def _hold(self, watch: AgentWatch, held: Iterable[Held]) -> None:
        """Back off ``held`` in a watch just loaded (or held already), from their ends."""
        now = self.clock()
        for base, kinds, drift, ended, learnt, key in held:
            if base != watch.version.ref:
                continue  # a version since: what it contradicted is moot
            if key:
                if len(self._held_applied) >= self.held_limit:
                    self._held_applied.clear()
                self._held_applied[watch.agent_id] = key
            if kinds:
                watch.back_off(kinds, now - ended, doubling=learnt)
            if drift:
                tested = watch.drift_tested
                if tested is not None:  # the work's counts, no longer awaited
                    for name in drift.keys() & tested.keys():
                        del tested[name]
                watch.keep_drift_tested({name: (counts, False)
                                         for name, counts in drift.items()})
                watch.back_off([drift_kind(name) for name in drift], now - ended,
                               doubling=learnt)

    def _bound(self, entries: dict[str, _T], until: Callable[[_T], float]) -> None:
        """Keep ``entries`` (agent → a back-off lasting until ``until`` of it) under
        :attr:`held_limit`: past it, drop those that passed, then those ending soonest,
        down to half (amortized: a full pass every half-limit additions at most)."""
        if len(entries) <= self.held_limit:
            return
        now = self.clock()
        for agent_id in [a for a, e in entries.items() if until(e) <= now]:
            del entries[agent_id]
        if len(entries) > self.held_limit:
            keep = sorted(entries, key=lambda a: until(entries[a]))[-max(1, self.held_limit // 2):]
            kept = {a: entries[a] for a in keep}
            entries.clear()
            entries.update(kept)

    def unpark(self, agent_id: str, key: str | None = None) -> None:
        """The parked work of an unloaded agent ended (any work, or only ``key``)."""
        if key is None or self._parked.get(agent_id) == key:
            self._parked.pop(agent_id, None)
            self._parked_kinds.pop(agent_id, None)
            self._parked_drift.pop(agent_id, None)
            self._hinted.discard(agent_id)

    def awaiting(self) -> dict[str, str]:
        """Agent id → key of the work it awaits, loaded or not."""
        out = dict(self._parked)
        out.update((a.agent_id, a.awaiting) for a in self._agents.values()
                   if a.awaiting is not None)
        return out
