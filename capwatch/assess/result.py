"""What an assessment returns: the new model, the changes with their evidence, the queries.

Split from the engine so callers (daemon, CLI, benchmark) can read results without the
machinery that produced them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from capwatch.assess.versionspace import Conflict
from capwatch.model.domain import Domain, GroundAction, GroundAtom, Outcome
from capwatch.model.pal import AbstractModel, Mode, PalTuple, summarise_changes


class Method(enum.Enum):
    DAAISY = "daaisy"
    VERIFY = "verify"
    AIA = "aia"
    AUTO = "auto"
    """daaisy, switching to verify when over half of the pa-tuples are flagged."""


@dataclass(frozen=True, slots=True)
class QueryLog:
    number: int
    state: frozenset[GroundAtom]
    plan: tuple[GroundAction, ...]
    executed: int
    final_state: frozenset[GroundAtom]
    purposes: tuple[str, ...]
    """Why each step was asked, in plan order."""


@dataclass(frozen=True, slots=True)
class PalChange:
    pal: PalTuple
    old: Mode
    new: Mode
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class RetiredOutcome:
    """A known outcome taken to be gone because no step showed it (session 14). The steps
    bound its share from above, not to zero: an outcome the drift made rarer (0.4 ->
    0.03) retires like a removed one, so the version says how rare it is shown to be."""

    action: str
    outcome: int
    """Index of the known outcome (0-based) in the known action."""
    known_probability: float
    steps: int
    """Steps of the known outcomes that were not it."""
    share_at_most: float
    """1 - error^(1/steps): a share above it would have shown in those steps but for a
    chance of the accepted error (``outcome_error``)."""


@dataclass(frozen=True)
class AssessmentResult:
    method: Method
    initial: AbstractModel
    model: AbstractModel
    """The assessed model: ``?`` where the engine could not decide (budget, no probe)."""
    changes: tuple[PalChange, ...]
    """Pal-tuples whose mode differs from the known model, with the evidence for each."""
    affected: frozenset[PalTuple]
    """Pal-tuples the observations flagged as possibly changed (before any query)."""
    queries: tuple[QueryLog, ...]
    conflicts: tuple[Conflict, ...]
    notes: tuple[str, ...]
    budget_exhausted: bool
    open_reasons: Mapping[PalTuple, str] = field(default_factory=dict)
    """Why each unresolved pal-tuple is still open (budget spent, no executing state ...)."""
    confirmed: frozenset[PalTuple] = frozenset()
    """Pal-tuples whose mode the evidence (observations, query answers) pins down; the
    others either carried the known mode over unverified or are unresolved."""
    outcomes: Mapping[str, tuple[Outcome, ...]] = field(default_factory=dict)
    """Probabilistic actions: their outcomes as the steps showed them (an effect belongs
    to the outcomes that have it, not to all of them; an outcome may have been added)."""

    undecided_outcomes: tuple[str, ...] = ()
    """Probabilistic actions that ran while a known outcome no step showed is still live
    (changed by the drift, gone, or unchanged: nothing tells), whether or not the steps also
    added one: no model of them can be published (:meth:`capwatch.assess.outcomes.
    OutcomeSpace.unconfirmed`)."""
    undecided_reasons: Mapping[str, str] = field(default_factory=dict)
    """Why, per action of :attr:`undecided_outcomes` (what the alert says)."""
    retired: tuple[RetiredOutcome, ...] = ()
    """Known outcomes left out as gone, each with the share the steps bound it below."""
    checks: int = 0
    """How many of :attr:`queries` (the last ones) were the final check's: each action
    the version states run once more after the other queries, past the budget
    (docs/assessment.md, "The final check"). A guard against an agent that changed during
    the assessment, not a question about the model: the papers' query counts have none."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "open_reasons", MappingProxyType(dict(self.open_reasons)))
        object.__setattr__(self, "outcomes", MappingProxyType(dict(self.outcomes)))

    @property
    def query_count(self) -> int:
        return len(self.queries)

    @property
    def unresolved(self) -> frozenset[PalTuple]:
        return self.model.unknown()

    @property
    def carried_over(self) -> frozenset[PalTuple]:
        """Pal-tuples published at the known model's mode without evidence for it."""
        return frozenset(self.initial.pals) - self.confirmed - self.unresolved

    def best_guess(self) -> AbstractModel:
        """Concrete: unresolved pal-tuples keep the known model's mode."""
        return self.model.with_modes(
            (p, self.initial.mode(p)) for p in self.model.unknown())

    def domain(self) -> Domain:
        domain = self.best_guess().to_domain()
        for name, outcomes in self.outcomes.items():
            domain = domain.replace_action(domain.action(name).replace(outcomes=outcomes))
        return domain

    def summary(self) -> list[str]:
        return summarise_changes(((c.pal, c.old, c.new) for c in self.changes
                                  if c.new is not Mode.UNKNOWN), self.initial.base)
