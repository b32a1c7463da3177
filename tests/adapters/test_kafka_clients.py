"""Choosing the Kafka client (``kafka.client``), and the security settings as librdkafka
reads them. No broker: tests/integration/test_kafka_backends.py runs both clients
against a real one, test_kafka_security.py over SASL_SSL."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

from capwatch.adapters.io.kafka_confluent import (
    ConfluentKafkaPublisher,
    ConfluentKafkaSource,
    librdkafka_security,
)
from capwatch.cli import main
from capwatch.daemon.config import ConfigError, load_config
from capwatch.daemon.service import kafka_clients
from tests.paths import REPO_ROOT


def test_kafka_python_stays_the_default() -> None:
    from capwatch.adapters.io.kafka import KafkaPublisher, KafkaSource

    config = load_config(text="{}")
    assert config.kafka.client == "kafka-python"
    assert kafka_clients(config.kafka) == (KafkaSource, KafkaPublisher)
    chosen = load_config(text="kafka: {client: confluent-kafka}")
    assert kafka_clients(chosen.kafka) == (ConfluentKafkaSource, ConfluentKafkaPublisher)


def test_an_unknown_client_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"kafka\.client.*'kafka-python' or 'confluent-kafka'"):
        load_config(text="kafka: {client: librdkafka}")


def test_the_missing_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    # As on a machine without the extra: the package cannot be imported.
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    monkeypatch.delitem(sys.modules, "capwatch.adapters.io.kafka_confluent")
    config = load_config(text="kafka: {client: confluent-kafka}")
    with pytest.raises(ConfigError, match=r"pip install 'capwatch\[confluent\]'"):
        kafka_clients(config.kafka)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "families": {"rover": {"domain": str(REPO_ROOT / "capwatch/examples/rover.pddl")}},
        "kafka": {"client": "confluent-kafka"}}))
    assert main(["run", "--config", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert "confluent-kafka package is not installed" in err
    # oper18b: the image's default EXTRAS leaves the client out, and a chart user who
    # sets kafka.client: confluent-kafka meets this error in the pod's log, where pip
    # is not the way to add it.
    assert "EXTRAS=otel,confluent" in err


def test_security_settings_map_to_librdkafka_keys(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret\n")
    config = load_config(text=yaml.safe_dump({"kafka": {
        "security_protocol": "SASL_SSL",
        "sasl": {"mechanism": "SCRAM-SHA-256", "username": "capwatch",
                 "password_file": str(tmp_path / "pw")},
        "tls": {"ca_file": "/ca.pem", "cert_file": "/c.pem", "key_file": "/k.pem",
                "key_password": "kp", "check_hostname": False}}}))
    assert librdkafka_security(config.kafka.client_options()) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "capwatch", "sasl.password": "s3cret",
        "ssl.ca.location": "/ca.pem", "ssl.certificate.location": "/c.pem",
        "ssl.key.location": "/k.pem", "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "none"}


def test_tls_without_a_ca_file_trusts_the_systems_cas() -> None:
    config = load_config(text="kafka: {security_protocol: SSL}")
    assert librdkafka_security(config.kafka.client_options()) == {
        "security.protocol": "SSL", "ssl.ca.location": "probe",
        "ssl.endpoint.identification.algorithm": "https"}
    assert librdkafka_security(load_config(text="{}").kafka.client_options()) == {
        "security.protocol": "PLAINTEXT"}


def test_an_option_librdkafka_has_no_word_for_is_refused() -> None:
    with pytest.raises(ValueError, match="ssl_crlfile"):
        librdkafka_security({"ssl_crlfile": "/crl.pem"})


class _FakeProducer:
    """librdkafka's Producer as the publisher sees it; the first one made fails fatally
    at its first flush (as an idempotent producer whose sequence broke), later ones
    deliver everything."""

    made: ClassVar[list[_FakeProducer]] = []

    def __init__(self, config: dict[str, object]) -> None:
        self.error_cb = config["error_cb"]
        self.queued: list[tuple[bytes, object]] = []
        self.delivered: list[bytes] = []
        self.fails = not _FakeProducer.made
        _FakeProducer.made.append(self)

    def produce(self, topic: str, value: bytes, key: bytes | None, on_delivery: object) -> None:
        self.queued.append((value, on_delivery))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        from confluent_kafka import KafkaError

        if self.fails:
            self.error_cb(KafkaError(KafkaError._FATAL, "sequence broken", fatal=True))  # type: ignore[operator]
            return len(self.queued)  # no report will ever come for these
        for value, report in self.queued:
            report(None, None)  # type: ignore[operator]
            self.delivered.append(value)
        self.queued = []
        return 0


def test_a_producer_failed_for_good_is_replaced_and_its_records_sent_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from capwatch.adapters.io import kafka_confluent
    from capwatch.contracts.ports import DeliveryError
    from capwatch.contracts.wire import DeadLetterRecord

    _FakeProducer.made = []
    monkeypatch.setattr(kafka_confluent, "Producer", _FakeProducer)
    pub = ConfluentKafkaPublisher("unused:9092", models_topic="m", alerts_topic="a",
                                  dead_letter_topic="d")
    pub.dead_letter(DeadLetterRecord(reason="r", raw_base64="", source="s",
                                     time=datetime.now(UTC)))
    with pytest.raises(DeliveryError, match="producer failed"):
        pub.flush(1)  # the old producer will never answer: nothing may be committed
    assert len(_FakeProducer.made) == 2 and pub.pending() == 1
    pub.flush(1)  # the new producer has the record now, and delivers it
    assert len(_FakeProducer.made[1].delivered) == 1 and pub.pending() == 0


def test_both_sources_refresh_metadata_every_30_s_not_every_5_minutes() -> None:
    """A partition the group leader's metadata does not list is assigned to nobody until
    the next refresh (the real broker's test: test_partitions_added_after_the_group_formed
    _are_read, both clients)."""
    from capwatch.adapters.io.kafka import KafkaSource
    from capwatch.adapters.io.kafka_confluent import ConfluentKafkaSource

    python_config = KafkaSource("127.0.0.1:1", "t", "g")._config
    confluent_config = ConfluentKafkaSource("127.0.0.1:1", "t", "g")._config
    assert python_config["metadata_max_age_ms"] == 30_000
    assert confluent_config["topic.metadata.refresh.interval.ms"] == 30_000


def test_both_sources_take_the_fetch_wait_and_batch_from_the_config() -> None:
    """kafka.fetch_max_wait_ms reaches both clients under their own names, and the
    sources' defaults are the config's (a held fetch stalls partitions still behind:
    docs/performance.md)."""
    from capwatch.adapters.io.kafka import KafkaSource
    from capwatch.daemon.config_connections import KafkaConfig

    defaults = KafkaConfig()
    assert defaults.fetch_max_wait_ms < 500  # below both clients' own default
    python_default = KafkaSource("127.0.0.1:1", "t", "g")
    confluent_default = ConfluentKafkaSource("127.0.0.1:1", "t", "g")
    assert python_default._config["fetch_max_wait_ms"] == defaults.fetch_max_wait_ms
    assert confluent_default._config["fetch.wait.max.ms"] == defaults.fetch_max_wait_ms
    assert python_default._config["max_poll_records"] == defaults.max_poll_records
    assert confluent_default._batch == defaults.max_poll_records
    python = KafkaSource("127.0.0.1:1", "t", "g", fetch_max_wait_ms=250, max_poll_records=7)
    confluent = ConfluentKafkaSource("127.0.0.1:1", "t", "g", fetch_max_wait_ms=250,
                                     max_poll_records=7)
    assert python._config["fetch_max_wait_ms"] == 250
    assert confluent._config["fetch.wait.max.ms"] == 250
    assert confluent._config["fetch.queue.backoff.ms"] == 250
    assert python._config["max_poll_records"] == 7 and confluent._batch == 7


def test_a_partition_fetch_is_the_setting_or_more_than_the_message_limit() -> None:
    """kafka.partition_fetch_bytes reaches both clients; an oversized message must still
    fit one fetch (it goes to the dead-letter topic rather than stall its partition)."""
    from capwatch.adapters.io.kafka import KafkaSource
    from capwatch.daemon.config_connections import KafkaConfig

    default = KafkaConfig().partition_fetch_bytes
    assert default > 1_048_576  # above both clients' own default
    assert KafkaSource("127.0.0.1:1", "t", "g")._config["max_partition_fetch_bytes"] \
        == default
    assert ConfluentKafkaSource("127.0.0.1:1", "t", "g")._config[
        "max.partition.fetch.bytes"] == default
    for limit, expected in ((1_000, 100_000), (8_000_000, 8_000_000 + 65_536)):
        python = KafkaSource("127.0.0.1:1", "t", "g", partition_fetch_bytes=100_000,
                             max_message_bytes=limit)
        confluent = ConfluentKafkaSource("127.0.0.1:1", "t", "g",
                                         partition_fetch_bytes=100_000,
                                         max_message_bytes=limit)
        assert python._config["max_partition_fetch_bytes"] == expected
        assert confluent._config["max.partition.fetch.bytes"] == expected


class _FakeFuture:
    """kafka-python's FutureRecordMetadata as the publisher reads it."""

    def __init__(self) -> None:
        self.is_done = False
        self.exception: Exception | None = None

    def fail(self, error: Exception) -> None:
        self.is_done, self.exception = True, error

    def get(self, timeout: float | None = None) -> None:
        from kafka.errors import KafkaTimeoutError

        if not self.is_done:
            raise KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.")
        if self.exception is not None:
            raise self.exception


class _WedgingProducer:
    """kafka-python's idempotent KafkaProducer after a batch expired (its topic deleted
    and auto-created with fewer partitions, rev14's reproduction): the first one made
    expires the first record at its first flush and from then on answers nothing (its
    flush, and so its close, only time out); later ones deliver everything."""

    made: ClassVar[list[_WedgingProducer]] = []
    def __init__(self, **config: object) -> None:
        self.sent: list[_FakeFuture] = []
        self.delivered = 0
        self.flushes = 0
        self.wedged = False
        self.first = not _WedgingProducer.made
        _WedgingProducer.made.append(self)

    def send(self, topic: str, key: bytes | None, value: bytes) -> _FakeFuture:
        self.sent.append(_FakeFuture())
        return self.sent[-1]

    def flush(self, timeout: float | None = None) -> None:
        from kafka.errors import KafkaTimeoutError

        self.flushes += 1
        waiting = [f for f in self.sent if not f.is_done]
        if self.first and self.flushes == 1 and waiting:
            waiting[0].fail(KafkaTimeoutError("Expiring 1 record(s) for m-1: 120000 ms"))
            self.wedged = True
            waiting = waiting[1:]
        if self.wedged and waiting:
            raise KafkaTimeoutError("Timeout waiting for future")
        if not self.wedged:
            for f in waiting:
                f.is_done = True
                self.delivered += 1

    def close(self, timeout: float | None = None) -> None:
        self.flush(timeout)  # as kafka-python's: raises while a batch is incomplete
        self._sender.force_close()

    @property
    def _sender(self) -> _WedgingProducer:
        return self

    def force_close(self) -> None:
        from kafka.errors import IllegalStateError

        for f in self.sent:
            if not f.is_done:
                f.fail(IllegalStateError("Producer is closed forcefully."))


@pytest.mark.parametrize("records", [1, 2], ids=["expiry seen by the flush",
                                                 "flush wedged before it is seen"])
def test_a_producer_that_expired_a_record_is_replaced_and_its_records_sent_again(
        monkeypatch: pytest.MonkeyPatch, records: int) -> None:
    """kafka-python's idempotent producer delivers nothing more once it expired a batch,
    and reports no fatal error; before, the record was sent again through it and no flush
    (so no version, alert or commit) ever succeeded again."""
    from datetime import UTC, datetime

    from capwatch.adapters.io import kafka as kafka_module
    from capwatch.adapters.io.kafka import KafkaPublisher
    from capwatch.contracts.wire import DeadLetterRecord

    _WedgingProducer.made = []
    monkeypatch.setattr(kafka_module, "KafkaProducer", _WedgingProducer)
    pub = KafkaPublisher("unused:9092", models_topic="m", alerts_topic="a",
                         dead_letter_topic="d")
    for _ in range(records):
        pub.dead_letter(DeadLetterRecord(reason="r", raw_base64="", source="s",
                                         time=datetime.now(UTC)))
    for _ in range(3):
        with contextlib.suppress(Exception):  # PublishError, or the wedged flush's timeout
            pub.flush(0.01)
        if pub.pending() == 0:
            break
    assert len(_WedgingProducer.made) == 2, "the wedged producer was not replaced"
    assert pub.pending() == 0
    assert _WedgingProducer.made[1].delivered == records


def test_a_record_is_labelled_with_the_producer_it_went_through_when_one_is_replaced_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush replaces the producer (its thread) while a worker sends (another): the
    handle must name the producer the record went through, or the new producer expiring
    it (or its partition vanishing) is never seen and the wedged producer stays in use.
    The replacement is made to fall between the sender's reads of the generation and of
    the producer, wherever nothing stops it from coming there (the interleaving two
    threads can reach)."""

    from kafka.errors import KafkaTimeoutError

    from capwatch.adapters.io import kafka as kafka_module
    from capwatch.adapters.io.kafka import KafkaPublisher

    class RacedPublisher(KafkaPublisher):
        race = False

        @property
        def _producer(self) -> _WedgingProducer:
            if self.race and not self._renewing.locked():
                self.race = False
                self._renew_producer("a flush, meanwhile")
            return self.__dict__["_producer"]  # type: ignore[no-any-return]

        @_producer.setter
        def _producer(self, value: _WedgingProducer) -> None:
            self.__dict__["_producer"] = value

    _WedgingProducer.made = []
    monkeypatch.setattr(kafka_module, "KafkaProducer", _WedgingProducer)
    pub = RacedPublisher("unused:9092", models_topic="m", alerts_topic="a",
                         dead_letter_topic="d")
    pub.race = True
    handle = pub._produce("d", None, b"x")
    generation, future = handle
    holder = next(i for i, p in enumerate(_WedgingProducer.made) if future in p.sent)
    assert generation == holder, "the record is labelled with another producer's generation"
    if holder == pub._generation:
        future.fail(KafkaTimeoutError("Expiring 1 record(s) for d-0: 120000 ms"))
        assert pub._expired(handle)
