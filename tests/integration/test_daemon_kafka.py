"""The daemon against a real Kafka broker, querying simulated agents over HTTP.

A fleet of 20 simulated agents over two families publishes transitions to Kafka; three
agents drift (a precondition change, the paper's sample_rock example; an effect change;
a probability change). Each agent answers plan-outcome queries through its own
reference HTTP server. The daemon must publish, for every drifted agent, one model
version equal to the agent's true model and one alert, and nothing for the others,
including across a graceful (SIGTERM) and a hard (SIGKILL) restart.
"""

from __future__ import annotations

import json
import signal
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer

from capwatch.adapters.sim.fleet import DriftSpec, SimulatedFleet
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.integration._daemon_setup import (
    CLIENTS,
    EXAMPLES,
    CapwatchProcess,
    Setup,
    committed,
    daemon_config,
    family_specs,
    lag,
    make_topics,
    produce,
    read_all,
    running,
    serve_fleet,
    wait,
)
from tests.support._proc import free_port

pytestmark = pytest.mark.integration

PARTITIONS = 4
AGENTS_PER_FAMILY = 10
DRIFTS = {
    "rover-v1-003": ("rover-sample-drift.pddl", "capability_reduced"),
    "courier-v1-001": ("courier-drop-jam.pddl", "capability_reduced"),
    "courier-v1-005": ("courier-pick-wear.pddl", "effect_distribution_drift"),
}


@pytest.fixture
def setup(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    topics = make_topics(kafka_bootstrap, kafka_topic, PARTITIONS)
    drifts = [DriftSpec(read_domain(EXAMPLES / f), 25, agent_id=a)
              for a, (f, _) in DRIFTS.items()]
    fleet = SimulatedFleet.build(family_specs("rover-v1", "courier-v1"), AGENTS_PER_FAMILY,
                                 drifts, seed=11)
    with serve_fleet(fleet) as urls:
        yield Setup(kafka_bootstrap, topics, PARTITIONS, fleet, urls, tmp_path)


def _committed(s: Setup) -> int:
    return sum((committed(s) or {}).values())


def _change_alerts(s: Setup) -> list[dict[str, Any]]:
    """Alerts about model changes (not "awaiting assessment")."""
    return [a for a in read_all(s, s.topics.alerts)
            if a["alert_type"] != "unexplained_inconsistency"]


def _once(records: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any],
          what: str) -> list[dict[str, Any]]:
    """``records`` as a consumer deduplicating on ``key`` sees them. Publication is at
    least once (docs/daemon.md, "What survives a crash"): a process killed between a
    broker's acknowledgement and the store recording it sends the same record again once
    its hold runs out. A repeat must be that very record; two different records under one
    key are a duplicate."""
    seen: dict[Any, dict[str, Any]] = {}
    for r in records:
        first = seen.setdefault(key(r), r)
        assert first == r, f"duplicated {what} {key(r)!r}: {first} and {r}"
    return list(seen.values())


def _check_outputs(s: Setup) -> None:
    models = _once(read_all(s, s.topics.models), lambda m: (m["agent_id"], m["version"]),
                   "model version")
    alerts = _once(read_all(s, s.topics.alerts), lambda a: a["dedup_key"], "alert")
    keys = [(m["agent_id"], m["version"]) for m in models]
    assert sorted(m["agent_id"] for m in models) == sorted(DRIFTS), keys
    for m in models:
        learned = domain_from_json(m["model"]["json"])
        assert delta(learned, s.fleet.true_model(m["agent_id"])) == 0, m["summary"]
        assert m["version"] == 1 and m["parent_agent_id"] is None
    waiting = [a for a in alerts if a["alert_type"] == "unexplained_inconsistency"]
    changes = [a for a in alerts if a not in waiting]
    assert {a["agent_id"]: a["alert_type"] for a in changes} == {
        a: kind for a, (_, kind) in DRIFTS.items()}
    assert len(changes) == len(DRIFTS)
    # Drifts seen as inconsistent transitions were announced once, when their assessment
    # was queued; the probability drift never contradicts the model.
    assert sorted(a["agent_id"] for a in waiting) == sorted(
        a for a, (_, kind) in DRIFTS.items() if kind == "capability_reduced")
    wear = next(m for m in models if m["agent_id"] == "courier-v1-005")
    pick = domain_from_json(wear["model"]["json"]).action("pick")
    assert pick.outcomes[0].probability == pytest.approx(0.5, abs=0.1)


class DaemonProcess(CapwatchProcess):
    """``capwatch run`` with this module's configuration and its own HTTP port;
    ``overrides`` replace top-level sections (or fields) of the configuration."""

    def __init__(self, s: Setup, name: str, client: str = "kafka-python",
                 command: Callable[[Path], list[str]] | None = None,
                 **overrides: Any) -> None:
        self.port = free_port()
        self.name = name
        super().__init__({**daemon_config(s, self.port, client), **overrides}, s.tmp, name,
                         command)

    def ready(self) -> bool:
        self.alive()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


@pytest.mark.parametrize("client", CLIENTS)
def test_fleet_drift_end_to_end_over_kafka_and_http(setup: Setup, client: str) -> None:
    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    n = produce(setup, rounds=300)
    assert n == 300 * 2 * AGENTS_PER_FAMILY
    assert set(setup.fleet.drifted_agents()) == set(DRIFTS)
    configure_logging("warning", "json")
    service = build_service(DaemonConfig(**daemon_config(setup, 0, client)))
    assert type(service.pipeline.source).__module__.endswith(
        "kafka_confluent" if client == "confluent-kafka" else ".kafka")
    with running(service) as (runner,):
        wait(lambda: lag(setup) == 0 and service.pipeline.processed >= n
             and not service.pipeline.awaiting(), 60, "the stream to be consumed")
        wait(lambda: len(_change_alerts(setup)) >= len(DRIFTS), 30,
             "the alerts")
    assert not runner.is_alive()
    _check_outputs(setup)
    assert service.pipeline.dead_letters == 0


@pytest.mark.parametrize(("sig", "client"), [
    (signal.SIGTERM, "kafka-python"), (signal.SIGKILL, "kafka-python"),
    (signal.SIGKILL, "confluent-kafka"), (signal.SIGTERM, "kafka-python-process")],
    ids=["sigterm", "sigkill", "sigkill-confluent-kafka", "sigterm-consumer-process"])
def test_restart_mid_stream_loses_and_duplicates_nothing(
        setup: Setup, sig: int, client: str) -> None:
    """``capwatch run`` stopped while the stream arrives, then started again."""
    import threading

    daemon = DaemonProcess(setup, "first", client)
    produced: list[int] = []
    try:
        wait(daemon.ready, 60, "the daemon to be ready")
        # Stop it while the first half is still arriving and some of it is committed.
        producer = threading.Thread(target=lambda: produced.append(
            produce(setup, rounds=150, pause_every=100)))
        producer.start()
        wait(lambda: lag(setup) < sys.maxsize and _committed(setup) > 0, 60,
             "the first commits")
        assert producer.is_alive(), "the stream ended before the daemon was stopped"
        code = daemon.stop(sig)
        producer.join(60)
    finally:
        daemon.kill_quietly()
    first_half = produced[0]
    if sig == signal.SIGTERM:
        assert code == 0, daemon.tail()
    second_half = produce(setup, rounds=150)
    again = DaemonProcess(setup, "second", client)
    try:
        wait(again.ready, 60, "the restarted daemon to be ready")
        wait(lambda: lag(setup) == 0, 90, "every transition to be committed")
        wait(lambda: len(_change_alerts(setup)) >= len(DRIFTS), 60,
             "an alert per drift")
        # A duplicate would need buffered evidence (which holds the commit back) or an
        # assessment still queued or running: wait until neither is left.
        wait(lambda: again.settled(lambda: lag(setup)), 60, "the daemon to settle")
        assert again.stop(signal.SIGTERM) == 0, again.tail()
    finally:
        again.kill_quietly()
    assert first_half + second_half == 300 * 2 * AGENTS_PER_FAMILY
    _check_outputs(setup)


def _produce_hostile(s: Setup, n: int) -> list[tuple[int, int]]:
    """``n`` messages that are not transitions (each a dead letter), spread over the
    partitions; their (partition, offset)."""
    producer = KafkaProducer(bootstrap_servers=s.bootstrap, acks="all")
    sent = [producer.send(s.topics.transitions, key=f"hostile-{i}".encode(),
                          value=b"not a transition %d" % i) for i in range(n)]
    producer.flush(30)
    producer.close()
    return [(m.partition, m.offset) for m in (f.get(30) for f in sent)]


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_a_kill_between_the_flush_and_the_commit_loses_nothing_and_repeats_only_the_replay(
        setup: Setup, client: str) -> None:
    """The scheduled checkpoint's flush runs off the main loop and its commit follows at a
    later turn, sent without waiting for the answer (docs/daemon.md, "Checkpoints and the
    commit rule"). Killed at that commit (tests/integration/killed_at_commit.py): every
    output of the records before its offsets was acknowledged already, the commit itself
    never landed, and the next start repeats only outputs of records at or after the commit
    the group kept (the replay), nothing before it, and loses nothing."""
    hostile: list[tuple[int, int]] = []
    for _ in range(3):  # dead letters among the transitions
        produce(setup, rounds=100)
        hostile += _produce_hostile(setup, 8)
    produce(setup, rounds=50)
    # Killed at the first commit past a partition's last dead letter: one is owed then.
    last: dict[int, int] = {}
    for p, o in hostile:
        last[p] = max(o, last.get(p, o))
    sent = setup.tmp / "sent.jsonl"
    daemon = DaemonProcess(setup, "killed", client, command=lambda path: [
        sys.executable, "-m", "tests.integration.killed_at_commit", str(path),
        json.dumps(last), str(sent)])
    try:
        code = daemon.proc.wait(120)
    finally:
        daemon.kill_quietly()
    assert code == -signal.SIGKILL, daemon.tail()
    commits = [json.loads(line) for line in sent.read_text().splitlines()]
    assert commits[-1]["killed"] and not any(c["killed"] for c in commits[:-1])
    killed = {int(p): o for p, o in commits[-1]["offsets"].items()}
    kept = {tp.partition: o for tp, o in (committed(setup) or {}).items()
            if tp.topic == setup.topics.transitions}
    # The killed commit was not sent: it moves some partition past everything the group has.
    assert any(o > kept.get(p, 0) for p, o in killed.items()), (killed, kept)
    assert all(kept.get(p, 0) <= o for p, o in killed.items()), (killed, kept)
    # The flush came first: every dead letter owed before the killed commit is there.
    letters = {(d["partition"], d["offset"]) for d in read_all(setup, setup.topics.dead_letter)}
    owed = {(p, o) for p, o in hostile if o < killed.get(p, 0)}
    assert owed <= letters, sorted(owed - letters)

    again = DaemonProcess(setup, "after", client)
    try:
        wait(again.ready, 60, "the restarted daemon to be ready")
        wait(lambda: lag(setup) == 0, 90, "every transition to be committed")
        wait(lambda: len(_change_alerts(setup)) >= len(DRIFTS), 90, "an alert per drift")
        wait(lambda: again.settled(lambda: lag(setup)), 60, "the daemon to settle")
        assert again.stop(signal.SIGTERM) == 0, again.tail()
    finally:
        again.kill_quietly()
    _check_outputs(setup)
    counts: dict[tuple[int, int], int] = {}
    for d in read_all(setup, setup.topics.dead_letter):
        key = (d["partition"], d["offset"])
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) == set(hostile)  # none lost, none for a good record
    repeated = {k for k, n in counts.items() if n > 1}
    # Only what the replay from the kept commit handled again, and only once more.
    assert all(o >= kept.get(p, 0) for p, o in repeated), (sorted(repeated), kept)
    assert max(counts.values()) <= 2, counts


def test_a_consumer_process_that_dies_stops_the_daemon_with_its_reason(
        setup: Setup) -> None:
    """kafka.consumer_process: the consumer's process killed under a running daemon is not
    a quiet stream. The daemon says so and exits (its supervisor restarts it, resuming
    from the last commit), rather than polling a dead channel forever as "ready"."""
    import os

    daemon = DaemonProcess(setup, "orphaned", "kafka-python-process")
    try:
        wait(daemon.ready, 60, "the daemon to be ready")
        consumers = daemon.children("capwatch.adapters.io.kafka_process")
        assert len(consumers) == 1
        os.kill(consumers.pop(), signal.SIGKILL)
        code = daemon.proc.wait(60)
    finally:
        daemon.kill_quietly()
    assert code != 0
    assert "the Kafka consumer's process ended" in daemon.tail()


@pytest.mark.parametrize("client", CLIENTS)
def test_hostile_messages_land_in_the_dead_letter_topic(setup: Setup, client: str) -> None:
    import base64

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    samples: list[bytes] = []

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=200) | st.text(max_size=50).map(str.encode))
    def collect(raw: bytes) -> None:
        samples.append(raw)

    collect()
    good = [e.value for e in setup.fleet.events(3)]
    wrong_key = good[0]
    producer = KafkaProducer(bootstrap_servers=setup.bootstrap, acks="all")
    for raw in samples:
        producer.send(setup.topics.transitions, key=b"fuzz", value=raw)
    producer.send(setup.topics.transitions, key=b"someone-else", value=wrong_key)
    for event_raw in good:
        agent = json.loads(event_raw)["agent_id"]
        producer.send(setup.topics.transitions, key=agent.encode(), value=event_raw)
    producer.flush(30)
    producer.close()
    bad = len(samples) + 1
    configure_logging("error", "json")
    service = build_service(DaemonConfig(**daemon_config(setup, 0, client)))
    with running(service):
        wait(lambda: service.pipeline.processed >= bad + len(good) and lag(setup) == 0, 60,
             "every message to be handled")
    dead = read_all(setup, setup.topics.dead_letter)
    assert len(dead) == bad == service.pipeline.dead_letters
    assert all(d["reason"] and d["source"] == setup.topics.transitions for d in dead)
    assert sorted(base64.b64decode(d["raw_base64"]) for d in dead) == sorted(
        [*samples, wrong_key])
    assert any("does not match agent_id" in d["reason"] for d in dead)
    assert len({(d["partition"], d["offset"]) for d in dead}) == bad


@pytest.mark.parametrize("client", CLIENTS)
def test_no_offset_is_committed_past_a_dead_letter_the_broker_refused(
        setup: Setup, client: str) -> None:
    """The commit rule over a real broker: while the dead-letter topic refuses a dead
    letter (over its max.message.bytes), the daemon says so and commits nothing past the
    bad record; once the topic takes it, the letter is there and everything is committed."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    from capwatch.daemon.config import DaemonConfig
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service

    dlq = f"{setup.topics.dead_letter}-small"
    admin = KafkaAdminClient(bootstrap_servers=setup.bootstrap)
    try:
        admin.create_topics([NewTopic(dlq, setup.partitions, 1,
                                      topic_configs={"max.message.bytes": "2048"})])
    finally:
        admin.close()

    def raise_the_limit() -> bool:
        admin = KafkaAdminClient(bootstrap_servers=setup.bootstrap)
        try:
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, dlq,
                                                configs={"max.message.bytes": "1000000"})])
            return True
        except ValueError:  # the admin client's check: the topic's configs not known yet
            return False
        finally:
            admin.close()

    n = produce(setup, rounds=3)
    producer = KafkaProducer(bootstrap_servers=setup.bootstrap, acks="all")
    bad = producer.send(setup.topics.transitions, key=b"fuzz",
                        value=b"{" + b"x" * 4000).get(30)  # its dead letter is > 2 KB
    producer.close()
    n += 1 + produce(setup, rounds=3)
    configure_logging("error", "json")
    config = daemon_config(setup, 0, client)
    config["kafka"]["dead_letter_topic"] = dlq
    service = build_service(DaemonConfig(**config))
    p = service.pipeline
    with running(service):
        wait(lambda: p.processed >= n and any("written to Kafka" in x for x in p.problems()),
             60, "the refused dead letter to be reported")
        done = committed(setup) or {}
        held = next((o for tp, o in done.items() if tp.partition == bad.partition), 0)
        assert held <= bad.offset, "an offset was committed past the refused dead letter"
        assert read_all(setup, dlq, timeout_s=2) == []
        wait(raise_the_limit, 30, "the dead-letter topic's limit to be raised")
        wait(lambda: lag(setup) == 0 and not p.problems(), 60,
             "every offset committed once the dead letter is written")
    dead = read_all(setup, dlq)
    assert [(d["partition"], d["offset"]) for d in dead] == [(bad.partition, bad.offset)]


def _group_assignments(s: Setup) -> list[set[int]] | None:
    """The partitions of the transitions topic each member of the group holds, once the
    group is stable; None while it is rebalancing or unknown."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=s.bootstrap)
    try:
        info = admin.describe_groups([s.topics.group])
    except Exception:
        return None
    finally:
        admin.close()
    group = info.get(s.topics.group, info) if isinstance(info, dict) else info
    if not isinstance(group, dict) or str(group.get("group_state", group.get("state"))) \
            not in ("Stable", "STABLE"):
        return None
    out = []
    for member in group.get("members", []):
        assignment = member.get("member_assignment") or {}
        owned: set[int] = set()
        for topic in assignment.get("assigned_partitions", assignment.get("assignment", [])):
            name, parts = (topic.get("topic"), topic.get("partitions")) \
                if isinstance(topic, dict) else topic
            if name == s.topics.transitions:
                owned.update(parts or ())
        out.append(owned)
    return out


@pytest.fixture
def setup6(kafka_bootstrap: str, kafka_topic: str, tmp_path: Path) -> Iterator[Setup]:
    topics = make_topics(kafka_bootstrap, kafka_topic, 6)
    drifts = [DriftSpec(read_domain(EXAMPLES / f), 25, agent_id=a)
              for a, (f, _) in DRIFTS.items()]
    fleet = SimulatedFleet.build(family_specs("rover-v1", "courier-v1"), AGENTS_PER_FAMILY,
                                 drifts, seed=11)
    with serve_fleet(fleet) as urls:
        yield Setup(kafka_bootstrap, topics, 6, fleet, urls, tmp_path)


# One group of both kinds (session 14: was the whole test once per kind, ~30 s each at
# load 26): the victim runs its consumer in a process of its own, which must go with it,
# and its partitions move to one survivor of each kind.
REPLICA_CLIENTS = ("kafka-python-process", "kafka-python-process", "kafka-python")


def test_three_replica_processes_one_killed_mid_stream(
        setup6: Setup, postgres_dsn: str) -> None:
    """Scale-out: three ``capwatch run`` processes in one consumer group share a
    PostgreSQL store and a 6-partition topic; one is SIGKILLed while the stream arrives.
    Its partitions move to the others, which replay from its last commit: every record is
    committed, each drifted agent gets one correct version and one change alert, and
    nothing is published twice. The victim's consumer process (kafka.consumer_process)
    goes with it; the survivors are one of each kind (kafka-python in the daemon's own
    process, and in a process of its own)."""
    import threading
    import uuid
    from urllib.parse import quote

    import psycopg

    s = setup6
    schema = f"daemon_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_dsn else "?"
    dsn = f"{postgres_dsn}{sep}options={quote(f'-csearch_path={schema}')}"
    replicas = []
    produced: list[int] = []
    try:
        for i, client in enumerate(REPLICA_CLIENTS):
            replicas.append(DaemonProcess(
                s, f"replica-{i}", client, replica_id=f"replica-{i}", store={"url": dsn},
                scheduler={"checkpoint_s": 0.5, "results_poll_s": 0.5}))
        for daemon in replicas:
            wait(daemon.ready, 90, f"{daemon.name} to be ready")

        def split() -> bool:
            owned = _group_assignments(s)
            return owned is not None and len(owned) == 3 and all(owned) \
                and sorted(p for o in owned for p in o) == list(range(6))

        wait(split, 90, "the group to split the six partitions between three replicas")
        # The kill falls between the two halves of the stream, while the first half is
        # still being consumed or right after (whatever the machine's speed): the second
        # half reaches the victim's partitions only through the survivors.
        producer = threading.Thread(target=lambda: produced.append(
            produce(s, rounds=150, pause_every=200)))
        producer.start()
        victim = replicas[0]
        wait(lambda: victim.alive() and lag(s) < sys.maxsize and _committed(s) > 0, 90,
             "the first commits")
        consumers = victim.children("capwatch.adapters.io.kafka_process")
        assert consumers
        victim.stop(signal.SIGKILL)
        wait(lambda: not any(Path(f"/proc/{pid}").exists() for pid in consumers), 30,
             "the victim's consumer process to exit")
        producer.join(120)
        produced.append(produce(s, rounds=150))
        survivors = replicas[1:]
        wait(lambda: all(d.alive() for d in survivors) and lag(s) == 0, 120,
             "the survivors to commit every transition")
        wait(lambda: len(_change_alerts(s)) >= len(DRIFTS), 90, "an alert per drift")
        # The victim may have died holding a delivery (an awaiting-assessment alert): a
        # survivor sends it once the hold runs out.
        wait(lambda: all(d.settled(lambda: lag(s)) for d in survivors), 60,
             "the survivors to settle and deliver every alert")
        # Stopped, the survivors publish nothing more: whatever is in the topics now is
        # everything that will ever be there.
        for daemon in survivors:
            assert daemon.stop(signal.SIGTERM) == 0, daemon.tail()
    finally:
        for daemon in replicas:
            daemon.kill_quietly()
    assert sum(produced) == 300 * 2 * AGENTS_PER_FAMILY
    _check_outputs(s)
