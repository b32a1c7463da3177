"""The daemon's Prometheus metrics, in a registry of its own (tests run several daemons).

Labels are bounded: family and action, never agent id, on per-transition series. Beyond
that convention, a :class:`LabelGuard` caps how many distinct values a label may take
(``family``, ``action``, ``reason``, ...); later values are reported as ``__other__``, so a
misbehaving producer inventing action names cannot blow up Prometheus' memory.
Names follow the Prometheus rules (``capwatch_`` prefix, base units, ``_total`` on
counters); ``promtool check metrics`` runs on the exposition in the tests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from capwatch import __version__
from capwatch.contracts.ports import PartitionFailing

OTHER = "__other__"
DEFAULT_LIMITS: Mapping[str, int] = {
    "family": 100, "action": 500, "reason": 50, "source": 50, "partition": 1024,
    "topic": 50, "sink": 20, "type": 20, "result": 20, "verdict": 10, "status": 10,
    "test": 5, "endpoint": 5,
}
M = TypeVar("M", Counter, Gauge, Histogram)


class LabelGuard:
    """Remembers the label values seen per label name and caps their number."""

    def __init__(self, limits: Mapping[str, int] | None = None) -> None:
        self.limits = dict(DEFAULT_LIMITS if limits is None else limits)
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def value(self, label: str, value: str) -> str:
        limit = self.limits.get(label)
        if limit is None:
            return value
        with self._lock:
            seen = self._seen.setdefault(label, set())
            if value in seen:
                return value
            if len(seen) >= limit:
                return OTHER
            seen.add(value)
            return value


class Bounded(Generic[M]):
    """A metric whose ``labels(...)`` passes every value through a :class:`LabelGuard`."""

    def __init__(self, metric: M, names: tuple[str, ...], guard: LabelGuard) -> None:
        self.metric: M = metric
        self._names = names
        self._guard = guard
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        if len(values) != len(self._names):
            raise ValueError(f"expected labels {self._names}, got {values}")
        child: M = self.metric.labels(*(self._guard.value(n, str(v))
                                        for n, v in zip(self._names, values, strict=True)))
        return child

    def child(self, *values: str) -> M:
        """``labels(...)``, cached: on the per-record path resolving labels (with the
        guard) costs more than the consistency check itself."""
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.labels(*values)
        return child


ASSESSMENT_RESULTS = ("changed", "unchanged", "failed", "retry", "superseded")
DEAD_LETTER_REASONS = ("decode", "vocabulary", "type", "family", "internal")
DRIFT_DETECTORS = ("sequential", "audit")
HELD_KINDS = ("inconsistency", "drift")


class DaemonMetrics:
    """Every series capwatch exports. Attribute names are what the pipeline calls."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 label_limits: Mapping[str, int] | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.guard = LabelGuard(label_limits)
        r = self.registry
        # process_* (CPU, memory, open files, start time) and python_info: the default
        # registry has them, a registry of our own must add them.
        if registry is None:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Bounded[Counter]:
            return Bounded(Counter(name, doc, labels, registry=r), labels, self.guard)

        def gauge(name: str, doc: str, labels: tuple[str, ...]) -> Bounded[Gauge]:
            return Bounded(Gauge(name, doc, labels, registry=r), labels, self.guard)

        self.build_info = Gauge("capwatch_build_info", "capwatch version (value is always 1).",
                                ["version"], registry=r)
        self.build_info.labels(__version__).set(1)
        self.records = counter("capwatch_records_total", "Records read from the source.",
                               ("source",))
        self.transitions = counter("capwatch_transitions_total",
                                   "Transitions checked, by verdict.",
                                   ("family", "action", "verdict"))
        self.inconsistencies = counter(
            "capwatch_inconsistencies_total",
            "Transitions inconsistent with the agent's model (hard evidence of drift).",
            ("family", "action"))
        self.duplicates = counter(
            "capwatch_duplicate_steps_total",
            "Steps an agent sent again (same episode, step and action as one of its last "
            "8: a producer's retry), not observed again.", ("family",))
        self.dead_letters = counter("capwatch_dead_letters_total",
                                    "Messages sent to the dead-letter output.", ("reason",))
        self.family_moves = counter(
            "capwatch_agent_family_moves_total",
            "Agents whose record named another family than the one they were watched under: "
            "each is watched under the new family's model from then on.",
            ("family", "previous_family"))
        self.drift_tests = counter(
            "capwatch_drift_tests_total",
            "Effect-frequency tests run: each update of the sequential test by an execution "
            "(test=sequential) and each windowed chi-square of the periodic audit "
            "(test=audit).", ("family", "action", "test"))
        self.drift_alarms = counter("capwatch_drift_alarms_total",
                                    "Drift tests that failed (effect-distribution drift "
                                    "alarms after FDR control).", ("family", "action"))
        self.drift_not_confirmed = counter(
            "capwatch_drift_not_confirmed_total",
            "Drift alarms whose re-estimate by queries held every probability of the model "
            "(nothing published): detector=sequential from the stream (each also a "
            "drift_not_confirmed alert), detector=audit from the fleet audit (counted "
            "only).", ("family", "detector"))
        self.held_back = counter(
            "capwatch_held_back_total",
            "Drift alarms (kind=drift, the stream's and the audit's) and inconsistencies "
            "(kind=inconsistency) not queued for assessment because an assessment of the "
            "same behaviour ended without explaining it less than its back-off ago "
            "(detection.unexplained_backoff_s, doubling); each hold is logged once per "
            "agent, action and back-off.", ("family", "kind"))
        self.assessments_queued = counter("capwatch_assessments_queued_total",
                                          "Assessments queued.", ("family",))
        self.assessments = counter("capwatch_assessments_total", "Assessments finished.",
                                   ("family", "result"))
        self.assessment_seconds = Bounded(Histogram(
            "capwatch_assessment_duration_seconds", "Assessment wall time.", ["family"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=r),
            ("family",), self.guard)
        self.queries = counter("capwatch_agent_queries_total", "Plan-outcome queries asked.",
                               ("family",))
        self.yielded = counter(
            "capwatch_yielded_to_stream_seconds_total",
            "Seconds background threads (work=assessment, work=canary) waited between "
            "queries for a stream that was behind (assessment.behind_s).", ("work",))
        for work in ("assessment", "canary"):
            self.yielded.labels(work)
        self.model_versions = counter("capwatch_model_versions_total",
                                      "Model versions published.", ("family",))
        self.alerts = counter("capwatch_alerts_total", "Alerts published.",
                              ("family", "type"))
        self.alerts_suppressed = counter(
            "capwatch_alerts_suppressed_total",
            "Alerts dropped inside their suppression window.", ("type",))
        self.alert_delivery_failures = counter(
            "capwatch_alert_delivery_failures_total",
            "Alert batches a sink failed to deliver.", ("sink",))
        self.alerts_undelivered = Gauge(
            "capwatch_alerts_undelivered",
            "Alerts in the store that some sink has not taken yet (every replica's, as of "
            "this replica's last routing pass): waiting to be routed, grouped, retried, or "
            "held by a replica sending them.", registry=r)
        # The fleet's figures, read from the store (fleet_drift.py): the same on every
        # replica, so dashboards and rules take max across replicas, not sum.
        self.model_delta = gauge(
            "capwatch_model_delta_from_baseline",
            "Pal-tuples differing from the family's newest baseline, max over the fleet's "
            "agents (every replica reports the whole fleet: take max, not sum).", ("family",))
        self.agents_drifted = gauge(
            "capwatch_agents_drifted",
            "The fleet's agents whose model differs from the family's newest baseline "
            "(every replica reports the whole fleet: take max, not sum).", ("family",))
        self.agents = Gauge("capwatch_agents", "Agents held by this replica.", registry=r)
        self.evictions = Counter(
            "capwatch_agent_evictions_total", "Idle agents written to the store and dropped "
            "from memory (limits.max_agents_in_memory, limits.evict_idle_after_s).", registry=r)
        self.restores = Counter(
            "capwatch_agent_restores_total", "Evicted agents loaded again, with their drift "
            "tables, at their next record.", registry=r)
        self.pending = Gauge("capwatch_agents_awaiting_assessment",
                             "Agents with queued or running assessment.", registry=r)
        self.lag = gauge("capwatch_consumer_lag", "Records behind the head, per partition.",
                         ("partition",))
        self.lag_seconds = gauge(
            "capwatch_consumer_lag_seconds",
            "Age of the newest record handled, per partition, while records are waiting "
            "behind it (0 when caught up).", ("partition",))
        self.last_record = gauge(
            "capwatch_last_record_timestamp_seconds",
            "When the newest record read was written (the source's timestamp, else when it "
            "was read), Unix seconds.", ("source",))
        self.canaries = counter("capwatch_canary_queries_total", "Canary probes, by result.",
                                ("family", "result"))
        self.ingest_events = counter(
            "capwatch_ingest_events_total",
            "Events (or transition spans) posted to the HTTP ingest, by endpoint and whether"
            " they were stored (accepted) or refused.", ("endpoint", "result"))
        self.ingest_spool_bytes = Gauge(
            "capwatch_ingest_spool_bytes",
            "Bytes in the ingest spool not yet released (committed segments are deleted).",
            registry=r)

    def start_families(self, actions: Mapping[str, Iterable[str]]) -> None:
        """The event counters of every family (``actions``: family -> its action names)
        exported at 0 from the start. Otherwise a series is born at its first event, at 1,
        and increase() and rate() never count a series' first sample: against a real
        Prometheus a family's first model version and first alerts showed as 0 in the
        dashboard's 24 h panels, and CapwatchDriftAlarmsFrequent needed a fourth alarm
        (session 18). Label sets known only from events (a family a record moved an
        agent from, a sink) are still born at 1."""
        # Here, not at the top: the early HTTP server imports this module, and the alert
        # types bring the model's diff code with them.
        from capwatch.alerts.types import AlertType

        types = [t.value for t in AlertType]
        for family, names in actions.items():
            self.model_versions.labels(family)
            self.assessments_queued.labels(family)
            self.queries.labels(family)
            for result in ASSESSMENT_RESULTS:
                self.assessments.labels(family, result)
            for alert_type in types:
                self.alerts.labels(family, alert_type)
            for detector in DRIFT_DETECTORS:
                self.drift_not_confirmed.labels(family, detector)
            for kind in HELD_KINDS:
                self.held_back.labels(family, kind)
            for action in names:
                self.drift_alarms.labels(family, action)
        for reason in DEAD_LETTER_REASONS:
            self.dead_letters.labels(reason)
        for alert_type in types:
            self.alerts_suppressed.labels(alert_type)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class FailingPartitions(Collector):
    """``capwatch_kafka_partitions_failing`` (the partitions whose fetches keep failing,
    as /readyz names them) and ``capwatch_kafka_partition_fetch_failures{partition}``
    (per partition whose last fetch failed, its failed fetches since it last handed out
    a record), read from the source at each scrape, the same with every Kafka client."""

    def __init__(self, failing: Callable[[], Mapping[int, PartitionFailing]],
                 after: int) -> None:
        self._failing = failing
        self._after = after

    def collect(self) -> Iterator[GaugeMetricFamily]:
        failing = self._failing()
        g = GaugeMetricFamily(
            "capwatch_kafka_partitions_failing",
            f"Partitions of the transitions topic whose fetches failed {self._after} times "
            f"or more since they last handed out a record (a batch corrupt in the log, one "
            f"the client cannot decompress): each waits alone while the others are read; "
            f"/readyz names them.")
        g.add_metric([], float(sum(f.failures >= self._after for f in failing.values())))
        yield g
        per = GaugeMetricFamily(
            "capwatch_kafka_partition_fetch_failures",
            "Per partition whose last fetch failed: its fetches that failed since it last "
            "handed out a record (absent once it reads again).", labels=["partition"])
        for p, f in sorted(failing.items()):
            per.add_metric([str(p)], float(f.failures))
        yield per


class StoreWrites(Collector):
    """``capwatch_store_writes_failing{kind}`` (1 while the store's last write of that
    kind failed, as /readyz says) and ``capwatch_store_write_failures_total{kind}``,
    read from the store at each scrape (``SqlBase.write_failures``)."""

    KINDS = ("model_versions", "other")

    def __init__(self, failing: Callable[[], Mapping[str, str]],
                 counts: Mapping[str, int]) -> None:
        self._failing = failing
        self._counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        failing = self._failing()
        g = GaugeMetricFamily("capwatch_store_writes_failing",
                              "1 while this replica's last write of the kind to the models "
                              "store failed (a full disk, a revoked privilege), 0 once one "
                              "changed a row again or the store took /readyz's probe write "
                              "of the kind.", labels=["kind"])
        c = CounterMetricFamily("capwatch_store_write_failures",
                                "Writes of the kind the models store refused.",
                                labels=["kind"])
        for kind in self.KINDS:
            g.add_metric([kind], 1.0 if kind in failing else 0.0)
            c.add_metric([kind], float(self._counts.get(kind, 0)))
        yield g
        yield c
