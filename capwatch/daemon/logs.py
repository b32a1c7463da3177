"""structlog set-up: one JSON object per line, with agent, episode, partition and offset
bound as context variables by the pipeline while it handles a record.

Libraries that log through the standard library (APScheduler's "missed by 2 s", kafka-python)
are routed through the same processors, so stderr stays one JSON object per line."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import MutableMapping
from typing import Any, Protocol, TextIO

import structlog


class RecordSlot:
    """The record a thread is handling (and the first transition decoded from it)."""

    __slots__ = ("record", "transition")

    def __init__(self) -> None:
        self.record: _HasPosition | None = None
        self.transition: _HasAgent | None = None


class _HasPosition(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...


class _HasAgent(Protocol):
    @property
    def agent_id(self) -> str: ...
    @property
    def episode_id(self) -> str | None: ...


class _RecordContext(threading.local):
    """The record this thread is handling, for every log line it writes meanwhile.

    structlog's bind/unbind_contextvars cost ~10 µs a record, and even attribute writes on
    a thread-local cost ~0.15 µs each; the main loop sets the context for every record
    although it logs for few of them. So each thread has one plain :class:`RecordSlot`,
    read from the thread-local once per batch, and a record costs two plain writes.
    """

    def __init__(self) -> None:
        self.slot = RecordSlot()


record_context = _RecordContext()
"""``record_context.slot`` is set by the pipeline's main loop around each record; read by
:func:`add_record_context`."""


def add_record_context(_logger: Any, _method: str,
                       event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    slot = record_context.slot
    record = slot.record
    if record is not None:
        event.setdefault("partition", record.partition)
        event.setdefault("offset", record.offset)
        t = slot.transition
        if t is not None:
            event.setdefault("agent_id", t.agent_id)
            event.setdefault("episode", t.episode_id)
    return event


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of writing.

    Binding the stream at configuration time would keep writing to a stream someone
    replaced and closed since (test runners swap stderr per test; so do daemonisers).
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


_STDLIB_HANDLER_NAME = "capwatch-structlog"


def configure_logging(level: str = "info", fmt: str = "json",
                      stream: TextIO | None = None) -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(sort_keys=True) if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        add_record_context,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream or _CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _route_stdlib_logging(level, renderer, shared, stream)


def _route_stdlib_logging(level: str, renderer: structlog.typing.Processor,
                          shared: list[structlog.typing.Processor],
                          stream: TextIO | None) -> None:
    formatter = structlog.stdlib.ProcessorFormatter(
        # ExtraAdder: capwatch's own stdlib loggers (the agent client) put what matters
        # (the URL, the error, the retry wait) in `extra`; without it the line said only
        # "agent request failed, retrying".
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name,
                           structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    )
    handler = logging.StreamHandler(stream or _CurrentStderr())
    handler.set_name(_STDLIB_HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    # Reconfiguring (tests, demo after run) replaces our handler instead of stacking copies.
    for old in [h for h in root.handlers if h.get_name() == _STDLIB_HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(_LEVELS[level])
    # kafka-python and APScheduler are chatty at info; their warnings still reach the log.
    for noisy in ("kafka", "apscheduler"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, _LEVELS[level]))


def reset_logging() -> None:
    """Undo :func:`configure_logging` (tests and embedders that configure it repeatedly)."""
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _STDLIB_HANDLER_NAME]:
        root.removeHandler(handler)
