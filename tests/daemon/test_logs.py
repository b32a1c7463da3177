"""The daemon's log is one JSON object per line, including lines from libraries that log
through the standard library (APScheduler, kafka-python)."""

from __future__ import annotations

import io
import json
import logging

import structlog

from capwatch.daemon.logs import configure_logging


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_apscheduler_warnings_are_json_lines() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    logging.getLogger("apscheduler.executors.default").warning(
        'Run time of job "route" was missed by %s', "0:00:02")
    structlog.get_logger().info("own_event", agent="a1")
    [scheduler, own] = _lines(stream)
    assert scheduler["event"] == 'Run time of job "route" was missed by 0:00:02'
    assert scheduler["level"] == "warning"
    assert scheduler["logger"] == "apscheduler.executors.default"
    assert "timestamp" in scheduler
    assert own["event"] == "own_event" and own["agent"] == "a1"


def test_library_exceptions_keep_their_traceback_inside_the_json_line() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    try:
        raise RuntimeError("broker gone")
    except RuntimeError:
        logging.getLogger("kafka.conn").exception("connection failed")
    [line] = _lines(stream)
    assert "RuntimeError: broker gone" in str(line["exception"])


def test_library_info_chatter_is_filtered_but_our_level_applies() -> None:
    stream = io.StringIO()
    configure_logging("warning", "json", stream=stream)
    logging.getLogger("apscheduler.scheduler").info("Added job")
    logging.getLogger("kafka.consumer").info("fetching")
    structlog.get_logger().info("hidden")
    structlog.get_logger().warning("shown")
    assert [line["event"] for line in _lines(stream)] == ["shown"]


def test_reconfiguring_does_not_duplicate_lines() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    configure_logging("info", "json", stream=stream)
    logging.getLogger("apscheduler").warning("once")
    assert len(_lines(stream)) == 1


def test_the_extra_fields_of_a_stdlib_record_reach_the_line() -> None:
    # The agent client logs its retries through the standard library with the reason in
    # `extra`; an operator reading "retrying" must see why and where.
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    logging.getLogger("capwatch.adapters.io.agent_client").info(
        "agent request failed, retrying",
        extra={"agent_url": "http://127.0.0.1:1", "attempt": 1,
               "error": "ConnectionRefusedError: [Errno 111] Connection refused",
               "retry_in_s": 0.4})
    [line] = _lines(stream)
    assert line["event"] == "agent request failed, retrying"
    assert line["agent_url"] == "http://127.0.0.1:1" and line["attempt"] == 1
    assert line["error"].startswith("ConnectionRefusedError") and line["retry_in_s"] == 0.4
