"""What the back-off holds back, made visible.

An assessment that ended without explaining an agent's evidence (no change found, or
failed) backs that evidence off: its inconsistency kinds and its actions' drift alarms
are not queued again until the back-off passes (``AgentWatch.settle``, docs/daemon.md,
"No loops"). Held silently, an operator could not tell a quiet agent from one whose
alarms are being held, nor why (a reviewer's finding, session 18). Each hold is counted
(``capwatch_held_back_total{family, kind}``) and said in the log once per agent, action
and back-off: a stream detector over a drifted action alarms at every execution while
it is held, and a line each would bury the log.
"""

from __future__ import annotations

from typing import Literal

import structlog

from capwatch.daemon.agent_watch import AgentWatch, drift_kind
from capwatch.daemon.metrics import DaemonMetrics

log = structlog.get_logger("capwatch.daemon")

HeldKind = Literal["inconsistency", "drift"]
"""The metric's ``kind`` label (``metrics.HELD_KINDS``)."""

_SAID_LIMIT = 10_000
"""Entries kept of the holds already said before the ones whose back-off passed are
dropped (bounded whatever the fleet does)."""


class Holds:
    def __init__(self, metrics: DaemonMetrics) -> None:
        self.metrics = metrics
        self._said: dict[tuple[str, str, str], float] = {}
        """(agent, kind, action) → the end of the back-off whose hold was logged."""

    def held(self, watch: AgentWatch, kind: HeldKind, action: str, detector: str) -> None:
        """``watch``'s drift alarm (``kind`` drift, from ``detector``: sequential or
        audit) or inconsistency of ``action`` was held back by its back-off."""
        self.metrics.held_back.labels(watch.family, kind).inc()
        until, times = _back_off(watch, kind, action)
        key = (watch.agent_id, kind, action)
        if self._said.get(key) == until:
            return
        if len(self._said) >= _SAID_LIMIT:
            now = watch.clock()
            self._said = {k: u for k, u in self._said.items() if u > now}
            if len(self._said) >= _SAID_LIMIT:
                self._said.clear()
        self._said[key] = until
        log.info("held back by its back-off", agent_id=watch.agent_id, action=action,
                 kind=kind, detector=detector, held_for_s=round(until - watch.clock(), 1),
                 unexplained_ends=times,
                 why="an assessment of the same behaviour ended without explaining it "
                     "(no change found, or failed); held until the back-off passes, a new "
                     "model version, or (a drift) counts unlike the ones it assessed")


def _back_off(watch: AgentWatch, kind: HeldKind, action: str) -> tuple[float, int]:
    """(end, unexplained ends) of the back-off that holds ``action``'s ``kind``."""
    if kind == "drift":
        return watch.backoff.get(drift_kind(action), (0.0, 0))
    prefix = action + "|"
    entries = [e for k, e in watch.backoff.items()
               if k.startswith(prefix) and k != drift_kind(action)]
    return max(entries) if entries else (0.0, 0)
