"""The daemon's Prometheus metrics, in a registry of its own (tests run several daemons).

Labels are bounded: family and action, never agent id, on per-transition series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class DaemonMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.records = Counter("capwatch_records_total", "Records read from the source.",
                               ["source"], registry=r)
        self.transitions = Counter("capwatch_transitions_total",
                                   "Transitions checked, by verdict.",
                                   ["family", "action", "verdict"], registry=r)
        self.dead_letters = Counter("capwatch_dead_letters_total",
                                    "Messages sent to the dead-letter output.", ["reason"],
                                    registry=r)
        self.drift_alarms = Counter("capwatch_drift_alarms_total",
                                    "Effect-distribution drift alarms.", ["family", "action"],
                                    registry=r)
        self.assessments_queued = Counter("capwatch_assessments_queued_total",
                                          "Assessments queued.", ["family"], registry=r)
        self.assessments = Counter("capwatch_assessments_total", "Assessments finished.",
                                   ["family", "result"], registry=r)
        self.assessment_seconds = Histogram(
            "capwatch_assessment_duration_seconds", "Assessment wall time.", ["family"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=r)
        self.queries = Counter("capwatch_agent_queries_total", "Plan-outcome queries asked.",
                               ["family"], registry=r)
        self.model_versions = Counter("capwatch_model_versions_total",
                                      "Model versions published.", ["family"], registry=r)
        self.alerts = Counter("capwatch_alerts_total", "Alerts published.",
                              ["family", "type"], registry=r)
        self.model_delta = Gauge("capwatch_model_delta_from_baseline",
                                 "Pal-tuples differing from the family baseline (max).",
                                 ["family"], registry=r)
        self.agents = Gauge("capwatch_agents", "Agents held by this replica.", registry=r)
        self.pending = Gauge("capwatch_agents_awaiting_assessment",
                             "Agents with queued or running assessment.", registry=r)
        self.lag = Gauge("capwatch_consumer_lag", "Records behind the head, per partition.",
                         ["partition"], registry=r)
        self.canaries = Counter("capwatch_canary_queries_total", "Canary probes, by result.",
                                ["family", "result"], registry=r)
