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

An agent drifted when its newest version's model is not the family's newest baseline's,
unless only by outcome probabilities that version's own intervals hold the baseline's in
(an agent that drifted and came back; the console's rule, ``within_intervals_of_baseline``);
Δ counts the pal-tuples whose modes differ between the two (``model_changes``), so a
probability-only change is drifted with Δ 0, a rollback to the baseline's model ends it and
a promotion of an agent's model ends it for every agent that runs that model. (A version's
stored ``delta_to_baseline`` is against the baseline its lineage forked from, which a
promotion does not move.) Versions never change, so the comparison of a pair (agent
version, baseline version) is kept and only a new version or baseline costs a model load.

A new pair costs a model load and its stated pal-tuple modes (~1 ms of CPU on this thread,
holding the interpreter's lock the main loop needs; ~2-4 ms until session 18 enumerated Γ
for each model): a restarted replica's first read and
each promotion compare every agent anew. So the models not compared yet are read in a
few round trips (not a whole version per agent), the baseline's modes are computed once,
and the comparison is kept per (model, baseline) as well, keyed by the model's content:
the agents that learned the same model (one drift across the fleet) cost one comparison
(docs/performance.md, "The drift gauges' store read").
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from capwatch.contracts.versions import ModelRef, ModelVersion, within_intervals_of_baseline
from capwatch.daemon.infra import INFRASTRUCTURE_ERRORS, OutageLog
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.model.domain import Domain
from capwatch.model.pal import Mode, PalTuple, stated_modes
from capwatch.model.serialize import domain_from_json

log = structlog.get_logger("capwatch.daemon")

REFRESH_S = 15.0
"""How often a replica reads the figures again when none of its workers published: the
bound on how long a version another replica (or the CLI) wrote takes to show here."""


class DriftSource(Protocol):
    def newest_versions(self) -> list[ModelRef]: ...

    def model_texts(self, refs: Sequence[ModelRef]) -> dict[ModelRef, str]: ...

    def get(self, ref: ModelRef) -> ModelVersion | None: ...


_Pair = tuple[int, bool, str]
"""An agent's figures against a baseline: (Δ, drifted, a hash of its model's stored text)."""


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
        self._pairs: dict[tuple[ModelRef, ModelRef], _Pair] = {}
        self._by_model: dict[tuple[str, ModelRef], _Pair] = {}
        """(the hash of the model's stored text, baseline) → the pair's figures: agents whose newest
        versions hold the same model share one comparison."""
        self._baselines: dict[ModelRef, tuple[Domain, Mapping[PalTuple, Mode]]] = {}
        self._as_baseline: dict[tuple[ModelRef, ModelRef], bool] = {}
        """(agent version, baseline) of a probability-only difference → whether the
        version's own intervals hold the baseline's probabilities (not drifted then):
        per version, as the intervals are the version's evidence, not its model's."""
        self._newest: list[ModelRef] | None = None
        """The newest versions the last read found, when every one was compared."""
        self._figures: dict[str, FamilyDrift] = {}
        """What that read computed."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._outage = OutageLog(log, "drift gauges")

    def figures(self) -> dict[str, FamilyDrift]:
        """Per family: the largest Δ of an agent's current model from the family's newest
        baseline, and the number of agents whose model is not that baseline's."""
        newest = self.store.newest_versions()
        if newest == self._newest:
            # Nothing stored since the last read (most reads): versions never change, so
            # neither do the figures. Comparing the lists took 16 ms at 50,000 agents;
            # going through the pairs again cost 1-3 s on a loaded machine.
            return dict(self._figures)
        baselines = {r.family: r for r in newest if r.agent_id is None}
        keys = [(r, baselines[r.family]) for r in newest
                if r.agent_id is not None and r.family in baselines]
        # The models of the agents not compared yet, in a few round trips: one get() per
        # agent took ~2 ms each on PostgreSQL (107 s for a replica's first read of
        # 50,000 agents; docs/performance.md, "The drift gauges' store read").
        fresh = [k[0] for k in keys if k not in self._pairs]
        models = self.store.model_texts(fresh) if fresh else {}
        pairs: dict[tuple[ModelRef, ModelRef], _Pair] = {}
        out: dict[str, FamilyDrift] = {}
        complete = True
        for key in keys:
            ref, base = key
            pair = self._pairs.get(key)
            if pair is None:
                model = models.get(ref)
                pair = None if model is None else self._compare(model, base)
            if pair is None:
                complete = False
                continue  # deleted between the two reads: the next refresh sees the truth
            pairs[key] = pair
            delta, differs, _ = pair
            if differs and delta == 0:
                held = self._as_baseline.get(key)
                if held is None:
                    held = self._within_intervals(ref, base)
                    if held is None:
                        complete = False
                        continue
                    self._as_baseline[key] = held
                differs = not held
            was = out.get(ref.family, FamilyDrift(0, 0))
            out[ref.family] = FamilyDrift(max(was.worst_delta, delta),
                                        was.drifted + (1 if differs else 0))
        for family in baselines:
            out.setdefault(family, FamilyDrift(0, 0))
        # Only the pairs still current are kept: the cache is as large as the fleet.
        self._pairs = pairs
        self._as_baseline = {k: v for k, v in self._as_baseline.items() if k in pairs}
        self._by_model = {(p[2], k[1]): p for k, p in pairs.items()}
        live = set(baselines.values())
        self._baselines = {r: d for r, d in self._baselines.items() if r in live}
        self._newest, self._figures = (newest if complete else None), dict(out)
        return out

    def _within_intervals(self, ref: ModelRef, base: ModelRef) -> bool | None:
        """Whether the version's assessment could not tell its probabilities from the
        baseline's (console.data's rule, ``within_intervals_of_baseline``: an agent
        that drifted and came back is not drifted); None if a version went meanwhile."""
        v = self.store.get(ref)
        baseline = self._baselines.get(base)
        if v is None or baseline is None:
            return None
        parent = self.store.get(v.parent) if v.parent is not None else None
        return within_intervals_of_baseline(
            v, parent.domain() if parent is not None else None, baseline[0])

    def _compare(self, model_text: str, base: ModelRef) -> _Pair | None:
        baseline = self._baselines.get(base)
        if baseline is None:
            b = self.store.get(base)
            if b is None:
                return None
            domain = b.domain()
            baseline = self._baselines[base] = (domain, stated_modes(domain))
        # The text's hash, not the parsed model's: parsing was most of the first read's
        # time, and only a model not compared yet needs it.
        model = hashlib.sha256(model_text.encode()).hexdigest()
        known = self._by_model.get((model, base))
        if known is not None:
            return known
        domain = domain_from_json(json.loads(model_text))
        # The stated modes, not Γ's (enumerating Γ was ~70% of a model's comparison), and
        # a count, not ``mode_changes``' sorted list: the modes hold no ∅, so a pal-tuple
        # one side lacks differs.
        base_modes, modes = baseline[1], stated_modes(domain)
        delta = sum(1 for p, m in modes.items() if base_modes.get(p) is not m) + sum(
            1 for p in base_modes if p not in modes)
        pair = self._by_model[(model, base)] = (delta, delta > 0 or domain != baseline[0],
                                                model)
        return pair

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
