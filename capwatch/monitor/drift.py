"""Probability drift of one agent's actions: online detection, fleet audits, re-estimation.

Two complementary tests watch every (agent, lifted action) frequency table:

- online, on every consistent transition: the mixture Shiryaev–Roberts detector of
  capwatch.monitor.sequential, whose false-alarm rate per transition is bounded by
  ``false_alarm_rate`` for each stream, whatever the number of streams;
- periodically, across the whole fleet: a windowed Pearson chi-square test per table
  with Benjamini–Hochberg control of the false discovery rate across tables.

Either produces a ``DriftEvidence`` record (chi-square, dof, p, q, TVD with its
confidence interval, counts, expected counts, MLE with per-outcome intervals) and a
re-estimated ``Action`` for the next model version. docs/drift-detection.md explains
why the online detector is sequential rather than a windowed chi-square.

An action's monitor (capwatch.monitor.action_drift) is one state machine (online
detector, confirmation, audit window, persisted state) whose parts share its tables;
this module holds a replica's tables, packs those of idle agents
(:meth:`DriftMonitor.pack`: every reader of the tables sees packed ones too) and runs
the fleet audit. The statistics are in capwatch.monitor.stats and .sequential, the
evidence and alarm records in .drift_evidence (imported here too, where callers have
always found them, as are ActionMonitor and DriftConfig).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from capwatch.model.domain import Action
from capwatch.monitor.action_drift import ActionMonitor as ActionMonitor
from capwatch.monitor.action_drift import DriftConfig as DriftConfig
from capwatch.monitor.attribution import Attribution
from capwatch.monitor.compact_bytes import compress, decompress
from capwatch.monitor.drift_evidence import CONFIRM_ALPHA as CONFIRM_ALPHA
from capwatch.monitor.drift_evidence import Detector as Detector
from capwatch.monitor.drift_evidence import DriftAlarm as DriftAlarm
from capwatch.monitor.drift_evidence import DriftEvidence as DriftEvidence
from capwatch.monitor.drift_evidence import action_fingerprint as action_fingerprint
from capwatch.monitor.drift_evidence import action_identity as action_identity
from capwatch.monitor.drift_evidence import describe_outcome as describe_outcome
from capwatch.monitor.drift_evidence import planned_samples as planned_samples
from capwatch.monitor.drift_evidence import with_probabilities as with_probabilities
from capwatch.monitor.sequential import SequentialDetector, apply_waiting
from capwatch.monitor.sequential import expected_delay_hint as expected_delay_hint
from capwatch.monitor.stats import (
    GofResult,
    benjamini_hochberg,
)

APPLY_TOGETHER: Final = 512
"""Detectors with waiting updates (``SequentialDetector.update``) gathered before they are
applied together (``sequential.apply_waiting``): the more of one table's detectors a
step applies, the fewer numpy calls per update; the references are all it holds."""

SHARED_BLOBS = 1024
"""Packed tables kept by their bytes (:meth:`DriftMonitor.pack`): compressing a typical
agent's tables costs ~10 us, the lookup of tables already seen well under 1 us, and the
bound keeps the map to ~1 MB."""

WALK_PER_TEST: Final = 32
"""A slice of the audit (:meth:`DriftMonitor.audit_step`) visits at most this many tables
per table it may test: a table whose result is kept costs a walk over its counts (~2 us
against a test's ~50-150 us), and a slice over a large idle fleet must stay bounded too."""

SHARED_UP_TO_SEEN = 64
"""Only tables of at most this many executions are looked up and kept by their bytes:
agents alike are those admitted with a few records, and longer tables (kilobytes each,
some tens of MB over :data:`SHARED_BLOBS` with many probabilistic actions) are rarely
alike. As the snapshot's cache of encodings does."""


@dataclass(frozen=True, slots=True)
class AuditFinding:
    agent_id: str
    action: str
    gof: GofResult
    q_value: float
    rejected: bool
    evidence: DriftEvidence | None = None
    """Filled in for rejected tables only."""
    action_name: str = ""
    """The action's name (``action`` is its header, for people)."""


class DriftMonitor:
    """All of one replica's (agent, action) monitors; owned and driven by the daemon.

    An idle agent's tables may be *packed* (:meth:`pack`): held as one bytes object until
    they are needed again, which unpacks them field for field, so they continue exactly
    as if they had never been packed. Everything here sees packed tables as tables: the
    audit tests them, :meth:`agent_states` exports them.
    """

    __slots__ = ("_audited", "_audited_packed", "_blobs", "_by_agent", "_changed", "_evidence",
                 "_monitors", "_packed", "_round", "_waiting", "config")

    def __init__(self, config: DriftConfig | None = None) -> None:
        self.config = config or DriftConfig()
        self._monitors: dict[tuple[str, str], ActionMonitor] = {}
        self._by_agent: dict[str, set[str]] = {}
        """Agent → the action names it has tables for: forgetting or saving one agent
        must not scan every agent's tables (100,000 agents hold several each)."""
        self._changed: set[str] = set()
        self._packed: dict[str, tuple[Any, ...]] = {}
        """Agent → (its tables' bytes, the most executions any of them has seen, the
        actions they count, in the bytes' order): one tuple per idle agent instead of a
        dozen objects and arrays per table."""
        self._blobs: dict[bytes, bytes] = {}
        """Tables' bytes → their packed blob, for the last :data:`SHARED_BLOBS` distinct ones:
        agents whose tables went through the same executions (agents admitted with a
        record or two above all) hold the same bytes, compressed once and held once."""
        self._audited: dict[tuple[str, str], tuple[tuple[float, ...], GofResult]] = {}
        """(agent, action name) → (the probabilities it was tested against, the result) of
        the last :meth:`audit`, for live tables it tested or would have tested; rebuilt by
        every audit, so a table gone is forgotten then."""
        self._audited_packed: dict[str, tuple[tuple[Any, ...], list[tuple[Action, GofResult]]]] = {}
        """Agent → (its packed tuple, its tables' results that were tested) of the last
        :meth:`audit`; an agent unpacked is dropped at once (its blob is no longer held)."""
        self._evidence: dict[tuple[str, str], tuple[Action, tuple[Any, ...] | None,
                                                    DriftEvidence]] = {}
        """(agent, action name) → (the action, the packed tuple that held the table or None
        for a live one, the evidence) of the tables the last :meth:`audit` rejected."""
        self._round: _AuditRound | None = None
        """The audit in slices under way (:meth:`start_audit`), if any."""
        self._waiting: list[SequentialDetector] = []
        """Detectors that began to hold back updates since the last :meth:`apply_waiting`
        (some may have applied them since, or been dropped: applying those is a no-op)."""

    def take_changed(self) -> set[str]:
        """Agents whose tables changed since the last call (observed, reset or forgotten):
        the ones whose saved state is out of date."""
        changed, self._changed = self._changed, set()
        return changed

    def take_changed_of(self, agent_ids: Iterable[str]) -> None:
        """Take ``agent_ids`` out of the changed set (their state was saved)."""
        self._changed.difference_update(agent_ids)

    def changed(self, agent_id: str) -> bool:
        """Whether the agent's tables changed since :meth:`take_changed` last handed it
        out (or :meth:`take_changed_of` took it out): whether its saved state is out of
        date."""
        return agent_id in self._changed

    def mark_changed(self, agent_ids: Iterable[str]) -> None:
        """Put agents back in the changed set (their state could not be saved)."""
        self._changed.update(agent_ids)

    def pack(self, agent_id: str) -> bool:
        """Hold the agent's tables as bytes until they are used again; True if packed.
        Nothing about them changes (nor is marked changed)."""
        names = self._by_agent.get(agent_id)
        if not names:
            return False
        mons = [self._monitors[(agent_id, name)] for name in sorted(names)]
        if any(m.config is not self.config for m in mons):
            return False  # unpacked with this monitor's settings: only its own tables
        raw = b"".join(m.pack() for m in mons)
        seen = max(m.window.seen for m in mons)
        shared = seen <= SHARED_UP_TO_SEEN
        blob = self._blobs.get(raw) if shared else None
        if blob is None:
            # The detector's statistics are mostly incompressible floats; zeros (a CUSUM
            # at rest, small counts) shrink at a fast level's cost (compact_bytes).
            # zstd's fast level: no entropy coding of the literals, which the floats are
            # not worth (the same sizes on tireworld's tables, ~2.4x faster; a frame
            # costs ~50,000 instructions at level 1 for ~700 bytes).
            small = compress(raw, fast=True)
            blob = b"\x01" + small if len(small) < len(raw) else b"\x00" + raw
            if shared:
                blobs = self._blobs
                if len(blobs) >= SHARED_BLOBS:
                    del blobs[next(iter(blobs))]  # the oldest
                blobs[raw] = blob
        for name in names:
            del self._monitors[(agent_id, name)]
        del self._by_agent[agent_id]
        packed = (blob, seen, *(m.action for m in mons))
        self._packed[agent_id] = packed
        results = self._kept_results(agent_id, mons)
        if results is not None:
            self._audited_packed[agent_id] = (packed, results)
        return True

    def _kept_results(self, agent_id: str, mons: list[ActionMonitor]
                      ) -> list[tuple[Action, GofResult]] | None:
        """The results the last :meth:`audit` kept for these tables of the agent, those it
        tested, if it kept a current one for every table it would test now; else None.
        Packing and unpacking move them along (no count changes either way), so an agent
        packed or unpacked between two audits is not tested again for that."""
        least = max(1, self.config.min_samples)
        kept = self._audited
        results = []
        for mon in mons:
            if mon.detector is None:
                continue
            counts = mon.window.tested_counts()
            if sum(counts) < least:
                continue
            entry = kept.get((agent_id, mon.action.name))
            if entry is None or entry[1].counts != counts or entry[0] != mon.probabilities:
                return None
            results.append((mon.action, entry[1]))
        return results

    def packed(self, agent_id: str) -> bool:
        """Whether the agent's tables are packed (:meth:`pack`)."""
        return agent_id in self._packed

    def _unpacked(self, packed: tuple[Any, ...]) -> list[ActionMonitor]:
        blob: bytes = packed[0]
        return thaw_tables(blob, [(action, self.config) for action in packed[2:]])

    def frozen(self, agent_id: str) -> tuple[bytes, list[tuple[Action, DriftConfig]]]:
        """The agent's tables as they are now, as bytes (a flag byte, 1 if the rest is
        compressed, then every table's ``ActionMonitor.pack``, in action name order) and
        each table's action and settings: :func:`thaw_tables` makes the same tables of
        them, field for field, wherever and whenever it runs. A packed agent's blob is
        handed as it is (immutable bytes); a live table's are packed here (a few µs),
        the rest (rebuilding, exporting, encoding, compressing) is left to the caller's
        thread: the scheduled checkpoint takes this on the main loop and encodes the
        snapshot in its writer's thread (docs/performance.md, "Alert latency")."""
        packed = self._packed.get(agent_id)
        if packed is not None:
            return packed[0], [(action, self.config) for action in packed[2:]]
        mons = [self._monitors[(agent_id, name)]
                for name in sorted(self._by_agent.get(agent_id, ()))]
        return (b"\x00" + b"".join(m.pack() for m in mons),
                [(m.action, m.config) for m in mons])

    def _unpack(self, agent_id: str) -> None:
        packed = self._packed.pop(agent_id, None)
        if packed is not None:
            kept = self._audited_packed.pop(agent_id, None)
            names = self._by_agent.setdefault(agent_id, set())
            for mon in self._unpacked(packed):
                self._monitors[(agent_id, mon.action.name)] = mon
                names.add(mon.action.name)
            if kept is not None:
                # The packed tables' results, as the live tables' (see _kept_results).
                for action, gof in kept[1]:
                    key = (agent_id, action.name)
                    self._audited[key] = (self._monitors[key].probabilities, gof)

    def _tables(self, agent_id: str) -> dict[str, ActionMonitor]:
        """Action name → the agent's table; packed ones are unpacked for the caller only."""
        packed = self._packed.get(agent_id)
        if packed is not None:
            return {m.action.name: m for m in self._unpacked(packed)}
        return {name: self._monitors[(agent_id, name)]
                for name in self._by_agent.get(agent_id, ())}

    def tables(self, agent_id: str) -> dict[str, ActionMonitor]:
        """Action name → the agent's table, for reading only (packed ones are unpacked
        for the caller, and stay packed)."""
        return self._tables(agent_id)

    def agent_states(self, agent_id: str, *, values_array: bool = False
                     ) -> dict[str, dict[str, Any]]:
        """Action name → ``ActionMonitor.export_state()`` for one agent."""
        return {name: mon.export_state(values_array=values_array)
                for name, mon in sorted(self._tables(agent_id).items())}

    def load_agent_states(self, agent_id: str, actions: Mapping[str, Action],
                          states: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        """Replace the agent's tables by saved ones, for the agent's current ``actions``.

        Each action is restored or skipped on its own; returns action name → why it was
        skipped (not in the model, another version of it, inconsistent state). Skipped
        actions start afresh, as they would without saved state.
        """
        self.forget(agent_id)
        skipped: dict[str, str] = {}
        for name, state in states.items():
            action = actions.get(name)
            if action is None:
                skipped[name] = "not in the current model"
                continue
            mon = ActionMonitor(action, self.config)
            try:
                mon.load_state(state)
            except (ValueError, KeyError, TypeError) as e:
                skipped[name] = f"{type(e).__name__}: {e}"
                continue
            self.put(agent_id, mon)
        self._changed.discard(agent_id)
        return skipped

    def monitor(self, agent_id: str, action: Action) -> ActionMonitor:
        """The monitor for ``action``; a changed action (new model version) starts afresh."""
        key = (agent_id, action.name)
        mon = self._monitors.get(key)
        if mon is None:
            if agent_id in self._packed:
                self._unpack(agent_id)
                return self.monitor(agent_id, action)
            mon = ActionMonitor(action, self.config)
            self.put(agent_id, mon)
        elif mon.action is not action and mon.action != action:
            mon.reset(action)
            self._changed.add(agent_id)
        return mon

    def observe(self, agent_id: str, action: Action, attribution: Attribution | int,
                wanted: bool = True) -> DriftAlarm | None:
        """Count an execution in the agent's table; ``wanted`` False: no alarm is made,
        the caller would discard it (``ActionMonitor.observe``)."""
        # The agent's table for this very action, as :meth:`monitor` would hand it out,
        # without its call (every execution of a probabilistic action comes here).
        mon = self._monitors.get((agent_id, action.name))
        if mon is None or mon.action is not action:
            mon = self.monitor(agent_id, action)
        alarm = mon.observe(attribution, wanted)
        self._changed.add(agent_id)
        detector = mon.detector
        if detector is not None and len(detector.waiting) == 1:
            waiting = self._waiting
            waiting.append(detector)
            if len(waiting) >= APPLY_TOGETHER:
                self.apply_waiting()
        if alarm is None:
            return None
        return replace(alarm, evidence=replace(alarm.evidence, agent_id=agent_id))

    def apply_waiting(self) -> None:
        """Apply the detectors' waiting updates now, together (they are applied anyway
        before anything reads them: this only saves numpy calls)."""
        apply_waiting(self._waiting)
        self._waiting.clear()

    def put(self, agent_id: str, mon: ActionMonitor) -> None:
        """Make ``mon`` the agent's table for its action."""
        self._unpack(agent_id)
        self._monitors[(agent_id, mon.action.name)] = mon
        self._by_agent.setdefault(agent_id, set()).add(mon.action.name)

    def has(self, agent_id: str) -> bool:
        """Whether the agent has any table."""
        return agent_id in self._by_agent or agent_id in self._packed

    def forget(self, agent_id: str) -> None:
        self._packed.pop(agent_id, None)
        self._audited_packed.pop(agent_id, None)
        for name in self._by_agent.pop(agent_id, ()):
            del self._monitors[(agent_id, name)]
        self._changed.add(agent_id)

    def __iter__(self) -> Iterator[tuple[tuple[str, str], ActionMonitor]]:
        """Every table, packed ones unpacked for the caller only (the live ones first)."""
        yield from list(self._monitors.items())
        for agent_id, packed in list(self._packed.items()):
            for mon in self._unpacked(packed):
                yield (agent_id, mon.action.name), mon

    def __len__(self) -> int:
        return len(self._monitors) + sum(len(p) - 2 for p in self._packed.values())

    def audit(self) -> list[AuditFinding]:
        """Chi-square on every stochastic table with enough data, BH across all of them.

        A table's test is a function of its window's counts, its probabilities and the
        settings alone (``ActionMonitor.test``), and most tables of a large fleet do not
        change between two audits (an idle agent's, a packed one's): each table's result
        is kept from the last audit and reused while those are the same, a packed agent's
        while the same packed tuple holds its tables (they do not change while packed).
        BH then runs over every tested table's p-value, kept or new, as before, so the
        findings are those of testing every table afresh (docs/performance.md, "The drift
        audit on the main loop"). A table with fewer usable executions than the test
        needs is not tested, as ``chi_square_gof`` would decide, without building its
        arrays (most tables of a fleet just admitted).

        The whole audit in one call: :meth:`start_audit` and :meth:`audit_step` do the
        same round in slices.
        """
        round_ = _AuditRound(self)
        while not round_.visit(self, -1):
            pass
        return self._finish(round_)

    def start_audit(self) -> bool:
        """Begin an audit done in slices (:meth:`audit_step`) over the agents held now;
        False (and nothing begun) while one is under way."""
        if self._round is not None:
            return False
        self._round = _AuditRound(self)
        return True

    @property
    def auditing(self) -> bool:
        """Whether an audit begun by :meth:`start_audit` is under way."""
        return self._round is not None

    def audit_step(self, tests: int) -> list[AuditFinding] | None:
        """Visit the round's next agents until ``tests`` tables were tested (unpacked,
        for a packed agent's) or ``tests`` * :data:`WALK_PER_TEST` visited; the findings
        once every agent was visited, else None.

        Each table is judged on its counts when its agent is visited (a table that
        changes later is seen by the next round), BH runs once over every table the
        round tested, and a rejected table's evidence describes the counts it was tested
        on (a copy is kept of a live table that could be rejected). A table whose action
        was replaced (a new model version) or whose agent was forgotten after its visit
        keeps its p-value in the BH, but a rejection has no evidence then (nothing is
        alarmed on a table that no longer exists). Agents admitted during the round are
        in the next one (docs/performance.md, "The audit in slices").
        """
        round_ = self._round
        if round_ is None:
            return None
        if not round_.visit(self, max(1, tests)):
            return None
        self._round = None
        return self._finish(round_)

    def _finish(self, round_: _AuditRound) -> list[AuditFinding]:
        """BH over the round's tested tables, and the rejected ones' evidence."""
        cfg = self.config
        self._audited = round_.audited
        self._audited_packed = round_.audited_packed
        tested = round_.tested
        if not tested:
            self._evidence = {}
            return []
        rejected, q_values = benjamini_hochberg([t[4].p_value for t in tested], cfg.fdr)
        kept_evidence = self._evidence
        evidences: dict[tuple[str, str], tuple[Action, tuple[Any, ...] | None,
                                                DriftEvidence]] = {}
        findings = []
        for (agent_id, action, live, holder, gof), rej, q in zip(tested, rejected, q_values,
                                                                 strict=True):
            evidence = None
            if rej and self._current_action(agent_id, action):
                # A rejected table's evidence (intervals by optimisation: ~1 ms) is a
                # function of its action, its counts, its window's span and ambiguous
                # executions and the settings: kept while all of them are the same, a
                # packed table's while the same packed tuple holds it.
                key = (agent_id, action.name)
                had = kept_evidence.get(key)
                if live is None:
                    if had is not None and had[0] is action and had[1] is holder:
                        found = had[2]
                    else:
                        # The packed tuple the round tested (immutable): its counts then.
                        assert holder is not None
                        found = self._packed_table(holder, action.name).evidence()
                    evidences[key] = (action, holder, found)
                elif live.config is not cfg:
                    found = live.evidence()
                else:
                    source = live
                    window = live.window
                    copy = round_.copies.get(key)
                    if copy is not None and copy[0] != window.seen:
                        # It ran since its visit: its copy then.
                        source, _ = ActionMonitor.unpack(action, cfg, copy[1])
                        window = source.window
                    if (had is not None and had[0] is action and had[1] is None
                            and had[2].gof.counts == gof.counts
                            and had[2].window == window.span()
                            and had[2].ambiguous == window.ambiguous()):
                        found = had[2]
                    else:
                        found = source.evidence()
                    evidences[key] = (action, None, found)
                evidence = replace(found, agent_id=agent_id, q_value=float(q))
            findings.append(AuditFinding(agent_id, action.header(), gof, float(q), bool(rej),
                                         evidence, action.name))
        self._evidence = evidences
        return findings

    def _current_action(self, agent_id: str, action: Action) -> bool:
        """Whether the agent still counts ``action`` (not forgotten, not a new version)."""
        packed = self._packed.get(agent_id)
        if packed is not None:
            return any(a is action or a == action for a in packed[2:])
        mon = self._monitors.get((agent_id, action.name))
        return mon is not None and (mon.action is action or mon.action == action)

    def _packed_table(self, packed: tuple[Any, ...], name: str) -> ActionMonitor:
        for mon in self._unpacked(packed):
            if mon.action.name == name:
                return mon
        raise KeyError(name)


class _AuditRound:
    """One audit's progress over the agents held when it began (:meth:`DriftMonitor.audit`
    in one call, :meth:`DriftMonitor.audit_step` in slices)."""

    def __init__(self, monitor: DriftMonitor) -> None:
        # Every agent is live or packed, never both: each is visited once, as it is then.
        self.agents: list[str] = [*monitor._by_agent, *monitor._packed]
        self.at = 0
        self.audited: dict[tuple[str, str], tuple[tuple[float, ...], GofResult]] = {}
        self.audited_packed: dict[str, tuple[tuple[Any, ...],
                                             list[tuple[Action, GofResult]]]] = {}
        # (agent, action, its live table or None, its packed tuple or None, the result)
        self.tested: list[tuple[str, Action, ActionMonitor | None, tuple[Any, ...] | None,
                                GofResult]] = []
        self.copies: dict[tuple[str, str], tuple[int, bytes]] = {}
        """A live table's executions seen and bytes when it was tested with a p-value BH
        could reject (at most the FDR level), for its evidence if it runs on before the
        round ends."""
        self.sliced = False

    def visit(self, monitor: DriftMonitor, tests: int) -> bool:
        """Visit agents until ``tests`` tables were tested (all of them if negative);
        True once every agent was visited."""
        cfg = monitor.config
        enough = cfg.min_samples
        least = max(1, enough)
        fdr = cfg.fdr
        kept_live = monitor._audited
        kept_packed = monitor._audited_packed
        monitors = monitor._monitors
        audited = self.audited
        tested = self.tested
        agents = self.agents
        done = 0
        walked = 0
        walk = tests * WALK_PER_TEST
        sliced = tests >= 0
        if sliced:
            self.sliced = True
        copy = self.sliced
        while self.at < len(agents):
            if sliced and (done >= tests or walked >= walk):
                return False
            agent_id = agents[self.at]
            self.at += 1
            packed = monitor._packed.get(agent_id)
            if packed is None:
                # In the order a packed agent's tables are in (:meth:`DriftMonitor.pack`).
                for name in sorted(monitor._by_agent.get(agent_id, ())):
                    key = (agent_id, name)
                    mon = monitors[key]
                    walked += 1
                    if mon.detector is None:
                        continue  # not stochastic
                    if mon.config is not cfg:
                        # A table put with settings of its own (``put``): tested as it says.
                        gof = mon.test()
                        done += 1
                    else:
                        counts = mon.window.tested_counts()
                        if sum(counts) < least:
                            continue  # what chi_square_gof decides for a stochastic table
                        kept = kept_live.get(key)
                        probabilities = mon.probabilities
                        if (kept is not None and kept[1].counts == counts
                                and kept[0] == probabilities):
                            gof = kept[1]
                        else:
                            gof = mon.test()
                            done += 1
                        audited[key] = (probabilities, gof)
                    if gof.tested:
                        tested.append((agent_id, mon.action, mon, None, gof))
                        if copy and gof.p_value <= fdr:
                            self.copies[key] = (mon.window.seen, mon.pack())
                continue
            walked += len(packed) - 2
            # A table tests at most the executions its window has seen: packed ones with
            # too few to be tested are not unpacked to find that out.
            if packed[1] < enough:
                continue
            kept_p = kept_packed.get(agent_id)
            if kept_p is not None and kept_p[0] is packed:
                results = kept_p[1]
            else:
                results = []
                for mon in monitor._unpacked(packed):
                    if mon.stochastic:
                        gof = mon.test()
                        done += 1
                        if gof.tested:
                            results.append((mon.action, gof))
            self.audited_packed[agent_id] = (packed, results)
            for action, gof in results:
                tested.append((agent_id, action, None, packed, gof))
        return True


def thaw_tables(blob: bytes, specs: list[tuple[Action, DriftConfig]]) -> list[ActionMonitor]:
    """The tables :meth:`DriftMonitor.frozen` (or :meth:`DriftMonitor.pack`) described:
    ``blob``'s flag byte then each table's bytes, for ``specs``' actions and settings in
    order. Touches no monitor's state, so it runs in any thread."""
    data = decompress(memoryview(blob)[1:]) if blob[0] else memoryview(blob)[1:]
    out = []
    at = 0
    for action, config in specs:
        mon, at = ActionMonitor.unpack(action, config, data, at)
        out.append(mon)
    return out
