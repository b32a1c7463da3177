"""What the transition monitor reports and keeps, and its limits: the records of one
observed transition, of an inconsistent one (with its Table 2 explanation) and of an
executed one (as bitsets), and :class:`MonitorLimits`.
:mod:`capwatch.monitor.transition_monitor` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from capwatch.model.consistency import Inconsistency, Verdict, explain
from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.grounding import GroundOperator, StateMask


class Observation(NamedTuple):
    """What one transition told us. ``position`` is the caller's (e.g. a Kafka offset).

    A NamedTuple rather than a dataclass: it is built for every transition and a
    tuple costs a fraction of a frozen dataclass's construction.
    """

    verdict: Verdict
    action: GroundAction
    outcomes: int
    """Bitmask of the model's outcomes that explain the transition (APPLIED only)."""
    position: int
    state: StateMask
    """The pre-state as the monitor encoded it (for capwatch.monitor.attribution)."""
    operator: GroundOperator
    """The ground operator the transition was checked against."""


class InconsistentTransition:
    """An inconsistent transition kept, with its Table 2 explanation.

    The explanation can be left to be made when first read (:meth:`unexplained`, given
    the model it is explained against): the monitor keeps every inconsistent transition,
    but most are never read (a watch buffers few, and none it has settled or whose
    action's work is awaited), and explaining one costs tens of microseconds, more than
    the rest of its record's handling. Made from the same model and sets either way, so
    what a reader gets is the same.
    """

    __slots__ = ("_declared", "_domain", "_explanation", "action", "next_state", "position",
                 "state")

    def __init__(self, position: int, state: frozenset[GroundAtom], action: GroundAction,
                 next_state: frozenset[GroundAtom], explanation: Inconsistency) -> None:
        self.position = position
        self.state = state
        self.action = action
        self.next_state = next_state
        self._explanation: Inconsistency | None = explanation
        self._domain: Domain | None = None
        self._declared: bool | None = None

    @classmethod
    def unexplained(cls, position: int, state: frozenset[GroundAtom], action: GroundAction,
                    next_state: frozenset[GroundAtom], domain: Domain,
                    declared: bool | None = None) -> InconsistentTransition:
        """The transition, explained against ``domain`` when its explanation is first read;
        ``declared``: the producer's word on whether the agent executed it."""
        kept = cls.__new__(cls)
        kept.position = position
        kept.state = state
        kept.action = action
        kept.next_state = next_state
        kept._explanation = None
        kept._domain = domain
        kept._declared = declared
        return kept

    @property
    def explanation(self) -> Inconsistency:
        made = self._explanation
        if made is None:
            domain = self._domain
            assert domain is not None
            made = self._explanation = explain(domain, self.action, self.state,
                                               self.next_state, self._declared)
            self._domain = None  # the model is let go once it has explained
        return made

    def _key(self) -> tuple[int, frozenset[GroundAtom], GroundAction,
                            frozenset[GroundAtom], Inconsistency]:
        return (self.position, self.state, self.action, self.next_state, self.explanation)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InconsistentTransition):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"InconsistentTransition(position={self.position!r}, state={self.state!r}, "
                f"action={self.action!r}, next_state={self.next_state!r}, "
                f"explanation={self.explanation!r})")


class ExecutedTransition(NamedTuple):
    """Kept as bitsets: decoding on the hot path would cost more than the check itself."""

    position: int
    state: StateMask
    action: GroundAction
    next_state: StateMask


@dataclass
class MonitorLimits:
    max_inconsistencies: int = 256
    """Inconsistent transitions kept as evidence until an assessment consumes them."""
    executed_per_action: int = 64
    """Executed transitions kept per action for Table 2 inference and DAAISy."""
    max_state_atoms: int = 10_000
    own_index_room: int = 4_096
    """Atoms an index of the agent's own keeps for what the monitor holds, beyond room for
    one transition (two states) and as many atoms again for the operators grounded in it
    (their preconditions and effects): a bitset costs as many bits as atoms were interned before
    it, so an agent forever bringing new objects would grow its index, and memory with
    the square of the atoms it ever showed (10 GB after 400,000). At the bound the index
    is rebuilt from what is kept, newest first (:meth:`TransitionMonitor._own_index`)."""

    @property
    def own_index_atoms(self) -> int:
        return 2 * self.max_state_atoms + 2 * self.own_index_room
