"""Whether a probabilistic action's outcomes mix where an independent draw would mix them.

A PPDDL agent draws the outcome of each step independently, whatever the state it runs in
(the action applies there). An agent that is not one can still give answers that a model
with more outcomes explains one by one: one that answers some queries as the old model and
others as the new, or some *states* as the old model and others as the new (rev12b's
``statewise`` agent: the model is chosen by a hash of the query), shows both forms of a
changed outcome, each in its own answers, and the union of both would be published (no
replay or asking again refutes a model that allows every answer).

The test is co-occurrence. Outcomes drawn independently of the state show side by side
within one *group* of steps that share the same situation, once the group is large enough;
an agent whose face is a function of the group never shows two faces in one group, however
often it is asked. The groups are:

* one answer, where an answer can run two steps of the action
  (:meth:`~capwatch.assess.outcomes.OutcomeSpace.together`): an agent choosing its face
  per answer shows one face per answer;
* otherwise one query asked again verbatim (the same state and plan, in separate answers:
  :class:`QueryGroups`): an agent choosing its face by anything in the query (state, plan,
  object names) shows one face per query. An agent choosing its face at random per answer
  is, for an action that runs once an answer, an agent whose outcomes are the mixture of
  both faces' (the answers it gives have exactly that distribution), so no query can tell
  it from one that has them all (docs/assessment.md).

What it costs an honest agent: a group of n draws holds two outcomes of shares p and q but
for a chance (1 - p)^n + (1 - q)^n; the engine asks one query verbatim up to
``RESAMPLE_ROUNDS`` times the draws that show the least likely known outcome but for
e^-3 (so such a pair fails to mix but for about 2 e^-9 when both are as likely as that),
then fails closed. No chance of a wrong publication is traded: an agent whose face is a
function of the group never passes.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping

from capwatch.model.domain import GroundAction, GroundAtom


class QueryGroups:
    """Numbers each distinct query (state, plan) and files each answer under its query's
    number: answers filed together are the same query asked again verbatim."""

    __slots__ = ("_ids", "of_answer")

    def __init__(self) -> None:
        self._ids: dict[tuple[frozenset[GroundAtom], tuple[GroundAction, ...]], int] = {}
        self.of_answer: dict[int, int] = {}
        """Answer (query number) -> group number."""

    def file(self, answer: int, state: frozenset[GroundAtom],
             plan: Iterable[GroundAction]) -> int:
        key = (state, tuple(plan))
        group = self._ids.setdefault(key, len(self._ids))
        self.of_answer[answer] = group
        return group

    def size(self, group: int) -> int:
        """How many answers were filed under ``group``."""
        return sum(1 for g in self.of_answer.values() if g == group)


def apart(outcomes: Mapping[int, Collection[Hashable]],
          beside: Collection[Hashable]) -> list[int]:
    """The outcomes (index -> the groups their steps showed in) that showed, but in no
    group in ``beside`` (the groups of the outcomes they must mix with)."""
    return [i for i, groups in outcomes.items() if groups and not set(groups) & set(beside)]


__all__ = ["QueryGroups", "apart"]
