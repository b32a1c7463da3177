"""A canary round costs the main loop in proportion to what it can send (canary22): it
stops once the probe backlog is full and the next round goes on from there, so no agent
is starved by those before it in the registry's order; and it runs in slices of a time
budget over the main loop's turns, forgetting agents no longer watched only once every
agent's turn came. Fake watches, a fake clock and a fake timer: no agent answers, no
sleep."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, cast

import pytest

from capwatch.assess.agent import AgentQuery, AgentUnavailable
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.canary import MAX_BACKLOG, CanaryProber
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.model.domain import Domain, GroundAtom
from capwatch.model.pddl_reader import read_domain
from tests.daemon.helpers import EXAMPLES

ROVER = read_domain(EXAMPLES / "rover.pddl")
OBJECTS = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                        "waypoint": ("waypoint1", "waypoint2")}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Watch:
    """The parts of an AgentWatch the prober reads; reading ``last_state`` (a frozen
    watch decodes it) counts as the agent's visit and costs ``cost`` on ``timer``."""

    def __init__(self, agent_id: str, clock: Clock, timer: Clock | None = None,
                 cost: float = 0.0, domain: Domain = ROVER) -> None:
        self.agent_id = agent_id
        self.family = "rover-v1"
        self.awaiting: str | None = None
        self.clock = clock
        self.domain = domain
        self.last_executed: dict[str, float] = {}
        self.visits = 0
        self.optimal_checks = 0
        self._timer = timer
        self._cost = cost

    @property
    def last_state(self) -> frozenset[GroundAtom]:
        self.visits += 1
        if self._timer is not None:
            self._timer.now += self._cost
        return frozenset()

    def take_optimal_runs(self) -> list[Any]:
        self.optimal_checks += 1
        if self._timer is not None:
            self._timer.now += self._cost
        return []


class Unreachable:
    def agent(self, agent_id: str, family: str) -> AgentQuery:
        raise AgentUnavailable("down")


class Held(Executor):
    """Holds each agent's probes until :meth:`answer`: agents slow enough to keep the
    backlog full between rounds."""

    def __init__(self) -> None:
        self.held: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.probed: dict[str, int] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.held.append((fn, args))
        self.probed[args[0]] = self.probed.get(args[0], 0) + len(args[3])
        return Future()

    def answer(self) -> None:
        held, self.held = self.held, []
        for fn, args in held:
            fn(*args)  # the agent is unreachable: its probes are done, none found anything


def _prober(executor: Executor, timer: Clock | None = None) -> CanaryProber:
    return CanaryProber(agents=Unreachable(), metrics=DaemonMetrics(), idle_s=1.0,
                        clock=lambda: None,  # type: ignore[arg-type,return-value]
                        post=lambda r: None, executor=executor, timer=timer or Clock())


def _watches(ws: list[Watch]) -> list[AgentWatch]:
    return cast(list[AgentWatch], ws)


def test_a_full_backlog_ends_the_round_and_the_next_goes_on_from_there() -> None:
    clock = Clock()
    ws = [Watch(f"r{i:03}", clock) for i in range(200)]
    held = Held()
    prober = _prober(held)
    prober.probe_idle(_watches(ws), {}, OBJECTS)
    assert sum(held.probed.values()) == MAX_BACKLOG
    # The round stopped at the agent that filled the backlog: those after it were not
    # even read (a frozen watch decodes its state for it).
    stopped = len(held.probed)
    assert sum(w.visits for w in ws) == stopped
    rounds = 1
    while len(held.probed) < len(ws) and rounds < 40:
        # Every action stays due (idle_s 1, a round a minute), the agents answer between
        # rounds and the backlog fills again in every round.
        held.answer()
        clock.now += 60.0
        prober.probe_idle(_watches(ws), {}, OBJECTS)
        rounds += 1
    # Every agent was probed, within about as many rounds as its share of the backlog
    # takes (each round sends MAX_BACKLOG probes, an agent's due actions a round ~10).
    assert len(held.probed) == len(ws)
    assert rounds <= 2 + len(ws) * max(held.probed.values()) // MAX_BACKLOG
    # Rounds were not spent re-reading the agents before the stop, nor those after it.
    assert max(w.visits for w in ws) <= rounds


def test_a_sliced_round_visits_at_most_its_budget_per_call_and_covers_every_agent() -> None:
    clock, timer = Clock(), Clock()
    ws = [Watch(f"a{i:02}", clock, timer, cost=1.0) for i in range(20)]
    prober = _prober(Held(), timer)
    assert prober.start_round(_watches(ws), {}, OBJECTS)
    assert not prober.start_round(_watches(ws), {}, OBJECTS)  # one under way finishes first
    calls = []
    while True:
        before = sum(w.visits for w in ws)
        going = prober.round_slice(3.0)
        calls.append(sum(w.visits for w in ws) - before)
        if not going:
            break
    assert max(calls) <= 3
    assert [w.visits for w in ws] == [1] * len(ws)
    assert not prober.probing


def test_a_sliced_round_keeps_its_pace_when_the_loop_turns_seldom() -> None:
    # A budget of one agent per call, but a call made after half the round's period
    # visits half the agents: the round ends within its period however few turns it gets.
    clock, timer = Clock(), Clock()
    ws = [Watch(f"a{i:02}", clock, timer, cost=1.0) for i in range(20)]
    prober = _prober(Held(), timer)
    prober.start_round(_watches(ws), {}, OBJECTS, period_s=100.0)
    prober.round_slice(1.0)
    assert sum(w.visits for w in ws) == 1
    timer.now = 50.0
    prober.round_slice(1.0)
    assert sum(w.visits for w in ws) == 10
    timer.now = 100.0
    prober.round_slice(1.0)
    assert [w.visits for w in ws] == [1] * len(ws)


def test_agents_gone_between_slices_are_skipped_and_forgotten_at_the_rounds_end() -> None:
    clock, timer = Clock(), Clock()
    ws = [Watch(f"a{i:02}", clock, timer, cost=1.0) for i in range(10)]
    prober = _prober(Held(), timer)
    prober.probe_idle(_watches(ws), {}, OBJECTS)
    kept = prober._agents
    assert set(kept) == {w.agent_id for w in ws}
    registry = {w.agent_id: w for w in ws}
    clock.now += 60.0
    prober.start_round(_watches(ws), {}, OBJECTS,
                       lookup=cast(Callable[[str], AgentWatch | None], registry.get))
    prober.round_slice(3.0)
    # Not visited yet is not gone: the agents after the slice keep their probe times.
    assert set(kept) == set(registry)
    visited = {w.agent_id for w in ws if w.visits == 2}
    assert len(visited) == 3
    early = next(iter(visited))
    late = next(w for w in ws if w.visits == 1)
    del registry[early], registry[late.agent_id]  # evicted, or moved to another replica
    while prober.round_slice(3.0):
        assert early in kept  # forgotten only at the round's end
    assert late.visits == 1  # gone before its turn: not read
    assert set(kept) == set(registry)
    # A later round forgets nothing more.
    prober.start_round(_watches(list(registry.values())), {}, OBJECTS)
    while prober.round_slice(3.0):
        pass
    assert set(kept) == set(registry)


def test_a_sliced_round_checks_every_agents_optimal_runs_a_full_backlog_or_not() -> None:
    clock, timer = Clock(), Clock()
    ws = [Watch(f"a{i:02}", clock, timer, cost=1.0) for i in range(60)]
    prober = _prober(Held(), timer)
    prober.start_round(_watches(ws), {}, OBJECTS, optimal=True)
    calls = []
    going = True
    while going:
        before = sum(w.visits + w.optimal_checks for w in ws)
        going = prober.round_slice(3.0)
        calls.append(sum(w.visits + w.optimal_checks for w in ws) - before)
    assert max(calls) <= 3
    assert sum(w.visits for w in ws) < len(ws)  # the backlog filled: the round stopped
    assert [w.optimal_checks for w in ws] == [1] * len(ws)


def test_a_visit_that_fails_half_way_gives_its_backlog_slots_back(monkeypatch: Any) -> None:
    held = Held()
    prober = _prober(held)
    clock = Clock()
    clock.now = 10.0
    calls = {"n": 0}
    real = CanaryProber._start

    def start(self: CanaryProber, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the agent's second due action: one slot already taken
            raise RuntimeError("design failed")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(CanaryProber, "_start", start)
    w = Watch("a0", clock)
    with pytest.raises(RuntimeError, match="design failed"):
        prober.probe_idle(_watches([w]), {}, OBJECTS)
    assert calls["n"] == 2
    assert prober._backlog == 0  # before: the slots of the failed visit kept for good
    # The round goes on past the failed agent as the main loop's slices do: the next
    # agent's probes still find room.
    monkeypatch.setattr(CanaryProber, "_start", real)
    while prober.round_slice(None):  # the failed round ends
        pass
    clock.now = 1_000.0  # every action due again
    assert prober.start_round(_watches([w, Watch("a1", clock)]), {}, OBJECTS)
    while prober.round_slice(None):
        pass
    assert held.probed.get("a1", 0) > 0
    assert prober._backlog == sum(held.probed.values())


class _Optimal(Watch):
    """An agent that always has an optimal run to search."""

    def __init__(self, agent_id: str, clock: Clock) -> None:
        super().__init__(agent_id, clock)
        self.taken = 0

    def take_optimal_runs(self) -> list[Any]:
        self.taken += 1
        return [("a run",)]


def test_one_optimal_run_search_an_agent_is_queued_at_a_time(monkeypatch: Any) -> None:
    """Each round took the agent's runs and queued another search, however many were
    still waiting in a pool slowed by pacing (rev22b): now the runs wait in the watch
    until the agent's last search ended."""
    held = Held()
    prober = _prober(held)
    monkeypatch.setattr(prober, "_search", lambda *args: None)
    w = _Optimal("a0", Clock())
    for _ in range(3):
        prober.check_optimal(_watches([w]), OBJECTS)
    assert len(held.held) == 1 and w.taken == 1
    held.answer()  # the search ran
    prober.check_optimal(_watches([w]), OBJECTS)
    assert len(held.held) == 1 and w.taken == 2
