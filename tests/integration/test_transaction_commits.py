"""The daemon over a stream a transactional producer wrote: once every record is
handled, the group's committed offsets reach each partition's end, past the transaction's
commit marker, so the broker's group tools (kafka-consumer-groups, the ``lag`` read here
from the group's offsets) count no lag. Committed at the last record's next offset, every
partition stayed one offset (its marker) behind for good, while the daemon's own lag read
0. The commit rule still holds: the marker stands for no record, and it is passed only
once every record before it is handled. Over each Kafka backend: kafka-python (its record
reader notes the markers), in one process and in the consumer process, and confluent-kafka
(librdkafka's position passes them)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata

from capwatch.adapters.sim.fleet import SimulatedFleet
from tests.integration._daemon_setup import (
    Setup,
    committed,
    daemon_config,
    end_offsets,
    family_specs,
    lag,
    make_topics,
    running,
    serve_fleet,
    wait,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def setup(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    topics = make_topics(kafka_bootstrap, kafka_topic, PARTITIONS)
    fleet = SimulatedFleet.build(family_specs("rover-v1", "courier-v1"), 3, [], seed=5)
    with serve_fleet(fleet) as urls:
        yield Setup(kafka_bootstrap, topics, PARTITIONS, fleet, urls, tmp_path)


def produce_in_transactions(s: Setup, rounds: int, per_transaction: int) -> int:
    """Every agent's ``rounds`` transitions, ``per_transaction`` records a transaction,
    the last one committed last: each partition ends with a commit marker."""
    producer = KafkaProducer(bootstrap_servers=s.bootstrap,
                             transactional_id=f"tx-{uuid.uuid4().hex}")
    producer.init_transactions()
    n = 0
    producer.begin_transaction()
    for event in s.fleet.events(rounds):
        producer.send(s.topics.transitions, key=event.agent_id.encode(), value=event.value)
        n += 1
        if n % per_transaction == 0:
            producer.commit_transaction()
            producer.begin_transaction()
    producer.commit_transaction()
    producer.close()
    return n


def produce_aborting_some(s: Setup, rounds: int, per_transaction: int) -> tuple[int, int]:
    """Every agent's ``rounds`` transitions in transactions of ``per_transaction``, every
    other one first written and aborted (the same records: a producer that aborts and
    tries again), then committed; the last transaction aborted after the last commit.
    The committed records and the aborted ones."""
    producer = KafkaProducer(bootstrap_servers=s.bootstrap,
                             transactional_id=f"tx-{uuid.uuid4().hex}")
    producer.init_transactions()
    events = list(s.fleet.events(rounds))
    aborted = 0
    chunks = [events[i:i + per_transaction] for i in range(0, len(events), per_transaction)]
    for c, chunk in enumerate(chunks):
        for abort in ((True, False) if c % 2 == 0 else (False,)):
            producer.begin_transaction()
            for event in chunk:
                producer.send(s.topics.transitions, key=event.agent_id.encode(),
                              value=event.value)
            if abort:
                producer.flush()  # in the log, then aborted
                producer.abort_transaction()
                aborted += len(chunk)
            else:
                producer.commit_transaction()
    producer.begin_transaction()
    for event in chunks[0]:
        producer.send(s.topics.transitions, key=event.agent_id.encode(), value=event.value)
    producer.flush()
    producer.abort_transaction()
    producer.close()
    return len(events), aborted + len(chunks[0])


CLIENTS = ["kafka-python", "kafka-python-process", "confluent-kafka"]


@pytest.mark.parametrize("client", CLIENTS)
def test_the_daemon_monitors_exactly_the_committed_transactions(setup: Setup,
                                                                client: str) -> None:
    """kafka.isolation_level read_committed (the default) with every client: the
    records of an aborted transaction are never handled, the committed ones each once,
    and the group's commits still reach the partitions' ends past the aborted batches and
    the markers. Before, kafka-python (read_uncommitted) handled the aborted ones too."""
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    n, aborted = produce_aborting_some(setup, rounds=12, per_transaction=20)
    assert aborted > 0
    ends = end_offsets(setup, setup.topics.transitions)
    assert sum(ends.values()) > n + aborted  # the markers
    configure_logging("warning", "json")
    service = build_service(DaemonConfig(**daemon_config(setup, 0, client)))
    with running(service):
        try:
            wait(lambda: lag(setup) == 0, 90, f"the group's commits to reach the ends {ends}")
        except AssertionError as e:
            raise AssertionError(f"{e}; committed: {committed(setup)}, processed "
                                 f"{service.pipeline.processed} of {n}") from None
        # Committed at the ends only once every record before them was handled.
        assert service.pipeline.processed == n


@pytest.mark.parametrize("client", CLIENTS)
def test_the_group_commits_past_the_last_transaction_marker(setup: Setup,
                                                            client: str) -> None:
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    n = produce_in_transactions(setup, rounds=20, per_transaction=25)
    ends = end_offsets(setup, setup.topics.transitions)
    # Every partition's end is past its records by its markers (one per transaction
    # that wrote to it): what a count of records alone would leave as lag.
    assert sum(ends.values()) > n
    configure_logging("warning", "json")
    service = build_service(DaemonConfig(**daemon_config(setup, 0, client)))
    with running(service):
        wait(lambda: service.pipeline.processed >= n, 90, "every record to be handled")
        try:
            wait(lambda: lag(setup) == 0, 60, f"the group's commits to reach the ends {ends}")
        except AssertionError as e:
            raise AssertionError(f"{e}; committed: {committed(setup)}") from None


@pytest.mark.parametrize("client", CLIENTS)
def test_a_new_owner_commits_past_a_marker_its_predecessor_did_not_read(
        setup: Setup, client: str) -> None:
    """A member that committed each partition's last record and stopped before reading
    the marker behind it (the group's offsets at the markers, written here as it would
    have) leaves nothing to handle: the next owner commits past the markers all the same.
    Before, it committed only after records it handled, and the group's lag stayed at one
    a partition until a record came."""
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    produce_in_transactions(setup, rounds=4, per_transaction=1000)  # one transaction
    ends = end_offsets(setup, setup.topics.transitions)
    assert all(end > 1 for end in ends.values()), ends  # records in every partition
    predecessor = KafkaConsumer(bootstrap_servers=setup.bootstrap,
                                group_id=setup.topics.group, enable_auto_commit=False)
    predecessor.commit({tp: OffsetAndMetadata(end - 1, "", -1) for tp, end in ends.items()})
    predecessor.close(autocommit=False)
    assert lag(setup) == setup.partitions
    configure_logging("warning", "json")
    service = build_service(DaemonConfig(**daemon_config(setup, 0, client)))
    with running(service):
        try:
            wait(lambda: lag(setup) == 0, 60, f"the group's commits to reach the ends {ends}")
        except AssertionError as e:
            raise AssertionError(f"{e}; committed: {committed(setup)}") from None
        # Nothing was there to handle: the member read no record to commit past it.
        assert service.pipeline.processed == 0
