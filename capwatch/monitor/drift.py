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

An action's monitor is one state machine (online detector, confirmation, audit window,
persisted state) whose parts share its tables; the statistics it uses are in
capwatch.monitor.stats and .sequential, the evidence and alarm records it returns in
.drift_evidence (imported here too, where callers have always found them). Slightly
over 24 KB (~500 lines) since the tables of idle agents are packed here
(:meth:`DriftMonitor.pack`): every reader of the tables must see packed ones too.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from capwatch.model.domain import Action
from capwatch.monitor.attribution import Attribution
from capwatch.monitor.drift_evidence import CONFIRM_ALPHA as CONFIRM_ALPHA
from capwatch.monitor.drift_evidence import Detector as Detector
from capwatch.monitor.drift_evidence import DriftAlarm as DriftAlarm
from capwatch.monitor.drift_evidence import DriftEvidence as DriftEvidence
from capwatch.monitor.drift_evidence import action_fingerprint as action_fingerprint
from capwatch.monitor.drift_evidence import action_identity as action_identity
from capwatch.monitor.drift_evidence import describe_outcome as describe_outcome
from capwatch.monitor.drift_evidence import planned_samples as planned_samples
from capwatch.monitor.drift_evidence import with_probabilities as with_probabilities
from capwatch.monitor.sequential import DEFAULT_LOGIT_SHIFTS, SequentialDetector
from capwatch.monitor.sequential import expected_delay_hint as expected_delay_hint
from capwatch.monitor.stats import (
    GofResult,
    IntervalMethod,
    MultinomialEstimate,
    benjamini_hochberg,
    chi_square_gof,
    multinomial_mle,
    tvd_interval,
)
from capwatch.monitor.tables import OutcomeWindow, WindowKind

_CONFIRM = struct.Struct("<qq")


@dataclass(frozen=True, slots=True)
class DriftConfig:
    false_alarm_rate: float = 1e-5
    """Online detector: at most this many false alarms per transition, per action."""
    shifts: tuple[float, ...] = DEFAULT_LOGIT_SHIFTS
    window: int = 2000
    """Executions per frequency table (the audit's window, the re-estimation horizon)."""
    window_kind: WindowKind = "sliding"
    min_samples: int = 100
    """Audit: a table is tested only once its window holds this many usable executions."""
    min_expected: float = 5.0
    fdr: float = 0.05
    """Audit: Benjamini–Hochberg level across all tables tested in one audit."""
    confidence: float = 0.95
    interval: IntervalMethod = "wilson"
    min_estimate_samples: int = 30
    """Re-estimation looks back at least this far even if the change point is more recent."""
    confirm_half_width: float | None = 0.05
    """After an alarm, collect this many fresh executions that every outcome probability
    is then known within ± this half-width (simultaneous Clopper–Pearson at
    ``confidence``), and report a confirmed estimate; None disables confirmation."""

    def __post_init__(self) -> None:
        if self.window < self.min_samples:
            raise ValueError("window must hold at least min_samples executions")
        if not 0 < self.fdr < 1 or not 0 < self.confidence < 1:
            raise ValueError("fdr and confidence must be in (0, 1)")


class ActionMonitor:
    """Frequency table, online detector and tests for one (agent, lifted action)."""

    __slots__ = ("_confirm_counts", "_confirm_left", "_confirm_start", "action", "config",
                 "detector", "probabilities", "window")

    def __init__(self, action: Action, config: DriftConfig | None = None) -> None:
        self.config = config or DriftConfig()
        self._setup(action)

    def _setup(self, action: Action) -> None:
        self.action = action
        self.probabilities = tuple(o.probability for o in action.outcomes)
        self.window = OutcomeWindow(len(action.outcomes), self.config.window,
                                    self.config.window_kind)
        self._confirm_counts = np.zeros(len(action.outcomes), dtype=np.int64)
        self._confirm_left = 0
        self._confirm_start = 0
        self.detector: SequentialDetector | None = None
        if len(action.outcomes) >= 2:
            self.detector = SequentialDetector(self.probabilities,
                                               false_alarm_rate=self.config.false_alarm_rate,
                                               shifts=self.config.shifts)

    @property
    def stochastic(self) -> bool:
        return self.detector is not None

    def reset(self, action: Action | None = None) -> None:
        """Start afresh against ``action`` (a new model version) or the current one."""
        if action is not None and action != self.action:
            self._setup(action)
            return
        self.window.clear()
        self._confirm_left = 0
        if self.detector is not None:
            self.detector.restart()

    @property
    def confirming(self) -> bool:
        """Collecting fresh executions after an alarm (the detector is paused meanwhile)."""
        return self._confirm_left > 0

    def observe(self, attribution: Attribution | int) -> DriftAlarm | None:
        """Count one consistent execution; returns an alarm or a confirmation, or None.

        After an alarm the detector pauses while the planned fresh executions arrive
        (further alarms about the same change would only repeat it); then the
        confirmation is returned and the detector resumes against the current model,
        until the owner passes the new model version to ``reset``.
        """
        self.window.add(attribution)
        if self.detector is None:
            return None
        if self._confirm_left > 0:
            return self._confirm(attribution)
        if not self.detector.update(attribution):
            return None
        # The detector skips observations that tell no outcomes apart, so count back
        # the post-change evidence from the newest execution rather than forward.
        change = self.window.seen - (self.detector.n - self.detector.change_point)
        evidence = self.evidence(since=change, detector="sequential")
        evidence = replace(evidence, log_statistic=self.detector.log_statistic,
                           log_threshold=self.detector.log_threshold, change_point=change)
        planned = None
        if self.config.confirm_half_width is not None:
            planned = planned_samples(
                multinomial_mle(evidence.gof.counts, self.config.confidence, "clopper-pearson",
                                simultaneous=True),
                self.config.confirm_half_width, self.config.confidence)
            self._confirm_left = planned
            self._confirm_start = self.window.seen
            self._confirm_counts.fill(0)
        return DriftAlarm(evidence, self.updated_action(evidence.estimate), True, planned)

    def _confirm(self, attribution: Attribution | int) -> DriftAlarm | None:
        if isinstance(attribution, int):
            outcome = attribution
        else:
            outcome = attribution.counted
            if outcome < 0:
                return None  # ambiguous executions neither count nor use up the plan
        self._confirm_counts[outcome] += 1
        self._confirm_left -= 1
        if self._confirm_left > 0:
            return None
        assert self.detector is not None
        self.detector.restart()
        cfg = self.config
        counts = self._confirm_counts.copy()
        estimate = multinomial_mle(counts, cfg.confidence, "clopper-pearson", simultaneous=True)
        evidence = DriftEvidence(
            action=self.action.header(),
            detector="confirmation",
            gof=chi_square_gof(counts, self.probabilities, min_samples=1,
                               min_expected=cfg.min_expected),
            tvd=tvd_interval(counts, self.probabilities, cfg.confidence),
            estimate=estimate,
            model_probabilities=self.probabilities,
            outcomes=tuple(describe_outcome(o) for o in self.action.outcomes),
            window=(self._confirm_start, self.window.seen),
            ambiguous=0,
        )
        return DriftAlarm(evidence, self.updated_action(estimate), provisional=False)

    def export_state(self, *, values_array: bool = False) -> dict[str, Any]:
        """Window, detector and confirmation progress as plain values (see
        capwatch.monitor.snapshot for the versioned, compact form); ``values_array``: the
        window's outcomes and the detector's statistics as arrays, which the snapshot
        packs as such (``OutcomeWindow.export_state``, ``SequentialDetector.export_state``)."""
        header, fingerprint = action_identity(self.action)
        return {
            "action": header,
            "fingerprint": fingerprint,
            "window": self.window.export_state(values_array=values_array),
            "detector": None if self.detector is None
            else self.detector.export_state(arrays=values_array),
            "confirm_counts": self._confirm_counts.tolist(),
            "confirm_left": self._confirm_left,
            "confirm_start": self._confirm_start,
        }

    def pack(self) -> bytes:
        """Window, detector and confirmation progress as bytes, field for field (see
        :meth:`unpack`): what an idle agent's table costs while it is held in memory."""
        parts = [_CONFIRM.pack(self._confirm_left, self._confirm_start),
                 self._confirm_counts.tobytes(), self.window.pack()]
        if self.detector is not None:
            parts.append(self.detector.pack())
        return b"".join(parts)

    @classmethod
    def unpack(cls, action: Action, config: DriftConfig, data: bytes | memoryview,
               at: int = 0) -> tuple[ActionMonitor, int]:
        """The monitor :meth:`pack` described, for the very ``action`` and ``config`` it
        was counting against; and where its bytes end."""
        mon = cls(action, config)
        mon._confirm_left, mon._confirm_start = _CONFIRM.unpack_from(data, at)
        at += _CONFIRM.size
        k = len(mon.probabilities)
        mon._confirm_counts = np.frombuffer(data, np.int64, k, at).copy()
        at = mon.window.unpack(data, at + 8 * k)
        if mon.detector is not None:
            at = mon.detector.unpack(data, at)
        return mon, at

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue exactly where ``export_state`` left off; raises ValueError (and
        changes nothing) if the state belongs to another action, model or setting."""
        if state["fingerprint"] != action_fingerprint(self.action):
            raise ValueError(f"state is for another version of {state['action']}")
        if (state["detector"] is None) != (self.detector is None):
            raise ValueError("state and action disagree on whether the action is stochastic")
        confirm = np.asarray(state["confirm_counts"], dtype=np.int64)
        if confirm.shape != self._confirm_counts.shape:
            raise ValueError("confirmation counts have the wrong length")
        # Load into fresh parts first so a bad state leaves this monitor untouched.
        window = OutcomeWindow(len(self.action.outcomes), self.config.window,
                               self.config.window_kind)
        window.load_state(state["window"])
        detector = None
        if self.detector is not None:
            detector = SequentialDetector(self.probabilities,
                                          false_alarm_rate=self.config.false_alarm_rate,
                                          shifts=self.config.shifts)
            detector.load_state(state["detector"])
        self.window = window
        self.detector = detector
        self._confirm_counts = confirm
        self._confirm_left = int(state["confirm_left"])
        self._confirm_start = int(state["confirm_start"])

    def test(self) -> GofResult:
        """The windowed chi-square goodness of fit the audit uses."""
        return chi_square_gof(self.window.counts(), self.probabilities,
                              min_samples=self.config.min_samples,
                              min_expected=self.config.min_expected)

    def evidence(self, since: int | None = None, detector: Detector = "audit") -> DriftEvidence:
        """Figures over the executions since ``since`` (default: the test window)."""
        cfg = self.config
        if since is None:
            counts, ambiguous, span = self.window.counts(), self.window.ambiguous(), \
                self.window.span()
        else:
            start = min(since, self.window.seen - cfg.min_estimate_samples)
            counts, ambiguous, first = self.window.counts_since(start)
            span = (first, self.window.seen)
        # The evidence describes whatever data there is; the minimum-sample rule gates
        # the audit's decision, not the description of an alarm already raised.
        gof = chi_square_gof(counts, self.probabilities, min_samples=1,
                             min_expected=cfg.min_expected)
        return DriftEvidence(
            action=self.action.header(),
            detector=detector,
            gof=gof,
            tvd=tvd_interval(counts, self.probabilities, cfg.confidence),
            estimate=multinomial_mle(counts, cfg.confidence, cfg.interval),
            model_probabilities=self.probabilities,
            outcomes=tuple(describe_outcome(o) for o in self.action.outcomes),
            window=span,
            ambiguous=ambiguous,
        )

    def updated_action(self, estimate: MultinomialEstimate) -> Action:
        if estimate.n == 0:
            return self.action
        return with_probabilities(self.action, estimate.probabilities, estimate.n)


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

    __slots__ = ("_by_agent", "_changed", "_monitors", "_packed", "config")

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

    def take_changed(self) -> set[str]:
        """Agents whose tables changed since the last call (observed, reset or forgotten):
        the ones whose saved state is out of date."""
        changed, self._changed = self._changed, set()
        return changed

    def take_changed_of(self, agent_ids: Iterable[str]) -> None:
        """Take ``agent_ids`` out of the changed set (their state was saved)."""
        self._changed.difference_update(agent_ids)

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
        # Level 1: the detector's statistics are mostly incompressible floats; zeros (a
        # CUSUM at rest, small counts) shrink at a fraction of the default level's cost.
        small = zlib.compress(raw, 1)
        blob = b"\x01" + small if len(small) < len(raw) else b"\x00" + raw
        for name in names:
            del self._monitors[(agent_id, name)]
        del self._by_agent[agent_id]
        self._packed[agent_id] = (blob, max(m.window.seen for m in mons),
                                  *(m.action for m in mons))
        return True

    def packed(self, agent_id: str) -> bool:
        """Whether the agent's tables are packed (:meth:`pack`)."""
        return agent_id in self._packed

    def _unpacked(self, packed: tuple[Any, ...]) -> list[ActionMonitor]:
        blob: bytes = packed[0]
        data = zlib.decompress(memoryview(blob)[1:]) if blob[0] else memoryview(blob)[1:]
        out = []
        at = 0
        for action in packed[2:]:
            mon, at = ActionMonitor.unpack(action, self.config, data, at)
            out.append(mon)
        return out

    def _unpack(self, agent_id: str) -> None:
        packed = self._packed.pop(agent_id, None)
        if packed is not None:
            names = self._by_agent.setdefault(agent_id, set())
            for mon in self._unpacked(packed):
                self._monitors[(agent_id, mon.action.name)] = mon
                names.add(mon.action.name)

    def _tables(self, agent_id: str) -> dict[str, ActionMonitor]:
        """Action name → the agent's table; packed ones are unpacked for the caller only."""
        packed = self._packed.get(agent_id)
        if packed is not None:
            return {m.action.name: m for m in self._unpacked(packed)}
        return {name: self._monitors[(agent_id, name)]
                for name in self._by_agent.get(agent_id, ())}

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

    def observe(self, agent_id: str, action: Action, attribution: Attribution | int
                ) -> DriftAlarm | None:
        alarm = self.monitor(agent_id, action).observe(attribution)
        self._changed.add(agent_id)
        if alarm is None:
            return None
        return replace(alarm, evidence=replace(alarm.evidence, agent_id=agent_id))

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
        """Chi-square on every stochastic table with enough data, BH across all of them."""
        tested: list[tuple[str, ActionMonitor, GofResult]] = []
        # A table tests at most the executions its window has seen: packed ones with too
        # few to be tested are not unpacked to find that out.
        enough = self.config.min_samples
        packed = ((agent_id, mon) for agent_id, p in self._packed.items() if p[1] >= enough
                  for mon in self._unpacked(p))
        live = ((agent_id, mon) for (agent_id, _), mon in self._monitors.items())
        for agent_id, mon in itertools.chain(live, packed):
            if not mon.stochastic:
                continue
            gof = mon.test()
            if gof.tested:
                tested.append((agent_id, mon, gof))
        if not tested:
            return []
        rejected, q_values = benjamini_hochberg([g.p_value for _, _, g in tested],
                                                self.config.fdr)
        findings = []
        for (agent_id, mon, gof), rej, q in zip(tested, rejected, q_values, strict=True):
            evidence = None
            if rej:
                evidence = replace(mon.evidence(), agent_id=agent_id, q_value=float(q))
            findings.append(AuditFinding(agent_id, mon.action.header(), gof, float(q), bool(rej),
                                         evidence, mon.action.name))
        return findings
