"""The runs of consecutive steps an agent marked optimal, for the reduced-functionality
check (canaries, ``Canaries.check_optimal``): the known model may reach a run's end
sooner than the agent could. One :class:`OptimalRuns` per agent that ever reported an
optimal step (:class:`~capwatch.daemon.agent_watch.AgentWatch` makes it then)."""

from __future__ import annotations

from capwatch.contracts.wire import AgentTransition

OPTIMAL_RUNS = 4
MAX_OPTIMAL_RUN = 64
"""Optimal runs kept per agent, and the longest run kept (a longer one is cut)."""


class OptimalRuns:
    """The finished runs (the last ``OPTIMAL_RUNS``) and the open one."""

    __slots__ = ("finished", "run", "seen")

    def __init__(self) -> None:
        self.finished: list[tuple[AgentTransition, ...]] = []
        self.run: list[AgentTransition] = []
        self.seen = 0
        """The open run's length when :meth:`take` last looked at it."""

    @property
    def holding(self) -> bool:
        """Whether anything is kept (a watch holding runs is not held as bytes)."""
        return bool(self.run or self.finished)

    def note(self, t: AgentTransition) -> None:
        """An executed step marked optimal: it extends the open run, or starts one."""
        run = self.run
        # The decoder hands the previous next state over as the very set (its memo): an
        # identity test first, as comparing two sets looks at every atom (0.9 µs at 215).
        if run and (run[-1].episode_id != t.episode_id
                    or (run[-1].next_state is not t.state and run[-1].next_state != t.state)
                    or len(run) >= MAX_OPTIMAL_RUN):
            self._close()
        self.run.append(t)

    def _close(self) -> None:
        if len(self.run) >= 2:
            self.finished.append(tuple(self.run))
            del self.finished[:-OPTIMAL_RUNS]
        self.run = []
        self.seen = 0

    def take(self) -> list[tuple[AgentTransition, ...]]:
        """The finished runs, and the open one if it did not grow since the last call (its
        episode is likely over); each run is handed out once."""
        if self.run and len(self.run) == self.seen:
            self._close()
        self.seen = len(self.run)
        runs, self.finished = self.finished, []
        return runs
