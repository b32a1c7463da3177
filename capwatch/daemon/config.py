"""Typed daemon configuration: a YAML file plus ``CAPWATCH_*`` environment variables.

Environment variables override the file (``CAPWATCH_KAFKA__BOOTSTRAP_SERVERS`` sets
``kafka.bootstrap_servers``: ``__`` separates levels), because deployments keep one
file per environment and inject secrets and addresses through the environment.

Everything is validated before the daemon touches a server. An error names where the
bad value came from: ``capwatch.yaml:12:3: kafka.group_id: ...`` for the file, the
variable's name for the environment.

The schema is assembled here (:class:`DaemonConfig`), one model per section: the sections
live in :mod:`capwatch.daemon.config_sections` and the connection sections (TLS, Kafka and
its SASL) in :mod:`capwatch.daemon.config_connections`, all imported from this module. The
Helm chart's values schema is generated from it (helm/gen_values_schema.py).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    Field,
    ValidationError,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from capwatch.daemon.config_connections import ConfigError as ConfigError
from capwatch.daemon.config_connections import KafkaConfig as KafkaConfig
from capwatch.daemon.config_connections import KafkaSaslConfig as KafkaSaslConfig
from capwatch.daemon.config_connections import TlsConfig as TlsConfig
from capwatch.daemon.config_connections import read_secret as read_secret
from capwatch.daemon.config_sections import AgentRetryConfig as AgentRetryConfig
from capwatch.daemon.config_sections import AgentsConfig as AgentsConfig
from capwatch.daemon.config_sections import AlertmanagerConfig as AlertmanagerConfig
from capwatch.daemon.config_sections import AlertsConfig as AlertsConfig
from capwatch.daemon.config_sections import AlertSinksConfig as AlertSinksConfig
from capwatch.daemon.config_sections import AssessmentConfig as AssessmentConfig
from capwatch.daemon.config_sections import ConsoleConfig as ConsoleConfig
from capwatch.daemon.config_sections import DetectionConfig as DetectionConfig
from capwatch.daemon.config_sections import FamilyConfig as FamilyConfig
from capwatch.daemon.config_sections import FleetDrift as FleetDrift
from capwatch.daemon.config_sections import FleetFamily as FleetFamily
from capwatch.daemon.config_sections import HealthConfig as HealthConfig
from capwatch.daemon.config_sections import HttpConfig as HttpConfig
from capwatch.daemon.config_sections import IngestConfig as IngestConfig
from capwatch.daemon.config_sections import LimitsConfig as LimitsConfig
from capwatch.daemon.config_sections import LogConfig as LogConfig
from capwatch.daemon.config_sections import OutputConfig as OutputConfig
from capwatch.daemon.config_sections import SchedulerConfig as SchedulerConfig
from capwatch.daemon.config_sections import SimulatedSourceConfig as SimulatedSourceConfig
from capwatch.daemon.config_sections import SourceConfig as SourceConfig
from capwatch.daemon.config_sections import StoreConfig as StoreConfig
from capwatch.daemon.config_sections import check_agent_url as check_agent_url
from capwatch.daemon.redact import redacted

ENV_PREFIX = "CAPWATCH_"
ENV_DELIMITER = "__"



class DaemonConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_DELIMITER, extra="forbid",
        case_sensitive=False,
    )

    replica_id: str = Field(default_factory=socket.gethostname)
    source: SourceConfig = Field(default_factory=SourceConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    families: dict[str, FamilyConfig] = Field(default_factory=dict)
    agents: AgentsConfig = Field(default_factory=AgentsConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    detection: DetectionConfig = Field(default_factory=DetectionConfig)
    assessment: AssessmentConfig = Field(default_factory=AssessmentConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    shutdown_grace_s: float = Field(default=20.0, gt=0)
    """SIGTERM: in-flight assessments get this long before they are left to the queue."""

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file arrives as init kwargs; the environment must win over it.
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _cross_checks(self) -> DaemonConfig:
        if self.limits.max_message_bytes + 65_536 > 1_000_000_000:
            # A partition fetch must hold the largest message and a little more
            # (kafka_common.fetch_bytes); librdkafka refuses a fetch over 1e9 bytes only
            # when the consumer is made, long after these checks.
            raise ValueError("limits.max_message_bytes must be at most 999934464 (a"
                             " partition fetch holds the largest message plus 64 KiB,"
                             " and Kafka clients fetch at most 1e9 bytes)")
        if self.source.kind == "ingest":
            if not self.http.enabled:
                raise ValueError("source.kind ingest is served by the HTTP server: set"
                                 " http.enabled: true")
            if self.ingest.token is None and self.ingest.token_file is None:
                raise ValueError("source.kind ingest needs ingest.token (the bearer token"
                                 " producers send; CAPWATCH_INGEST__TOKEN)")
        if self.source.kind == "simulated":
            for name in self.source.simulated.families:
                fam = self.families.get(name)
                if fam is None:
                    raise ValueError(f"source.simulated.families names {name!r}, which is not"
                                     f" in families")
                if fam.problem is None:
                    raise ValueError(f"families.{name}.problem is needed by the simulated"
                                     f" source")
            for d in self.source.simulated.drifts:
                if d.family is not None and d.family not in self.families:
                    raise ValueError(f"a drift targets unknown family {d.family!r}")
        return self


class _LineLoader(yaml.SafeLoader):
    """Keeps every mapping node's marks so errors can point at a line."""


def _positions(node: yaml.Node, path: tuple[str | int, ...],
               out: dict[tuple[str | int, ...], tuple[int, int]],
               twice: list[str] | None = None, name: str = "") -> None:
    """Every node's line and column by its path; ``twice`` collects the keys a mapping
    gives more than once (YAML loaders keep the last one without a word, so a second
    ``kafka:`` section pasted below the first silently replaced its settings)."""
    out[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        first: dict[str, int] = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k)
            line, col = k.start_mark.line + 1, k.start_mark.column + 1
            if twice is not None and key != "<<":
                if key in first:
                    dotted = ".".join(str(p) for p in (*path, key))
                    twice.append(f"{name}:{line}:{col}: {dotted}: given twice (first at"
                                 f" line {first[key]})")
                else:
                    first[key] = line
            out[(*path, key)] = (line, col)
            _positions(v, (*path, key), out, twice, name)
            out[(*path, key)] = (line, col)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _positions(v, (*path, i), out, twice, name)


def _env_name(loc: tuple[str | int, ...]) -> str:
    return ENV_PREFIX + ENV_DELIMITER.join(str(p).upper() for p in loc)


def _resolve_paths(data: dict[str, Any], base: Path) -> None:
    """Relative model paths in a file are relative to the file, not the working directory."""
    for fam in (data.get("families") or {}).values():
        if isinstance(fam, dict):
            for k in ("domain", "problem"):
                if isinstance(fam.get(k), str) and not Path(fam[k]).is_absolute():
                    fam[k] = str(base / fam[k])
    sim = ((data.get("source") or {}).get("simulated") or {})
    for d in sim.get("drifts") or []:
        if isinstance(d, dict) and isinstance(d.get("domain"), str) \
                and not Path(d["domain"]).is_absolute():
            d["domain"] = str(base / d["domain"])
    src = data.get("source") or {}
    if isinstance(src, dict) and isinstance(src.get("path"), str) and src["path"] != "-" \
            and not Path(src["path"]).is_absolute():
        src["path"] = str(base / src["path"])
    out = data.get("output") or {}
    if isinstance(out.get("directory"), str) and not Path(out["directory"]).is_absolute():
        out["directory"] = str(base / out["directory"])
    ingest = data.get("ingest") or {}
    if isinstance(ingest, dict) and isinstance(ingest.get("directory"), str) \
            and not Path(ingest["directory"]).is_absolute():
        ingest["directory"] = str(base / ingest["directory"])


def load_config(path: str | Path | None = None, *, text: str | None = None,
                source_name: str | None = None) -> DaemonConfig:
    """Read and validate the configuration; raises :class:`ConfigError` naming the spot."""
    name = source_name or (str(path) if path is not None else "<config>")
    if text is None and path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{name}: cannot read the configuration: {e.strerror}") from None
    data: dict[str, Any] = {}
    positions: dict[tuple[str | int, ...], tuple[int, int]] = {}
    if text:
        try:
            node = yaml.compose(text, Loader=_LineLoader)
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
            problem = getattr(e, "problem", None) or str(e)
            raise ConfigError(f"{where}: not valid YAML: {problem}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{name}:1:1: the configuration must be a mapping of sections")
        data = loaded or {}
        if node is not None:
            twice: list[str] = []
            _positions(node, (), positions, twice, name)
            if twice:
                raise ConfigError("invalid configuration:\n  " + "\n  ".join(twice))
        if path is not None:
            _resolve_paths(data, Path(path).resolve().parent)
    unknown = _unknown_sections_in_environment()
    if unknown:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(unknown))
    try:
        return DaemonConfig(**data)
    except ValidationError as e:
        raise ConfigError(_explain(e, name, positions, data)) from None


def _unknown_sections_in_environment() -> list[str]:
    """``CAPWATCH_<SECTION>__...`` variables whose section the configuration lacks.

    pydantic-settings refuses a misspelt field of a known section (extra="forbid") but
    drops a variable whose section it does not know, so ``CAPWATCH_KAFAK__BOOTSTRAP_SERVERS``
    left the daemon on its default broker without a word. Only names with the nesting
    delimiter are judged: ``CAPWATCH_PURE_PYTHON`` and the like are not configuration."""
    fields = set(DaemonConfig.model_fields)
    problems = []
    for key in sorted(os.environ):
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or ENV_DELIMITER not in upper[len(ENV_PREFIX):]:
            continue
        section = upper[len(ENV_PREFIX):].split(ENV_DELIMITER, 1)[0].lower()
        if section not in fields:
            problems.append(f"environment variable {key}: no configuration section"
                            f" {section!r} (sections: {', '.join(sorted(fields))})")
    return problems


_SHOWN_CHARS = 80


def _explain(error: ValidationError, name: str,
             positions: dict[tuple[str | int, ...], tuple[int, int]],
             data: dict[str, Any]) -> str:
    lines = []
    for err in error.errors(include_url=False):
        loc = tuple(err["loc"])
        dotted = ".".join(str(p) for p in loc) or "(top level)"
        env = _env_name(loc)
        if loc and env in {k.upper() for k in os.environ}:
            where = f"environment variable {env}"
        else:
            # Walk up to the nearest node the file has (a missing key points at its parent).
            probe = loc
            while probe and probe not in positions:
                probe = probe[:-1]
            line, col = positions.get(probe, (1, 1))
            where = f"{name}:{line}:{col}"
        value = ""
        if err["type"] not in ("missing",) and "input" in err:
            shown = repr(redacted(err["input"], loc[-1] if loc else None))
            # A cut value says so: "(got {'kafka': {'bootstrap_servers': 'k:9093', 'se)"
            # read as if the file held a half-written mapping.
            if len(shown) > _SHOWN_CHARS:
                shown = shown[:_SHOWN_CHARS - 1] + "…"
            value = f" (got {shown})"
        lines.append(f"{where}: {dotted}: {err['msg']}{value}")
    return "invalid configuration:\n  " + "\n  ".join(lines)
