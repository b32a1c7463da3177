"""One agent under watch: its model, monitor, drift tables, evidence and debounce.

An :class:`AgentWatch` is owned by the replica that owns the agent's partition and is
touched only by the main loop. Its surface is :meth:`AgentWatch.observe`: a transition
in, a :class:`Finding` out, saying what the transition showed and whether the agent's
evidence is now ripe for an assessment. The pipeline turns a ripe watch into a
:class:`~capwatch.daemon.work.WorkItem` (:meth:`AgentWatch.work_item`), queues it in the
store, and tells the watch (:meth:`AgentWatch.queued`); until the work ends the watch is
*awaiting*: drift alarms and inconsistencies of the kinds the work assesses are counted
only (the new model re-checks what follows), and any other hard inconsistency is buffered
(and alerted at once) but not queued until the work ends; a version it installs keeps
what it still cannot explain (:meth:`AgentWatch.install`).

What must outlive the replica is in the models store (model versions, queued work,
offsets, drift snapshots); what lives here is soft and is rebuilt from the store plus a
replay from the committed offset. The commit rule (never past a buffered transition)
makes that replay rebuild the evidence buffer exactly.

Kept whole, past the size where a module is usually split, because a watch held idle as
bytes (:meth:`AgentWatch.freeze`) must stay one object with one surface: every method
that changes a watch thaws it first, and readers of its state read the bytes; kept
apart, that rule would live in two places.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import msgspec

from capwatch.contracts.versions import ModelVersion
from capwatch.contracts.wire import AgentTransition
from capwatch.contracts.wire_fast import StateMemo
from capwatch.daemon.optimal_runs import OptimalRuns
from capwatch.daemon.watch_freezing import (
    FROZEN_ALARMS,
    FROZEN_BACKOFF,
    FROZEN_EVIDENCE,
    FROZEN_TIMES,
    NO_STATE,
    freeze_bytes,
    frozen_last_state,
    idle_state,
    thaw_bytes,
)
from capwatch.daemon.watch_records import Evidence as Evidence
from capwatch.daemon.watch_records import Finding as Finding
from capwatch.daemon.watch_records import WatchSettings as WatchSettings
from capwatch.daemon.watch_records import evidence_kind as evidence_kind
from capwatch.daemon.watch_records import explained_positions as explained_positions
from capwatch.daemon.watch_records import still_inconsistent
from capwatch.daemon.work import DriftProbe, WorkItem
from capwatch.model.consistency import Verdict, explain
from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.grounding import SharedGrounding
from capwatch.monitor.attribution import attribution_from_mask
from capwatch.monitor.drift import CONFIRM_ALPHA, DriftAlarm, DriftEvidence, DriftMonitor
from capwatch.monitor.stats import homogeneity_p_value
from capwatch.monitor.transition_monitor import TransitionMonitor

# Final, as the constants below: mypyc keeps a Final module name in a C static, where
# another is looked up in the module's dictionary at every read (~130 instructions).
_PLAIN: Final = {v: Finding(v) for v in Verdict}
_TESTED: Final = {v: Finding(v, tested=True) for v in Verdict}
PLAIN_APPLIED: Final = _PLAIN[Verdict.APPLIED]
_PLAIN_APPLIED: Final = PLAIN_APPLIED
TESTED_APPLIED: Final = _TESTED[Verdict.APPLIED]
_TESTED_APPLIED: Final = TESTED_APPLIED
_HELD: Final = {v: Finding(v, held=True) for v in Verdict}
_HELD_DRIFT: Final = Finding(Verdict.APPLIED, tested=True, held=True)
"""The findings with nothing but a verdict (and whether a drift test counted it), made
once: most transitions end in one, and a new object per transition would be measurable
on the hot path. The batch loop tells these two apart by identity."""

# Module constants: reading a member off an enum class costs ~0.15 µs on Python 3.11.
_APPLIED: Final = Verdict.APPLIED
_INCONSISTENT: Final = Verdict.INCONSISTENT

DUPLICATE: Final = Finding(Verdict.APPLIED)
"""The finding of a step the agent already sent (:meth:`AgentWatch.observe`): not
observed again. Told apart by identity."""
_FIELDS: Final = msgspec.structs.astuple
"""An AgentTransition's fields as a tuple, in the order below (checked at import)."""
_FIELD_ORDER = ("agent_id", "family", "episode_id", "step", "time", "state", "action",
                "next_state", "optimal", "executed", "partition", "offset")
if tuple(f.name for f in msgspec.structs.fields(AgentTransition)) != _FIELD_ORDER:
    raise ImportError("AgentTransition's fields moved: AgentWatch.observe reads them by "
                      "position")

STEP_WINDOW: Final = 8
"""How many of an agent's last steps (episode, step, action) a repeat is looked for in: a
producer's retry resends what it sent last (a batch of a few records at most)."""
_KEY_MASK: Final = (1 << 62) - 1


_NO_KINDS: frozenset[str] = frozenset()


def drift_kind(action_name: str) -> str:
    """The back-off's key for drift alarms of action ``action_name`` (an evidence kind has
    seven ``|``-separated parts, :func:`evidence_kind`, so the two never meet)."""
    return action_name + "|drift"


def _assessed(name: str, queued: frozenset[str]) -> bool:
    """Whether evidence of action ``name`` is of an action the queued evidence ``queued``
    is of (a kind starts with its action's name and ``|``, :func:`evidence_kind`; what
    precedes a kind's first ``|`` is so what precedes the name's). Told by the name: a
    drifted agent awaiting work sends such evidence at every record, and its kind's
    text cost ~10x the rest of the check on large states."""
    action = name.partition("|")[0] + "|"
    return any(k.startswith(action) for k in queued)


class AgentWatch:
    """One agent's live state; see the module docstring.

    A replica holds up to ``limits.max_agents_in_memory`` of them, so the fields are
    slots and what most agents never use (optimal runs, the monitor's evidence buffers)
    is made when first needed.
    """

    __slots__ = ("_drift", "_drift_tested", "_evidence_key", "_frozen", "_frozen_shared",
                 "_last_executed", "_last_state", "_monitor", "_optimal", "_queued_kinds",
                 "agent_id", "alarms", "awaiting", "backoff", "clock", "domain",
                 "drift_restored", "evidence", "evidence_since", "explained", "family",
                 "held_back", "inconsistent", "last_offset", "partition", "restore_tried",
                 "saved_inconsistent", "saved_transitions", "seen", "settings", "state_memo",
                 "steps", "transitions", "version")

    def __init__(self, agent_id: str, family: str, partition: int, version: ModelVersion,
                 drift: DriftMonitor, settings: WatchSettings | None = None,
                 clock: Callable[[], float] = time.monotonic, *,
                 domain: Domain | None = None, shared: SharedGrounding | None = None) -> None:
        self.agent_id = agent_id
        self.family = family
        self.partition = partition
        self.settings = settings or WatchSettings()
        self.clock = clock
        """Monotonic seconds (debounce, back-off, canary idleness); a test's own clock."""
        self.version = version
        # ``domain``: the version's model parsed once and shared (a family baseline's
        # agents all run one Domain object).
        self.domain: Domain = domain if domain is not None else version.domain()
        self._monitor: TransitionMonitor | None = TransitionMonitor(
            self.domain, self.settings.monitor, shared)
        self._frozen: bytes | None = None
        """An idle watch's monitor, timers and last state as bytes (:meth:`freeze`);
        ``_monitor`` is None meanwhile."""
        self._frozen_shared: SharedGrounding | None = None
        """The family grounding a frozen watch's monitor shares."""
        self._drift = drift
        """The replica's drift tables (shared: the audit controls FDR across agents);
        this watch reads and writes only its own agent's."""
        self.evidence: list[Evidence] = []
        self.evidence_since: float | None = None
        """Monotonic time the oldest buffered inconsistency arrived (debounce clock)."""
        self._evidence_key: str | None = None
        """The work key of the buffered evidence, fixed at its first inconsistency from a
        record (:meth:`work_key`): a newer version installed under evidence it still
        contradicts, or evidence it explains dropped, leaves the key its prompt alert
        went out under."""
        self.alarms: dict[str, DriftAlarm] = {}
        self.awaiting: str | None = None
        """Key of the queued work; set until a new version (or the work's end) arrives."""
        self.transitions = 0
        self.inconsistent = 0
        self.saved_transitions = 0
        self.saved_inconsistent = 0
        """``transitions`` and ``inconsistent`` as last added to the store's activity."""
        self.seen = 0
        """When the registry last handed this watch out (its own counter, not a clock)."""
        self.last_offset = -1
        self._last_state: frozenset[GroundAtom] | tuple[GroundAtom, ...] = NO_STATE
        """The last next-state; an idle watch's as a tuple (:meth:`compact`)."""
        self.state_memo: StateMemo | None = None
        """The decoder's memo of the agent's last next-state (contracts.wire_fast): the
        next record's state, when it repeats it, is neither decoded nor encoded again."""
        self._last_executed: dict[str, float] = {}
        """Action name → monotonic time it was last seen executing (canaries probe the rest)."""
        self.restore_tried = False
        """Whether the drift tables saved for the agent were looked for (at its first
        record: ``Checkpointer.restore``)."""
        self.drift_restored: tuple[int, int] | None = None
        """(partition, next offset) of the drift snapshot this agent's tables were restored
        from: its records before that offset are already counted, and a replay skips them."""
        self.explained = explained_positions(version)
        """Partition → the last record offset the version's own evidence came from."""
        self.backoff: dict[str, tuple[float, int]] = {}
        """Evidence kind → (monotonic time until which it is not assessed again, how many
        assessments it already ended without an explanation)."""
        self.held_back = 0
        """Inconsistencies not buffered because an assessment already failed on their kind."""
        self._queued_kinds = _NO_KINDS
        self._drift_tested: dict[str, tuple[tuple[int, ...], bool]] | None = None
        """Action -> (the outcome counts of its last drift alarm queued for assessment,
        whether that work is still awaited); what a drift alarm within its back-off is
        compared with (:meth:`_drift_held`). Made at the first such alarm."""
        self._optimal: OptimalRuns | None = None
        """Runs of steps the agent marked optimal (made at its first such step)."""
        self.steps: list[int] | None = None
        """Hashes of the agent's last steps that named their episode and step (made at
        the first), to tell a producer's retry (:meth:`observe`), which looks in the
        last :data:`STEP_WINDOW` of them (up to twice as many are held); dropped when the
        watch is frozen (idle) or evicted."""

    # ------------------------------------------------------------------ the surface

    def observe(self, t: AgentTransition, flipped: Collection[GroundAtom] | None = None,
                came: tuple[frozenset[GroundAtom], Collection[GroundAtom]] | None = None
                ) -> Finding:
        """Check ``t`` against the model and keep what it shows; ``flipped``: the atoms
        the decoder made its next state from its state by, ``came``: the set it made the
        state from and the atoms it made it by (``TransitionMonitor.observe``).

        Raises ModelError (unknown vocabulary) before anything changes, so a refused
        record leaves the watch as it was.
        """
        # The fields read once, in one C call: each attribute of a msgspec Struct read
        # from compiled code is a generic lookup (PyObject_GetAttr), and this method read
        # some ten of them a record (~2,000 instructions; callgrind, planned fleet).
        fields = _FIELDS(t)
        episode: str | None = fields[2]
        step: int | None = fields[3]
        ground: GroundAction = fields[6]
        next_state: frozenset[GroundAtom] = fields[7]
        offset: int = fields[11]
        # A step sent again (same episode, step and action: a producer's retry) is not
        # counted again: counted twice, it would bias the drift statistics and buffer
        # its evidence twice. Only a record that names its episode and step is checked.
        # The key alone does not make a retry: a message reusing a sent step's key with
        # other content (bad vocabulary, a hard inconsistency where the first send was
        # consistent) is judged like any step, so the check runs first; only a repeat
        # the model does not contradict, or an inconsistency already buffered as it is,
        # is skipped.
        key = 0
        keyed = False
        repeat = False
        if step is not None and episode is not None:
            # 62 bits: a short int compiled, compared in place below, where ``key in
            # steps`` compared boxed ints through the generic protocol (~900 instructions a
            # record of a full window; callgrind, outside fleet).
            key = hash((episode, step, ground)) & _KEY_MASK
            keyed = True
            steps = self.steps
            if steps is not None:
                # The window is the list's last STEP_WINDOW keys (see below).
                n = len(steps)
                i = n - STEP_WINDOW if n > STEP_WINDOW else 0
                while i < n:
                    if steps[i] == key:
                        repeat = True
                        break
                    i += 1
        monitor = self._monitor
        if monitor is None:
            monitor = self.thaw()
        # The observation's fields as a plain tuple (TransitionMonitor.step): verdict,
        # action, outcomes, position, state's mask, operator.
        obs = monitor.step(fields[5], ground, next_state, offset, flipped, fields[9], came)
        verdict = obs[0]
        if repeat and (verdict is not _INCONSISTENT or self._buffered(t)):
            return DUPLICATE
        if keyed and not repeat:
            # Noted once the monitor took it: a refused record (ModelError) is not a step.
            steps = self.steps
            if steps is None:
                self.steps = [key]
            else:
                steps.append(key)
                # Trimmed a window at a time, not a key a record (a deletion at the front
                # moves the list: ~300 instructions, a slice's object and a generic call).
                if len(steps) >= 2 * STEP_WINDOW:
                    del steps[:STEP_WINDOW]
        self.transitions += 1
        self.last_offset = offset
        self._last_state = next_state
        if verdict is _APPLIED:
            self._last_executed[ground[0]] = self.clock()
            if fields[8]:
                optimal = self._optimal
                if optimal is None:
                    optimal = self._optimal = OptimalRuns()
                optimal.note(t)
            op = obs[5]
            if len(op.effects) < 2:
                return _PLAIN_APPLIED  # one outcome: no drift table counts it
            restored = self.drift_restored
            # A replayed record the restored tables already counted is not counted again.
            if restored is not None and fields[10] == restored[0] and offset < restored[1]:
                return _PLAIN_APPLIED
            if self.explained and self._settled(t):
                return _PLAIN_APPLIED  # the version's tables start after its evidence
            # observation_attribution, without its checks: applied, two outcomes.
            attribution = attribution_from_mask(op, obs[4], obs[2])
            if attribution is None:
                return _PLAIN_APPLIED
            action = op.action
            # An alarm while work is awaited would be ignored: none is made.
            alarm = self._drift.observe(self.agent_id, action, attribution,
                                        self.awaiting is None)
            # An action of two outcomes or more: its table runs the sequential detector
            # (ActionMonitor), so the transition counted as drift-tested.
            if alarm is None or self.awaiting is not None:
                return _TESTED_APPLIED
            if self.backoff and self._drift_held(action.name, alarm.evidence):
                return _HELD_DRIFT  # counted and said by the batch (daemon.holds)
            self.alarms[action.name] = alarm
            return Finding(verdict, alarm, ripe=True, tested=True)
        if verdict is not _INCONSISTENT:
            return _PLAIN[verdict]
        self.inconsistent += 1
        if self._settled(t):
            return _PLAIN[verdict]
        # While work is awaited, an inconsistency of an action whose inconsistencies it
        # already assesses is what that work is about (the new model re-checks what
        # follows): one drift of an action shows as several kinds, as its transitions
        # contradict different pa-tuples, and which of them arrive before the work ends
        # is a matter of timing, which must not decide what is alerted. A hard
        # inconsistency of any other action is buffered, and so alerted at once, as an
        # on-call engineer expects whatever else is pending (ripe() keeps it unqueued
        # until the work ends, and the buffer holds the commit meanwhile).
        if self.awaiting is not None and self._queued_kinds \
                and _assessed(ground[0], self._queued_kinds):
            return _PLAIN[verdict]
        evidence = Evidence(t, monitor.last_inconsistency().explanation)
        if not self._buffer(evidence):
            return _HELD[verdict]
        return Finding(verdict, ripe=self.ripe())

    def _buffered(self, t: AgentTransition) -> bool:
        """Whether the evidence buffer holds ``t``'s step with the same content (a retry
        of an inconsistency, not another transition under its key)."""
        for e in self.evidence:
            o = e.transition
            if o.step == t.step and o.episode_id == t.episode_id and o.action == t.action \
                    and o.state == t.state and o.next_state == t.next_state:
                return True
        return False

    def _settled(self, t: AgentTransition) -> bool:
        """Whether ``t`` is at or before the last evidence of the version in use.

        Such a record was first read while an earlier version was in force, and that
        version's assessment has already judged it (a replay after a crash, restart or
        rebalance). Judged again against the new version, the agent's behaviour from
        before its drift would look like a new drift and start an assessment from
        evidence a stored version explains.
        """
        explained = self.explained.get(t.partition) if self.explained else None
        return explained is not None and 0 <= t.offset <= explained

    # ------------------------------------------------------------------ held idle, as bytes

    @property
    def monitor(self) -> TransitionMonitor:
        """The agent's consistency monitor (a frozen watch thaws for it)."""
        monitor = self._monitor
        return monitor if monitor is not None else self.thaw()

    @property
    def frozen(self) -> bool:
        """Whether the watch is held as bytes (:meth:`freeze`)."""
        return self._frozen is not None

    @property
    def last_state(self) -> frozenset[GroundAtom]:
        """The agent's last next-state (canaries start probes there); read from the bytes
        of a frozen watch without thawing it."""
        if self._frozen is None:
            last = self._last_state
            return last if type(last) is frozenset else frozenset(last)
        return frozen_last_state(self._idle_state(), self._frozen_shared)

    @last_state.setter
    def last_state(self, state: frozenset[GroundAtom]) -> None:
        self.thaw()
        self._last_state = state

    @property
    def last_executed(self) -> Mapping[str, float]:
        """Action name → monotonic time it was last seen executing (canaries probe the
        rest); a frozen watch's, read-only, without thawing it."""
        if self._frozen is None:
            return self._last_executed
        return MappingProxyType(dict(self._idle_state()[1]))

    @last_executed.setter
    def last_executed(self, times: dict[str, float]) -> None:
        self.thaw()
        self._last_executed = times

    def compact(self, keep_last: bool = False) -> bool:
        """Keep only what an idle watch still needs (``TransitionMonitor.compact``), its
        last state as a tuple: a set of 60 atoms costs 4 KB, a tuple 0.5 KB, and it is
        read again only by a canary (as a set made anew) or replaced by the next record.
        True if anything was dropped. ``keep_last``: the last state as it is, for a
        caller freezing the watch next (:meth:`freeze` holds it as the monitor's mask)."""
        monitor = self.monitor
        last = self._last_state
        if keep_last or type(last) is not frozenset or not last:
            return monitor.compact(keep_last)
        held = tuple(last)
        # The monitor's encoding of the set kept for the tuple (freeze_bytes uses it).
        monitor.compact(held=(last, held))
        self._last_state = held
        return True

    def freeze(self, memo: StateMemo | None = None) -> bool:
        """Hold an idle watch's monitor (its counts and the executions kept), its
        execution times and its last state as one bytes object until its next record or
        any use of them (:meth:`thaw`): an idle agent held in memory then costs a few
        hundred bytes instead of a dozen small objects and big integers (an index of the
        agent's own, as its atoms). Only a watch holding nothing for an assessment (no
        evidence, alarm, awaited work or optimal run) is frozen; True if it was.
        The drift tables are packed by their owner (``DriftMonitor.pack``). ``memo``:
        the decoder's memo the caller took off the watch (``freeze_bytes``)."""
        monitor = self._monitor
        if monitor is None or self.awaiting is not None or self.evidence or self.alarms \
                or (self._optimal is not None and self._optimal.holding) \
                or self.state_memo is not None or monitor.domain is not self.domain \
                or monitor.limits is not self.settings.monitor:
            return False
        packed = freeze_bytes(monitor, self._last_state, self._last_executed, memo)
        if packed is None:
            return False
        self._frozen, self._frozen_shared = packed
        self._monitor = None
        self.steps = None  # an idle agent's retries are long over
        self._last_executed = FROZEN_TIMES
        self._last_state = NO_STATE
        # Empty containers are shared, read-only, while frozen: every method that writes
        # them thaws the watch first.
        self.evidence = FROZEN_EVIDENCE
        self.alarms = FROZEN_ALARMS
        if not self.backoff:
            self.backoff = FROZEN_BACKOFF
        return True

    def _idle_state(self) -> tuple[Any, ...]:
        assert self._frozen is not None
        return idle_state(self._frozen)

    def thaw(self) -> TransitionMonitor:
        """Rebuild what :meth:`freeze` held as bytes, exactly as it was; the monitor."""
        if self._frozen is None:
            assert self._monitor is not None
            return self._monitor
        monitor, times, last_state, memo = thaw_bytes(
            self._frozen, self.domain, self.settings.monitor, self._frozen_shared)
        if self.state_memo is None:
            self.state_memo = memo
        self._monitor = monitor
        self._last_executed = dict(times)
        self._last_state = last_state
        self._frozen = None
        self._frozen_shared = None
        self.evidence = []
        self.alarms = {}
        if self.backoff is FROZEN_BACKOFF:
            self.backoff = {}
        return monitor

    def take_optimal_runs(self) -> list[tuple[AgentTransition, ...]]:
        """The agent's optimal runs not handed out yet (``OptimalRuns.take``)."""
        return [] if self._optimal is None else self._optimal.take()

    # ------------------------------------------------------------------ evidence from elsewhere

    def add_canary_finding(self, t: AgentTransition) -> bool:
        """Evidence from a canary probe (no record, offset -1); True if taken."""
        if self.awaiting is not None:
            return False
        self.thaw()
        return self._buffer(Evidence(t, explain(self.domain, t.action, t.state,
                                                 t.next_state, t.executed)))

    def add_audit_alarm(self, evidence: DriftEvidence, action_name: str) -> DriftAlarm | None:
        """A drift the fleet-wide audit found; None (ignored) while work is awaited."""
        if self.awaiting is not None:
            return None
        if self.backoff and self._drift_held(action_name, evidence):
            return None
        self.thaw()
        mon = self._drift.monitor(self.agent_id, self.domain.action(action_name))
        alarm = DriftAlarm(evidence, mon.updated_action(evidence.estimate))
        self.alarms[action_name] = alarm
        return alarm

    def _drift_held(self, name: str, evidence: DriftEvidence) -> bool:
        """Whether a drift alarm of action ``name`` over ``evidence`` is held back: an
        assessment of the action's drift ended without confirming it (no change found,
        failed) less than its back-off ago (:meth:`settle`), and these counts are not
        told apart from the ones that assessment was handed (Pearson's test of one
        distribution, at the level a confirmation uses). Counts that differ are a drift
        of its own: assessed at once, and backed off afresh should it end unconfirmed
        too. Without the tested counts (the watch was evicted and read back) the alarm
        is held until the back-off passes. Read while frozen: no thaw."""
        key = drift_kind(name)
        held = self.backoff.get(key)
        if held is None or self.clock() >= held[0]:
            return False
        tested = self._drift_tested.get(name) if self._drift_tested is not None else None
        if tested is not None and homogeneity_p_value(
                tested[0], evidence.estimate.counts) < CONFIRM_ALPHA:
            del self.backoff[key]
            return False
        self.held_back += 1
        return True

    def _buffer(self, evidence: Evidence) -> bool:
        """Keep evidence for the next assessment; False if its kind is backed off (an
        assessment of the same evidence already ended unexplained: no loop)."""
        held = self.backoff.get(evidence.kind)
        if held is not None and self.clock() < held[0]:
            self.held_back += 1
            return False
        if len(self.evidence) < self.settings.max_evidence:
            self.evidence.append(evidence)
        if self._evidence_key is None and evidence.offset >= 0:
            self._evidence_key = self._key_at(evidence.offset)
        if self.evidence_since is None:
            self.evidence_since = self.clock()
        return True

    # ------------------------------------------------------------------ debounce and queueing

    @property
    def buffered(self) -> bool:
        return bool(self.evidence or self.alarms)

    def ripe(self, force: bool = False) -> bool:
        """Whether the buffered evidence should be assessed now."""
        if self.awaiting is not None or not self.buffered:
            return False
        if force or self.alarms or len(self.evidence) >= self.settings.debounce_transitions:
            return True
        return self.evidence_since is not None \
            and self.clock() - self.evidence_since >= self.settings.debounce_s

    def first_buffered_offset(self) -> int | None:
        # Canary findings carry offset -1: they come from no record and hold no commit.
        return min((e.offset for e in self.evidence if e.offset >= 0), default=None)

    def work_key(self) -> str:
        """The key :meth:`work_item` gives the buffered evidence: it names the model
        version in use and the first buffered record, so it is known from the first
        inconsistency on (the prompt alert is written under it)."""
        if self._evidence_key is not None:
            return self._evidence_key
        first = self.first_buffered_offset()
        return self._key_at(first if first is not None else self.last_offset)

    def _key_at(self, since: int) -> str:
        return f"{self.family}/{self.agent_id}@{self.version.ref}#{since}"

    def parent_work_key(self) -> str | None:
        """The work key the buffered evidence had under the version's parent, if it was
        first buffered then and kept when this version was installed (:meth:`install`):
        a replay after a restart or a rebalance buffers it again under this version, and
        its prompt alert went out under that key. None: no parent, or no evidence from a
        record buffered."""
        parent = self.version.parent
        first = self.first_buffered_offset()
        if parent is None or first is None:
            return None
        return f"{self.family}/{self.agent_id}@{parent}#{first}"

    def resume_work_key(self, key: str) -> None:
        """The buffered evidence is the one announced under ``key`` (:meth:`parent_work_key`
        found its alert open): keep that key, so that its alert is neither written again
        under another key nor left without an ending."""
        self._evidence_key = key

    def work_item(self) -> WorkItem:
        """The buffered evidence as queued work (the buffer is kept until :meth:`queued`)."""
        first = self.first_buffered_offset()
        key = self.work_key()
        provisional = self.domain
        drift = {}
        probes = {}
        for name, alarm in self.alarms.items():
            provisional = provisional.replace_action(alarm.updated_action)
            drift[name] = alarm.evidence.to_dict()
            last = self.monitor.last_executed(name)
            if last is not None:
                # A state the action ran in is a state to ask it to run in again.
                probes[name] = DriftProbe(last[1], last[0])
        return WorkItem(
            key=key, agent_id=self.agent_id, family=self.family, partition=self.partition,
            base=self.version.ref, inconsistent=tuple(e.transition for e in self.evidence),
            executed=self._executed_evidence(first), drift=drift,
            provisional=provisional if drift else None, probes=probes,
            kinds=tuple(sorted({e.kind for e in self.evidence})))

    def _executed_evidence(self, first: int | None) -> tuple[AgentTransition, ...]:
        """Executed transitions of the records after the first buffered inconsistency's.

        Older ones may predate the drift: they show the old behaviour, and handing them to
        the assessment would contradict what the agent does now. The inconsistency's own
        record is left out too: a trace message is one record, all its steps at one offset,
        and the steps it took before the inconsistent one may predate the drift (a drift
        that began mid-trace failed closed on them). Its steps after it are lost with them;
        its inconsistent ones are in the work's own evidence.
        """
        keep = self.settings.max_executed_evidence
        if not keep or first is None:
            return ()
        return tuple(AgentTransition(self.agent_id, self.family, None, None, None, s, a, s2,
                                     False)
                     for s, a, s2 in self.monitor.executed_since(first + 1, keep))

    def queued(self, key: str, *, awaiting: bool = True) -> None:
        """The work item ``key`` is in the store: its evidence is durable, wait for it.
        ``awaiting`` False: the same work was queued and finished before (a replay after a
        crash), so there is nothing to wait for."""
        self.thaw()
        self.awaiting = key if awaiting else None
        self._queued_kinds = frozenset(e.kind for e in self.evidence) or _NO_KINDS
        tested = self._drift_tested
        if tested is not None:  # a work that ended unsettled (adopt) awaits no more
            for name, (counts, _) in list(tested.items()):
                tested[name] = (counts, False)
        if self.alarms:
            if tested is None:
                tested = self._drift_tested = {}
            for name, alarm in self.alarms.items():
                tested[name] = (alarm.evidence.estimate.counts, awaiting)
        self.evidence.clear()
        self.evidence_since = None
        self._evidence_key = None
        self.alarms.clear()

    @property
    def drift_tested(self) -> dict[str, tuple[tuple[int, ...], bool]] | None:
        """What :meth:`_drift_held` compares an alarm with (kept by the registry across an
        eviction, with :attr:`backoff`)."""
        return self._drift_tested

    def keep_drift_tested(self, tested: Mapping[str, tuple[tuple[int, ...], bool]]) -> None:
        """:attr:`drift_tested` of this agent's watch before it was evicted (same version)."""
        mine = self._drift_tested
        if mine is None:
            mine = self._drift_tested = {}
        for name, entry in tested.items():
            mine.setdefault(name, entry)

    @property
    def queued_kinds(self) -> frozenset[str]:
        """The evidence kinds of the awaited work (what it assesses)."""
        return self._queued_kinds

    def await_work(self, key: str, kinds: Collection[str] = (),
                   drift: Mapping[str, Sequence[int]] | None = None) -> None:
        """Work ``key``, queued before this watch was loaded (a restart, a partition moved
        back, a reload), assesses evidence of ``kinds`` and the drift of ``drift``'s
        actions (action -> the outcome counts it was handed): await it as if this watch
        had queued it, so such evidence is not buffered and alerted again meanwhile and
        is backed off should the work end unexplained. Without the counts the end of a
        drift's work backed nothing off, and the next alarm asked the same questions."""
        self.awaiting = key
        self._queued_kinds = frozenset(kinds) or _NO_KINDS
        tested = self._drift_tested
        if tested is not None:  # an earlier work's drift is not this one's (as queued())
            for name, (was, _) in list(tested.items()):
                tested[name] = (was, False)
        if drift:
            if tested is None:
                tested = self._drift_tested = {}
            for name, counts in drift.items():
                tested[name] = (tuple(counts), True)

    # ------------------------------------------------------------------ results

    def adopt(self, version: ModelVersion, domain: Domain | None = None,
              shared: SharedGrounding | None = None) -> None:
        """A version stored for this agent (by any replica): use it unless it is older than
        the one in use; either way the awaited work is over. ``domain``: the version's
        model, when the caller has it parsed already."""
        if version.ref.version >= self.version.ref.version \
                or version.agent_id != self.version.agent_id:
            self.install(version, domain, shared)
        else:
            self.awaiting = None

    def install(self, version: ModelVersion, domain: Domain | None = None,
                shared: SharedGrounding | None = None) -> None:
        """Switch to a new model version. Buffered evidence the new model explains is
        moot and dropped; what it still contradicts (a hard inconsistency seen while the
        version's assessment ran, on another action) stays buffered, explained against
        the new model, under the same work key: it is queued against the new version,
        and the alert that announced it is neither ended nor written again."""
        self.thaw()
        self.version = version
        self.domain = domain if domain is not None else version.domain()
        self.explained = explained_positions(version)
        self.monitor.replace_model(self.domain, shared)
        kept = still_inconsistent(self.domain, self.evidence) if self.evidence else []
        self.evidence.clear()
        self.evidence.extend(kept)
        if not kept:
            self.evidence_since = None
            self._evidence_key = None
        self.alarms.clear()
        self.awaiting = None
        self.backoff.clear()  # kinds are relative to the model they contradicted
        self._drift_tested = None
        self._queued_kinds = _NO_KINDS
        self._drift.forget(self.agent_id)

    def settle(self, key: str, learnt: bool = True) -> None:
        """The work ``key`` ended without a new version, so its evidence is still
        unexplained: the same kinds of evidence are backed off (doubling each time), new
        kinds may queue again at once: evidence buffered while the work was awaited (of
        other kinds, :meth:`observe`) is queued when ripe. So are its drift alarms, per
        action (:meth:`_drift_held`): the next audit's, or the stream's, alarm over the
        same behaviour would otherwise queue the same questions again.

        ``learnt`` False: the work failed because the agent could not be reached, so it
        learnt nothing about the behaviour; the wait is the first one, not doubled
        (:meth:`back_off`): doubled by an outage, the back-off held a real drift or
        inconsistency for hours after the agent was back."""
        if self.awaiting == key:
            self.awaiting = None
            self._drift.forget(self.agent_id)
            self.back_off(self._queued_kinds, doubling=learnt)
            self._queued_kinds = _NO_KINDS
            tested = self._drift_tested
            if tested is not None:
                # The work's drift alarms were not confirmed either: an alarm of the same
                # action over counts like these would ask the agent the same questions.
                drifted = [name for name, (_, awaited) in tested.items() if awaited]
                for name in drifted:
                    tested[name] = (tested[name][0], False)
                self.back_off([drift_kind(name) for name in drifted], doubling=learnt)

    def back_off(self, kinds: Iterable[str], ago_s: float = 0.0,
                 doubling: bool = True) -> None:
        """Evidence of ``kinds`` ended an assessment unexplained ``ago_s`` seconds ago: hold
        it back, doubling the wait each time the same kind does so again. ``doubling``
        False (the agent was not reached): the first wait, and the count of unexplained
        ends stays as it was; a longer hold already running is kept."""
        self.thaw()
        now = self.clock()
        cfg = self.settings
        for kind in kinds:
            until, n = self.backoff.get(kind, (0.0, 0))
            if not doubling:
                first = now + min(cfg.unexplained_max_backoff_s,
                                  cfg.unexplained_backoff_s) - ago_s
                self.backoff[kind] = (max(until, first), n)
                continue
            n += 1
            wait = min(cfg.unexplained_max_backoff_s, cfg.unexplained_backoff_s * 2 ** (n - 1))
            self.backoff[kind] = (now + wait - ago_s, n)
