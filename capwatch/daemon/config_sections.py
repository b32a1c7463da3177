"""The sections of the daemon's configuration (one pydantic model each), assembled into
:class:`capwatch.daemon.config.DaemonConfig`, which is where they are imported from.
The connection sections (TLS, Kafka and its SASL) are in
:mod:`capwatch.daemon.config_connections`.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from capwatch.alerts.policy import AlertPolicy
from capwatch.daemon.config_connections import ConfigError as ConfigError
from capwatch.daemon.config_connections import KafkaConfig as KafkaConfig
from capwatch.daemon.config_connections import KafkaSaslConfig as KafkaSaslConfig
from capwatch.daemon.config_connections import Section, one_of
from capwatch.daemon.config_connections import TlsConfig as TlsConfig
from capwatch.daemon.config_connections import read_secret as read_secret


class FleetFamily(Section):
    agents: int = Field(default=10, ge=1)


class FleetDrift(Section):
    domain: Path
    at_step: int = Field(ge=0)
    agent_id: str | None = None
    family: str | None = None

    @model_validator(mode="after")
    def _one_target(self) -> FleetDrift:
        if (self.agent_id is None) == (self.family is None):
            raise ValueError("name exactly one of agent_id or family")
        return self


class SimulatedSourceConfig(Section):
    families: dict[str, FleetFamily] = Field(default_factory=dict)
    """Agents per family; each family needs a ``problem`` in ``families``."""
    drifts: list[FleetDrift] = Field(default_factory=list)
    rounds: int = Field(default=200, ge=1)
    """Transitions per agent before the source is exhausted."""
    seed: int = 0
    episode_steps: int = Field(default=12, ge=1)
    p_inapplicable: float = Field(default=0.25, ge=0, le=1)


class SourceConfig(Section):
    kind: Literal["kafka", "jsonl", "simulated", "ingest"] = "kafka"
    """``ingest``: transitions POSTed to the daemon's HTTP server (``ingest`` section)."""
    path: str = "-"
    """jsonl: file to read, ``-`` for stdin."""
    follow: bool = False
    """jsonl: keep reading as the file grows (tail -f) instead of stopping at its end."""
    simulated: SimulatedSourceConfig = Field(default_factory=SimulatedSourceConfig)


class OutputConfig(Section):
    kind: Literal["kafka", "log", "jsonl"] = "kafka"
    """Where model versions and alerts go: Kafka topics, the log, or JSONL files."""
    directory: Path = Path("capwatch-out")
    """jsonl: models.jsonl, alerts.jsonl and deadletter.jsonl are appended here."""


class StoreConfig(Section):
    url: str = "capwatch.db"
    """A SQLite path (embedded; ``sqlite://`` + path, so ``sqlite:///var/lib/x.db`` is
    absolute) or ``postgresql://...`` (shared by replicas). The default is a plain path:
    ``sqlite:///capwatch.db`` would put the store at the file system's root."""
    connect_timeout_s: float = Field(default=60.0, gt=0)
    """PostgreSQL: how long to keep trying to connect at start before giving up."""
    clock: Literal["auto", "caller"] = "auto"
    """Whose clock says when queued work is due and when a lease runs out. ``auto``: the
    PostgreSQL server's (replicas whose clocks differ or are stepped agree on it); with
    SQLite, the daemon's wall clock made never to go back (a step back of the host's
    clock holds no work back). ``caller``: the daemon's clock as it is, for runs that
    drive time themselves (tests, replays of recorded time)."""

    @field_validator("url")
    @classmethod
    def _scheme(cls, url: str) -> str:
        # open_store's rule, here so that `run --check` refuses what the daemon would
        # refuse only when it opens the store.
        if "://" in url and not url.startswith(("postgresql://", "postgres://", "sqlite://")):
            raise ValueError("unsupported store URL: use a SQLite path (or sqlite:// +"
                             " path) or postgresql://")
        return url
    statement_timeout_s: float = Field(default=15.0, gt=0)
    """PostgreSQL: how long one round trip to the server (a statement, a commit, a
    reconnection) may take before the store gives up on it and the daemon treats the
    store as down (nothing committed, retried; ``/readyz`` says the store is
    unreachable). A frozen server otherwise holds the daemon without end. Raise it if a
    slow server fails the daemon's largest writes (a checkpoint of many agents) with
    "did not answer within". Migrations have no such bound."""


class FamilyConfig(Section):
    domain: Path
    """The PDDL/PPDDL model the family's agents were deployed with (its baseline)."""
    problem: Path | None = None
    """A problem over the family's objects; canaries and the simulated fleet use it."""


def check_agent_url(url: str, what: str, placeholders: bool = True) -> None:
    """An agent URL (template) that expands to http(s)://host...; raises ValueError."""
    fields = set()
    try:
        for _, name, spec, conv in string.Formatter().parse(url):
            if name is not None:
                fields.add(name)
                if spec or conv:
                    raise ValueError(f"{what} {url!r}: write {{{name}}} without format or "
                                     f"conversion")
    except ValueError as e:
        if "without format" in str(e):
            raise
        raise ValueError(f"{what} {url!r}: {e} (a literal brace is written {{{{ or }}}})"
                         ) from None
    unknown = fields - ({"agent_id", "family"} if placeholders else set())
    if unknown:
        allowed = "{agent_id} and {family}" if placeholders else "no placeholders"
        raise ValueError(f"{what} {url!r}: unknown placeholder "
                         f"{', '.join('{' + u + '}' for u in sorted(unknown))}; "
                         f"it may use {allowed}")
    expanded = url.format(agent_id="agent-1", family="family-1") if placeholders else url
    parts = urlsplit(expanded)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} {url!r}: must start with http:// or https:// and name a "
                         f"host (e.g. http://{{agent_id}}.agents:8080)")


class AgentsConfig(Section):
    url_template: str = "http://{agent_id}:8080"
    """Where to ask an agent plan-outcome queries; ``{agent_id}`` and ``{family}`` expand."""
    urls: dict[str, str] = Field(default_factory=dict)
    """Per-agent URLs that override the template."""
    timeout_s: float = Field(default=5.0, gt=0)
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra request headers for every agent (e.g. an API key header)."""
    bearer_token: SecretStr | None = None
    """Sent as ``Authorization: Bearer ...``; better from a Secret:
    ``CAPWATCH_AGENTS__BEARER_TOKEN`` or ``bearer_token_file``."""
    bearer_token_file: Path | None = None
    tls: TlsConfig | None = None
    """For https:// agents: the CA to trust, and a client certificate for mutual TLS."""

    @model_validator(mode="after")
    def _urls(self) -> AgentsConfig:
        check_agent_url(self.url_template, "url_template")
        for agent_id, url in self.urls.items():
            check_agent_url(url, f"urls.{agent_id}", placeholders=False)
        one_of(self.bearer_token, self.bearer_token_file, "bearer_token")
        return self

    def request_headers(self) -> dict[str, str]:
        headers = dict(self.headers)
        token = read_secret(self.bearer_token, self.bearer_token_file,
                            "agents.bearer_token_file")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers


class LimitsConfig(Section):
    max_message_bytes: int = Field(default=1_000_000, ge=64)
    max_state_atoms: int = Field(default=5_000, ge=1)
    max_trace_steps: int = Field(default=5_000, ge=1)
    max_agents_in_memory: int = Field(default=50_000, ge=1)
    """Agents held in memory; beyond it the least recently seen idle ones (nothing
    buffered, no awaited work) are evicted to the store and restored at their next record
    (docs/performance.md: 2-5 KB each while held, ~0.2 KB evicted)."""
    evict_idle_after_s: float | None = Field(default=900.0, gt=0)
    """Agents with no record for this long (and nothing buffered or awaited) are evicted
    at the next scheduled checkpoint, however many are held: an idle agent then costs
    ~0.2 KB, and its next record reads its drift tables back from the store. ``null``
    keeps agents until ``max_agents_in_memory`` is reached."""
    freeze_idle_after_s: float | None = Field(default=60.0, ge=0)
    """Agents held with no record for this long (and nothing buffered or awaited) are
    kept in memory as bytes from the next scheduled checkpoint on: ~1 KB each instead of
    3-5 KB, and their next record unpacks them (tens of µs), exactly as they were
    (docs/performance.md). ``null`` keeps them unpacked; 0 packs them at the first
    checkpoint that finds them idle, as is done anyway while more than half of
    ``max_agents_in_memory`` are held (agents differ in size, a count alone does not
    bound memory)."""


class DetectionConfig(Section):
    debounce_transitions: int = Field(default=3, ge=1)
    """Inconsistent transitions to collect before assessing (or until debounce_s)."""
    debounce_s: float = Field(default=2.0, ge=0)
    max_evidence: int = Field(default=50, ge=1)
    max_executed_evidence: int = Field(default=200, ge=0)
    """Recent executed transitions handed to the assessment (Table 2 pins modes free)."""
    drift_false_alarm_rate: float = Field(default=1e-5, ge=1e-100, lt=1)
    drift_window: int = Field(default=2000, ge=10)
    drift_min_samples: int = Field(default=100, ge=10)
    drift_fdr: float = Field(default=0.05, gt=0, lt=1)
    unexplained_backoff_s: float = Field(default=600.0, ge=0)
    """After an assessment ends without explaining its evidence (no change found, failed,
    budget spent), inconsistencies of the same kind are not assessed again for this long;
    doubled after each further such assessment, up to ``unexplained_max_backoff_s``. New,
    different evidence is assessed at once. The same holds for a drift alarm such an
    assessment did not confirm, per action: an alarm whose outcome counts are not told
    apart from the ones assessed queues nothing meanwhile. An assessment that failed
    because the agent could not be reached waits this long, not doubled: it learnt
    nothing about the behaviour."""
    unexplained_max_backoff_s: float = Field(default=6 * 3600.0, ge=0)


class AgentRetryConfig(Section):
    """Retries of an assessment whose agent could not be reached (capwatch.daemon.retry)."""

    attempts: int = Field(default=8, ge=1)
    """Attempts in all, the first included, before the ``assessment_failed`` alert."""
    backoff_s: float = Field(default=5.0, ge=0)
    """Wait after the first failure; multiplied by ``multiplier`` after each further one."""
    multiplier: float = Field(default=2.0, ge=1)
    max_backoff_s: float = Field(default=300.0, ge=0)
    jitter: float = Field(default=0.1, ge=0, lt=1)
    """Each wait varies by ± this fraction, per assessment, so agents that went down
    together are not all retried at the same instant."""


class AssessmentConfig(Section):
    method: Literal["daaisy", "verify", "auto"] = "verify"
    """``daaisy`` resolves only the pal-tuples the evidence flags; ``verify`` then also
    confirms the rest with probing queries (more queries, no missed change); ``auto`` is
    daaisy, switching to verify when over half of the pa-tuples are flagged."""
    workers: int = Field(default=2, ge=1)
    lease_s: float = Field(default=120.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    """Attempts of an assessment that fails with an error (other than an unreachable
    agent), ``retry_after_s`` apart, before the ``assessment_failed`` alert."""
    retry_after_s: float = Field(default=10.0, ge=0)
    agent_retry: AgentRetryConfig = Field(default_factory=AgentRetryConfig)
    """Failures because the agent could not be reached: exponential backoff instead."""
    query_budget: int = Field(default=500, ge=1)
    confirm_queries: int = Field(default=64, ge=0)
    """Queries of an assessment asked a second time before its version is published; an
    answer the new model cannot explain the second time (an agent whose answers do not
    hold together) fails the assessment instead. 0 asks nothing again."""
    samples: int = Field(default=30, ge=1)
    """Samples per query when re-estimating probabilities of stochastic actions."""
    min_outcome_probability: float = Field(default=0.01, ge=0, lt=1)
    """An outcome the assessment finds beside the known ones is published only once its
    probability is shown to be at least this (a rare wrong answer repeats like a rare
    outcome); otherwise the assessment fails closed naming it (docs/assessment.md,
    "Outcome probabilities"). 0 publishes any outcome that showed again."""
    probability_tolerance: float = Field(default=0.1, gt=0, le=1)
    """After a structural change of a probabilistic action, its outcome probabilities are
    re-estimated from the answers and published only once they are within this of the
    truth for two outcomes at 1/2 each, and elsewhere within the same Pearson chi-square
    distance (relative to each probability's size: about 2 · this · sqrt(p (1 - p)) for
    an outcome of probability p), but for the assessment's accepted error; otherwise the
    assessment fails closed. 1 publishes the estimate however wide."""
    reassess_every_s: float | None = Field(default=None, gt=0)
    """Re-assess each agent this replica watches with ``verify`` once per this period,
    evidence or not (daemon.reassess): finds what the stream cannot show, such as a
    precondition removed from an action the agent does not use. Off (null) by default: a
    ``verify`` asks the agent ~70-250 queries, so a fleet of 10,000 agents re-assessed daily
    asks ~10-30 queries/s of the fleet; choose the period for what the agents can take
    (e.g. 604800, weekly). ``capwatch assess agent ID`` does one on demand."""
    independent_draws: bool = False
    """The operator's word that the agents draw each step's outcome of a probabilistic
    action independently and never answer some queries as one model and others as
    another. Off (the default), an outcome a drift added beside kept known ones, on an
    action no answer runs twice, fails closed: such answers are also what an agent
    switching models per answer gives, and a model with both would be published. On,
    it is published (honest agents' added outcomes, ~21 of 298 versions of the outcome
    sweep), and a per-answer switcher is published wrong with both models' outcomes:
    nothing the answers show checks the word (docs/assessment.md, "Agents declared to
    draw independently")."""
    max_query_atoms: int = Field(default=10_000, ge=1)
    """The largest initial state (atoms) of one query to the agent: probes beyond it wait
    for the next query. The agent sets up and runs a whole query within
    ``agents.timeout_s``; lower this for slow agents (docs/agent-query-protocol.md,
    "Query size")."""
    behind_s: float | None = Field(default=0.25, gt=0)
    """The stream is behind while the newest record handled was written more than this
    long ago (the source's timestamp), counted above the least age seen over the last
    150-300 s (the producers' clock offset): the assessment workers and canary probes,
    which share the main loop's interpreter, then yield it (``behind_cpu_share``). null:
    they never yield (daemon.pacing)."""
    behind_cpu_share: float = Field(default=0.1, gt=0, le=1)
    """While the stream is behind, the share of a core the assessment workers together
    (and the canary's probe threads together) spend, each by its own CPU time, waiting
    between queries for the rest: assessments finish later, and the records that wait
    behind the backlog (an inconsistency's alert among them) sooner."""


class SchedulerConfig(Section):
    checkpoint_s: float = Field(default=5.0, gt=0)
    drift_audit_s: float = Field(default=60.0, gt=0)
    drift_audit_slice: int = Field(default=0, ge=0)
    """The audit runs in slices between batches: at most this many tables tested per turn
    of the main loop (and 32 times as many visited), BH once the round is done, then its
    rejections raised together at the next turn (docs/performance.md, "The audit in
    slices"); 0 (the default until measured better): the whole audit in one turn."""
    canary_s: float = Field(default=60.0, gt=0)
    canary_slice_s: float = Field(default=0.005, ge=0)
    """The canary round runs in slices between batches: about this much of the main
    loop's time per turn (at least one agent, and more when the round would not end
    within half of ``canary_s`` otherwise); 0: the whole round in one turn
    (docs/performance.md, "canary22")."""
    canary_idle_s: float = Field(default=120.0, gt=0)
    """An action not seen executing (nor probed) for this long is probed by a canary query:
    with ``canary_s`` 60 an action an agent stopped is probed within 3 minutes."""
    canary_busy_s: float = Field(default=240.0, gt=0)
    """Actions still in use are probed this often too, from other states and groundings
    than the agent's own (a lost precondition its own states happen to satisfy)."""
    results_poll_s: float = Field(default=2.0, gt=0)


class HealthConfig(Section):
    """When the probes say something is wrong with the daemon itself (docs/daemon.md,
    Health and readiness)."""

    unassigned_after_s: float = Field(default=60.0, gt=0)
    """``/readyz`` answers 503 once a Kafka replica has held no partition for this long,
    unless it is a member of a stable group with more members than partitions (standing
    by: 200, with a note). Longer than a rebalance takes: the members rejoin within a
    session timeout."""
    stall_after_s: float = Field(default=120.0, gt=0)
    """``/livez`` answers 503 once the main loop has not begun a turn for this long. A turn
    includes an outage's retry wait (up to 30 s) and a rebalance (up to
    ``kafka.session_timeout_ms`` in one poll), so keep it well above both."""


class AlertmanagerConfig(Section):
    url: str
    """Alertmanager's base URL, e.g. ``http://alertmanager:9093``."""
    timeout_s: float = Field(default=5.0, gt=0)
    resolve_after_s: float = Field(default=6 * 3600.0, gt=0)
    """capwatch alerts are events: Alertmanager resolves each this long after it fired."""
    generator_url: str | None = None

    @model_validator(mode="after")
    def _http(self) -> AlertmanagerConfig:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must be http(s)://, got {self.url!r}")
        return self


class AlertSinksConfig(Section):
    output: bool = True
    """The output's alert stream: the Kafka alerts topic, alerts.jsonl, or the log."""
    log: bool = False
    """A structlog ``alert`` event per alert with every field (in addition)."""
    alertmanager: AlertmanagerConfig | None = None


class AlertsConfig(Section):
    """Routing of alerts (capwatch.alerts.outbox): suppression, grouping, sinks, retries."""

    severity: dict[str, str] = Field(default_factory=dict)
    """Per alert type: info, warning or critical (defaults in docs/operations.md)."""
    suppress_seconds: dict[str, float] = Field(default_factory=dict)
    """Per alert type: a repeat of a dedup key within this window is dropped."""
    group_wait_seconds: float = Field(default=30.0, ge=0)
    """How long the first alert of a group waits for the same change in other agents."""
    group_wait_by_type: dict[str, float] = Field(default_factory=dict)
    """Per alert type, instead of group_wait_seconds. unexplained_inconsistency waits 0
    unless set here: the prompt alert of a hard inconsistency (docs/daemon.md)."""
    max_agents_listed: int = Field(default=20, ge=1)
    sinks: AlertSinksConfig = Field(default_factory=AlertSinksConfig)
    route_s: float = Field(default=1.0, gt=0)
    """How often the outbox is routed and due deliveries are sent."""
    retry_after_s: float = Field(default=5.0, gt=0)
    """First retry of a failed sink; doubled per failure up to max_retry_after_s."""
    max_retry_after_s: float = Field(default=300.0, gt=0)
    delivery_lease_s: float = Field(default=60.0, gt=0)
    """A replica sending a delivery holds it this long; if it dies meanwhile, another
    replica (or this one, restarted) sends it once the hold runs out. So it is the longest
    a crash delays an alert; keep it above the slowest sink's timeout, or a slow send is
    repeated by a second replica."""
    keep_s: float = Field(default=7 * 86400.0, gt=0)
    """Routed alerts are kept this long for inspection (at least the longest window)."""

    @model_validator(mode="after")
    def _checks(self) -> AlertsConfig:
        self.policy()  # unknown types and severities fail here, with the config's position
        if not (self.sinks.output or self.sinks.log or self.sinks.alertmanager):
            raise ValueError("alerts.sinks enables no sink: alerts would pile up unsent")
        return self

    def policy(self) -> AlertPolicy:
        return AlertPolicy.from_config({
            "severity": self.severity, "suppress_seconds": self.suppress_seconds,
            "group_wait_seconds": self.group_wait_seconds,
            "group_wait_by_type": self.group_wait_by_type,
            "max_agents_listed": self.max_agents_listed})


class IngestConfig(Section):
    """``source.kind: ingest``: transition events and OTLP traces over HTTP, for teams
    without Kafka (docs/integrating-an-agent.md). Served by the ``http`` server."""

    token: SecretStr | None = None
    """Bearer token producers must send; required. Better from a Secret:
    ``CAPWATCH_INGEST__TOKEN`` or ``token_file``. Separate from ``http.token``, which lets
    operators act: an agent that may report may not roll models back."""
    token_file: Path | None = None
    directory: Path = Path("capwatch-spool")
    """The spool: accepted events are fsynced here before the request is answered."""
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_events: int = Field(default=10_000, ge=1)
    """Events (or spans) per request."""
    max_spool_bytes: int = Field(default=1024 * 1024 * 1024, ge=1024)
    """Past this the endpoints answer 503 until the pipeline catches up."""
    segment_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    otlp: bool = True
    """Also accept OTLP traces at POST /v1/traces (needs the ``otel`` extra)."""

    @model_validator(mode="after")
    def _token(self) -> IngestConfig:
        one_of(self.token, self.token_file, "token")
        return self

    def ingest_token(self) -> str | None:
        return read_secret(self.token, self.token_file, "ingest.token_file")


class HttpConfig(Section):
    enabled: bool = True
    host: str = "127.0.0.1"
    """The address to bind: loopback by default; 0.0.0.0 (all) in a container."""
    port: int = Field(default=9464, ge=0, le=65535)
    """0 picks a free port (tests)."""
    token: SecretStr | None = None
    """Bearer token the API requires: always for writes, for reads with ``read_auth``.
    Better from a Secret: ``CAPWATCH_HTTP__TOKEN`` or ``token_file``."""
    token_file: Path | None = None
    read_auth: bool = False
    """Require the token for the read API (/api/v1/...) too. /healthz, /readyz and
    /metrics stay open for probes and Prometheus."""

    @model_validator(mode="after")
    def _auth(self) -> HttpConfig:
        one_of(self.token, self.token_file, "token")
        if self.read_auth and self.token is None and self.token_file is None:
            raise ValueError("read_auth needs a token (token, token_file, or the "
                             "CAPWATCH_HTTP__TOKEN variable)")
        return self

    def api_token(self) -> str | None:
        return read_secret(self.token, self.token_file, "http.token_file")


class ConsoleConfig(Section):
    """The operator's web pages on the HTTP port (docs/console.md)."""

    enabled: bool = True
    """Operators sign in with ``http.token`` to act; without a token the pages are
    read-only, and with ``http.read_auth`` they need a sign-in to be read at all."""


class LogConfig(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"
