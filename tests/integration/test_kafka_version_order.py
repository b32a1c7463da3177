"""A model version sent again by one replica must not land behind a newer version of
the same agent that another replica published meanwhile: the models topic is compacted
by agent, so the last record of a key is the version every consumer keeps for good
(docs/wire-formats.md). Real broker, both clients (docs/reliability.md, session 16).

How a replica comes to send an old version late: its worker published version N and the
flush failed (the broker refused it, or this replica was cut off from the broker or frozen
past its lease); the record stays in the publisher, sent again at every flush until
acknowledged. Meanwhile another replica took the work over, published N itself, and later
N+1 after a new drift. When the first replica's record finally goes through, N lands after
N+1. Here the broker refuses the first replica's record by the topic's size limit, which
is then raised: the same keeping and sending again as a cut-off replica's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from capwatch.contracts.ports import DeliveryError
from capwatch.daemon.events import model_event, resend_newest_versions
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, build_version, open_store
from tests.integration._daemon_setup import wait
from tests.integration.test_kafka_backends import BACKENDS, _read, create, publisher_class

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "capwatch" / "examples"


@pytest.mark.parametrize("client", BACKENDS)
def test_a_version_sent_again_late_does_not_land_behind_a_newer_one(
        client: str, kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "models.db"))
    rover = read_domain(EXAMPLES / "rover.pddl")
    now = datetime.now(UTC)
    base = store.put(build_version(ModelRef("rover", None, 1), rover, now))
    v1 = store.put(build_version(ModelRef("rover", "rover-1", 1), rover, now, parent=base))
    first = model_event(v1).model_dump_json().encode()
    topics = {"models_topic": f"{kafka_topic}-m", "alerts_topic": f"{kafka_topic}-a",
              "dead_letter_topic": f"{kafka_topic}-d"}
    create(kafka_bootstrap, topics["models_topic"], 1,
           **{"max.message.bytes": str(len(first) // 2)})
    late = publisher_class(client)(kafka_bootstrap, **topics)
    resend_newest_versions(late, store)  # as the daemon's service wires it
    other = publisher_class(client)(kafka_bootstrap, **topics)
    try:
        late.model_version(model_event(v1))
        for _ in range(2):
            with pytest.raises(DeliveryError):
                late.flush(30)

        def raise_the_limit() -> bool:
            admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
            try:
                admin.alter_configs([ConfigResource(
                    ConfigResourceType.TOPIC, topics["models_topic"],
                    configs={"max.message.bytes": "1000000"})])
                return True
            except ValueError:  # the admin client's check: the topic's configs not known yet
                return False
            finally:
                admin.close()

        wait(raise_the_limit, 30, "the topic's limit to be raised")
        # The work's new holder publishes version 1, and version 2 after a new drift.
        v2 = store.put(build_version(ModelRef("rover", "rover-1", 2), rover, now, parent=v1,
                                         baseline=rover))

        def published_by_the_other() -> bool:
            try:
                other.flush(30)
            except DeliveryError:
                return False
            return True

        other.model_version(model_event(v1))
        other.model_version(model_event(v2))
        wait(published_by_the_other, 60, "the other replica's versions to be written")

        def goes_through() -> bool:
            try:
                late.flush(30)
            except DeliveryError:
                return False
            return True

        wait(goes_through, 60, "the late replica's record to be written once allowed")
        records = _read(kafka_bootstrap, topics["models_topic"], 3)
        versions = [json.loads(v)["version"] for k, v in records if k == b"rover-1"]
        assert len(versions) == 3, versions
        assert versions[-1] == v2.version, (
            f"the topic keeps version {versions[-1]} of rover-1 (sent again late) after "
            f"version {v2.version}: {versions}")
    finally:
        late.close()
        other.close()
        store.close()
