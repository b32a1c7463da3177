"""Which outcome a consistent transition realises, and which outcomes it cannot tell apart.

In a given pre-state several outcomes may produce the same successor (an add-literal
that is already true makes its outcome look like "no change"). Such outcomes are
indistinguishable *in that state*. The grouping of outcomes by successor depends only
on the pre-state, which is fixed before the agent's outcome is drawn, so:

- the statistics may condition on it (select observations by it) without bias, and
- the likelihood of an observation is the total probability of its group.

A transition that no outcome explains is structural drift: ``attribute`` returns None
and the caller sends it down the consistency path, never into the frequency tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capwatch.model.consistency import Verdict
from capwatch.model.domain import Action
from capwatch.model.grounding import GroundOperator, StateMask
from capwatch.monitor.observations import Observation


@dataclass(frozen=True, slots=True)
class Attribution:
    """One consistent execution of an action, as seen by the outcome statistics."""

    partition: tuple[tuple[int, ...], ...]
    """Outcome indices grouped by the successor they produce in the pre-state (sorted)."""
    block: int
    """Index into ``partition`` of the group the observed successor belongs to."""
    counted: int = field(init=False, repr=False, compare=False)
    """What a frequency table counts: :attr:`outcome` when the observation is
    :attr:`distinguishable`, else -1 (ambiguous). Worked out once here: the tables and
    the detector read it at every execution they count, and the two properties cost
    ~0.3 µs there."""

    def __post_init__(self) -> None:
        blk = self.partition[self.block]
        object.__setattr__(self, "counted", blk[0] if len(blk) == 1
                           and len(self.partition) == sum(map(len, self.partition)) else -1)

    @property
    def explaining(self) -> tuple[int, ...]:
        """The outcomes that explain the transition."""
        return self.partition[self.block]

    @property
    def distinguishable(self) -> bool:
        """Every outcome produces a different successor in this pre-state."""
        # As many groups as outcomes; asked at every execution a table counts, and the
        # generator form cost ~1 µs.
        return len(self.partition) == sum(map(len, self.partition))

    @property
    def outcome(self) -> int | None:
        """The realised outcome when it is unambiguous."""
        blk = self.partition[self.block]
        return blk[0] if len(blk) == 1 else None

    @classmethod
    def single(cls, k: int, outcome: int) -> Attribution:
        """An unambiguous observation among ``k`` distinguishable outcomes."""
        if not 0 <= outcome < k:
            raise ValueError(f"outcome {outcome} out of range for {k} outcomes")
        return cls(tuple((i,) for i in range(k)), outcome)


def partition_successors(successors: list[StateMask]) -> tuple[tuple[int, ...], ...]:
    groups: dict[StateMask, list[int]] = {}
    for i, s in enumerate(successors):
        groups.setdefault(s, []).append(i)
    return tuple(sorted(tuple(g) for g in groups.values()))


def attribute(op: GroundOperator, state: StateMask, next_state: StateMask) -> Attribution | None:
    """Attribute (s, a, s') to an outcome group, or None if it is not a modelled execution.

    None covers both an inapplicable action (no outcome was drawn, nothing to count)
    and a successor no outcome predicts (structural drift, for the consistency path).
    """
    if not op.applicable(state):
        return None
    successors = [(state & keep) | add for keep, add in op.effects]
    partition = partition_successors(successors)
    for b, group in enumerate(partition):
        if successors[group[0]] == next_state:
            return Attribution(partition, b)
    return None


_SINGLES: dict[int, tuple[Attribution, ...]] = {}
"""k → the k unambiguous attributions among k outcomes: shared, as they are immutable."""


def _singles(k: int) -> tuple[Attribution, ...]:
    singles = _SINGLES.get(k)
    if singles is None:
        singles = _SINGLES[k] = tuple(Attribution.single(k, i) for i in range(k))
    return singles


def always_distinct(op: GroundOperator) -> bool:
    """Whether every two outcomes of ``op`` lead to different successors in every state
    the operator applies in: some atom is true after one and false after the other
    whatever the state, given the preconditions (an atom it adds, or keeps and requires
    true; and one it does not add and deletes, or requires false). Sufficient, not
    necessary: when False, the successors of the state at hand tell."""
    forced = [(add | (keep & op.pre_pos), (~keep | op.pre_neg) & ~add)
              for keep, add in op.effects]
    return all(true_i & false_j or true_j & false_i
               for i, (true_i, false_i) in enumerate(forced)
               for true_j, false_j in forced[i + 1:])


def attribution_from_mask(op: GroundOperator, state: StateMask, matched: int
                          ) -> Attribution | None:
    """Build an attribution from ``consistency.check``'s bitmask of explaining outcomes."""
    if not matched:
        return None
    distinct = op.distinct_outcomes
    if distinct is None:
        distinct = always_distinct(op)
        object.__setattr__(op, "distinct_outcomes", distinct)
    if distinct:
        # Every outcome leads elsewhere in any state (the usual case): the partition is
        # the singletons, whatever this state is, without building its successors.
        return _singles(len(op.effects))[(matched & -matched).bit_length() - 1]
    successors = [(state & keep) | add for keep, add in op.effects]
    if len(set(successors)) == len(successors):
        # Every outcome leads elsewhere (the usual case): the partition is the singletons
        # in outcome order, and the one explaining outcome is its own block.
        return _singles(len(successors))[(matched & -matched).bit_length() - 1]
    partition = partition_successors(successors)
    first = (matched & -matched).bit_length() - 1
    for b, group in enumerate(partition):
        if first in group:
            return Attribution(partition, b)
    return None  # pragma: no cover - every outcome index is in some group


def observation_attribution(obs: Observation) -> tuple[Action, Attribution] | None:
    """The outcome group an APPLIED observation of a probabilistic action realised, for
    the outcome-frequency tables; None when there is nothing to count (a deterministic
    action, or a verdict other than APPLIED)."""
    op = obs.operator
    if obs.verdict is not Verdict.APPLIED or len(op.effects) < 2:
        return None  # one outcome: nothing to count
    attribution = attribution_from_mask(op, obs.state, obs.outcomes)
    return None if attribution is None else (op.action, attribution)
