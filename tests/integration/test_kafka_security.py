"""The daemon against a broker that demands SASL over TLS with client certificates
(tests/support/kafka_broker.py, ``secure=True``): PLAIN and both SCRAM mechanisms, the
password from a variable or a file, and the refusals an operator would meet."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import KafkaException
from kafka import KafkaConsumer, KafkaProducer

from capwatch.cli import main
from capwatch.daemon.config import DaemonConfig, load_config
from capwatch.daemon.service import DependencyError, build_service, wait_for_kafka
from tests.integration._daemon_setup import running, wait
from tests.paths import REPO_ROOT
from tests.support.kafka_broker import SECURE_USERS, KafkaBroker, start_kafka_broker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl missing"),
]
EXAMPLES = REPO_ROOT / "capwatch" / "examples"
USER, PASSWORD = next(iter(SECURE_USERS.items()))


@pytest.fixture(scope="module")
def broker() -> Iterator[KafkaBroker]:
    b = start_kafka_broker(secure=True)
    try:
        yield b
    finally:
        b.stop(graceful=False)  # throw-away


def kafka_section(b: KafkaBroker, mechanism: str, **over: Any) -> dict[str, Any]:
    assert b.tls is not None and b.secure_bootstrap is not None
    section: dict[str, Any] = {
        "bootstrap_servers": b.secure_bootstrap, "security_protocol": "SASL_SSL",
        "sasl": {"mechanism": mechanism, "username": USER},
        "tls": {"ca_file": str(b.tls.ca), "cert_file": str(b.tls.client_cert),
                "key_file": str(b.tls.client_key)},
        "connect_timeout_s": 20,
    }
    section.update(over)
    return section


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_check_connect_logs_in_with_each_mechanism(
        broker: KafkaBroker, mechanism: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "password").write_text(PASSWORD + "\n")  # as a mounted Secret file
    kafka = kafka_section(broker, mechanism)
    kafka["sasl"]["password_file"] = str(tmp_path / "password")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "families": {"rover": {"domain": str(EXAMPLES / "rover.pddl")}},
        "store": {"url": f"sqlite:///{tmp_path / 'm.db'}"}, "kafka": kafka,
        "log": {"level": "error"}}))
    assert main(["run", "--config", str(path), "--check", "--connect"]) == 0
    assert f"Kafka: {broker.secure_bootstrap} (SASL_SSL): reachable" in capsys.readouterr().out


@pytest.mark.parametrize(("client", "mechanism"), [
    ("kafka-python", "SCRAM-SHA-512"), ("confluent-kafka", "SCRAM-SHA-512"),
    ("confluent-kafka", "PLAIN")])
def test_the_daemon_consumes_and_publishes_over_sasl_ssl(
        broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str,
        mechanism: str) -> None:
    """SASL, mutual TLS, the password from the variable a Secret would set: a record
    produced (over the plain listener) reaches the daemon, and what it publishes (here:
    the dead letter of an undecodable record) reaches the topic; with either client (the
    security settings mapped to librdkafka's for confluent-kafka)."""
    prefix = f"sec-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("CAPWATCH_KAFKA__SASL__PASSWORD", PASSWORD)
    kafka = kafka_section(broker, mechanism, client=client, transitions_topic=f"{prefix}-tr",
                          models_topic=f"{prefix}-models", alerts_topic=f"{prefix}-alerts",
                          dead_letter_topic=f"{prefix}-dlq", group_id=f"{prefix}-group",
                          partitions=1)
    config: DaemonConfig = load_config(text=yaml.safe_dump({
        "replica_id": "secure-0", "families": {
            "rover-v1": {"domain": str(EXAMPLES / "rover.pddl")}},
        "store": {"url": f"sqlite:///{tmp_path / 'm.db'}"}, "kafka": kafka,
        "http": {"enabled": False}, "log": {"level": "error"},
        "scheduler": {"checkpoint_s": 0.2}}))
    service = build_service(config)  # creates the topics through the secure listener
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send(f"{prefix}-tr", key=b"rover-a", value=b"{not json")
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(f"{prefix}-dlq", bootstrap_servers=broker.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    letters: list[dict[str, Any]] = []
    try:
        with running(service):
            def dead_lettered() -> bool:
                letters.extend(json.loads(m.value) for m in consumer)
                return bool(letters)

            wait(dead_lettered, 60, "the dead letter, published over SASL_SSL")
    finally:
        consumer.close()
    assert letters[0]["source"] == f"{prefix}-tr" and letters[0]["offset"] == 0
    assert service.pipeline.processed == 1


@pytest.mark.parametrize(("change", "words"), [
    ({"sasl": {"mechanism": "SCRAM-SHA-256", "username": USER, "password": "wrong"}},
     "invalid credentials"),
    ({"tls": "other-ca"}, "CERTIFICATE"),
])
def test_a_refused_login_fails_at_once_with_its_reason(
        broker: KafkaBroker, change: dict[str, Any], words: str) -> None:
    assert broker.tls is not None
    kafka = kafka_section(broker, "SCRAM-SHA-256", connect_timeout_s=60)
    kafka["sasl"]["password"] = PASSWORD
    if change.get("tls") == "other-ca":
        kafka["tls"].update(cert_file=str(broker.tls.other_client_cert),
                            key_file=str(broker.tls.other_client_key))
    elif "sasl" in change:
        kafka["sasl"] = change["sasl"]
    config = load_config(text=yaml.safe_dump({"kafka": kafka}))
    t0 = time.monotonic()
    with pytest.raises(DependencyError) as e:
        wait_for_kafka(config.kafka)
    assert f"Kafka at {broker.secure_bootstrap} (SASL_SSL): refused us" in str(e.value)
    assert words in str(e.value)
    assert time.monotonic() - t0 < 30  # not the whole minute of retries


def test_the_plain_listener_is_not_the_secure_one(broker: KafkaBroker) -> None:
    """A client without TLS at the SASL_SSL port gets nowhere (the listener is real)."""
    config = load_config(text=yaml.safe_dump({"kafka": {
        "bootstrap_servers": broker.secure_bootstrap, "connect_timeout_s": 3}}))
    with pytest.raises(DependencyError, match="not reachable within 3 s"):
        wait_for_kafka(config.kafka)


def test_confluent_kafka_says_when_the_brokers_refuse_the_login(broker: KafkaBroker) -> None:
    """librdkafka only logs a refused login and retries; the confluent-kafka source and
    publisher raise it at their next call instead, so the daemon's outage handling names
    it (on /readyz and in the log) rather than waiting without a word."""
    from capwatch.adapters.io.kafka_confluent import (
        ConfluentKafkaPublisher,
        ConfluentKafkaSource,
    )
    from capwatch.contracts.ports import DeliveryError
    from capwatch.contracts.wire import DeadLetterRecord
    from tests.integration.test_kafka_backends import _letter

    kafka = kafka_section(broker, "SCRAM-SHA-256")
    kafka["sasl"]["password"] = "wrong"
    options = load_config(text=yaml.safe_dump({"kafka": kafka})).kafka.client_options()
    source = ConfluentKafkaSource(broker.secure_bootstrap or "", "refused", "refused-group",
                                  security=options)
    source.start(lambda parts: None, lambda parts: None, {})
    refused: list[str] = []

    def polled_refusal() -> bool:
        try:
            source.poll(0.5)
        except KafkaException as e:
            refused.append(str(e))
        return bool(refused)

    try:
        wait(polled_refusal, 60, "the source to report the refused login")
    finally:
        source.close()
    assert "Authentication failed" in refused[0] or "SASL" in refused[0], refused
    pub = ConfluentKafkaPublisher(broker.secure_bootstrap or "", models_topic="m",
                                  alerts_topic="a", dead_letter_topic="refused",
                                  security=options)
    letter: DeadLetterRecord = _letter(10)
    pub.dead_letter(letter)
    with pytest.raises(DeliveryError, match="refused"):
        pub.flush(10)
