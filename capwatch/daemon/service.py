"""Builds a running daemon from its configuration: source, store, publisher, agents,
assessor, HTTP server and scheduled jobs, plus SIGTERM/SIGINT handling."""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import FrameType

import structlog
from apscheduler.schedulers.background import BackgroundScheduler

from capwatch.adapters.sim.fleet import DriftSpec, FamilySpec, SimulatedFleet
from capwatch.alerts.sinks import AlertSink
from capwatch.assess.agent import AgentQuery
from capwatch.contracts.ports import AgentDirectory, Publisher, Source
from capwatch.contracts.store import ModelStore
from capwatch.contracts.wire import AlertEvent, DeadLetterRecord, ModelVersionEvent
from capwatch.daemon.assessor import Assessor, EngineAssessor
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.http import ApiServer, RecentAlerts
from capwatch.daemon.infra import Clock, utc_now
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.pipeline import Pipeline
from capwatch.model.domain import Domain, GroundAtom, Problem
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.models_store import open_store

log = structlog.get_logger("capwatch.service")


class FleetDirectory:
    """Agents of an in-process simulated fleet."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.fleet.agent(agent_id)


class HttpDirectory:
    """Agents reached over the HTTP query protocol; one client per agent, reused."""

    def __init__(self, url_template: str, urls: Mapping[str, str], timeout_s: float) -> None:
        self.url_template = url_template
        self.urls = dict(urls)
        self.timeout_s = timeout_s
        self._clients: dict[str, AgentQuery] = {}
        self._lock = threading.Lock()

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        from capwatch.adapters.io.agent_client import HttpAgentClient

        with self._lock:
            client = self._clients.get(agent_id)
            if client is None:
                url = self.urls.get(agent_id) or self.url_template.format(
                    agent_id=agent_id, family=family)
                client = HttpAgentClient(url, timeout=self.timeout_s, retries=2, backoff=0.2)
                self._clients[agent_id] = client
            return client


class TeePublisher:
    """Publishes to ``inner`` and remembers alerts for the read API."""

    def __init__(self, inner: Publisher, recent: RecentAlerts) -> None:
        self.inner = inner
        self.recent = recent

    def model_version(self, event: ModelVersionEvent) -> None:
        self.inner.model_version(event)

    def alert(self, event: AlertEvent) -> None:
        self.inner.alert(event)
        self.recent.add(event)

    def dead_letter(self, record: DeadLetterRecord) -> None:
        self.inner.dead_letter(record)

    def flush(self, timeout_s: float = 10.0) -> None:
        self.inner.flush(timeout_s)

    def close(self) -> None:
        self.inner.close()


def load_families(config: DaemonConfig) -> tuple[dict[str, Domain], dict[str, Problem]]:
    domains: dict[str, Domain] = {}
    problems: dict[str, Problem] = {}
    for name, fam in config.families.items():
        # pddlgym-style action literals ("(move-car ?from ?to)" in move-car's precondition)
        # never appear in a reported state: kept, every execution would look inconsistent.
        domains[name] = read_domain(fam.domain).without_action_literals()
        if fam.problem is not None:
            problems[name] = read_problem(fam.problem)
    return domains, problems


def build_fleet(config: DaemonConfig, domains: Mapping[str, Domain],
                problems: Mapping[str, Problem]) -> SimulatedFleet:
    sim = config.source.simulated
    specs = {name: FamilySpec(name, domains[name], problems[name]) for name in sim.families}
    agents = {f"{name}-{i:03d}": name for name, fam in sim.families.items()
              for i in range(fam.agents)}
    drifts = [DriftSpec(read_domain(d.domain).without_action_literals(), d.at_step,
                        d.agent_id, d.family)
              for d in sim.drifts]
    return SimulatedFleet(specs, agents, drifts, seed=sim.seed,
                          episode_steps=sim.episode_steps, p_inapplicable=sim.p_inapplicable)


@dataclass
class Service:
    """The daemon: the pipeline with its HTTP server and scheduler; :meth:`run` blocks
    until stopped."""

    pipeline: Pipeline
    api: ApiServer | None
    scheduler: BackgroundScheduler
    store: ModelStore
    problems: dict[str, Problem]

    def _objects(self) -> dict[str, dict[str, tuple[str, ...]]]:
        return {name: p.objects_by_type(self.pipeline.families[name])
                for name, p in self.problems.items() if name in self.pipeline.families}

    def _schedule(self) -> None:
        d, sched = self.pipeline, self.pipeline.config.scheduler
        inits: dict[str, frozenset[GroundAtom]] = {n: p.init for n, p in self.problems.items()}
        objects = self._objects()
        self.scheduler.add_job(lambda: d.submit(d.audit), "interval",
                               seconds=sched.drift_audit_s, id="drift-audit")
        self.scheduler.add_job(lambda: d.submit(lambda: d.canary(inits, objects)), "interval",
                               seconds=sched.canary_s, id="canary")
        self.scheduler.add_job(lambda: d.submit(d.checkpoint), "interval",
                               seconds=sched.checkpoint_s, id="checkpoint")
        self.scheduler.add_job(lambda: d.submit(d.poll_results), "interval",
                               seconds=sched.results_poll_s, id="results")
        # Routing reads and writes only the store and the sinks, never the registry, so it
        # runs on the scheduler's thread and a slow sink never stalls the consumer.
        self.scheduler.add_job(d.route_alerts, "interval", seconds=d.config.alerts.route_s,
                               id="alerts", max_instances=1, coalesce=True)

    def run(self, exit_when_idle: bool = False, install_signals: bool = True) -> int:
        if install_signals and threading.current_thread() is threading.main_thread():
            def handle(signum: int, frame: FrameType | None) -> None:
                log.info("signal received", signal=signal.Signals(signum).name)
                self.pipeline.stop()

            signal.signal(signal.SIGTERM, handle)
            signal.signal(signal.SIGINT, handle)
        if self.api is not None:
            self.api.start()
            log.info("http listening", url=self.api.url)
        self._schedule()
        self.scheduler.start()
        try:
            return self.pipeline.run(exit_when_idle=exit_when_idle)
        finally:
            self.scheduler.shutdown(wait=False)
            if self.api is not None:
                self.api.close()
            self.store.close()


def build_service(config: DaemonConfig, *, publisher: Publisher | None = None,
                  agents: AgentDirectory | None = None, source: Source | None = None,
                  assessor: Assessor | None = None, store: ModelStore | None = None,
                  agent_urls: Mapping[str, str] | None = None,
                  alert_sinks: list[AlertSink] | None = None,
                  clock: Clock = utc_now) -> Service:
    """Everything the configuration names, with optional replacements (tests, demo)."""
    domains, problems = load_families(config)
    store = store if store is not None else open_store(config.store.url)
    fleet: SimulatedFleet | None = None
    if source is None:
        if config.source.kind == "kafka":
            from capwatch.adapters.io.kafka import KafkaSource, ensure_topics

            k = config.kafka
            if k.create_topics:
                ensure_topics(k.bootstrap_servers, transitions=k.transitions_topic,
                              models=k.models_topic, alerts=k.alerts_topic,
                              dead_letter=k.dead_letter_topic, partitions=k.partitions,
                              replication_factor=k.replication_factor)
            source = KafkaSource(k.bootstrap_servers, k.transitions_topic, k.group_id,
                                 client_id=k.client_id, max_poll_records=k.max_poll_records,
                                 session_timeout_ms=k.session_timeout_ms,
                                 max_message_bytes=config.limits.max_message_bytes)
        elif config.source.kind == "jsonl":
            from capwatch.adapters.io.streams import JsonlSource

            source = JsonlSource(config.source.path, follow=config.source.follow)
        else:
            from capwatch.adapters.sim.source import SimulatedSource

            fleet = build_fleet(config, domains, problems)
            source = SimulatedSource(fleet, config.source.simulated.rounds)
    if publisher is None:
        if config.output.kind == "kafka":
            from capwatch.adapters.io.kafka import KafkaPublisher

            k = config.kafka
            publisher = KafkaPublisher(k.bootstrap_servers, models_topic=k.models_topic,
                                       alerts_topic=k.alerts_topic,
                                       dead_letter_topic=k.dead_letter_topic,
                                       client_id=k.client_id)
        elif config.output.kind == "jsonl":
            from capwatch.adapters.io.streams import JsonlPublisher

            publisher = JsonlPublisher(config.output.directory)
        else:
            from capwatch.adapters.io.streams import LogPublisher

            publisher = LogPublisher()
    if agents is None:
        if fleet is not None:
            agents = FleetDirectory(fleet)
        else:
            urls = {**config.agents.urls, **(agent_urls or {})}
            agents = HttpDirectory(config.agents.url_template, urls, config.agents.timeout_s)
    objects = {name: {t: list(objs) for t, objs in p.objects_by_type(domains[name]).items()}
               for name, p in problems.items() if name in domains}
    if assessor is None:
        assessor = EngineAssessor(objects, config.assessment.method)
    recent = RecentAlerts()
    metrics = DaemonMetrics()
    pipeline = Pipeline(config, store=store, source=source,
                        publisher=TeePublisher(publisher, recent), agents=agents,
                        assessor=assessor, families=domains, metrics=metrics,
                        alert_sinks=alert_sinks, clock=clock)
    api = None
    if config.http.enabled:
        def family_of(agent_id: str) -> str | None:
            state = pipeline.registry.get(agent_id)
            return state.family if state is not None else None

        api = ApiServer(store, metrics.registry, ready=lambda: pipeline.ready,
                        families_of=family_of, alerts=recent, host=config.http.host,
                        port=config.http.port)
    scheduler = BackgroundScheduler(timezone="UTC")
    return Service(pipeline, api, scheduler, store, problems)
