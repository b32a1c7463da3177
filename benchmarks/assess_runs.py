"""What the assessment harnesses (fuzz_assess, probe_assess_rev12b, probe_assess_rev13b)
share: a case's walks as the daemon's transitions, and one run of the daemon's assessor
under a wall-clock alarm, a hang or a crash recorded rather than raised.

Each harness keeps its own drifts, agents and verdicts; what a run costs and how it ended
is read alike here, so the three count a hang, a crash and an unreachable agent the same.
"""

from __future__ import annotations

import signal
import time
import traceback
from collections.abc import Sequence
from typing import Any

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentUnavailable, State
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.assessor import AssessmentOutcome, AssessmentRequest, EngineAssessor
from capwatch.model.domain import Domain


class Timeout(Exception):
    """The run outlasted its alarm (the harness's hang)."""


def _alarm(*_: object) -> None:
    raise Timeout()


def failed_closed(out: AssessmentOutcome, known: Domain, rec: dict[str, Any]) -> bool:
    """Whether the daemon would publish nothing for ``out`` (``rec`` then says why): a
    model its own evidence contradicts, or the known model left as it was when the
    budget ran out."""
    if out.unexplained:
        rec.update(status="failed_closed", why=out.unexplained[0].source)
        return True
    if out.budget_exhausted and out.model == known:
        rec.update(status="failed_closed", why="budget")
        return True
    return False


def split_walks(agent: SimulatedAgent, known: Domain, episodes: int, length: int,
                p_inapplicable: float
                ) -> tuple[list[Transition], list[Transition], list[State]]:
    """The agent's random walks split by the known model as the monitor would: the steps
    it explains, those it cannot, and every state the walks went through."""
    good: list[Transition] = []
    bad: list[Transition] = []
    states: list[State] = []
    for _ in range(episodes):
        ep = agent.random_walk(length, p_inapplicable=p_inapplicable)
        states += ep.states
        for i, a in enumerate(ep.actions):
            t = Transition(ep.states[i], a, ep.states[i + 1], executed=ep.executed[i])
            (bad if replay(known, [t]) else good).append(t)
    return good, bad, states


def agent_transitions(transitions: Sequence[Transition]) -> list[AgentTransition]:
    """The walks' transitions as one agent's records, numbered in order."""
    return [AgentTransition("a", "f", "e", i, None, t.state, t.action, t.next_state, False,
                            executed=t.executed)
            for i, t in enumerate(transitions)]


def assess_once(request: AssessmentRequest, rec: dict[str, Any], *, method: str = "verify",
                seconds: int = 180) -> AssessmentOutcome | None:
    """The daemon's assessor on ``request``; its seconds go in ``rec``. None when it did not
    end with an outcome: ``rec["status"]`` then says how (hang, crash, or failed closed on
    an agent the assessor could not reach)."""
    t0 = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        return EngineAssessor(method=method).assess(request)
    except Timeout:
        rec["status"] = "hang"
    except AgentUnavailable as exc:
        rec.update(status="failed_closed", why=f"agent unavailable: {exc}")
    except Exception as exc:
        rec.update(status="crash", error=f"{type(exc).__name__}: {exc}",
                   tb=traceback.format_exc()[-2000:])
    finally:
        signal.alarm(0)
        rec["seconds"] = round(time.monotonic() - t0, 2)
    return None
