"""``capwatch run`` over a real broker against bare consumers of the same topic, for both
Kafka clients (issue 13's Kafka rows; run by ``make bench-daemon``).

One topic (3 partitions) is filled once with the simulated fleet's transitions; then, in
each round, six readers take the whole topic, each in a consumer group of its own: for
each client (kafka-python, then confluent-kafka)

- a bare consumer that polls (``consume``s batches, for confluent-kafka) and
  ``json.loads`` every message, once with the client's default settings and once with
  the fetch settings capwatch gives its own source (TUNED), the ratio printed against
  both;
- capwatch's own source for that client alone (``poll`` into Records, no pipeline);
- ``capwatch run`` (the service, in this process, output to the log) with that
  ``kafka.client``;
- for kafka-python, also capwatch's source and ``capwatch run`` with
  ``kafka.consumer_process`` (the consumer in a child process), ratioed against the same
  bare kafka-python consumers, the child's CPU printed beside the daemon's;
- capwatch's pipeline alone on the records that client's source delivered, in its
  batches, through a fresh daemon's main-loop turns (kafka_split): with the main loop's
  own CPU in ``capwatch run``, what the run adds around the pipeline.

Rounds alternate the readers, so other load on the machine hits them alike. Rates are
records per wall second from the first record read to the last (the group's join is not
counted); the process's CPU seconds over the same span (``time.process_time``, every
thread: librdkafka's included) are printed per record beside them, as is the machine's
load average. ``python benchmarks/bench_kafka.py --profile`` runs ``capwatch run`` with
confluent-kafka once under cProfile and prints where its main loop's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

from kafka_split import pipeline_alone, read_batches

from capwatch.adapters.sim.fleet import SimulatedFleet
from capwatch.contracts.ports import AgentDirectory, Record
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.config_connections import KafkaConfig
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import FleetDirectory, build_service

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "capwatch" / "examples"
CLIENTS = ("kafka-python", "confluent-kafka")
_KAFKA_DEFAULTS = KafkaConfig()
TUNED = {"max_poll_records": _KAFKA_DEFAULTS.max_poll_records,
         "fetch_max_wait_ms": _KAFKA_DEFAULTS.fetch_max_wait_ms,
         "partition_fetch_bytes": _KAFKA_DEFAULTS.partition_fetch_bytes}
"""The fetch settings capwatch's config gives its source by default (kafka.
max_poll_records, which the bare consumers use anyway; kafka.fetch_max_wait_ms and
kafka.partition_fetch_bytes, which differ from both clients' 500 ms and 1 MiB): the bare
consumers are run both with the clients' defaults and with these, so the ratio says how
much of capwatch's figure is the settings and how much is capwatch."""


class Rate:
    """Records per wall second and CPU microseconds per record over one read; with
    ``child_cpu``, the consumer process's beside the daemon's; with ``main_cpu``, the
    share of the daemon's main-loop thread."""

    def __init__(self, n: int, wall: float, cpu: float, child_cpu: float | None = None,
                 main_cpu: float | None = None,
                 main_parts: tuple[float, float] | None = None) -> None:
        """``main_parts``: of ``main_cpu``, the seconds in the source's ``poll`` and in
        the pipeline's batches (``Pipeline.handle_batch``)."""
        self.per_s = n / wall
        self.cpu_us = cpu / n * 1e6
        self.child_us = child_cpu / n * 1e6 if child_cpu is not None else None
        self.main_us = main_cpu / n * 1e6 if main_cpu is not None else None
        self.poll_us: float | None = None
        self.batch_us: float | None = None
        if main_parts is not None:
            self.poll_us, self.batch_us = main_parts[0] / n * 1e6, main_parts[1] / n * 1e6

    def __str__(self) -> str:
        main = f", {self.main_us:.1f} in the main loop" if self.main_us is not None else ""
        if self.main_us is not None and self.poll_us is not None \
                and self.batch_us is not None:
            main += (f": poll {self.poll_us:.1f}, batches {self.batch_us:.1f}, the rest "
                     f"{self.main_us - self.poll_us - self.batch_us:.1f}")
        child = f" + {self.child_us:.1f} in the consumer process" \
            if self.child_us is not None else ""
        return f"{self.per_s:,.0f}/s ({self.cpu_us:.1f} us CPU{main}{child})"


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used so far, from /proc (0 without)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PROCESS = "kafka-python-process"
"""capwatch over kafka-python with kafka.consumer_process: its rows' name."""


Workload = tuple[Iterable[tuple[bytes, bytes]], dict[str, Path], AgentDirectory]
"""What a Kafka run reads: (key, value) messages, its families' domain files and who
answers queries."""


def simulated(f: SimulatedFleet, rounds: int) -> Workload:
    return (((e.agent_id.encode(), e.value) for e in f.events(rounds)),
            {"rover-v1": EXAMPLES / "rover.pddl", "courier-v1": EXAMPLES / "courier.pddl"},
            FleetDirectory(f))


def fill(bootstrap: str, topic: str, messages: Iterable[tuple[bytes, bytes]]
         ) -> tuple[int, int]:
    """The messages on ``topic``, keyed as given; returns (messages, bytes)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1 << 20)
    n = size = 0
    for key, value in messages:
        producer.send(topic, key=key, value=value)
        n += 1
        size += len(value)
    producer.flush(120)
    producer.close()
    return n, size


def bare_kafka_python(bootstrap: str, topic: str, n: int, tuned: bool = False) -> Rate:
    """``tuned``: with the fetch settings capwatch's source uses (TUNED), else the
    client's defaults."""
    from kafka import KafkaConsumer

    settings = ({"max_poll_records": TUNED["max_poll_records"],
                 "fetch_max_wait_ms": TUNED["fetch_max_wait_ms"],
                 "max_partition_fetch_bytes": TUNED["partition_fetch_bytes"]} if tuned
                else {"max_poll_records": 500})
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap,
                             group_id=f"bare-{uuid.uuid4().hex[:6]}",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             **settings)
    seen, first, cpu0 = 0, 0.0, 0.0
    while seen < n:
        for records in consumer.poll(500).values():
            if not first and records:
                first, cpu0 = time.perf_counter(), time.process_time()
            for r in records:
                json.loads(r.value)
            seen += len(records)
    rate = Rate(n, time.perf_counter() - first, time.process_time() - cpu0)
    consumer.close()
    return rate


def bare_confluent(bootstrap: str, topic: str, n: int, tuned: bool = False) -> Rate:
    from confluent_kafka import Consumer

    batch = TUNED["max_poll_records"] if tuned else 500
    # As capwatch's confluent-kafka source sets them from kafka.fetch_max_wait_ms.
    settings = {"fetch.wait.max.ms": TUNED["fetch_max_wait_ms"],
                "fetch.queue.backoff.ms": TUNED["fetch_max_wait_ms"],
                "max.partition.fetch.bytes": TUNED["partition_fetch_bytes"]} if tuned else {}
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"bare-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **settings})
    consumer.subscribe([topic])
    seen, first, cpu0 = 0, 0.0, 0.0
    while seen < n:
        messages = consumer.consume(batch, 0) or consumer.consume(1, 0.5)
        if not first and messages:
            first, cpu0 = time.perf_counter(), time.process_time()
        for m in messages:
            if m.error() is None:
                json.loads(m.value())  # type: ignore[arg-type]
                seen += 1
    rate = Rate(n, time.perf_counter() - first, time.process_time() - cpu0)
    consumer.close()
    return rate


def source_only(bootstrap: str, topic: str, n: int, client: str) -> Rate:
    """capwatch's own Kafka source (poll → Records), nothing after it: what the adapter
    adds to the bare client, apart from the pipeline."""
    from capwatch.daemon.service import kafka_clients

    if client == PROCESS:
        from capwatch.adapters.io.kafka_process import ProcessKafkaSource

        cls: Callable[..., Any] = ProcessKafkaSource
    else:
        cls, _ = kafka_clients(daemon_config(bootstrap, topic, Path("unused.db"),
                                             client).kafka)
    source = cls(bootstrap, topic, f"src-{uuid.uuid4().hex[:6]}")
    source.start(lambda parts: None, lambda parts: None, {})
    child = getattr(source, "child_pid", None)
    seen, first, cpu0, child0 = 0, 0.0, 0.0, 0.0
    while seen < n:
        records = source.poll(0.5)
        if not first and records:
            first, cpu0, child0 = time.perf_counter(), time.process_time(), process_cpu(child)
        seen += len(records)
    rate = Rate(n, time.perf_counter() - first, time.process_time() - cpu0,
                process_cpu(child) - child0 if child is not None else None)
    source.close()
    return rate


def alone(bootstrap: str, topic: str, n: int, families: dict[str, Path],
          agents: AgentDirectory, client: str) -> Rate:
    """capwatch's pipeline on the records ``client``'s source delivers, read first."""
    with tempfile.TemporaryDirectory() as tmp:
        config = daemon_config(bootstrap, topic, Path(tmp) / "m.db", client, families)
        wall, cpu = pipeline_alone(config, agents, read_batches(config, n))
    return Rate(n, wall, cpu)


def daemon_config(bootstrap: str, topic: str, store: Path, client: str,
                  families: dict[str, Path] | None = None) -> DaemonConfig:
    """``client`` kafka-python-process: kafka-python with kafka.consumer_process."""
    process = client == PROCESS
    if process:
        client = "kafka-python"
    if families is None:
        families = {"rover-v1": EXAMPLES / "rover.pddl", "courier-v1": EXAMPLES / "courier.pddl"}
    return DaemonConfig(**cast("dict[str, Any]", {
        "replica_id": "bench", "store": {"url": f"sqlite:///{store}"},
        "families": {name: {"domain": str(d)} for name, d in families.items()},
        "source": {"kind": "kafka"}, "output": {"kind": "log"},
        "http": {"enabled": False},
        "kafka": {"client": client, "bootstrap_servers": bootstrap,
                  "transitions_topic": topic, "group_id": f"capwatch-{uuid.uuid4().hex[:6]}",
                  "partitions": 3, "create_topics": False, "consumer_process": process},
    }))


def capwatch_run(bootstrap: str, topic: str, n: int, families: dict[str, Path],
                 agents: AgentDirectory, client: str,
                 profile: Callable[[Callable[[], object]], None] | None = None) -> Rate:
    """The daemon's service in a thread (as ``capwatch run`` runs it), until it has
    handled all ``n`` records."""
    with tempfile.TemporaryDirectory() as tmp:
        svc = build_service(daemon_config(bootstrap, topic, Path(tmp) / "m.db", client,
                                          families), agents=agents)

        def run() -> None:
            if profile is None:
                svc.run(install_signals=False)
            else:
                profile(lambda: svc.run(install_signals=False))

        p = svc.pipeline
        progress = Progress(p, n)
        runner = threading.Thread(target=run)
        runner.start()
        first, last = progress.wait(runner)
        rate = Rate(n, last.wall - first.wall, last.cpu - first.cpu,
                    last.child - first.child if first.child is not None
                    and last.child is not None else None,
                    last.main - first.main,
                    (last.poll - first.poll, last.batch - first.batch))
        p.stop()
        runner.join(60)
        assert p.dead_letters == 0
    return rate


class Clocks(NamedTuple):
    """The clocks at one point of a run: wall, the process's CPU, the main loop's thread's
    CPU, the consumer process's CPU (None without one)."""

    wall: float
    cpu: float
    main: float
    child: float | None
    poll: float
    """The main loop's CPU so far in the source's ``poll`` (thread CPU)."""
    batch: float
    """... and in ``Pipeline.handle_batch``."""


class Progress:
    """When ``pipeline``'s main loop has handled its first record and its ``n``-th: the
    clocks read by the main loop itself, after the batch that got there
    (``handle_batch`` wrapped on this pipeline), so that no thread of the benchmark's
    wakes meanwhile.

    It used to be a thread of the benchmark's that looked at ``processed`` every 10 ms:
    each wake took the GIL from the main loop (a forced switch; the main loop then waits
    to get it back, on a busy machine behind other processes for a CPU). That thread
    doubled the main loop's voluntary context switches (stochastic, 100,000 records, load
    13-17: 811-930 a run against 427-483 without it, docs/performance.md, session 21),
    a cost `capwatch run` does not have and the bare consumers, which time themselves,
    did not pay."""

    def __init__(self, pipeline: Pipeline, n: int,
                 at_mark: Callable[[bool], None] | None = None) -> None:
        """``at_mark``: called on the main loop at each mark, True at the first
        (kafka_callgrind switches its counting there)."""
        self.n = n
        self.marks: list[Clocks] = []
        self.reached = threading.Event()
        handle = pipeline.handle_batch
        # The main loop's CPU split: the source's poll, the batches, the rest (its own
        # steps: results, commands, sweeps, checkpoints, commits, lag).
        self.in_poll = self.in_batch = 0.0
        poll = pipeline.source.poll

        def timed_poll(timeout_s: float) -> list[Record]:
            t = time.thread_time()
            try:
                return poll(timeout_s)
            finally:
                self.in_poll += time.thread_time() - t

        setattr(pipeline.source, "poll", timed_poll)  # noqa: B010 (mypy: a method)

        def handle_batch(records: Sequence[Record]) -> None:
            t = time.thread_time()
            try:
                handle(records)
            finally:
                self.in_batch += time.thread_time() - t
            if not self.marks and pipeline.processed:
                self.marks.append(self._clocks(pipeline))
                if at_mark is not None:
                    at_mark(True)
            if len(self.marks) == 1 and pipeline.processed >= n:
                if at_mark is not None:
                    at_mark(False)
                self.marks.append(self._clocks(pipeline))
                self.reached.set()

        setattr(pipeline, "handle_batch", handle_batch)  # noqa: B010 (mypy: a method)

    def _clocks(self, pipeline: Pipeline) -> Clocks:
        child = getattr(pipeline.source, "child_pid", None)
        return Clocks(time.perf_counter(), time.process_time(), time.thread_time(),
                      process_cpu(child) if child is not None else None,
                      self.in_poll, self.in_batch)

    def wait(self, runner: threading.Thread) -> tuple[Clocks, Clocks]:
        """The clocks at the first record and at the ``n``-th (``runner`` runs the
        daemon; its ending first is an error)."""
        while not self.reached.wait(1.0):
            if not runner.is_alive():
                raise RuntimeError("the daemon stopped before it handled every record")
        first, last = self.marks
        return first, last


def kafka_rows(work: Workload, n_agents: int, repeats: int = 2) -> None:
    """Print the Kafka rows of issue 13's table (a broker from tests/support, or
    ``KAFKA_BOOTSTRAP_SERVERS``)."""
    messages, families, agents = work
    sys.path.insert(0, str(ROOT))
    from capwatch.adapters.io.kafka import ensure_topics
    from tests.support.kafka_broker import start_kafka_broker

    broker = start_kafka_broker()
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        ensure_topics(broker.bootstrap, transitions=topic, models=f"{topic}-m",
                      alerts=f"{topic}-a", dead_letter=f"{topic}-d", partitions=3)
        n, size = fill(broker.bootstrap, topic, messages)
        print(f"  over Kafka: {n:,} transitions of {size // n} bytes, {n_agents} agents, "
              f"3 partitions; load {os.getloadavg()[0]:.1f} before")
        bare = {"kafka-python": bare_kafka_python, "confluent-kafka": bare_confluent}
        bare_confluent(broker.bootstrap, topic, n)  # warm-up: a fresh topic's first read
        runs: dict[tuple[str, str], list[Rate]] = {}
        for _ in range(repeats):
            for client in CLIENTS:
                runs.setdefault(("bare", client), []).append(
                    bare[client](broker.bootstrap, topic, n))
                runs.setdefault(("tuned", client), []).append(
                    bare[client](broker.bootstrap, topic, n, True))
                for reader in (client, PROCESS) if client == "kafka-python" else (client,):
                    runs.setdefault(("source", reader), []).append(
                        source_only(broker.bootstrap, topic, n, reader))
                    runs.setdefault(("capwatch", reader), []).append(
                        capwatch_run(broker.bootstrap, topic, n, families, agents, reader))
                runs.setdefault(("alone", client), []).append(
                    alone(broker.bootstrap, topic, n, families, agents, client))

        def mean(kind: str, client: str) -> float:
            rates = runs[(kind, client)]
            return sum(r.per_s for r in rates) / len(rates)

        def line(kind: str, client: str) -> str:
            return "; ".join(str(r) for r in runs[(kind, client)])

        settings = (f"fetch_max_wait_ms {TUNED['fetch_max_wait_ms']}, partition fetch "
                    f"{TUNED['partition_fetch_bytes'] >> 20} MiB")
        for client in CLIENTS:
            print(f"  bare {client} consumer, the client's defaults          "
                  f"{line('bare', client)}")
            print(f"  bare {client} consumer, capwatch's settings ({settings}) "
                  f"{line('tuned', client)}")
            for reader in (client, PROCESS) if client == "kafka-python" else (client,):
                name = ("kafka-python, consumer_process" if reader == PROCESS else reader)
                print(f"  capwatch's {name} source alone (poll)                  "
                      f"{line('source', reader)}")
                capwatch = mean("capwatch", reader)
                ratios = (f"ratio {capwatch / mean('bare', client):.2f} against the bare "
                          f"consumer with the client's defaults, "
                          f"{capwatch / mean('tuned', client):.2f} with capwatch's settings")
                target = ("(target >= 0.9)" if client == "kafka-python"
                          else "(target >= 100,000/s)")
                print(f"  capwatch run, {name}  {line('capwatch', reader)}   {ratios} "
                      f"{target}")
            main = [r.main_us for r in runs[("capwatch", client)] if r.main_us is not None]
            batch = [r.batch_us for r in runs[("capwatch", client)]
                     if r.batch_us is not None]
            alone_us = [r.cpu_us for r in runs[("alone", client)]]
            print(f"  capwatch's pipeline alone, the records and batches {client}'s source "
                  f"delivered (first pass) {line('alone', client)}; capwatch run's main "
                  f"loop adds {min(main) - min(alone_us):+.1f} us a record around it "
                  f"(min against min), of which its batches "
                  f"{min(batch) - min(alone_us):+.1f}")
        print(f"  load {os.getloadavg()[0]:.1f} after")
    finally:
        broker.stop()


def profile_confluent(f: SimulatedFleet, rounds: int) -> None:
    """cProfile of the daemon's main loop over confluent-kafka: where the time goes."""
    import cProfile
    import pstats

    sys.path.insert(0, str(ROOT))
    from capwatch.adapters.io.kafka import ensure_topics
    from tests.support.kafka_broker import start_kafka_broker

    broker = start_kafka_broker()
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        ensure_topics(broker.bootstrap, transitions=topic, models=f"{topic}-m",
                      alerts=f"{topic}-a", dead_letter=f"{topic}-d", partitions=3)
        messages, families, agents = simulated(f, rounds)
        n, _ = fill(broker.bootstrap, topic, messages)
        prof = cProfile.Profile()

        def profiled(call: Callable[[], object]) -> None:
            prof.runcall(call)

        rate = capwatch_run(broker.bootstrap, topic, n, families, agents, "confluent-kafka",
                            profiled)
        print(f"  profiled: {rate}")
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(15)
        # The main loop's steps, by cumulative time (poll, handle_batch, drain, sweep,
        # checkpoint, and the commit inside it).
        stats.sort_stats("cumulative").print_stats(
            r"pipeline.py.*\((_step|handle_batch|drain|sweep|checkpoint|_refresh_lag)"
            r"|kafka_confluent.py.*\((poll|commit|lag)\)")
    finally:
        broker.stop()


def main() -> int:
    from bench_daemon import fleet  # the same simulated fleet as the other rows

    from capwatch.daemon.heap import settle_heap
    from capwatch.daemon.logs import configure_logging

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    configure_logging("error", "json")
    # The collector as `capwatch run` sets it (cli/run_cmd.py), and as `make
    # bench-daemon`'s in-process rows leave it before these: standalone, the default
    # thresholds cost the main loop 1.5-4 us a record more (docs/performance.md).
    settle_heap()
    agents = 20 if args.quick else 100
    rounds = 20 if args.quick else 500
    f = fleet(agents)
    print(f"kafka benchmark: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    if args.profile:
        profile_confluent(f, rounds)
    else:
        kafka_rows(simulated(f, rounds), 2 * agents)
    return 0


if __name__ == "__main__":
    sys.exit(main())
