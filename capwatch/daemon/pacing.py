"""Background work yields the interpreter to the stream while the stream is behind.

The assessment workers (and the canary's probe threads) run in the main loop's
interpreter, and their work is CPU-bound Python: an in-process agent's simulation, the
engine between queries. CPython hands its lock to a waiting thread only after the switch
interval (5 ms), and the main loop lets go of it at every socket read or store write, so
one busy worker takes far more of the main loop's time than its own CPU share. Measured
in the alert latency benchmark (alert22): while an assessment ran, a record cost the
main loop 17.6 µs of CPU and 30.8 µs blocked on the lock, against 13.8 and 2.8 µs
otherwise; an injection a second kept one running a tenth of the time, and the records
read meanwhile (a hard inconsistency among them) waited behind the backlog it made.

So while the newest record handled is older than ``assessment.behind_s`` (the stream is
behind), each background thread runs at most its part of ``assessment.behind_cpu_share``
of a core, measured by its own thread CPU time, and waits between queries for the rest
(at once back to full speed when the stream catches up). Work is only slowed, never
stopped: an assessment under a stream that stays behind still finishes, at that share.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from capwatch.assess.agent import AgentQuery, QueryResult, State
from capwatch.model.domain import GroundAction

BURST_S = 0.01
"""CPU seconds a background thread may spend at once when the stream falls behind (and
at most this much credit is saved while it waits or idles): two switch intervals."""

LONGEST_WAIT_S = 1.0
"""A wait is cut into waits of at most this, each ending early when the stream catches
up: a stopping daemon or a caught-up stream is not kept waiting on an old debt."""


OFFSET_WINDOW_S = 150.0
"""How long the least record age seen stands for the producers' clock offset: a window
and the one before it. A stream behind for longer than two windows straight is taken as
the new normal and no longer paces anything (pacing cannot have been helping it)."""


_ROUNDING = 1e-9
"""A debt this small is what rounding leaves of one waited out: no wait for it."""


class StreamPressure:
    """Whether the main loop is behind the stream: set by the main loop after each batch,
    read by background threads (thread-safe)."""

    def __init__(self, behind_s: float | None) -> None:
        self.behind_s = behind_s
        """A stream whose newest handled record is older than this is behind; None: it
        never is (nothing yields)."""
        self._caught_up = threading.Event()
        self._caught_up.set()
        # A record's age is read from the producers' clocks: one running slow by more
        # than behind_s would keep the stream "behind" for good (rev22b), paced work at
        # its share for ever. So the age counts above the least age seen over the last
        # one or two windows (the clocks' offset, and the stream's own latency), starting
        # from 0 (no offset assumed); an age below 0 (a clock running fast) counts as 0,
        # which never paces. Main loop only.
        self._floor = 0.0
        self._floor_before = 0.0
        self._window_ends: float | None = None

    def handled(self, newest: float | None, now: float) -> None:
        """A batch was handled at ``now``; ``newest``: when the newest record handled so
        far was written (Unix seconds), None if not known."""
        if self.behind_s is None or newest is None:
            self._caught_up.set()
            return
        age = max(0.0, now - newest)
        if self._window_ends is None:
            self._window_ends = now + OFFSET_WINDOW_S
        elif now >= self._window_ends:
            self._floor_before, self._floor = self._floor, age
            self._window_ends = now + OFFSET_WINDOW_S
        self._floor = min(self._floor, age)
        if age - min(self._floor, self._floor_before) > self.behind_s:
            self._caught_up.clear()
        else:
            self._caught_up.set()

    def caught_up(self) -> None:
        """A poll found nothing waiting."""
        self._caught_up.set()

    @property
    def behind(self) -> bool:
        return not self._caught_up.is_set()

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the stream to catch up; True if it has."""
        return self._caught_up.wait(timeout_s)


class Pacer:
    """One background thread's pace: while the stream is behind, it spends at most
    ``share`` of a core (its thread CPU time), waiting at :meth:`pace` for the rest.

    A token bucket: credit grows at ``share`` CPU seconds a wall second, up to
    :data:`BURST_S`, and CPU spent takes from it; while the stream keeps up the bucket
    stays full, so work starts at full speed."""

    def __init__(self, pressure: StreamPressure, share: float, *,
                 waited: Callable[[float], None] = lambda seconds: None,
                 clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time,
                 wait: Callable[[float], bool] | None = None) -> None:
        if share <= 0:
            raise ValueError(f"a pacer's share must be above 0, not {share}")
        self.pressure = pressure
        self.share = share
        self.waited = waited
        """Told of each wait (seconds): counted in the metrics."""
        self.clock = clock
        self.cpu = cpu
        self._wait = wait if wait is not None else pressure.wait
        self._at: float | None = None
        self._used = 0.0
        self._credit = BURST_S

    def pace(self) -> None:
        """Call between steps of the work (this thread's): returns at once unless the
        stream is behind and this thread spent more than its share since."""
        now, used = self.clock(), self.cpu()
        if self._at is None or not self.pressure.behind:
            self._at, self._used, self._credit = now, used, BURST_S
            return
        # Earned and spent over the same span: only what is left over is capped.
        self._credit = min(BURST_S, self._credit + (now - self._at) * self.share
                           - (used - self._used))
        self._at, self._used = now, used
        while self._credit < -_ROUNDING and self.pressure.behind:
            start = self.clock()
            caught_up = self._wait(min(LONGEST_WAIT_S, -self._credit / self.share))
            end = self.clock()
            self.waited(end - start)
            self._credit = min(BURST_S, self._credit + (end - start) * self.share)
            self._at = end
            if caught_up:
                break
        if not self.pressure.behind:
            self._credit = BURST_S


class PacedAgent:
    """An agent whose every query first lets the stream's pacer wait: the one call all of
    an assessment's (or a probe's) work runs between."""

    def __init__(self, agent: AgentQuery, pacer: Pacer) -> None:
        self.agent = agent
        self.pacer = pacer

    def query(self, state: State, plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.pacer.pace()
        return self.agent.query(state, plan, samples)


class Pacers:
    """A pacer per thread for one kind of background work: ``share`` is the kind's whole
    share, split over ``threads`` threads."""

    def __init__(self, pressure: StreamPressure, share: float, threads: int,
                 waited: Callable[[float], None] = lambda seconds: None) -> None:
        self.pressure = pressure
        self.share = share / max(1, threads)
        self.waited = waited
        self._local = threading.local()

    def pacer(self) -> Pacer:
        """The calling thread's."""
        pacer: Pacer | None = getattr(self._local, "pacer", None)
        if pacer is None:
            pacer = self._local.pacer = Pacer(self.pressure, self.share, waited=self.waited)
        return pacer

    def agent(self, agent: AgentQuery) -> AgentQuery:
        """``agent``, its queries paced on the calling thread's pacer."""
        if self.pressure.behind_s is None:
            return agent
        return PacedAgent(agent, self.pacer())
