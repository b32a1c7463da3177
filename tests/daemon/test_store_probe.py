"""/readyz's store probe runs on a thread of its own: /readyz answers while the probe
waits on a store that does not answer (the real server frozen: test_frozen_server.py)."""

from __future__ import annotations

import threading

from capwatch.daemon.store_probe import StoreProbe


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Blocking:
    """A probe that waits until released, then answers ``answer``."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.answer: str | None = None
        self.calls = 0

    def __call__(self) -> str | None:
        self.calls += 1
        assert self.release.wait(60)
        return self.answer


def test_check_answers_while_the_probe_waits_and_then_names_it_late() -> None:
    clock, probe = _Clock(), _Blocking()
    checker = StoreProbe(probe, late_s=3.0, answer_s=0.01, clock=clock)
    # The first probe has not answered: nothing is known yet, the answer is at once.
    assert checker.check() is None
    assert checker.probing and probe.calls == 1
    clock.now += 1.0
    assert checker.check() is None  # in flight 1 s: not late yet, no second probe
    assert probe.calls == 1
    clock.now += 2.5
    why = checker.check()
    assert why is not None and why.startswith("a probe has had no answer for 4 s"), why
    assert probe.calls == 1  # still one at a time
    probe.answer = "OperationalError: connection refused"
    probe.release.set()
    _wait_idle(checker)
    assert checker.check() == "OperationalError: connection refused"


def test_a_fresh_answer_is_reused_and_a_stale_one_probed_again() -> None:
    clock = _Clock()
    answers = iter(["down", None])
    calls: list[float] = []

    def probe() -> str | None:
        calls.append(clock.now)
        return next(answers)

    checker = StoreProbe(probe, late_s=3.0, answer_s=30.0, fresh_s=1.0, clock=clock)
    assert checker.check() == "down"  # answered within answer_s: its own answer
    clock.now += 0.5
    assert checker.check() == "down" and len(calls) == 1  # fresh: not probed again
    clock.now += 1.0
    assert checker.check() is None and len(calls) == 2


def test_a_probe_that_raises_names_the_error() -> None:
    def probe() -> str | None:
        raise ConnectionError("no route to host")

    checker = StoreProbe(probe, late_s=3.0, answer_s=30.0)
    assert checker.check() == "ConnectionError: no route to host"


def _wait_idle(checker: StoreProbe) -> None:
    done = threading.Event()
    for _ in range(6000):
        if not checker.probing:
            return
        done.wait(0.01)
    raise AssertionError("the probe did not end")
