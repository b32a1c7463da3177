"""Builds a running daemon from its configuration: source, store, publisher, agents,
assessor, HTTP server and scheduled jobs, plus SIGTERM/SIGINT handling.

Kept whole, past the size where a module is usually split, because it is the one place
that knows every part's configuration and start order: the parts themselves live in
their own modules, and what is left here is wiring that reads top to bottom in the order
the daemon starts and stops.
"""

from __future__ import annotations

import logging
import signal
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType

import structlog
from apscheduler.schedulers.background import BackgroundScheduler

from capwatch.adapters.io.kafka_liveness import BrokerLiveness
from capwatch.adapters.sim.fleet import DriftSpec, FamilySpec, SimulatedFleet
from capwatch.alerts.sinks import AlertSink
from capwatch.assess.agent import AgentQuery
from capwatch.contracts.agent_protocol import agent_url
from capwatch.contracts.errors import error_text
from capwatch.contracts.ports import (
    AgentDirectory,
    GroupView,
    Publisher,
    ReportsFailingPartitions,
    Source,
)
from capwatch.contracts.store import ModelStore
from capwatch.contracts.wire import AlertEvent, DeadLetterRecord, ModelVersionEvent
from capwatch.daemon.assessor import Assessor, EngineAssessor
from capwatch.daemon.config import ConfigError, DaemonConfig, KafkaConfig
from capwatch.daemon.events import resend_newest_versions
from capwatch.daemon.http import ApiServer, RecentAlerts
from capwatch.daemon.infra import Clock, utc_now
from capwatch.daemon.ingest import IngestEndpoints
from capwatch.daemon.metrics import DaemonMetrics, FailingPartitions, StoreWrites
from capwatch.daemon.pipeline import FAILING_FETCHES, Pipeline
from capwatch.daemon.redact import redact_url
from capwatch.daemon.startup import EarlyStart, Startup, start_early
from capwatch.model.domain import Domain, GroundAtom, Problem
from capwatch.model.errors import ModelError
from capwatch.model.object_types import ObjectTypes
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.models_store import open_store

log = structlog.get_logger("capwatch.service")


class FleetDirectory:
    """Agents of an in-process simulated fleet."""

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.fleet.agent(agent_id)


class DependencyError(RuntimeError):
    """A server the daemon needs (Kafka, the store) cannot be used; the message says which
    and why."""


class HttpDirectory:
    """Agents reached over the HTTP query protocol; one client per agent, reused."""

    def __init__(self, url_template: str, urls: Mapping[str, str], timeout_s: float, *,
                 headers: Mapping[str, str] | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.url_template = url_template
        self.urls = dict(urls)
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.ssl_context = ssl_context
        self._clients: dict[str, AgentQuery] = {}
        self._lock = threading.Lock()

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        from capwatch.adapters.io.agent_client import HttpAgentClient

        with self._lock:
            client = self._clients.get(agent_id)
            if client is None:
                # A configured URL is used as given; a template only over a valid id.
                url = self.urls.get(agent_id) or agent_url(self.url_template, agent_id,
                                                           family)
                # The client's own cap (64 MiB, docs/agent-query-protocol.md): an answer
                # holds one state per sample, up to 1,000 samples of a query's state, so
                # a cap sized for one state failed sampled queries on large states.
                client = HttpAgentClient(url, timeout=self.timeout_s, retries=2, backoff=0.2,
                                         headers=self.headers, ssl_context=self.ssl_context,
                                         agent_id=agent_id)
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
        domain = read_domain(fam.domain)
        domains[name] = domain.without_action_literals()
        if fam.problem is not None:
            problem = read_problem(fam.problem)
            misfits = _problem_misfits(domain, problem)
            if misfits:
                # The canaries draw objects and start states from the problem: one of
                # another domain (a pasted path) made every probe an unknown predicate.
                raise ModelError(f"family {name}: problem {fam.problem} does not fit domain"
                                 f" {domain.name} ({fam.domain}): " + "; ".join(misfits))
            problems[name] = problem
    return domains, problems


def _problem_misfits(domain: Domain, problem: Problem, at_most: int = 3) -> list[str]:
    """What of the problem the domain's vocabulary lacks (checked against the domain as
    written, so a pddlgym action literal in the init is no misfit)."""
    predicates = {p.name: p for p in domain.predicates}
    types = domain.types.names
    typed = {o.name: o.type for o in (*domain.constants, *problem.objects)}
    found: list[str] = []
    for atom in sorted(problem.init):
        predicate = predicates.get(atom[0])
        if predicate is None:
            found.append(f"init atom ({' '.join(atom)}): unknown predicate {atom[0]!r}")
        elif predicate.arity != len(atom) - 1:
            found.append(f"init atom ({' '.join(atom)}): {atom[0]!r} takes "
                         f"{predicate.arity} arguments")
        else:
            # Arguments in the wrong order ("(at hall r1)") passed: the canaries then
            # drew start states in which r1 was nowhere.
            for name, param in zip(atom[1:], predicate.parameters, strict=True):
                kind = typed.get(name)
                if kind is None:
                    found.append(f"init atom ({' '.join(atom)}): object {name!r} is not "
                                 "declared")
                elif kind in types and not domain.types.is_subtype(kind, param.type):
                    found.append(f"init atom ({' '.join(atom)}): {name} is a {kind}, "
                                 f"{atom[0]!r} takes a {param.type} there")
    for obj in problem.objects:
        if obj.type not in types:
            found.append(f"object {obj.name} has unknown type {obj.type!r}")
    if len(found) > at_most:
        found = [*found[:at_most], f"(+{len(found) - at_most} more)"]
    return found


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
    kafka_liveness: BrokerLiveness | None = None

    def _objects(self) -> dict[str, dict[str, tuple[str, ...]]]:
        return {name: p.objects_by_type(self.pipeline.families[name])
                for name, p in self.problems.items() if name in self.pipeline.families}

    def _schedule(self) -> None:
        d, sched = self.pipeline, self.pipeline.config.scheduler
        inits: dict[str, frozenset[GroundAtom]] = {n: p.init for n, p in self.problems.items()}
        objects = self._objects()
        self.scheduler.add_job(lambda: d.submit(d.start_audit), "interval",
                               seconds=sched.drift_audit_s, id="drift-audit")
        self.scheduler.add_job(lambda: d.submit(lambda: d.canary(inits, objects)), "interval",
                               seconds=sched.canary_s, id="canary")
        self.scheduler.add_job(lambda: d.submit(lambda: d.checkpoint(background=True)),
                               "interval",
                               seconds=sched.checkpoint_s, id="checkpoint")
        self.scheduler.add_job(lambda: d.submit(d.poll_results), "interval",
                               seconds=sched.results_poll_s, id="results")
        every = d.config.assessment.reassess_every_s
        if every is not None:
            # A round queues the agents whose phase passed since the last: a minute's
            # rounds keep each agent's re-assessment within a minute of its phase.
            self.scheduler.add_job(lambda: d.submit(d.reassess), "interval",
                                   seconds=min(60.0, every), id="reassess")

    def run(self, exit_when_idle: bool = False, install_signals: bool = True) -> int:
        if install_signals and threading.current_thread() is threading.main_thread():
            def handle(signum: int, frame: FrameType | None) -> None:
                # Nothing that takes a lock (a log line, an Event): see Pipeline.signalled.
                self.pipeline.signalled = signum

            signal.signal(signal.SIGTERM, handle)
            signal.signal(signal.SIGINT, handle)
        if self.api is not None and not self.api.started:
            self.api.start()
            log.info("http listening", url=self.api.url)
        self._schedule()
        self.scheduler.start()
        if self.kafka_liveness is not None:
            self.kafka_liveness.start()
        try:
            return self.pipeline.run(exit_when_idle=exit_when_idle)
        finally:
            if self.kafka_liveness is not None:
                self.kafka_liveness.close()
            self.scheduler.shutdown(wait=False)
            if self.api is not None:
                self.api.close()
            self.store.close()


class _RefusalWatch(logging.Handler):
    """kafka-python retries a refused login or certificate like an unreachable broker and
    ends in "Unable to bootstrap"; the real cause is only in its log. Keep it, so a wrong
    password fails at once with its reason instead of after the whole connect timeout."""

    MARKERS = ("SaslAuthenticationFailedError", "UnsupportedSaslMechanism",
               "IllegalSaslState", "SSL:", "CERTIFICATE")

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.refusal: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if self.refusal is None and any(m in message for m in self.MARKERS):
            self.refusal = message.split(">: ", 1)[-1]


def kafka_clients(k: KafkaConfig) -> tuple[Callable[..., Source], Callable[..., Publisher]]:
    """The source and publisher classes of the configured Kafka client (the same
    arguments for both); a ConfigError if its package is not installed."""
    if k.client == "confluent-kafka":
        try:
            from capwatch.adapters.io.kafka_confluent import (
                ConfluentKafkaPublisher,
                ConfluentKafkaSource,
            )
        except ImportError as e:
            if e.name != "confluent_kafka":
                raise
            raise ConfigError(
                "kafka.client is confluent-kafka but the confluent-kafka package is not "
                "installed: pip install 'capwatch[confluent]' (the container image: "
                "build it with EXTRAS=otel,confluent, deploy/image/build.sh), or set "
                "kafka.client to kafka-python") from None
        return ConfluentKafkaSource, ConfluentKafkaPublisher
    from capwatch.adapters.io.kafka import KafkaPublisher, KafkaSource

    return KafkaSource, KafkaPublisher


def wait_for_kafka(k: KafkaConfig, startup: Startup | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> None:
    """Try the brokers until they answer or ``connect_timeout_s`` passes, logging each
    attempt; a refused login or certificate fails at once (retrying cannot fix it)."""
    from kafka.errors import SaslAuthenticationFailedError, UnsupportedSaslMechanismError

    from capwatch.adapters.io.kafka import list_topics

    watch = _RefusalWatch()
    kafka_log = logging.getLogger("kafka")
    kafka_log.addHandler(watch)
    try:
        _wait_for_kafka(k, startup, sleep, watch, list_topics,
                        (SaslAuthenticationFailedError, UnsupportedSaslMechanismError,
                         ssl.SSLError))
    finally:
        kafka_log.removeHandler(watch)


def _wait_for_kafka(k: KafkaConfig, startup: Startup | None, sleep: Callable[[float], None],
                    watch: _RefusalWatch, list_topics: Callable[..., set[str]],
                    refusals: tuple[type[BaseException], ...]) -> None:
    where = f"Kafka at {k.bootstrap_servers} ({k.security_protocol})"
    security = k.client_options()
    t0 = time.monotonic()
    deadline = t0 + k.connect_timeout_s
    delay, attempt = 1.0, 0
    while True:
        attempt += 1
        log.info("waiting for Kafka", bootstrap_servers=k.bootstrap_servers,
                 security_protocol=k.security_protocol, attempt=attempt)
        if attempt == 1 and startup is not None:
            # The log line first: a probe that sees /readyz say it may stop the daemon at
            # once, and the log must already hold what the state said (test_early_probes
            # read the log after its SIGTERM and missed the line under load).
            startup.waiting_for(where)
        try:
            list_topics(k.bootstrap_servers, security=security,
                        client_id=f"{k.client_id}-probe",
                        timeout_s=max(1.0, min(5.0, (deadline - time.monotonic()) / 2)))
        except refusals as e:
            raise DependencyError(f"{where}: refused us: {error_text(e)}") from None
        except Exception as e:
            if watch.refusal is not None:
                raise DependencyError(f"{where}: refused us: {watch.refusal}") from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise DependencyError(
                    f"{where}: not reachable within {k.connect_timeout_s:g} s "
                    f"({attempt} attempts; last: {error_text(e)})") from None
            log.warning("Kafka not reachable yet", bootstrap_servers=k.bootstrap_servers,
                        error=error_text(e), retry_in_s=round(min(delay, left), 1))
            sleep(min(delay, left))
            delay = min(delay * 2, 10.0)
            continue
        log.info("Kafka reachable", bootstrap_servers=k.bootstrap_servers,
                 seconds=round(time.monotonic() - t0, 2))
        return


def open_store_waiting(config: DaemonConfig, startup: Startup | None = None,
                       sleep: Callable[[float], None] = time.sleep) -> ModelStore:
    """Open the store, retrying a PostgreSQL server that does not answer yet for
    ``store.connect_timeout_s``; every other failure (a bad path, a schema newer than
    this capwatch) is final at once."""
    shown = redact_url(config.store.url)
    if startup is not None:
        startup.waiting_for(f"the store at {shown}")
    t0 = time.monotonic()
    deadline = t0 + config.store.connect_timeout_s
    delay, attempt = 1.0, 0
    while True:
        attempt += 1
        log.info("opening the store", store=shown, attempt=attempt)
        try:
            store = open_store(config.store.url,
                               statement_timeout_s=config.store.statement_timeout_s,
                               clock=None if config.store.clock == "auto" else "caller")
        except Exception as e:
            import psycopg

            if not isinstance(e, psycopg.OperationalError):
                raise DependencyError(f"store at {shown}: {error_text(e)}") from None
            left = deadline - time.monotonic()
            cause = " ".join(str(e).split())
            if left <= 0:
                raise DependencyError(
                    f"store at {shown}: not reachable within "
                    f"{config.store.connect_timeout_s:g} s ({attempt} attempts; last: "
                    f"{cause})") from None
            log.warning("store not reachable yet", store=shown, error=cause,
                        retry_in_s=round(min(delay, left), 1))
            sleep(min(delay, left))
            delay = min(delay * 2, 10.0)
            continue
        log.info("store ready", store=shown, seconds=round(time.monotonic() - t0, 2))
        return store


def build_service(config: DaemonConfig, *, publisher: Publisher | None = None,
                  agents: AgentDirectory | None = None, source: Source | None = None,
                  assessor: Assessor | None = None, store: ModelStore | None = None,
                  agent_urls: Mapping[str, str] | None = None,
                  alert_sinks: list[AlertSink] | None = None,
                  clock: Clock = utc_now, early: EarlyStart | None = None,
                  families: tuple[dict[str, Domain], dict[str, Problem]] | None = None,
                  ) -> Service:
    """Everything the configuration names, with optional replacements (tests, demo).

    The HTTP server starts first (``early``: already started by `capwatch run`, before this
    module was imported), so /healthz answers (and /readyz says what the daemon is doing)
    while the models are read and the store and the brokers are reached, each logged as it
    is awaited. ``families``: the models already read from ``config``.
    """
    if early is None:
        early = start_early(config)
    try:
        if families is None:
            early.startup.doing = "reading the family models"
            families = load_families(config)
        domains, problems = families
        return _build(config, domains, problems, early.recent, early.metrics, early.startup,
                      early.api, publisher=publisher, agents=agents, source=source,
                      assessor=assessor, store=store, agent_urls=agent_urls,
                      alert_sinks=alert_sinks, clock=clock)
    except BaseException:
        early.close()
        raise


def _build(config: DaemonConfig, domains: dict[str, Domain], problems: dict[str, Problem],
           recent: RecentAlerts, metrics: DaemonMetrics, startup: Startup,
           api: ApiServer | None, *, publisher: Publisher | None,
           agents: AgentDirectory | None, source: Source | None, assessor: Assessor | None,
           store: ModelStore | None, agent_urls: Mapping[str, str] | None,
           alert_sinks: list[AlertSink] | None, clock: Clock) -> Service:
    metrics.start_families({name: [a.name for a in d.actions] for name, d in domains.items()})
    if store is None:
        store = open_store_waiting(config, startup)
    failing = getattr(store, "write_failures", None)
    counts = getattr(store, "write_failure_count", None)
    if failing is not None and counts is not None:
        metrics.registry.register(StoreWrites(failing, counts))
    needs_kafka = (source is None and config.source.kind == "kafka") or \
        (publisher is None and config.output.kind == "kafka")
    if needs_kafka:
        wait_for_kafka(config.kafka, startup)
    fleet: SimulatedFleet | None = None
    ingest: IngestEndpoints | None = None
    if source is None:
        if config.source.kind == "kafka":
            from capwatch.adapters.io.kafka import ensure_topics

            k = config.kafka
            kafka_source, _ = kafka_clients(k)
            if k.create_topics:
                startup.doing = "creating the Kafka topics"
                ensure_topics(k.bootstrap_servers, transitions=k.transitions_topic,
                              models=k.models_topic, alerts=k.alerts_topic,
                              dead_letter=k.dead_letter_topic, partitions=k.partitions,
                              replication_factor=k.replication_factor,
                              security=k.client_options())
            extra = {}
            if k.consumer_process and k.client == "kafka-python":
                from capwatch.adapters.io.kafka_process import ProcessKafkaSource
                from capwatch.daemon.cpus import warn_without_second_cpu

                warn_without_second_cpu()
                kafka_source = ProcessKafkaSource
                extra["log_setup"] = ("capwatch.daemon.logs", "configure_logging",
                                      (config.log.level, config.log.format))
            startup.doing = f"connecting the consumer of {k.transitions_topic}"
            source = kafka_source(k.bootstrap_servers, k.transitions_topic, k.group_id,
                                  **extra, client_id=k.client_id,
                                  max_poll_records=k.max_poll_records,
                                  fetch_max_wait_ms=k.fetch_max_wait_ms,
                                  partition_fetch_bytes=k.partition_fetch_bytes,
                                  session_timeout_ms=k.session_timeout_ms,
                                  max_message_bytes=config.limits.max_message_bytes,
                                  auto_offset_reset=k.auto_offset_reset,
                                  isolation_level=k.isolation_level,
                                  security=k.client_options())
        elif config.source.kind == "jsonl":
            from capwatch.adapters.io.streams import JsonlSource

            source = JsonlSource(config.source.path, follow=config.source.follow,
                                 max_line_bytes=config.limits.max_message_bytes)
        elif config.source.kind == "ingest":
            from capwatch.adapters.io.spool import Spool, SpoolSource
            from capwatch.contracts.wire import DecodeLimits

            ing = config.ingest
            spool = Spool(ing.directory, segment_bytes=ing.segment_bytes,
                          max_bytes=ing.max_spool_bytes)
            # Named per replica: each replica has its own spool and its own checkpoint.
            source = SpoolSource(spool, f"ingest-{config.replica_id}")
            lim = config.limits
            ingest = IngestEndpoints(spool, ing, domains, DecodeLimits(
                lim.max_message_bytes, lim.max_state_atoms, lim.max_trace_steps), metrics)
        else:
            from capwatch.adapters.sim.source import SimulatedSource

            fleet = build_fleet(config, domains, problems)
            source = SimulatedSource(fleet, config.source.simulated.rounds)
    if isinstance(source, ReportsFailingPartitions):
        metrics.registry.register(FailingPartitions(source.failing, FAILING_FETCHES))
    if publisher is None:
        if config.output.kind == "kafka":
            k = config.kafka
            _, kafka_publisher = kafka_clients(k)
            publisher = kafka_publisher(k.bootstrap_servers, models_topic=k.models_topic,
                                        alerts_topic=k.alerts_topic,
                                        dead_letter_topic=k.dead_letter_topic,
                                        client_id=k.client_id, security=k.client_options())
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
            a = config.agents
            urls = {**a.urls, **(agent_urls or {})}
            agents = HttpDirectory(a.url_template, urls, a.timeout_s,
                                   headers=a.request_headers(),
                                   ssl_context=a.tls.context() if a.tls else None)
    objects = {name: {t: list(objs) for t, objs in p.objects_by_type(domains[name]).items()}
               for name, p in problems.items() if name in domains}
    if assessor is None:
        det = config.detection
        assessor = EngineAssessor(objects, config.assessment.method,
                                  audit_window=det.drift_window, audit_level=det.drift_fdr)
    liveness = None
    if needs_kafka:
        k = config.kafka
        # Unanswered for longer than a session, the group would have dropped us anyway.
        topic = k.transitions_topic if config.source.kind == "kafka" else k.models_topic
        liveness = BrokerLiveness(k.bootstrap_servers, topic,
                                  timeout_s=k.session_timeout_ms / 1000,
                                  security=k.client_options(),
                                  client_id=f"{k.client_id}-liveness",
                                  group=k.group_id if config.source.kind == "kafka" else None)
    group_view = None
    if liveness is not None and liveness.group is not None:
        probe = liveness

        def group_view() -> GroupView | None:
            # Older than a session, the group may have moved on: say it is not known.
            return probe.group_view(max_age_s=probe.timeout_s)

    resend_newest_versions(publisher, store)
    startup.doing = "building the pipeline"
    pipeline = Pipeline(config, store=store, source=source,
                        publisher=TeePublisher(publisher, recent), agents=agents,
                        assessor=assessor, families=domains, metrics=metrics,
                        alert_sinks=alert_sinks, clock=clock,
                        checks=[liveness.problem] if liveness is not None else [],
                        group_view=group_view,
                        object_types={name: ObjectTypes((*p.objects, *domains[name].constants))
                                      for name, p in problems.items() if name in domains})
    pipeline.starting = "starting the main loop"
    if api is not None:
        def family_of(agent_id: str) -> str | None:
            state = pipeline.registry.get(agent_id)
            return state.family if state is not None else None

        api.attach(store, ready=lambda: pipeline.ready, families_of=family_of,
                   problems=pipeline.problems, notes=pipeline.notes, stalled=pipeline.stalled)
        api.ingest = ingest
        if config.console.enabled:
            from capwatch.console.web import Console

            api.console = Console(store, token=config.http.api_token(),
                                  read_auth=config.http.read_auth, clock=clock)
    startup.doing = None
    # The jobs only queue a command for the main loop (a checkpoint, an audit, a canary
    # round, a poll of the results), so each is over at once. A run the scheduler's thread
    # wakes late for (a loaded machine: the thread waits for the CPU and the GIL) is still
    # wanted, once: APScheduler's default dropped any run more than 1 s late with a warning
    # ("missed by 0:00:02") that read like a fault, and a checkpoint skipped is a commit
    # later. Runs that piled up are one run (coalesce).
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={
        "coalesce": True, "max_instances": 1, "misfire_grace_time": None})
    return Service(pipeline, api, scheduler, store, problems, liveness)
