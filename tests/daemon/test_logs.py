"""The daemon's log is one JSON object per line, including lines from libraries that log
through the standard library (APScheduler, kafka-python)."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import structlog

from capwatch.daemon.logs import configure_logging


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
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


def test_a_library_repeating_itself_in_an_outage_is_one_line_per_window() -> None:
    """kafka-python logs an ERROR per reconnection attempt: hundreds of lines in an
    outage, which hid the one that said what failed."""
    from capwatch.daemon.logs import RepeatFilter

    now = [0.0]
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    handler = next(h for h in logging.getLogger().handlers
                   if h.get_name() == "capwatch-structlog")
    handler.filters = [RepeatFilter(window_s=30.0, clock=lambda: now[0])]
    kafka = logging.getLogger("kafka.net.manager")
    for i in range(200):
        now[0] = i * 0.1
        kafka.error("Connection failed to 127.0.0.1:%d: ECONNREFUSED", 40000 + i)
    kafka.error("Bootstrap failed: KafkaTimeoutError")  # another line is not held back
    now[0] = 31.0
    kafka.error("Connection failed to 127.0.0.1:%d: ECONNREFUSED", 49999)
    # capwatch's own stdlib lines differ by their extras, never held back.
    agent = logging.getLogger("capwatch.adapters.io.agent_client")
    for url in ("http://a:1", "http://b:1"):
        agent.info("agent request failed, retrying", extra={"agent_url": url})
    lines = _lines(stream)
    assert [line["event"] for line in lines] == [
        "Connection failed to 127.0.0.1:40000: ECONNREFUSED",
        "Bootstrap failed: KafkaTimeoutError",
        "Connection failed to 127.0.0.1:49999: ECONNREFUSED",
        "agent request failed, retrying", "agent request failed, retrying"]
    assert "repeated" not in lines[0] and lines[2]["repeated"] == 199
    assert [line["agent_url"] for line in lines[3:]] == ["http://a:1", "http://b:1"]


def _slow_task(seconds: float) -> None:
    # As kafka-python 3's NetworkSelector logs it: pre-formatted, no arguments.
    logging.getLogger("kafka.net.selector").warning(
        f"Task <kafka.net.selector.Task object at 0x7f822012c410> ran for {seconds:.3f}s "
        "(>0.100s threshold). It is blocking the event loop -- likely a tight sync loop "
        "inside a coroutine. Other pollers will time out.")


def test_kafka_pythons_slow_task_warning_says_what_it_means_in_capwatch() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    _slow_task(0.148)
    _slow_task(2.5)
    short, long = _lines(stream)
    for line in (short, long):
        assert str(line["event"]).startswith("Kafka client's network thread was held up")
        assert "blocking the event loop" not in str(line["event"])
        assert line["logger"] == "kafka.net.selector"
    # Short holds are ordinary on a loaded replica; past a second they show as lag.
    assert (short["level"], short["held_up_s"]) == ("info", 0.148)
    assert (long["level"], long["held_up_s"]) == ("warning", 2.5)


def test_under_confluent_kafka_the_line_does_not_advise_switching_to_it() -> None:
    # Only kafka-python's admin client runs there: its consumer advice was wrong (oper17b).
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, kafka_client="confluent-kafka")
    _slow_task(0.3)
    [line] = _lines(stream)
    assert str(line["event"]).startswith("Kafka client's network thread was held up")
    assert "admin client" in str(line["event"])
    assert "kafka.client: confluent-kafka" not in str(line["event"])
    assert line["held_up_s"] == 0.3


def test_a_short_hold_is_not_logged_at_level_warning() -> None:
    stream = io.StringIO()
    configure_logging("warning", "json", stream=stream)
    _slow_task(0.3)
    _slow_task(1.2)
    [line] = _lines(stream)
    assert line["held_up_s"] == 1.2


def test_a_line_logged_while_a_record_is_handled_names_its_position_and_agent(
        tmp_path: Path) -> None:
    """The batch loop sets the log context per record (a plain slot, written from
    compiled code): the "inconsistent transition" line carries the record's partition,
    offset, agent and episode; a line logged after the batch carries none of them."""
    from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
    from capwatch.daemon.service import build_service
    from tests.daemon.helpers import config, good_sample, refused_sample

    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in
                            (good_sample(step=0), good_sample(step=1), refused_sample(step=2))))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    d = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path))).pipeline
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    d.handle_batch(d.source.poll(1.0))
    structlog.get_logger().info("after the batch")
    lines = _lines(stream)
    (line,) = [x for x in lines if x["event"] == "inconsistent transition"]
    assert (line["partition"], line["offset"]) == (0, 2)
    assert (line["agent_id"], line["episode"]) == ("rover-a", "ep")
    (after,) = [x for x in lines if x["event"] == "after the batch"]
    assert not {"partition", "offset", "agent_id", "episode"} & after.keys()
    d.source.close()
    d.store.close()


def test_a_worker_line_after_an_assessment_names_no_agent(tmp_path: Path) -> None:
    """A worker's log lines name the agent of the assessment it runs; the ones after it
    (a claim that fails on an outage, the next item before it is read) must not name the
    last one. The agent was bound to the thread's context and never unbound: every later
    line of the thread carried it (and a test running work on the main thread, as
    tests/daemon/helpers.run_queued does, left it on every line of the tests after)."""
    from datetime import UTC, datetime, timedelta

    from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
    from capwatch.daemon.service import build_service
    from tests.daemon.helpers import config, good_sample, run_queued

    path = tmp_path / "in.jsonl"
    path.write_text(good_sample(step=0) + "\n")
    day = 86400.0
    now = [datetime(2026, 11, 27, tzinfo=UTC)]
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 assessment={"reassess_every_s": day})
    d = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path)),
                      clock=lambda: now[0]).pipeline
    stream = io.StringIO()
    try:
        d.seed_families()
        d.source.start(lambda p: None, lambda p: None, {})
        d.handle_batch(d.source.poll(1.0))
        now[0] += timedelta(seconds=day)
        d.reassess()
        configure_logging("info", "json", stream=stream)
        assert run_queued(d) == 1  # on this thread, as a worker thread runs it
        structlog.get_logger().info("after the assessment")
    finally:
        structlog.contextvars.clear_contextvars()
        d.source.close()
        d.store.close()
    lines = _lines(stream)
    (after,) = [x for x in lines if x["event"] == "after the assessment"]
    assert any(x.get("agent_id") == "rover-a" for x in lines if x is not after)
    assert "agent_id" not in after
