"""What a drift alarm says and proposes: the evidence record that goes into alerts, the
alarm with its re-estimated action, the confirmation's planned sample size, and the
fingerprint that ties saved tables to one version of an action. Split out of
capwatch.monitor.drift, which detects; this module only describes."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from capwatch.model.domain import Action, Outcome
from capwatch.monitor.stats import (
    GofResult,
    MultinomialEstimate,
    TvdEstimate,
    normal_isf,
    simultaneous_level,
)

Detector = Literal["sequential", "confirmation", "audit"]

CONFIRM_ALPHA = 0.01
"""A confirmation whose fresh executions fit the old model at this level (p ≥ 0.01)
says so in its summary: the alarm was then likely one of the rare false ones."""




@dataclass(frozen=True, slots=True)
class DriftEvidence:
    """Why capwatch believes an action's outcome probabilities changed; goes into alerts."""

    action: str
    detector: Detector
    gof: GofResult
    tvd: TvdEstimate
    estimate: MultinomialEstimate
    model_probabilities: tuple[float, ...]
    outcomes: tuple[str, ...]
    """Each outcome in the model's vocabulary, in index order."""
    window: tuple[int, int]
    """[start, end) execution indices (since the table was started) the figures cover."""
    ambiguous: int
    """Executions in the window set aside because their outcome was ambiguous."""
    agent_id: str | None = None
    q_value: float | None = None
    """Benjamini–Hochberg adjusted p-value (audit only)."""
    log_statistic: float | None = None
    """Sequential detector: log of the mixture Shiryaev–Roberts statistic at the alarm."""
    log_threshold: float | None = None
    change_point: int | None = None

    @property
    def confirms_drift(self) -> bool:
        """For a confirmation: whether the fresh executions reject the old model on their own."""
        return self.gof.p_value < CONFIRM_ALPHA

    def summary(self) -> str:
        """One line, in the model's vocabulary, for the alert text."""
        if self.detector == "confirmation" and not self.confirms_drift:
            return (f"{self.action}: earlier drift alarm not confirmed by {self.gof.n} fresh "
                    f"executions (p={self.gof.p_value:.2g}, TVD {self.tvd.value:.3f})")
        parts = []
        for name, old, new in zip(self.outcomes, self.model_probabilities,
                                  self.estimate.probabilities, strict=True):
            if abs(new - old) >= 0.005:
                parts.append(f"{name}: {old:.2f} → {new:.2f}")
        what = "; ".join(parts) or "outcome frequencies differ from the model"
        return (f"{self.action} outcome probabilities drifted ({what}); TVD {self.tvd.value:.3f} "
                f"[{self.tvd.low:.3f}, {self.tvd.high:.3f}], p={self.gof.p_value:.2g}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "action": self.action,
            "detector": self.detector,
            "chi2": self.gof.statistic,
            "dof": self.gof.dof,
            "p_value": self.gof.p_value,
            "q_value": self.q_value,
            "test": self.gof.method,
            "tvd": self.tvd.value,
            "tvd_ci": [self.tvd.low, self.tvd.high],
            "tvd_confidence": self.tvd.confidence,
            "n": self.gof.n,
            "counts": list(self.gof.counts),
            "expected": list(self.gof.expected),
            "cells": [list(c) for c in self.gof.cells],
            "outcomes": list(self.outcomes),
            "model_probabilities": list(self.model_probabilities),
            "estimated_probabilities": list(self.estimate.probabilities),
            "estimate_ci": [list(p) for p in zip(self.estimate.low, self.estimate.high,
                                                 strict=True)],
            "estimate_confidence": self.estimate.confidence,
            "window": list(self.window),
            "ambiguous": self.ambiguous,
            "log_statistic": self.log_statistic,
            "log_threshold": self.log_threshold,
            "change_point": self.change_point,
            "confirmed": self.confirms_drift if self.detector == "confirmation" else None,
            "summary": self.summary(),
        }


_IDENTITIES: dict[int, tuple[Action, str, str]] = {}
"""id(action) → (the action, its header, its fingerprint): every checkpoint writes both
for each table it saves, and the actions are few objects shared by a family's agents."""


def action_identity(action: Action) -> tuple[str, str]:
    """The action's header and :func:`action_fingerprint`, computed once per action."""
    known = _IDENTITIES.get(id(action))
    if known is not None and known[0] is action:
        return known[1], known[2]
    header = action.header()
    text = json.dumps([header, [[describe_outcome(o), o.probability]
                                for o in action.outcomes]])
    fingerprint = hashlib.sha256(text.encode()).hexdigest()[:16]
    if len(_IDENTITIES) >= 10_000:
        _IDENTITIES.clear()  # a bound on memory (new model versions make new actions)
    _IDENTITIES[id(action)] = (action, header, fingerprint)
    return header, fingerprint


def action_fingerprint(action: Action) -> str:
    """Short digest of what an action's frequency tables depend on: its outcomes (in index
    order) and their probabilities. Saved state is only valid for an equal fingerprint."""
    return action_identity(action)[1]


def describe_outcome(outcome: Outcome) -> str:
    lits = [str(a) for a in sorted(outcome.add)] + [f"(not {a})" for a in sorted(outcome.delete)]
    return " ".join(lits) if lits else "(no change)"


def with_probabilities(action: Action, probabilities: Sequence[float] | npt.ArrayLike,
                       n: int | None = None) -> Action:
    """The action with new outcome probabilities, for a new model version.

    An outcome never observed keeps a small probability (half an observation's worth,
    0.5 / n, capped by its old value) instead of the MLE's zero: dropping an outcome is a
    structural change of the model, which only the consistency path and the assessment
    engine may decide; a zero here would turn its next occurrence into an "inconsistent"
    transition. The result's outcomes are re-sorted canonically, so indices may move.
    """
    probs = np.asarray(probabilities, dtype=np.float64)
    if probs.shape != (len(action.outcomes),):
        raise ValueError("one probability per outcome is required")
    if (probs < 0).any() or probs.sum() <= 0:
        raise ValueError("probabilities must be non-negative and not all zero")
    probs = probs / probs.sum()
    zero = probs <= 0
    if zero.any():
        old = np.array([o.probability for o in action.outcomes])
        floor = 0.5 / n if n else 1e-6
        probs = np.where(zero, np.minimum(old, floor), probs)
        probs = probs / probs.sum()
    outcomes = tuple(replace(o, probability=float(p))
                     for o, p in zip(action.outcomes, probs, strict=True))
    return action.replace(outcomes=outcomes)


@dataclass(frozen=True, slots=True)
class DriftAlarm:
    evidence: DriftEvidence
    updated_action: Action
    """The action with the MLE probabilities over the evidence window."""
    provisional: bool = True
    """True for the alarm itself: its window was chosen by the detector because it looked
    different, so its MLE is biased away from the model and its intervals under-cover.
    A confirmation (``provisional=False``) is estimated from executions observed after
    the alarm, whose number was fixed at the alarm: its intervals and its chi-square
    p-value are honest."""
    fresh_samples_planned: int | None = None
    """Provisional alarms: how many fresh executions the confirmation will use."""


def planned_samples(estimate: MultinomialEstimate, half_width: float, confidence: float
                    ) -> int:
    """Executions needed so every outcome's simultaneous CI is about ±``half_width``.

    Planned from the provisional interval's end nearest 1/2 (the largest variance still
    plausible), plus the Clopper–Pearson widening; fixed before the fresh data arrive,
    so the confirmation's coverage is the interval's nominal coverage.
    """
    level = simultaneous_level(confidence, len(estimate.probabilities))
    z = normal_isf((1.0 - level) / 2.0)
    worst = max(min(max(0.5, lo), hi) * (1.0 - min(max(0.5, lo), hi))
                for lo, hi in zip(estimate.low, estimate.high, strict=True))
    return max(30, math.ceil(z * z * worst / half_width**2 * 1.1))
