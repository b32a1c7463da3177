"""A drifted agent's random walks split as the daemon splits its evidence: the steps the
known model explains and those it contradicts (shared by the assessment tests)."""

from __future__ import annotations

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.model.domain import Domain


def split_walks(agent: SimulatedAgent, known: Domain, *, episodes: int, length: int,
                p_inapplicable: float) -> tuple[list[Transition], list[Transition]]:
    """(explained, contradicted): each step labelled ``ep{episode}[{step}]``, in order."""
    explained: list[Transition] = []
    contradicted: list[Transition] = []
    for e in range(episodes):
        ep = agent.random_walk(length, p_inapplicable=p_inapplicable)
        for i, a in enumerate(ep.actions):
            t = Transition(ep.states[i], a, ep.states[i + 1], executed=ep.executed[i],
                           source=f"ep{e}[{i}]")
            (contradicted if replay(known, [t]) else explained).append(t)
    return explained, contradicted
