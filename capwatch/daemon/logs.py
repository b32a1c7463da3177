"""structlog set-up: one JSON object per line, with agent, episode, partition and offset
bound as context variables by the pipeline while it handles a record.

Libraries that log through the standard library (APScheduler's "missed by 2 s", kafka-python)
are routed through the same processors, so stderr stays one JSON object per line."""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from typing import Any, Final, TextIO

import structlog

RECORD: Final = 0
TRANSITION: Final = 1


def new_slot() -> list[Any]:
    """The record a thread is handling and the first transition decoded from it, at
    :data:`RECORD` and :data:`TRANSITION` (None when none). A plain list, not an object
    with two attributes: the batch loop (compiled) writes it two to three times a record,
    and an item write from compiled code is a direct store where an attribute write of a
    Python object is a generic ``PyObject_SetAttr`` (~500 instructions each with what it
    calls, callgrind, ipc-mixed)."""
    return [None, None]


class _RecordContext(threading.local):
    """The record this thread is handling, for every log line it writes meanwhile.

    structlog's bind/unbind_contextvars cost ~10 µs a record, and even attribute writes on
    a thread-local cost ~0.15 µs each; the main loop sets the context for every record
    although it logs for few of them. So each thread has one plain slot (:func:`new_slot`),
    read from the thread-local once per batch, and a record costs two item writes.
    """

    def __init__(self) -> None:
        self.slot = new_slot()


record_context = _RecordContext()
"""``record_context.slot`` is set by the pipeline's main loop around each record; read by
:func:`add_record_context`."""


def add_record_context(_logger: Any, _method: str,
                       event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    slot = record_context.slot
    record = slot[RECORD]
    if record is not None:
        event.setdefault("partition", record.partition)
        event.setdefault("offset", record.offset)
        t = slot[TRANSITION]
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


class RepeatFilter(logging.Filter):
    """Lets the first of a run of like lines through and holds back their repeats for
    ``window_s``; the first line after that says how many were held back (``repeated``).

    During an outage kafka-python logs an ERROR for every reconnection attempt, many a
    second, and APScheduler a warning for every job run it missed: the one line that
    says what failed was lost among hundreds. Lines are alike when their logger, level
    and message agree once digits are masked (ports, node ids, durations differ between
    attempts). capwatch's own stdlib lines (the agent client's) pass untouched: they put
    what tells them apart (the agent's URL) in ``extra``, not in the message.
    """

    MAX_KEYS = 1_000

    def __init__(self, window_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, int, str], tuple[float, int]] = {}
        """Key → (when its last line went through, lines held back since)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("capwatch"):
            return True
        key = (record.name, record.levelno, _DIGITS.sub("#", record.getMessage())[:300])
        now = self.clock()
        with self._lock:
            run = self._runs.get(key)
            if run is not None and now - run[0] < self.window_s:
                self._runs[key] = (run[0], run[1] + 1)
                return False
            if len(self._runs) >= self.MAX_KEYS:
                self._runs = {k: v for k, v in self._runs.items()
                              if now - v[0] < self.window_s}
            self._runs[key] = (now, 0)
        if run is not None and run[1]:
            record.repeated = run[1]
        return True


_DIGITS = re.compile(r"\d+")


class LibraryLines(logging.Filter):
    """Says in capwatch's words what a library's alarming but ordinary line means.

    kafka-python 3 times each step of its network thread (fetches, heartbeats, metadata)
    and warns past 0.1 s: "Task ... ran for 0.148s (>0.100s threshold). It is blocking the
    event loop -- likely a tight sync loop inside a coroutine. Other pollers will time
    out." The time is the wall time of the step, and the thread shares the interpreter
    with capwatch's main loop: while the main loop checks a batch, or the machine is short
    of CPU, the step waits for its turn. So in capwatch it means the client's network work
    was that late, not a bug in a coroutine; it matters once it nears the heartbeat
    interval (a third of ``kafka.session_timeout_ms``). The line is rewritten to say so,
    at ``info`` below :attr:`WARN_S` and ``warning`` from it; the repeat filter after it
    still holds back runs of like lines.
    """

    WARN_S = 1.0
    """A tenth of the default session timeout: past it, fetches and heartbeats are late
    enough to show as lag, and a few such in a row put the membership at risk."""

    _CONSUMER = ("Kafka client's network thread was held up: its fetches and heartbeats "
                 "ran late (the main loop held the interpreter checking a batch, or the "
                 "machine is short of CPU); harmless well below kafka.session_timeout_ms. "
                 "Often or long: give the replica more CPU, or set kafka.consumer_process "
                 "or kafka.client: confluent-kafka")
    _ADMIN = ("Kafka client's network thread was held up: kafka-python's admin client "
              "(topics, the group's state; records and heartbeats go through "
              "confluent-kafka) ran late (the main loop held the interpreter, or the "
              "machine is short of CPU); consumption is not affected")
    """Under kafka.client: confluent-kafka only the admin work uses kafka-python: the
    consumer's advice (switch to confluent-kafka) was wrong there (oper17b)."""

    def __init__(self, kafka_client: str = "kafka-python") -> None:
        super().__init__()
        self.confluent = kafka_client == "confluent-kafka"

    _SLOW_TASK = re.compile(r"ran for ([0-9.]+)s \(>[0-9.]+s threshold\)\. It is blocking")

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "kafka.net.selector" and record.levelno == logging.WARNING:
            found = self._SLOW_TASK.search(record.getMessage())
            if found is not None:
                seconds = float(found.group(1))
                record.msg = (self._ADMIN if self.confluent else self._CONSUMER)
                record.args = ()
                record.held_up_s = round(seconds, 3)
                if seconds < self.WARN_S:
                    record.levelno, record.levelname = logging.INFO, "INFO"
                    return logging.getLogger().isEnabledFor(logging.INFO)
        return True


def configure_logging(level: str = "info", fmt: str = "json",
                      stream: TextIO | None = None, kafka_client: str = "kafka-python"
                      ) -> None:
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
    _route_stdlib_logging(level, renderer, shared, stream, kafka_client)


def _route_stdlib_logging(level: str, renderer: structlog.typing.Processor,
                          shared: list[structlog.typing.Processor],
                          stream: TextIO | None, kafka_client: str) -> None:
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
    handler.addFilter(LibraryLines(kafka_client))
    handler.addFilter(RepeatFilter())
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
