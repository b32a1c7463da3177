"""structlog set-up: one JSON object per line, with agent, episode, partition and offset
bound as context variables by the pipeline while it handles a record."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


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


def configure_logging(level: str = "info", fmt: str = "json",
                      stream: TextIO | None = None) -> None:
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(sort_keys=True) if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(stream or _CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # kafka-python logs through the standard library; keep its chatter out of ours.
    logging.getLogger("kafka").setLevel(logging.WARNING)
