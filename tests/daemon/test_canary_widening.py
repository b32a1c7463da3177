"""Session 19, gap 1: a precondition lost from an action the agent never runs.

The canaries made the known precondition true before asking, so an agent that lost a
precondition ran the action as the model said and nothing showed: such a drift stayed
unknown unless ``assessment.reassess_every_s`` was set. Here, on IPC domains and one of
tests/data's own, each precondition literal in turn is dropped from one action (the drift
is made here, not hand-picked), the agent never runs that action, and the prober must
report it on a simulated clock; an honest agent must never be reported."""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.canary import CanaryProber
from capwatch.daemon.config import SchedulerConfig
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.work import CanaryFinding, Result
from capwatch.model.domain import Domain, GroundAtom
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import DATA, IPC

DOMAINS = [IPC / "ferry", IPC / "parking", IPC / "transport", IPC / "hiking",
           DATA / "classic" / "gripper"]


class Inline(Executor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(fn(*args, **kwargs))
        return f


class Directory:
    def __init__(self, agent: SimulatedAgent) -> None:
        self.sim = agent

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return self.sim


@dataclass
class Watch:
    """What the prober reads of an agent's watch."""

    domain: Domain
    family: str
    now: list[float]
    agent_id: str = "a-1"
    awaiting: None = None
    last_state: frozenset[GroundAtom] = frozenset()
    last_executed: dict[str, float] = field(default_factory=dict)

    def clock(self) -> float:
        return self.now[0]


def _drifts(domain: Domain) -> list[tuple[str, Domain]]:
    """Each action with two or more precondition literals, one literal dropped (at most
    three per domain, drawn with a fixed seed)."""
    out = []
    for action in domain.actions:
        for atom in sorted(action.pre_pos):
            if len(action.pre_pos) + len(action.pre_neg) >= 2:
                out.append((action.name, domain.replace_action(
                    action.replace(pre_pos=action.pre_pos - {atom}))))
    random.Random(19).shuffle(out)
    return out[:3]


def _rounds_to_finding(domain: Domain, truth: Domain, where: str, action: str,
                       rounds: int) -> int | None:
    problem = read_problem(where + "/problem.pddl")
    agent = Directory(SimulatedAgent(truth, seed=1))
    found: list[Result] = []
    defaults = SchedulerConfig()
    now = [0.0]
    prober = CanaryProber(agents=agent, metrics=DaemonMetrics(),
                          idle_s=defaults.canary_idle_s, busy_s=defaults.canary_busy_s,
                          clock=lambda: None, post=found.append,  # type: ignore[arg-type,return-value]
                          executor=Inline(), seed=7)
    # Every action but the drifted one runs all the time; the drifted one never ran.
    watch = Watch(domain, "f", now, last_state=problem.init)
    objects = {"f": problem.objects_by_type(domain)}
    for k in range(rounds):
        now[0] = k * defaults.canary_s
        watch.last_executed = {a.name: now[0] for a in domain.actions if a.name != action}
        prober.probe_idle([cast(AgentWatch, watch)], {"f": problem.init}, objects)
        if found:
            (finding,) = found
            assert isinstance(finding, CanaryFinding)
            assert finding.transition.action[0] == action
            return k
    return None


CASES = [(str(where), name, truth) for where in DOMAINS
         for name, truth in _drifts(read_domain(where / "domain.pddl"))]


@pytest.mark.parametrize(("where", "action", "truth"), CASES,
                         ids=[f"{w.rsplit('/', 1)[-1]}-{a}-{i}" for i, (w, a, _) in
                              enumerate(CASES)])
def test_a_precondition_lost_from_an_action_never_run_is_found(
        where: str, action: str, truth: Domain) -> None:
    domain = read_domain(where + "/domain.pddl")
    # Six hours of the default schedule (360 rounds of canary_s).
    k = _rounds_to_finding(domain, truth, where, action, 360)
    assert k is not None, f"{action} never reported"


@pytest.mark.parametrize("where", [str(w) for w in DOMAINS])
def test_an_honest_agent_is_never_reported(where: str) -> None:
    domain = read_domain(where + "/domain.pddl")
    for action in domain.actions:
        assert _rounds_to_finding(domain, domain, where, action.name, 60) is None
