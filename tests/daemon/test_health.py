"""The daemon's own health (capwatch/daemon/health.py): a main loop that stopped turning
makes /livez answer 503, and a Kafka replica left without partitions makes /readyz answer
503, while one standing by in a group with more members than partitions stays ready.

Unit tests: a fake clock, and a real pipeline over a source whose poll never returns.
The no-partition case against the real broker is in tests/integration/test_daemon_health.py.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.contracts.ports import GroupView, Rebalance, Record
from capwatch.daemon.health import Health
from capwatch.daemon.service import build_service
from tests.daemon.helpers import EndlessSourceTail, config


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_without_a_turn_for_the_bound_is_stalled() -> None:
    clock = Clock()
    health = Health(stall_after_s=120, unassigned_after_s=60, clock=clock)
    assert health.stalled() is None  # not running yet: starting is not stalling
    health.running(True)
    clock.now += 119
    assert health.stalled() is None
    clock.now += 2
    assert health.stalled() == "main loop stalled: no turn for 121 s (health.stall_after_s 120)"
    health.turn()
    assert health.stalled() is None
    clock.now += 500
    health.running(False)  # stopping: the loop is gone, not stalled
    assert health.stalled() is None


def _group(view: GroupView | None, clock: Clock) -> Health:
    health = Health(stall_after_s=120, unassigned_after_s=60, group="g",
                    group_view=lambda: view, clock=clock)
    health.running(True)
    return health


def test_no_partitions_past_the_bound_is_a_problem_naming_the_group() -> None:
    clock = Clock()
    view = GroupView("PreparingRebalance", frozenset({"m-1", "m-2"}), 6)
    health = _group(view, clock)
    health.turn(member="m-1")
    clock.now += 60
    assert health.partitions() == (None, None)  # a rebalance may take this long
    clock.now += 1
    problem, note = health.partitions()
    assert note is None and problem == (
        "no partitions held for 61 s (health.unassigned_after_s 60): the group g is "
        "PreparingRebalance with 2 members for 6 partitions")
    health.holding({3})
    assert health.partitions() == (None, None)
    health.holding(set())  # revoked: the bound starts again
    clock.now += 30
    assert health.partitions() == (None, None)


def test_a_stable_member_of_a_group_with_more_members_than_partitions_stands_by() -> None:
    clock = Clock()
    view = GroupView("Stable", frozenset({"m-1", "m-2", "m-3"}), 2)
    health = _group(view, clock)
    health.turn(member="m-3")
    clock.now += 61
    assert health.partitions() == (
        None, "standing by: the group g has 3 members for 2 partitions")


def test_left_out_of_a_stable_group_is_a_problem_even_with_spare_members() -> None:
    clock = Clock()
    view = GroupView("Stable", frozenset({"m-1", "m-2", "m-3"}), 2)
    health = _group(view, clock)
    health.turn(member="m-9")  # its id is not among the group's members
    clock.now += 61
    problem, _ = health.partitions()
    assert problem is not None and problem.endswith(", this replica not among them")
    health.turn(member=None)
    problem, _ = health.partitions()
    assert problem is not None and problem.endswith(", this replica not a member")


def test_a_stable_group_with_enough_partitions_for_everyone_is_no_excuse() -> None:
    """The leader's assignment forgot this member (the stale-metadata fault)."""
    clock = Clock()
    health = _group(GroupView("Stable", frozenset({"m-1", "m-2"}), 6), clock)
    health.turn(member="m-2")
    clock.now += 61
    assert health.partitions()[0] is not None


def test_an_undescribed_group_is_reported_as_such() -> None:
    clock = Clock()
    health = _group(None, clock)
    clock.now += 61
    problem, _ = health.partitions()
    assert problem is not None and problem.endswith("the group g could not be described")


def test_a_source_that_is_not_a_group_member_is_not_judged_on_partitions() -> None:
    clock = Clock()
    health = Health(stall_after_s=120, unassigned_after_s=60, clock=clock)
    health.running(True)
    clock.now += 1000
    health.turn()
    assert health.partitions() == (None, None)


class StuckSource(EndlessSourceTail):
    """A source whose poll never returns until released: the main loop stops turning."""

    name = "stuck"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.polls = 0

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        on_assign({0})

    def poll(self, timeout_s: float) -> list[Record]:
        self.polls += 1
        if self.polls == 3:
            self.release.wait(60)
        return []


def wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.05)


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_stalled_main_loop_makes_livez_answer_503_and_a_turn_clears_it(
        tmp_path: Path) -> None:
    cfg = config(tmp_path, health={"stall_after_s": 0.5},
                 http={"enabled": True, "port": 0})
    source = StuckSource()
    service = build_service(cfg, publisher=MemoryPublisher(), source=source)
    assert service.api is not None
    url = service.api.url
    runner = threading.Thread(target=lambda: service.run(install_signals=False))
    runner.start()
    try:
        wait(lambda: source.polls >= 3, 30, "the poll that does not return")
        wait(lambda: _get(url + "/livez")[0] == 503, 30, "/livez to say the loop stalled")
        status, body = _get(url + "/livez")
        assert status == 503 and body["status"] == "stalled"
        assert body["problems"][0].startswith("main loop stalled: no turn for ")
        assert _get(url + "/healthz")[0] == 200  # the process is up: startup probes pass
        source.release.set()
        wait(lambda: _get(url + "/livez") == (200, {"status": "ok", "problems": []}), 30,
             "/livez to clear once the loop turns again")
    finally:
        source.release.set()
        service.pipeline.stop()
        runner.join(60)
    assert not runner.is_alive()
