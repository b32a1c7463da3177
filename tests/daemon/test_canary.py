"""Issue 11, finding 3: canaries find a capability an agent lost and stopped using, on a
simulated clock (no sleeps): varied groundings and start states, within 5 minutes with
the default schedule."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery, QueryNotAttempted
from capwatch.contracts.agent_protocol import AgentProtocolError, AgentRejectedQuery
from capwatch.daemon.canary import CanaryProber
from capwatch.daemon.config import SchedulerConfig
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.service import build_service
from capwatch.daemon.work import CanaryFinding, Result
from capwatch.model.domain import Action, LiftedAtom, Parameter
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.daemon.helpers import EXAMPLES, config, good_sample
from tests.paths import DATA


class Inline(Executor):
    """Runs a probe at once, on the caller's thread: the test's clock decides when."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(fn(*args, **kwargs))
        return f


class Directory:
    def __init__(self, model: str = "rover-sample-drift.pddl") -> None:
        self.sim = SimulatedAgent(read_domain(EXAMPLES / model), seed=1)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


def _first_finding(tmp_path: Path, phase: float, lost_at: float, drift: Path,
                   stops: str | None, own_state: list[list[str]] | None = None
                   ) -> tuple[float, CanaryFinding]:
    """Seconds from the loss to the first canary finding, on a simulated clock: an hour of
    the default schedule (ticks at ``phase`` + k·canary_s) with the agent as modelled, then
    at ``lost_at`` the agent switches to ``drift`` and stops running ``stops``. It runs
    every other action at 20 transitions/s (their last-executed times stay current), in
    ``own_state`` if given (its stream's states)."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(good_sample(step=i) + "\n" for i in range(3)))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)})
    agent = Directory("rover.pddl")
    service = build_service(cfg, publisher=MemoryPublisher(), agents=agent,
                            source=JsonlSource(str(path)))
    d = service.pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    for r in d.source.poll(1.0):
        d.handle(r)
    watch = d.registry.get("rover-a")
    assert watch is not None
    now = [0.0]
    watch.clock = lambda: now[0]
    watch.last_executed = dict.fromkeys((a.name for a in watch.domain.actions), 0.0)
    found: list[Result] = []
    defaults = SchedulerConfig()
    prober = CanaryProber(agents=agent, metrics=DaemonMetrics(),
                          idle_s=defaults.canary_idle_s, busy_s=defaults.canary_busy_s,
                          clock=d.clock, post=found.append, executor=Inline())
    problems = {name: p.init for name, p in service.problems.items()}
    objects = {name: p.objects_by_type(d.families[name])
               for name, p in service.problems.items()}
    t = phase - 3600.0
    while not found and t <= 7200.0:
        now[0] = t
        if t >= lost_at and agent.sim.model_version == 1:
            agent.sim.switch_model(read_domain(drift))
        watch.last_executed = {name: t if t < lost_at or name != stops else at
                               for name, at in watch.last_executed.items()}
        if own_state is not None:
            watch.last_state = frozenset(tuple(a) for a in own_state)
        prober.probe_idle([watch], problems, objects)
        t += defaults.canary_s
    d.source.close()
    d.store.close()
    (finding,) = found
    assert isinstance(finding, CanaryFinding)
    return now[0] - lost_at, finding


@pytest.mark.parametrize(("phase", "lost_at"), [(0.0, 1.0), (23.0, 61.0), (59.0, 151.0),
                                               (0.0, 299.0), (37.0, 300.5)])
def test_a_stopped_capability_is_found_within_five_minutes(tmp_path: Path, phase: float,
                                                           lost_at: float) -> None:
    """``phase``: where the scheduler's ticks fall; ``lost_at``: when sample_rock starts
    to need a full battery (and the agent stops trying it), against the canaries' rounds."""
    after, finding = _first_finding(tmp_path, phase, lost_at,
                                    EXAMPLES / "rover-sample-drift.pddl", "sample_rock")
    assert finding.transition.action[0] == "sample_rock"
    assert 0 <= after <= 300.0, f"found {after} s after the loss"


@pytest.mark.parametrize(("phase", "lost_at"), [(0.0, 1.0), (41.0, 130.0), (17.0, 239.5)])
def test_a_capability_the_agents_own_states_hide_is_found_within_five_minutes(
        tmp_path: Path, phase: float, lost_at: float) -> None:
    """navigate starts to need a full battery; the agent keeps navigating, always fully
    charged, so its stream stays consistent and its last state satisfies the new
    precondition (finding 3: probing there never showed it)."""
    charged = [["at", "rover1", "waypoint1"], ["equipped_rock_analysis", "rover1"],
               ["battery_full", "rover1"]]
    after, finding = _first_finding(tmp_path, phase, lost_at,
                                    DATA / "own" / "rover" / "drift-navigate-full.pddl",
                                    None, charged)
    assert finding.transition.action[0] == "navigate"
    assert ("battery_full", "rover1") not in finding.transition.state
    assert 0 <= after <= 300.0, f"found {after} s after the loss"


def test_groundings_vary_and_respect_equality_constraints() -> None:
    h = Parameter("?a", "height"), Parameter("?b", "height")
    move = Action("move", h, frozenset({LiftedAtom("at", ("?a",))}), frozenset(),
                  distinct=frozenset({("?a", "?b")}))
    prober = CanaryProber(agents=Directory(), metrics=DaemonMetrics(), idle_s=1.0,
                          clock=lambda: None, post=lambda r: None,  # type: ignore[arg-type,return-value]
                          executor=Inline())
    seen = {prober._grounding(move, {"height": ("h1", "h2", "h3")}) for _ in range(60)}
    assert len(seen) >= 4
    assert all(g is not None and g[0] != g[1] for g in seen)
    # One height cannot fill two parameters that must differ: a fresh one fills the
    # other (session 20; before, the action was never probed).
    one = {prober._grounding(move, {"height": ("h1",)}) for _ in range(20)}
    assert one == {("h1", "canary-height-1"), ("canary-height-1", "h1")}
    same = Action("stay", h, frozenset({LiftedAtom("at", ("?a",))}), frozenset(),
                  equal=frozenset({("?a", "?b")}), distinct=frozenset({("?a", "?b")}))
    assert prober._grounding(same, {"height": ("h1", "h2")}) is None


SHUTTLE = DATA / "own" / "shuttle"


class Shuttle:
    def __init__(self) -> None:
        self.sim = SimulatedAgent(read_domain(SHUTTLE / "drift-no-charge.pddl"), seed=1)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


def test_reduced_functionality_is_found_from_optimal_runs(tmp_path: Path) -> None:
    """The drifted shuttle can no longer teleport and walks a-b-c-d: every step is
    consistent with the old model, and only the length of its optimal runs shows it."""
    agent = Shuttle()
    problem = read_problem(SHUTTLE / "problem.pddl")
    episode = agent.sim.run_optimal(problem)
    assert episode.optimal and len(episode.actions) == 3
    lines = []
    for ep in range(2):
        for i, (s, a, s2) in enumerate(episode.transitions()):
            lines.append(json.dumps({
                "type": "transition", "agent_id": "shuttle-a", "family": "shuttle-v1",
                "episode_id": f"ep{ep}", "step": i, "state": sorted(map(list, s)),
                "action": list(a), "next_state": sorted(map(list, s2)), "optimal": True}))
    path = tmp_path / "in.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 families={"shuttle-v1": {"domain": str(SHUTTLE / "domain.pddl"),
                                          "problem": str(SHUTTLE / "problem.pddl")}})
    service = build_service(cfg, publisher=MemoryPublisher(), agents=agent,
                            source=JsonlSource(str(path)))
    d = service.pipeline
    d.seed_families()
    d.source.start(lambda p: None, lambda p: None, {})
    for r in d.source.poll(1.0):
        d.handle(r)
    watch = d.registry.get("shuttle-a")
    assert watch is not None and watch.inconsistent == 0  # the monitor sees nothing wrong
    found: list[Result] = []
    prober = CanaryProber(agents=agent, metrics=DaemonMetrics(), idle_s=1e9,
                          clock=d.clock, post=found.append, executor=Inline())
    objects = {n: p.objects_by_type(d.families[n]) for n, p in service.problems.items()}
    prober.check_optimal([watch], objects)  # ep0 is finished (ep1 began)
    assert len(found) == 3
    for f in found:
        assert isinstance(f, CanaryFinding) and watch.add_canary_finding(f.transition)
    d.sweep(force=True)
    while items := d.store.claim("test/w0", d.clock(), 60.0, 1):
        d.workers.run_claimed("test/w0", items[0])
    d.drain()
    latest = d.store.latest("shuttle-v1", "shuttle-a")
    assert latest is not None
    assert any("teleport" in line and "requires (charged)" in line for line in latest.summary)
    d.source.close()
    d.store.close()


class Held(Executor):
    """Accepts probes and never runs them: an agent that does not answer."""

    def __init__(self) -> None:
        self.held: list[tuple[Any, ...]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.held.append(args)
        return Future()


def test_probes_waiting_for_slow_agents_are_bounded() -> None:
    from types import SimpleNamespace

    from capwatch.daemon.canary import MAX_BACKLOG

    rover = read_domain(EXAMPLES / "rover.pddl")
    watches = [SimpleNamespace(agent_id=f"r{i}", family="rover-v1", awaiting=None,
                               clock=lambda: 0.0, last_state=frozenset(), domain=rover,
                               last_executed={}) for i in range(200)]
    held = Held()
    prober = CanaryProber(agents=Directory(), metrics=DaemonMetrics(), idle_s=1.0,
                          clock=lambda: None, post=lambda r: None,  # type: ignore[arg-type,return-value]
                          executor=held)
    objects = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                            "waypoint": ("waypoint1", "waypoint2")}}
    prober.probe_idle(watches, {}, objects)  # type: ignore[arg-type]
    # One task per agent, holding its due probes: 1,000 due, the rest wait a later round.
    assert sum(len(args[3]) for args in held.held) == MAX_BACKLOG
    prober.probe_idle(watches, {}, objects)  # type: ignore[arg-type]
    assert sum(len(args[3]) for args in held.held) == MAX_BACKLOG


def test_a_round_queued_before_shutdown_probes_nothing_after_close() -> None:
    # The pipeline closes the prober, then drains commands the scheduler queued before the
    # stop; a probe round among them used to hit the closed pool ("cannot schedule new
    # futures after shutdown") and log a traceback per round.
    from types import SimpleNamespace

    rover = read_domain(EXAMPLES / "rover.pddl")
    watch = SimpleNamespace(agent_id="r0", family="rover-v1", awaiting=None,
                            clock=lambda: 0.0, last_state=frozenset(), domain=rover,
                            last_executed={})
    prober = CanaryProber(agents=Directory(), metrics=DaemonMetrics(), idle_s=1.0,
                          clock=lambda: None, post=lambda r: None)  # type: ignore[arg-type,return-value]
    objects = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                            "waypoint": ("waypoint1", "waypoint2")}}
    prober.close()
    prober.probe_idle([watch], {}, objects)  # type: ignore[list-item]


def _reading(cell: list[float]) -> Callable[[], float]:
    """A clock that reads what the test last put in ``cell``."""
    return lambda: cell[0]


class Recorder:
    """Answers as the modelled rover and records every probe it is asked."""

    def __init__(self) -> None:
        self.sim = SimulatedAgent(read_domain(EXAMPLES / "rover.pddl"), seed=1)
        self.asked: list[tuple[str, Any, Any]] = []

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        outer = self

        class Query:
            def query(self, state: Any, plan: Any, samples: int) -> Any:
                outer.asked.append((agent_id, sorted(state), list(plan)))
                return outer.sim.query(state, plan, samples)

        return Query()  # type: ignore[return-value]


def test_an_agent_held_as_bytes_is_probed_as_if_it_was_not(tmp_path: Path) -> None:
    """Canaries read a frozen watch's last state and execution times without thawing it,
    and ask the very same probes (same seed) as for the watch never frozen."""
    from tests.daemon.test_compaction import _stream

    asked = []
    for freeze in (False, True):
        (tmp_path / str(freeze)).mkdir()
        path = tmp_path / f"in-{freeze}.jsonl"
        path.write_text("")
        cfg = config(tmp_path / str(freeze), source={"kind": "jsonl", "path": str(path)})
        recorder = Recorder()
        d = build_service(cfg, publisher=MemoryPublisher(), agents=recorder,
                          source=JsonlSource(str(path))).pipeline
        d.seed_families()
        watches = []
        for agent in ("rover-a", "rover-b"):
            watch = d.registry.load(agent, "rover-v1", 0)
            assert watch is not None
            now = [0.0]
            watch.clock = _reading(now)
            for t in _stream(40):
                watch.observe(t)
            watches.append((watch, now))
        service_problems = read_problem(EXAMPLES / "rover-problem.pddl")
        problems = {"rover-v1": service_problems.init}
        objects = {"rover-v1": service_problems.objects_by_type(d.families["rover-v1"])}
        prober = CanaryProber(agents=recorder, metrics=DaemonMetrics(), idle_s=120.0,
                              busy_s=240.0, clock=d.clock, post=lambda r: None,
                              executor=Inline(), seed=3)
        for at in range(0, 1200, 60):
            for watch, now in watches:
                now[0] = float(at)
                if freeze and not watch.frozen:
                    watch.compact()
                    assert watch.freeze()
            prober.probe_idle([w for w, _ in watches], problems, objects)
            assert all(w.frozen for w, _ in watches) == freeze
        asked.append(recorder.asked)
        d.store.close()
    assert asked[0] == asked[1] and len(asked[0]) > 10


class Outside:
    """An agent whose answers hold an atom of a predicate its family's model lacks."""

    def __init__(self, atom: tuple[str, ...]) -> None:
        self.atom = atom

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self  # type: ignore[return-value]

    def query(self, state: frozenset[tuple[str, ...]], plan: list[tuple[str, ...]],
              samples: int = 1) -> list[Any]:
        from capwatch.assess.agent import QueryResult
        return [QueryResult(0, state | {self.atom})] * samples


@pytest.mark.parametrize("atom", [("teleported", "x"), ("at",), ("at", "r", "w", "extra")])
def test_an_answer_outside_the_vocabulary_is_no_finding(atom: tuple[str, ...]) -> None:
    """Before, the atom was an unexplained change of the probed action: an
    unexplained_inconsistency alert and an assessment for an agent breaking the protocol."""
    from types import SimpleNamespace

    rover = read_domain(EXAMPLES / "rover.pddl")
    watch = SimpleNamespace(agent_id="r0", family="rover-v1", awaiting=None,
                            clock=lambda: 0.0, last_state=frozenset(), domain=rover,
                            last_executed={})
    found: list[Result] = []
    metrics = DaemonMetrics()
    prober = CanaryProber(agents=Outside(atom), metrics=metrics, idle_s=1.0,
                          clock=lambda: None, post=found.append,  # type: ignore[arg-type,return-value]
                          executor=Inline())
    objects = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                            "waypoint": ("waypoint1", "waypoint2")}}
    prober.probe_idle([watch], {}, objects)  # type: ignore[list-item]
    assert found == []
    probes = metrics.canaries.labels("rover-v1", "invalid_answer")._value.get()
    # Two probes an idle action (its precondition true, and one literal of it false:
    # session 19), every one refused as an invalid answer.
    assert probes == 2 * len(rover.actions)


class SaysRefusedButChanges:
    """An agent (in process: the HTTP client refuses such answers itself, e622582) whose
    answers break the protocol's rule that a refused first step leaves the start state: it
    reports 0 steps executed and the state the model predicts."""

    def __init__(self) -> None:
        self.sim = SimulatedAgent(read_domain(EXAMPLES / "rover.pddl"), seed=1)

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        outer = self

        class Query:
            def query(self, state: Any, plan: Any, samples: int) -> Any:
                from capwatch.assess.agent import QueryResult
                return [QueryResult(0, r.state) for r in outer.sim.query(state, plan, samples)]

        return Query()  # type: ignore[return-value]


def test_an_answer_saying_refused_whose_state_changed_is_a_finding() -> None:
    # Before, check_declared counted such an answer "applied" when the model explained
    # the change: a protocol breach (or a lying agent) passed silently. Now every changed
    # answer is a finding; an unchanged one (a true refusal) is not.
    from types import SimpleNamespace

    rover = read_domain(EXAMPLES / "rover.pddl")
    watch = SimpleNamespace(agent_id="r0", family="rover-v1", awaiting=None,
                            clock=lambda: 0.0, last_state=frozenset(), domain=rover,
                            last_executed={})
    posted: list[Any] = []
    metrics = DaemonMetrics()
    prober = CanaryProber(agents=SaysRefusedButChanges(), metrics=metrics, idle_s=1.0,
                          clock=lambda: None, post=posted.append,  # type: ignore[arg-type,return-value]
                          executor=Inline(), seed=3)
    objects = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                            "waypoint": ("waypoint1", "waypoint2")}}
    prober.probe_idle([watch], {}, objects)  # type: ignore[list-item]
    changed = [f for f in posted if isinstance(f, CanaryFinding)
               and f.transition.state != f.transition.next_state]
    assert changed, posted
    assert all(f.transition.executed is False for f in changed)
    applied = metrics.canaries.labels("rover-v1", "applied")._value.get()
    assert applied == 0


class Unreachable:
    """An agent whose endpoint never answers; counts the queries it is sent."""

    def __init__(self) -> None:
        self.asked = 0

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self

    def query(self, state: Any, plan: Any, samples: int = 1) -> Any:
        from capwatch.assess.agent import AgentUnavailable
        self.asked += 1
        raise AgentUnavailable("agent at http://127.0.0.1:9/ unavailable after 3 attempts")


def test_an_unreachable_agent_fails_its_round_once() -> None:
    # oper19: every due action of an unreachable agent was a probe of its own, so one
    # round logged "canary failed" and counted "unavailable" once per action (three lines
    # within a second), each after the client's own retries; once per round is the news.
    from types import SimpleNamespace

    from structlog.testing import capture_logs

    rover = read_domain(EXAMPLES / "rover.pddl")
    assert len(rover.actions) > 1
    watch = SimpleNamespace(agent_id="r0", family="rover-v1", awaiting=None,
                            clock=lambda: 0.0, last_state=frozenset(), domain=rover,
                            last_executed={})
    agent = Unreachable()
    metrics = DaemonMetrics()
    prober = CanaryProber(agents=agent, metrics=metrics, idle_s=1.0,
                          clock=lambda: None, post=lambda r: None,  # type: ignore[arg-type,return-value]
                          executor=Inline())
    objects = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                            "waypoint": ("waypoint1", "waypoint2")}}
    with capture_logs() as logs:
        prober.probe_idle([watch], {}, objects)  # type: ignore[list-item]
    assert [e["event"] for e in logs] == ["canary failed"]
    assert metrics.canaries.labels("rover-v1", "unavailable")._value.get() == 1
    assert agent.asked == 1
    assert prober._backlog == 0


class Refuses(Unreachable):
    """An agent that answers every probe, and each time with ``error``."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def query(self, state: Any, plan: Any, samples: int = 1) -> Any:
        self.asked += 1
        raise self.error


@pytest.mark.parametrize("error", [
    QueryNotAttempted("the agent cannot be put in that state"),
    AgentRejectedQuery(422, "invalid_query", "no such waypoint"),
    AgentProtocolError("2 results for 1 sample")])
def test_a_probe_the_agent_answers_and_refuses_fails_alone(error: Exception) -> None:
    # The agent answered: another start state or grounding may be one it can take, so
    # the round goes on (only an agent that does not answer ends its round).
    from types import SimpleNamespace

    rover = read_domain(EXAMPLES / "rover.pddl")
    watch = SimpleNamespace(agent_id="r0", family="rover-v1", awaiting=None,
                            clock=lambda: 0.0, last_state=frozenset(), domain=rover,
                            last_executed={})
    agent = Refuses(error)
    metrics = DaemonMetrics()
    prober = CanaryProber(agents=agent, metrics=metrics, idle_s=1.0,
                          clock=lambda: None, post=lambda r: None,  # type: ignore[arg-type,return-value]
                          executor=Inline())
    objects = {"rover-v1": {"rover": ("rover1",), "store": ("store1",),
                            "waypoint": ("waypoint1", "waypoint2")}}
    prober.probe_idle([watch], {}, objects)  # type: ignore[list-item]
    # Every idle action twice: its precondition made true, then one literal made false
    # (no rover precondition needs one atom both true and false, so none is skipped).
    assert agent.asked == 2 * len(rover.actions)
    assert metrics.canaries.labels("rover-v1", "unavailable")._value.get() == agent.asked
