"""Executing plans on a model: the semantics shared by the reference agent and the engine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from capwatch.model.domain import GroundAction, GroundAtom
from capwatch.model.grounding import Grounder, GroundOperator, StateMask


class UniformSource(Protocol):
    """Anything with ``random() -> float`` in [0, 1): ``random.Random``, numpy's Generator."""

    def random(self) -> float: ...


def sample_outcome(op: GroundOperator, rng: UniformSource | None) -> int:
    """Draw an outcome index; deterministic operators never touch the RNG."""
    if len(op.effects) == 1:
        return 0
    if rng is None:
        raise ValueError(f"action {op.action.name} is probabilistic: an RNG is required")
    u = rng.random()
    acc = 0.0
    outcomes = op.action.outcomes
    for i, o in enumerate(outcomes):
        acc += o.probability
        if u < acc:
            return i
    return len(outcomes) - 1


def step(op: GroundOperator, state: StateMask, rng: UniformSource | None = None
         ) -> tuple[bool, StateMask]:
    """One action: (executed, next state). An inapplicable action leaves the state as is."""
    if not op.applicable(state):
        return False, state
    return True, op.apply(state, sample_outcome(op, rng))


def execute_plan(grounder: Grounder, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
                 rng: UniformSource | None = None) -> tuple[int, frozenset[GroundAtom]]:
    """Plan-outcome semantics: ⟨n_F, s_F⟩, the longest executable prefix and its end state."""
    mask = grounder.index.encode(state)
    executed = 0
    for ground_action in plan:
        ok, mask = step(grounder.operator(ground_action), mask, rng)
        if not ok:
            break
        executed += 1
    return executed, grounder.index.decode(mask)
