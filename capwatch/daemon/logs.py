"""structlog set-up: one JSON object per line, with agent, episode, partition and offset
bound as context variables by the pipeline while it handles a record."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

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
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    # kafka-python logs through the standard library; keep its chatter out of ours.
    logging.getLogger("kafka").setLevel(logging.WARNING)
