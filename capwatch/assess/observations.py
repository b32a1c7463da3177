"""What the engine is told about the agent's recent behaviour: transitions and traces.

A :class:`Transition` is one observed step; a :class:`Trace` is a whole episode. Both
may be flagged ``optimal`` (the agent was planning optimally), which is what lets the
engine detect *reduced* functionality by comparing plan lengths (papers/daaisy.md §4.1).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom, Predicate
from capwatch.model.errors import ModelError

State = frozenset[GroundAtom]


@dataclass(frozen=True, slots=True)
class Transition:
    state: State
    action: GroundAction
    next_state: State
    executed: bool | None = None
    """True/False when the source knows; None: executed iff the state changed, and an
    unchanged state says nothing (the action may have run with no visible effect)."""
    optimal: bool = False
    source: str = ""
    """Where the observation came from (trace id and step, stream offset), for evidence."""

    @property
    def did_execute(self) -> bool | None:
        if self.executed is not None:
            return self.executed
        return True if self.state != self.next_state else None


@dataclass(frozen=True, slots=True)
class Trace:
    """⟨s_0, a_1, s_1, ..., a_n, s_n⟩: every action executed (papers/daaisy.md Def. 4)."""

    states: tuple[State, ...]
    actions: tuple[GroundAction, ...]
    optimal: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.states) != len(self.actions) + 1:
            raise ModelError(
                f"trace {self.source or '?'}: {len(self.actions)} actions need "
                f"{len(self.actions) + 1} states, found {len(self.states)}"
            )

    def transitions(self) -> Iterator[Transition]:
        for i, action in enumerate(self.actions):
            yield Transition(self.states[i], action, self.states[i + 1], executed=True,
                             optimal=self.optimal, source=f"{self.source or 'trace'}[{i}]")


Observation = Transition | Trace


def transitions_of(observations: Iterable[Observation]) -> list[Transition]:
    result: list[Transition] = []
    for obs in observations:
        if isinstance(obs, Trace):
            result.extend(obs.transitions())
        else:
            result.append(obs)
    return result


def optimal_traces(observations: Iterable[Observation]) -> list[Trace]:
    """Optimal state sequences: given traces, plus runs of consecutive optimal transitions."""
    result: list[Trace] = []
    run: list[Transition] = []

    def flush() -> None:
        if len(run) >= 2:
            result.append(Trace(tuple([run[0].state, *(t.next_state for t in run)]),
                                tuple(t.action for t in run), optimal=True,
                                source=run[0].source))
        run.clear()

    for obs in observations:
        if isinstance(obs, Trace):
            flush()
            if obs.optimal:
                result.append(obs)
            continue
        if obs.optimal and obs.did_execute and (not run or run[-1].next_state == obs.state):
            run.append(obs)
            continue
        flush()
        if obs.optimal and obs.did_execute:
            run.append(obs)
    flush()
    return result


def infer_object_types(domain: Domain, states: Iterable[State],
                       actions: Iterable[GroundAction]) -> dict[str, tuple[str, ...]]:
    """Objects grouped under every type they provably belong to, from how they are used.

    The stream carries no object declarations; an object used as argument k of a predicate
    or action whose k-th parameter has type t is a t (and so are t's ancestors). This is
    what lets the engine ground the known model over the objects the agent talks about.
    """
    preds = domain.predicate_map
    acts = domain.action_map
    types: dict[str, set[str]] = {}

    def note(obj: str, t: str) -> None:
        types.setdefault(obj, set()).update(domain.types.ancestors(t))

    def note_args(term: Sequence[str], signature: Predicate | Action | None) -> None:
        # A name the model does not know, or the wrong arity, says nothing about types.
        if signature is not None and signature.arity == len(term) - 1:
            for obj, param in zip(term[1:], signature.parameters, strict=True):
                note(obj, param.type)

    for state in states:
        for atom in state:
            note_args(atom, preds.get(atom[0]))
    for ga in actions:
        note_args(ga, acts.get(ga[0]))
    for const in domain.constants:
        note(const.name, const.type)
    by_type: dict[str, set[str]] = {}
    for obj, ts in types.items():
        for t in ts:
            by_type.setdefault(t, set()).add(obj)
    return {t: tuple(sorted(objs)) for t, objs in by_type.items()}
