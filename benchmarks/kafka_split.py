"""What ``capwatch run`` over Kafka spends around its pipeline (bench_kafka's rows).

Two measurements beside the whole process's CPU per record:

- the CPU of the thread that runs the daemon's main loop (poll, the pipeline,
  checkpoints), apart from every other thread of the process (the client's own:
  librdkafka's, kafka-python's IO thread; the scheduler, the workers, the benchmark's
  watcher), read from the thread's CPU clock at the first and the last record
  (``bench_kafka.capwatch_run``);
- the pipeline alone on the very records a source delivered, in its batches: the topic
  read once, then fed to a fresh daemon's main-loop turns with no Kafka client (the same
  configuration, store and agents as ``capwatch run``). Over Kafka every record is a
  first pass, and a source hands over one partition's records at a time, not the fleet
  file's order; both change what the decoder's caches and the agents' memos find, so
  the in-process steady-state row is not the baseline to subtract from the run.

The main loop's CPU less the pipeline alone's is what the run adds around the pipeline
in the daemon's own thread: the source's conversion of the client's messages, the
client's work done on the caller's thread, commits and lag.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from capwatch.contracts.ports import AgentDirectory, Rebalance, Record
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.service import build_service, kafka_clients


class Delivered:
    """The batches a Kafka source delivered, handed out again one per poll."""

    def __init__(self, topic: str, batches: list[list[Record]]) -> None:
        self.name = topic
        self.batches = batches
        self.pos = 0

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        del on_revoke, resume
        on_assign({r.partition for b in self.batches for r in b})  # as a group would

    def poll(self, timeout_s: float) -> list[Record]:
        batch = self.batches[self.pos] if self.pos < len(self.batches) else []
        self.pos += 1
        return batch

    def commit(self, offsets: Mapping[int, int]) -> None:
        """Nothing to commit to: the records were read once, before."""

    def exhausted(self) -> bool:
        return self.pos >= len(self.batches)

    def lag(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        """Nothing to release."""


def read_batches(config: DaemonConfig, n: int) -> list[list[Record]]:
    """``n`` records of the configured topic, as the configured client's source polls
    them (a consumer group of its own)."""
    k = config.kafka
    source_class: Callable[..., Any] = kafka_clients(k)[0]
    source = source_class(k.bootstrap_servers, k.transitions_topic,
                          f"split-{uuid.uuid4().hex[:6]}")
    source.start(lambda parts: None, lambda parts: None, {})
    batches, seen = [], 0
    try:
        while seen < n:
            batch = source.poll(0.5)
            if batch:
                batches.append(batch)
                seen += len(batch)
    finally:
        source.close()
    return batches


def pipeline_alone(config: DaemonConfig, agents: AgentDirectory,
                   batches: list[list[Record]]) -> tuple[float, float]:
    """(wall, CPU) seconds for a fresh daemon's main-loop turns to handle ``batches``:
    ``capwatch run``'s configuration with the records already read."""
    source = Delivered(config.kafka.transitions_topic, batches)
    svc = build_service(config, agents=agents, source=source)
    p = svc.pipeline
    try:
        p.open()
        wall, cpu = time.perf_counter(), time.process_time()
        while not source.exhausted():
            p._step()  # one turn of Pipeline.run, without its outage handling
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        p.source.close()
        p.publisher.close()
        svc.store.close()
