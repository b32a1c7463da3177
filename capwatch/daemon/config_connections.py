"""Connection settings of the daemon's configuration: TLS towards servers (Kafka brokers,
agents) and the Kafka section with its SASL credentials, plus what every section shares
(the error type, secrets read from files).

Split from :mod:`capwatch.daemon.config`, which imports these and remains the one place
the whole schema is assembled (and the Helm values schema generated from).
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


class ConfigError(ValueError):
    """The configuration is unusable; the message says where and why."""


class Section(BaseModel):
    """A configuration section: unknown keys are errors (a typo must not pass)."""

    model_config = ConfigDict(extra="forbid")


def read_secret(value: SecretStr | None, path: Path | None, what: str) -> str | None:
    """A secret given inline (or by a ``CAPWATCH_*`` variable) or as a file, e.g. a
    Kubernetes Secret mounted as a volume; surrounding whitespace is not part of it."""
    if value is not None:
        return value.get_secret_value()
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {path}: {e.strerror}") from None


def one_of(value: object, path: object, name: str) -> None:
    if value is not None and path is not None:
        raise ValueError(f"give {name} or {name}_file, not both")


class TlsConfig(Section):
    """TLS towards a server (Kafka brokers, agents): whom to trust, and who we are."""

    ca_file: Path | None = None
    """CA certificates (PEM) to verify the server with; none: the system's CAs."""
    cert_file: Path | None = None
    """Our certificate (PEM) for mutual TLS; needs ``key_file``."""
    key_file: Path | None = None
    key_password: SecretStr | None = None
    check_hostname: bool = True

    @model_validator(mode="after")
    def _pair(self) -> TlsConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (mutual TLS)")
        return self

    def context(self) -> ssl.SSLContext:
        """An SSL context as configured (reads the files: errors are ConfigError)."""
        try:
            ctx = ssl.create_default_context(
                cafile=str(self.ca_file) if self.ca_file else None)
            ctx.check_hostname = self.check_hostname
            if self.cert_file is not None and self.key_file is not None:
                password = self.key_password.get_secret_value() if self.key_password else None
                ctx.load_cert_chain(str(self.cert_file), str(self.key_file), password)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"TLS files ({self.ca_file}, {self.cert_file}): {e}") from None
        return ctx


class KafkaSaslConfig(Section):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "SCRAM-SHA-512"
    username: str = Field(min_length=1)
    password: SecretStr | None = None
    """Better from a Secret: ``CAPWATCH_KAFKA__SASL__PASSWORD`` or ``password_file``."""
    password_file: Path | None = None

    @model_validator(mode="after")
    def _password(self) -> KafkaSaslConfig:
        one_of(self.password, self.password_file, "password")
        if self.password is None and self.password_file is None:
            raise ValueError("SASL needs a password (password, password_file, or the "
                             "CAPWATCH_KAFKA__SASL__PASSWORD variable)")
        return self


class KafkaConfig(Section):
    client: Literal["kafka-python", "confluent-kafka"] = "kafka-python"
    """The Kafka client the daemon consumes and publishes with: ``kafka-python`` (pure
    Python, always installed) or ``confluent-kafka`` (librdkafka, an order of magnitude
    more messages per core; install the ``confluent`` extra). See docs/performance.md."""
    consumer_process: bool = False
    """With ``kafka-python``: run the consumer (fetching and parsing records) in a child
    process of its own, so that it uses a second core while the main loop runs the
    pipeline; the main loop then spends ~1 us a record on the consumer instead of 6-22.
    Worth it with two or more cores to spare; the commit rule and rebalances are as
    without it. Ignored by ``confluent-kafka``, which fetches on native threads anyway.
    See docs/performance.md."""
    bootstrap_servers: str = "127.0.0.1:9092"
    transitions_topic: str = "capwatch.transitions"
    models_topic: str = "capwatch.models"
    alerts_topic: str = "capwatch.alerts"
    dead_letter_topic: str = "capwatch.deadletter"
    group_id: str = "capwatch"
    client_id: str = "capwatch"
    max_poll_records: int = Field(default=500, ge=1)
    """Most records one poll hands the main loop (one batch). Larger batches did not help
    over kafka-python: a poll that takes every fetched record leaves no fetch overlapping
    the batch's work (docs/performance.md)."""
    fetch_max_wait_ms: int = Field(default=100, ge=0, le=60_000)
    """How long the broker may hold a fetch for partitions with nothing new (both
    clients' default is 500). A consumer has one fetch per broker in flight: while it is
    held for partitions that are caught up, a partition still behind is not fetched, so a
    replica catching up on uneven partitions read ~1 MB per partition every 500 ms. With
    confluent-kafka it also bounds how long librdkafka pauses a partition's fetching once
    its prefetch queue is full (``fetch.queue.backoff.ms``, 1000 by default)."""
    partition_fetch_bytes: int = Field(default=4_194_304, ge=65_536, le=1_000_000_000)
    """How much one fetch may bring of one partition (both clients' default is 1 MiB);
    raised to ``limits.max_message_bytes`` + 64 KiB if that is more. kafka-python fetches a
    partition again only once its records are all handed out, so with large messages a
    small fetch left the main loop waiting every few batches. Up to this much per
    assigned partition may be held in memory ahead of the daemon. At most 1e9 bytes:
    librdkafka refuses more when the consumer is made, past the configuration's checks."""
    session_timeout_ms: int = Field(default=10_000, ge=1000)
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    """Where a partition the group has no committed offset for is read from: its first
    record (``earliest``: a new group monitors the topic's history) or only records
    produced from now on (``latest``). Also where a partition given up at a revoke and
    handed back is read from when nothing of it was ever committed."""
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    """Which records of an agent's transactional producer the daemon monitors:
    ``read_committed`` only those of committed transactions (an aborted transaction's
    transitions never happened, and no model version is drawn from them), the same with
    both clients. A transaction left open holds back every later record of its partition
    until it ends or the broker aborts it (``transaction.max.timeout.ms``, 15 minutes by
    default), shown as lag, not as records: ``read_uncommitted`` hands every record out as
    soon as it is written, aborted ones too, for a fleet whose producers are not
    transactional and an operator who would rather not wait on one that is.
    Before session 22 kafka-python read uncommitted and confluent-kafka committed."""
    create_topics: bool = True
    """Create missing topics at start (the model topic compacted)."""
    partitions: int = Field(default=6, ge=1)
    """Partitions of topics capwatch creates; the unit of scale-out."""
    replication_factor: int = Field(default=1, ge=1)
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl: KafkaSaslConfig | None = None
    """Required by the SASL_* protocols."""
    tls: TlsConfig | None = None
    """For SSL and SASL_SSL: CA, and a client certificate for mutual TLS."""
    connect_timeout_s: float = Field(default=120.0, gt=0)
    """How long to keep trying to reach the brokers at start before giving up."""

    @model_validator(mode="after")
    def _security(self) -> KafkaConfig:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and self.sasl is None:
            raise ValueError(f"security_protocol {self.security_protocol} needs a sasl "
                             f"section (mechanism, username, password)")
        if not sasl and self.sasl is not None:
            raise ValueError(f"a sasl section needs security_protocol SASL_SSL or "
                             f"SASL_PLAINTEXT, not {self.security_protocol}")
        if self.tls is not None and not self.security_protocol.endswith("SSL"):
            raise ValueError(f"a tls section needs security_protocol SSL or SASL_SSL, not "
                             f"{self.security_protocol}")
        return self

    def client_options(self) -> dict[str, Any]:
        """kafka-python's security keyword arguments (reads password files)."""
        out: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.sasl is not None:
            out.update(sasl_mechanism=self.sasl.mechanism,
                       sasl_plain_username=self.sasl.username,
                       sasl_plain_password=read_secret(self.sasl.password,
                                                       self.sasl.password_file,
                                                       "kafka.sasl.password_file"))
        if self.security_protocol.endswith("SSL"):
            tls = self.tls or TlsConfig()
            out["ssl_check_hostname"] = tls.check_hostname
            if tls.ca_file is not None:
                out["ssl_cafile"] = str(tls.ca_file)
            if tls.cert_file is not None:
                out.update(ssl_certfile=str(tls.cert_file), ssl_keyfile=str(tls.key_file))
            if tls.key_password is not None:
                out["ssl_password"] = tls.key_password.get_secret_value()
        return out
