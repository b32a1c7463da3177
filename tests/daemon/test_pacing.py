"""Background work yields the interpreter to a stream that is behind (daemon.pacing,
alert22): while the newest record handled is older than ``assessment.behind_s``, each
assessment worker (and canary probe thread) spends at most its share of
``assessment.behind_cpu_share`` of a core, by its own thread CPU time, and waits between
queries for the rest; at full speed again once the stream catches up. Fake clocks: no
test waits for real."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.assess.agent import AgentQuery, QueryResult, State
from capwatch.contracts.ports import Record
from capwatch.daemon.pacing import (
    BURST_S,
    LONGEST_WAIT_S,
    OFFSET_WINDOW_S,
    PacedAgent,
    Pacer,
    Pacers,
    StreamPressure,
)
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.model.domain import GroundAction
from tests.daemon.helpers import config, good_sample, refused_sample, run_queued


class Clocks:
    """A wall clock and this thread's CPU clock, both moved by hand; a wait moves the wall
    clock by its timeout (or, with ``catch_up_after``, the stream catches up then)."""

    def __init__(self, pressure: StreamPressure) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self.pressure = pressure
        self.waits: list[float] = []
        self.catch_up_after: float | None = None

    def work(self, cpu_s: float) -> None:
        self.wall += cpu_s
        self.cpu += cpu_s

    def wait(self, timeout_s: float) -> bool:
        self.waits.append(timeout_s)
        if self.catch_up_after is not None and self.catch_up_after <= timeout_s:
            self.wall += self.catch_up_after
            self.pressure.caught_up()
            return True
        self.wall += timeout_s
        return False


def _behind() -> StreamPressure:
    pressure = StreamPressure(0.25)
    pressure.handled(100.0, 101.0)
    assert pressure.behind
    return pressure


def _pacer(pressure: StreamPressure, share: float = 0.1
           ) -> tuple[Pacer, Clocks, list[float]]:
    clocks = Clocks(pressure)
    waited: list[float] = []
    pacer = Pacer(pressure, share, waited=waited.append, clock=lambda: clocks.wall,
                  cpu=lambda: clocks.cpu, wait=clocks.wait)
    return pacer, clocks, waited


def test_the_stream_is_behind_while_its_newest_record_handled_is_older_than_behind_s() -> None:
    pressure = StreamPressure(0.25)
    assert not pressure.behind
    pressure.handled(100.0, 100.2)
    assert not pressure.behind
    pressure.handled(100.0, 100.3)
    assert pressure.behind
    pressure.handled(None, 100.3)  # a source that says nothing of when: never behind
    assert not pressure.behind
    pressure.handled(100.0, 100.3)
    pressure.caught_up()  # a poll that found nothing waiting
    assert not pressure.behind
    never = StreamPressure(None)
    never.handled(0.0, 1e9)
    assert not never.behind


def test_while_the_stream_keeps_up_nothing_waits() -> None:
    pacer, clocks, waited = _pacer(StreamPressure(0.25))
    for _ in range(100):
        pacer.pace()
        clocks.work(0.05)
    pacer.pace()
    assert clocks.waits == [] and waited == []
    assert clocks.wall == pytest.approx(5.0)


def test_while_the_stream_is_behind_a_thread_keeps_to_its_share_and_still_finishes() -> None:
    pacer, clocks, waited = _pacer(_behind(), share=0.1)
    for _ in range(100):
        pacer.pace()
        clocks.work(0.02)
    pacer.pace()
    # 2 s of CPU at a tenth of a core: 20 s of wall time, but for the burst allowed.
    assert clocks.cpu == pytest.approx(2.0)
    assert clocks.wall == pytest.approx(2.0 / 0.1, abs=BURST_S / 0.1 + 1e-9)
    assert sum(waited) == pytest.approx(clocks.wall - clocks.cpu)
    assert max(clocks.waits) <= LONGEST_WAIT_S


def test_a_long_debt_is_waited_in_pieces_and_ends_when_the_stream_catches_up() -> None:
    pressure = _behind()
    pacer, clocks, waited = _pacer(pressure, share=0.1)
    pacer.pace()
    clocks.work(1.0)  # one step of a second: 10 s of waiting at a tenth of a core
    clocks.catch_up_after = 0.5
    pacer.pace()
    assert clocks.waits == [LONGEST_WAIT_S]  # in pieces, the first cut short
    assert waited == [0.5]
    assert not pressure.behind
    clocks.work(1.0)
    pacer.pace()  # caught up: full speed, the debt forgiven
    assert clocks.waits == [LONGEST_WAIT_S]


def test_credit_saved_while_idle_is_capped_at_the_burst() -> None:
    pacer, clocks, waited = _pacer(_behind(), share=0.1)
    pacer.pace()
    clocks.wall += 100.0  # idle (no assessment) while the stream stays behind
    pacer.pace()
    clocks.work(0.5)
    pacer.pace()
    assert sum(waited) == pytest.approx((0.5 - BURST_S) / 0.1 - 0.5)


def test_a_thread_that_falls_behind_with_the_stream_starts_with_the_burst_only() -> None:
    pressure = StreamPressure(0.25)
    pacer, clocks, waited = _pacer(pressure, share=0.1)
    pacer.pace()
    clocks.work(0.3)  # ran at full speed while the stream kept up
    pressure.handled(100.0, 101.0)
    pacer.pace()
    assert sum(waited) == pytest.approx((0.3 - BURST_S) / 0.1 - 0.3)


class _Answers:
    def __init__(self) -> None:
        self.asked = 0

    def query(self, state: State, plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.asked += 1
        return [QueryResult(0, state)]


def test_a_paced_agent_paces_before_every_query() -> None:
    pressure = _behind()
    pacer, clocks, waited = _pacer(pressure, share=0.5)
    inner = _Answers()
    agent = PacedAgent(inner, pacer)
    for _ in range(4):
        agent.query(frozenset(), [("a",)])
        clocks.work(0.1)
    assert inner.asked == 4
    # 0.3 s of CPU paced (the last step's comes after the last query) at half a core.
    assert sum(waited) == pytest.approx(0.3 / 0.5 - 0.3 - BURST_S / 0.5)


def test_the_share_is_split_over_the_threads_and_off_without_behind_s() -> None:
    pacers = Pacers(StreamPressure(0.25), 0.1, 2)
    assert pacers.pacer().share == pytest.approx(0.05)
    assert pacers.pacer() is pacers.pacer()  # one per thread
    agent = _Answers()
    assert isinstance(pacers.agent(agent), PacedAgent)
    assert Pacers(StreamPressure(None), 0.1, 2).agent(agent) is agent


class _Stamped(JsonlSource):
    """The JSONL source, its records written ``age`` seconds before they are read."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.age = 10.0

    def poll(self, timeout_s: float) -> list[Record]:
        at = time.time() - self.age
        return [msgspec.structs.replace(r, timestamp=at) for r in super().poll(timeout_s)]


def _behind_pipeline(tmp_path: Path) -> tuple[Pipeline, _Stamped, Path]:
    """A daemon that handled one record written long ago: the stream behind."""
    path = tmp_path / "in.jsonl"
    path.write_text(good_sample(step=0) + "\n")
    source = _Stamped(str(path))
    d = build_service(config(tmp_path, source={"kind": "jsonl", "path": str(path)}),
                      publisher=MemoryPublisher(), source=source).pipeline
    d.open()
    assert d._step() and d.pressure.behind
    return d, source, path


def test_the_main_loop_says_when_the_stream_is_behind(tmp_path: Path) -> None:
    d, source, path = _behind_pipeline(tmp_path)
    source.age = 0.0
    with path.open("a") as f:
        f.write(good_sample(step=1) + "\n")
    assert d._step() and not d.pressure.behind
    d.pressure.handled(0.0, time.time())
    assert d.pressure.behind
    assert not d.source.poll(0.0)
    assert d._step() == [] and not d.pressure.behind  # nothing waiting: caught up
    d.source.close()
    d.store.close()


class _Recording(Pacers):
    def __init__(self) -> None:
        super().__init__(StreamPressure(0.25), 0.1, 1)
        self.paced: list[AgentQuery] = []

    def agent(self, agent: AgentQuery) -> AgentQuery:
        self.paced.append(agent)
        return super().agent(agent)


def test_an_assessment_asks_its_agent_through_the_workers_pacer(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(refused_sample(step=i) + "\n" for i in range(3)))
    d = build_service(config(tmp_path, source={"kind": "jsonl", "path": str(path)}),
                      publisher=MemoryPublisher(), source=JsonlSource(str(path))).pipeline
    d.open()
    d.handle_batch(d.source.poll(1.0))
    recording = _Recording()
    d.workers.pacers = recording
    assert run_queued(d) == 1
    assert len(recording.paced) == 1
    d.source.close()
    d.store.close()


def test_the_settings_default_to_yielding_a_tenth_of_a_core_past_a_quarter_second(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    assert cfg.assessment.behind_s == 0.25
    assert cfg.assessment.behind_cpu_share == 0.1
    off = config(tmp_path, assessment={"behind_s": None})
    d = build_service(off, publisher=MemoryPublisher(), source=JsonlSource(
        str(tmp_path / "none.jsonl"))).pipeline
    assert d.pressure.behind_s is None
    d.store.close()


def test_a_stopping_daemon_lets_running_work_use_its_grace_at_full_speed(
        tmp_path: Path) -> None:
    d = _behind_pipeline(tmp_path)[0]
    d._shutdown()
    assert not d.pressure.behind


def test_an_outage_leaves_no_stream_to_yield_to(tmp_path: Path) -> None:
    """While the broker or the store is out the main loop handles nothing: paced work
    must not wait out the outage at its reduced share (it used to, the stream last seen
    behind)."""
    d = _behind_pipeline(tmp_path)[0]
    d._stop.set()  # the outage's wait returns at once
    d._failed(OSError(28, "No space left on device"))
    assert not d.pressure.behind
    d.source.close()
    d.store.close()


def test_producers_clocks_running_slow_pace_for_two_windows_at_most() -> None:
    """An age read from slow producer clocks (every record 0.4 s 'old' on arrival) is an
    offset, not a backlog: it paces only until two windows have shown it, after which a
    real backlog on top of it still does (rev22b: it paced for ever)."""
    pressure = StreamPressure(0.25)
    t = 1_000.0
    while t < 1_000.0 + 2 * OFFSET_WINDOW_S + 1:
        pressure.handled(t - 0.4, t)
        assert pressure.behind == (t < 1_000.0 + 2 * OFFSET_WINDOW_S)
        t += 1.0
    pressure.handled(t - 0.6, t)
    assert not pressure.behind  # 0.2 s above the offset
    pressure.handled(t - 1.4, t)
    assert pressure.behind  # 1 s of backlog above it


def test_producers_clocks_running_fast_never_pace() -> None:
    pressure = StreamPressure(0.25)
    pressure.handled(1_300.0, 1_000.0)  # written 300 s "after" it was handled
    assert not pressure.behind
    pressure.handled(999.0, 1_000.0)
    assert pressure.behind  # the fast record raised no floor: a real second behind
