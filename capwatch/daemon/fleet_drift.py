"""``capwatch_agents_drifted`` and ``capwatch_model_delta_from_baseline``: the fleet's
figures, read from the models store, the same on every replica.

Until session 16 a worker set them when it published a version, from what this process
had published: after a restart (or on the replica that took a partition over) they were
absent although the store held the drifted versions, the dashboard showed no drifted
agent and ``CapwatchModelDriftedFromBaseline`` resolved; a rollback or promotion (the CLI
writes the store) never moved them. The store is the only place that knows every agent's
current version, whoever wrote it, so each replica reads the figure from there, on a
thread of its own (never the main loop: no store query per record) every
:data:`REFRESH_S` and soon after each version its workers publish. Every replica reports
the whole fleet, so the dashboard and the rules take ``max`` across replicas, never
``sum``. Giving each agent's gauge to the replica that holds its partition would need
each replica to load, at every rebalance, the versions of agents it may not have seen,
leave the figure absent between a revoke and the next assignment, and still miss a
promotion (which changes every agent's Δ) until each owner reloaded: more mechanism and
less correct than one read of the store (docs/operations.md, "Metrics").

An agent drifted when its newest version's model is not the family's newest baseline's;
Δ counts the pal-tuples whose modes differ between the two (``model_changes``), so a
probability-only change is drifted with Δ 0, a rollback to the baseline's model ends it and
a promotion of an agent's model ends it for every agent that runs that model. (A version's
stored ``delta_to_baseline`` is against the baseline its lineage forked from, which a
promotion does not move.) Versions never change, so the comparison of a pair (agent
version, baseline version) is kept and only a new version or baseline costs a model load.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog

from capwatch.contracts.versions import LineageSummary, ModelRef, ModelVersion
from capwatch.daemon.infra import INFRASTRUCTURE_ERRORS, OutageLog
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.model.diff import model_changes
from capwatch.model.domain import Domain

log = structlog.get_logger("capwatch.daemon")

REFRESH_S = 15.0
"""How often a replica reads the figures again when none of its workers published: the
bound on how long a version another replica (or the CLI) wrote takes to show here."""


class DriftSource(Protocol):
    def lineages(self, family: str | None = None) -> list[LineageSummary]: ...

    def get(self, ref: ModelRef) -> ModelVersion | None: ...


@dataclass(frozen=True)
class FamilyDrift:
    worst_delta: int
    drifted: int


class FleetDrift:
    """Computes the figures from the store and sets the gauges; :meth:`start` runs that
    on a thread every :data:`REFRESH_S` and at each :meth:`wake`."""

    def __init__(self, store: DriftSource, metrics: DaemonMetrics,
                 families: Iterable[str] = (), interval_s: float = REFRESH_S) -> None:
        self.store = store
        self.metrics = metrics
        self.interval_s = interval_s
        # Families the daemon watches show 0 before any version: an absent series and a
        # fleet without drift would read differently on the dashboard.
        self._reported: set[str] = set(families)
        self._pairs: dict[tuple[ModelRef, ModelRef], tuple[int, bool]] = {}
        self._baselines: dict[ModelRef, Domain] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._outage = OutageLog(log, "drift gauges")

    def figures(self) -> dict[str, FamilyDrift]:
        """Per family: the largest Δ of an agent's current model from the family's newest
        baseline, and the number of agents whose model is not that baseline's."""
        summaries = self.store.lineages()
        baselines = {s.family: ModelRef(s.family, None, s.latest_version)
                     for s in summaries if s.agent_id is None}
        pairs: dict[tuple[ModelRef, ModelRef], tuple[int, bool]] = {}
        out: dict[str, FamilyDrift] = {}
        for s in summaries:
            base = baselines.get(s.family)
            if s.agent_id is None or base is None:
                continue
            key = (ModelRef(s.family, s.agent_id, s.latest_version), base)
            pair = self._pairs.get(key)
            if pair is None:
                pair = self._compare(*key)
            if pair is None:
                continue  # deleted between the two reads: the next refresh sees the truth
            pairs[key] = pair
            delta, differs = pair
            was = out.get(s.family, FamilyDrift(0, 0))
            out[s.family] = FamilyDrift(max(was.worst_delta, delta),
                                        was.drifted + (1 if differs else 0))
        for family in baselines:
            out.setdefault(family, FamilyDrift(0, 0))
        # Only the pairs still current are kept: the cache is as large as the fleet.
        self._pairs = pairs
        live = set(baselines.values())
        self._baselines = {r: d for r, d in self._baselines.items() if r in live}
        return out

    def _compare(self, agent: ModelRef, base: ModelRef) -> tuple[int, bool] | None:
        version = self.store.get(agent)
        baseline = self._baselines.get(base)
        if baseline is None:
            b = self.store.get(base)
            if b is None:
                return None
            baseline = self._baselines[base] = b.domain()
        if version is None:
            return None
        domain = version.domain()
        delta = len(model_changes(baseline, domain))
        return delta, delta > 0 or domain != baseline

    def refresh(self) -> None:
        """Read the figures and set the gauges (raises what the store raises)."""
        with self._lock:
            figures = self.figures()
            for family in self._reported | set(figures):
                f = figures.get(family, FamilyDrift(0, 0))
                self.metrics.model_delta.labels(family).set(f.worst_delta)
                self.metrics.agents_drifted.labels(family).set(f.drifted)
            self._reported |= set(figures)

    def refresh_logged(self) -> None:
        """:meth:`refresh`; a failure is logged and the gauges keep their last figures
        (the store is the one that is down, and /readyz says so)."""
        try:
            self.refresh()
        except INFRASTRUCTURE_ERRORS as e:
            self._outage.failed(e)
            return
        except Exception:
            log.exception("reading the drift gauges from the store failed")
            return
        self._outage.ok()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="capwatch-drift-gauges",
                                            daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Read again soon (a worker published a version); wakes coalesce."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._closed:
            self.refresh_logged()
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
