"""What the daemon would publish after an assessment, and an agent that switches models
per answer: shared by the tests of outcomes that must not be published wrong."""

from __future__ import annotations

import random
from collections.abc import Sequence

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import confirm, replay
from capwatch.assess.result import AssessmentResult
from capwatch.model.domain import Domain, GroundAction, GroundAtom


class ByAnswer:
    """The old model in a random 30% of the answers (seeded), the new one in the rest."""

    def __init__(self, old: SimulatedAgent, new: SimulatedAgent, seed: int) -> None:
        self.old, self.new, self.rng = old, new, random.Random(seed)

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        return (self.old if self.rng.random() < 0.3 else self.new).query(state, plan, samples)


def decided(result: AssessmentResult, agent: object,
            evidence: list[Transition]) -> Domain | None:
    """The model the daemon would publish from ``result``, its assessment of ``agent`` on
    ``evidence`` (None: it fails closed)."""
    if result.undecided_outcomes:
        return None
    model = result.domain()
    if replay(model, evidence, result.queries):
        return None
    if confirm(model, agent, result.queries, 64)[0]:  # type: ignore[arg-type]
        return None
    return model


def published(known: Domain, agent: object, evidence: list[Transition],
              budget: int = 300) -> Domain | None:
    """The model the daemon would publish (None: it fails closed)."""
    result = assess(known, evidence, agent, method="verify",  # type: ignore[arg-type]
                    budget=budget)
    return decided(result, agent, evidence)
