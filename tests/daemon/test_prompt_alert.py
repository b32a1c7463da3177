"""A hard inconsistency is alerted at once, not when its debounce lets the evidence be
queued (issue 13, latency row): the alert is in the outbox after the batch that showed
it, goes out on the next routing without a group wait, and the queued work adds no
second one. The commit rule is unchanged. No servers."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.alerts.outbox import DeliveryReport
from capwatch.daemon.alerting import AlertRouting, queued_alert_key
from capwatch.daemon.config import AlertsConfig
from capwatch.daemon.service import build_service
from tests.daemon.helpers import config, good_sample, refused_sample


def test_the_first_inconsistency_is_alerted_before_the_debounce_and_only_once(
        tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    lines = [good_sample(step=0), refused_sample(step=1), good_sample(step=2),
             refused_sample(step=3), refused_sample(step=4)]
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600.0},
                 alerts={"group_wait_seconds": 600})
    memory = MemoryPublisher()
    d = build_service(cfg, publisher=memory, source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    records = d.source.poll(1.0)
    d.handle_batch(records[:3])
    assert d.store.queue_items() == []  # one inconsistency: still debouncing
    watch = d.registry.get("rover-a")
    assert watch is not None
    (row,) = d.store.outbox()
    assert row.key == queued_alert_key(watch.work_key())
    assert row.alert_type == "unexplained_inconsistency"
    assert d.checkpoints.commit_offsets() == {0: 1}  # the evidence still holds the commit
    d.route_alerts()  # not forced: the group wait of the other types does not apply
    (alert,) = memory.alerts
    assert alert.agent_id == "rover-a" and alert.alert_type == "unexplained_inconsistency"
    assert [(t["partition"], t["offset"]) for t in alert.evidence["transitions"]] == [(0, 1)]
    assert alert.evidence["assessment_key"] == watch.work_key()
    d.handle_batch(records[3:])  # the third inconsistency: the work is queued
    (item,) = d.store.queue_items()
    assert item.key == alert.evidence["assessment_key"]
    assert [r.key for r in d.store.outbox()] == [row.key]  # written once
    d.route_alerts(force=True)
    assert len(memory.alerts) == 1
    d.source.close()
    d.store.close()


class _Outbox:
    def __init__(self) -> None:
        self.ran = threading.Event()
        self.thread: str | None = None

    def run_once(self, now: datetime, force: bool = False) -> DeliveryReport:
        self.thread = threading.current_thread().name
        self.ran.set()
        return DeliveryReport()

    def prune(self, now: datetime, keep: timedelta) -> int:
        return 0


def test_a_wake_routes_at_once_on_the_routing_thread() -> None:
    outbox = _Outbox()
    routing = AlertRouting(AlertsConfig(route_s=3600), outbox,  # type: ignore[arg-type]
                           datetime.now)
    routing.start()
    routing.wake()
    assert outbox.ran.wait(30)  # long before the scheduler's hour
    assert outbox.thread == "capwatch-alerts"
    routing.close()
    assert routing._thread is not None and not routing._thread.is_alive()


class _SlowOutbox:
    """Counts runs, how many were going at once, and holds each until told to finish."""

    def __init__(self) -> None:
        self.runs = 0
        self.going = 0
        self.most_at_once = 0
        self.threads: set[str] = set()
        self.lock = threading.Lock()
        self.in_run = threading.Event()
        self.finish = threading.Event()
        self.ran = threading.Condition()

    def run_once(self, now: datetime, force: bool = False) -> DeliveryReport:
        with self.lock:
            self.going += 1
            self.most_at_once = max(self.most_at_once, self.going)
            self.threads.add(threading.current_thread().name)
        self.in_run.set()
        self.finish.wait(30)
        with self.lock:
            self.going -= 1
        with self.ran:
            self.runs += 1
            self.ran.notify_all()
        return DeliveryReport()

    def prune(self, now: datetime, keep: timedelta) -> int:
        return 0


def test_routing_runs_every_route_s_on_its_own_thread_one_run_at_a_time() -> None:
    # Before session 14 an APScheduler job ran it every route_s beside the woken thread:
    # a run longer than route_s made the scheduler skip the next with a warning
    # ("maximum number of running instances reached") that looked like a fault.
    outbox = _SlowOutbox()
    routing = AlertRouting(AlertsConfig(route_s=0.01), outbox,  # type: ignore[arg-type]
                           datetime.now)
    routing.start()
    try:
        assert outbox.in_run.wait(30)  # unwoken: the interval alone started it
        routing.wake()  # while a run is held: coalesces into one more run, later
        routing.wake()
        outbox.finish.set()
        with outbox.ran:
            assert outbox.ran.wait_for(lambda: outbox.runs >= 3, 30)
    finally:
        outbox.finish.set()
        routing.close()
    assert outbox.most_at_once == 1
    assert outbox.threads == {"capwatch-alerts"}


def test_the_scheduler_runs_a_late_job_once_and_has_no_routing_job(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    service = build_service(cfg, publisher=MemoryPublisher(), source=JsonlSource(str(path)))
    try:
        service._schedule()
        service.scheduler.start(paused=True)  # the job defaults apply as jobs are added
        jobs = {job.id: job for job in service.scheduler.get_jobs()}
        assert set(jobs) == {"drift-audit", "canary", "checkpoint", "results"}
        assert "alerts" not in jobs  # routing has its own thread
        for job in jobs.values():
            # A job only queues a command: run it however late (the default dropped a
            # run over 1 s late with a "missed by" warning), and piled-up runs as one.
            assert job.misfire_grace_time is None and job.coalesce and job.max_instances == 1
    finally:
        service.scheduler.shutdown(wait=False)
        service.store.close()


def test_a_graceful_stop_sends_the_alerts_still_waiting_in_their_group(
        tmp_path: Path) -> None:
    # A replica scaled down (or the last one stopped) has no next start to send them:
    # a group still in its wait at SIGTERM would be held in the store unseen.
    path = tmp_path / "in.jsonl"
    path.write_text(good_sample(step=0) + "\n" + refused_sample(step=1) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 detection={"debounce_transitions": 3, "debounce_s": 3600.0},
                 alerts={"group_wait_seconds": 600,
                         "group_wait_by_type": {"unexplained_inconsistency": 600}})
    memory = MemoryPublisher()
    d = build_service(cfg, publisher=memory, source=JsonlSource(str(path))).pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    d.handle_batch(d.source.poll(1.0))
    d.route_alerts()
    assert memory.alerts == []  # waiting in its group
    d._shutdown()
    (alert,) = memory.alerts
    assert alert.agent_id == "rover-a" and alert.alert_type == "unexplained_inconsistency"
    d.store.close()
