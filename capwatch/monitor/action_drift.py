"""One (agent, lifted action) frequency table and its tests: the online detector, the
confirmation after an alarm, the audit's window, its state as plain values and as bytes
(:class:`ActionMonitor`), and the settings every table follows (:class:`DriftConfig`).
capwatch.monitor.drift holds a replica's tables and re-exports these.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from capwatch.model.domain import Action
from capwatch.monitor.attribution import Attribution
from capwatch.monitor.drift_evidence import (
    Detector,
    DriftAlarm,
    DriftEvidence,
    action_fingerprint,
    action_identity,
    describe_outcome,
    planned_samples,
    with_probabilities,
)
from capwatch.monitor.sequential import (
    DEFAULT_LOGIT_SHIFTS,
    SequentialDetector,
    packed_detector_end,
)
from capwatch.monitor.stats import (
    GofResult,
    IntervalMethod,
    MultinomialEstimate,
    chi_square_gof,
    multinomial_mle,
    tvd_interval,
)
from capwatch.monitor.tables import OutcomeWindow, WindowKind, packed_window_end

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

    def observe(self, attribution: Attribution | int, wanted: bool = True
                ) -> DriftAlarm | None:
        """Count one consistent execution; returns an alarm or a confirmation, or None.

        After an alarm the detector pauses while the planned fresh executions arrive
        (further alarms about the same change would only repeat it); then the
        confirmation is returned and the detector resumes against the current model,
        until the owner passes the new model version to ``reset``.

        ``wanted`` False: the caller would discard an alarm (its agent awaits an
        assessment already), so none is made; the table changes exactly as it would
        have (the confirmation is still planned), only the alarm's evidence (a test, an
        interval by linear programming: milliseconds) is not worked out.
        """
        self.window.add(attribution)
        if self.detector is None:
            return None
        if self._confirm_left > 0:
            return self._confirm(attribution, wanted)
        if not self.detector.update(attribution):
            return None
        # The detector skips observations that tell no outcomes apart, so count back
        # the post-change evidence from the newest execution rather than forward.
        change = self.window.seen - (self.detector.n - self.detector.change_point)
        if not wanted:
            if self.config.confirm_half_width is not None:
                self._plan_confirmation(self._counts_since(change)[0])
            return None
        evidence = self.evidence(since=change, detector="sequential")
        evidence = replace(evidence, log_statistic=self.detector.log_statistic,
                           log_threshold=self.detector.log_threshold, change_point=change)
        planned = None
        if self.config.confirm_half_width is not None:
            planned = self._plan_confirmation(evidence.gof.counts)
        return DriftAlarm(evidence, self.updated_action(evidence.estimate), True, planned)

    def _plan_confirmation(self, counts: Any) -> int:
        """Plan the fresh executions that confirm an alarm over ``counts``."""
        cfg = self.config
        assert cfg.confirm_half_width is not None
        planned = planned_samples(
            multinomial_mle(counts, cfg.confidence, "clopper-pearson", simultaneous=True),
            cfg.confirm_half_width, cfg.confidence)
        self._confirm_left = planned
        self._confirm_start = self.window.seen
        self._confirm_counts.fill(0)
        return planned

    def _counts_since(self, since: int) -> tuple[Any, int, int]:
        """(counts, ambiguous, first) over the executions an alarm's evidence since
        ``since`` covers (at least ``min_estimate_samples`` back)."""
        start = min(since, self.window.seen - self.config.min_estimate_samples)
        return self.window.counts_since(start)

    def _confirm(self, attribution: Attribution | int, wanted: bool = True
                 ) -> DriftAlarm | None:
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
        if not wanted:
            return None
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

    @staticmethod
    def packed_extent(action: Action, config: DriftConfig, data: bytes | memoryview,
                      at: int = 0) -> tuple[int, int]:
        """Where the bytes :meth:`pack` made for a table of ``action`` and ``config`` from
        ``at`` end, and its window's ``seen``, without building the table (:meth:`unpack`
        builds a window and a detector: ~60,000 instructions, compiled)."""
        k = len(action.outcomes)
        end, seen = packed_window_end(k, data, at + _CONFIRM.size + 8 * k)
        if k >= 2:  # a detector follows (_setup)
            end = packed_detector_end([o.probability for o in action.outcomes],
                                      config.shifts, data, end)
        return end, seen

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
            counts, ambiguous, first = self._counts_since(since)
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
