"""Intake: a source record → the transitions of an agent this replica watches, or a dead
letter saying why not (bad bytes, a trace mixing agents, an unknown family, a trace
step outside the model's vocabulary). Runs on the main loop."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import structlog

from capwatch.contracts.ports import Publisher, Record
from capwatch.contracts.wire import (
    AgentTransition,
    DeadLetter,
    DecodeLimits,
    dead_letter_record,
    vocabulary_error,
)
from capwatch.contracts.wire_fast import decode
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.checkpoint import Checkpointer
from capwatch.daemon.logs import record_context
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.registry import Registry

log = structlog.get_logger("capwatch.daemon")


class Intake:
    def __init__(self, *, limits: DecodeLimits, registry: Registry, checkpoints: Checkpointer,
                 publisher: Publisher, metrics: DaemonMetrics,
                 clock: Callable[[], datetime]) -> None:
        self.limits = limits
        self.registry = registry
        self.checkpoints = checkpoints
        self.publisher = publisher
        self.metrics = metrics
        self.clock = clock
        self.dead_letters = 0

    def read(self, record: Record) -> tuple[AgentWatch, list[AgentTransition]] | None:
        """The record's transitions and their agent's watch; None when there are none
        (the record was dead-lettered, or was an empty trace).

        A single transition's vocabulary is left to the watch's monitor, which checks it
        before changing anything; a trace's steps are all checked here first, because a
        trace is applied whole or not at all.
        """
        decoded = decode(record.value, self.limits, key=record.key,
                         partition=record.partition, offset=record.offset, size=record.size,
                         sha256=record.sha256)
        if isinstance(decoded, DeadLetter):
            self.dead_letter(record, decoded.reason, "decode")
            return None
        if not decoded:
            return None
        first = decoded[0]
        record_context.agent_id, record_context.episode = first.agent_id, first.episode_id
        if any(t.agent_id != first.agent_id or t.family != first.family for t in decoded):
            self.dead_letter(record, "a trace mixes agents or families", "decode")
            return None
        watch = self.registry.load(first.agent_id, first.family, record.partition)
        if watch is None:
            self.dead_letter(record, f"unknown family {first.family!r}: no baseline model",
                             "vocabulary")
            return None
        if self.checkpoints.saved_drift or self.checkpoints.evicted:
            self.checkpoints.restore(watch)
        if len(decoded) > 1:
            for t in decoded:
                problem = vocabulary_error(watch.domain, t)
                if problem is not None:
                    self.dead_letter(record, f"step {t.step}: {problem}", "vocabulary")
                    return None
        return watch, decoded

    def dead_letter(self, record: Record, reason: str, kind: str) -> None:
        self.dead_letters += 1
        self.metrics.dead_letters.labels(kind).inc()
        self.publisher.dead_letter(dead_letter_record(
            DeadLetter(reason, record.value, record.size, record.sha256), record.source,
            record.partition, record.offset, self.clock()))
        log.warning("dead letter", reason=reason)
