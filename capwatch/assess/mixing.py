"""Whether a probabilistic action's outcomes mix where an independent draw would mix them.

A PPDDL agent draws the outcome of each step independently, whatever the state it runs in
(the action applies there). An agent that is not one can still give answers that a model
with more outcomes explains one by one: one that answers some queries as the old model and
others as the new, or some *states* as the old model and others as the new (rev12b's
``statewise`` agent: the model is chosen by a hash of the query), shows both forms of a
changed outcome, each in its own answers, and the union of both would be published (no
replay or asking again refutes a model that allows every answer).

The test is co-occurrence within one answer that runs the action twice
(:meth:`~capwatch.assess.outcomes.OutcomeSpace.together`): outcomes drawn independently
show side by side there once the action ran often enough; an agent choosing its face per
answer (or per query, or per state) shows one face per answer, however often it is asked.

Where no answer runs the action twice (a chance effect on a 0-ary atom the next step needs:
blocksworld's pick-up and ``handempty``, tireworld's move-car and ``not-flattire``), nothing
can be seen side by side. Session 13 grouped the answers to one query asked again verbatim
instead; that catches an agent choosing by the query, but one choosing at random per answer
mixes across separate answers exactly as an agent with both outcomes does, and was
published with both (13 of fuzz_assess's 16 wrong versions). Such a known outcome kept
beside an added one is now a doubt no answer lifts
(:meth:`~capwatch.assess.outcomes.OutcomeSpace.unmixable`): the action fails closed, an
honest agent's too (docs/assessment.md, session 14, says what it costs).

Session 16 asks for the two draws where it can (``engine._two_draws``, docs/assessment.md,
"Two draws in one answer"): the action again in the same answer, with the shared atom free
where it runs at either value, or after a step of another, deterministic action on objects
of its own that sets the atom back whatever it was (blocksworld's put-down of a block held
from the start). Once an answer ran the action twice, the rule above (co-occurrence within
one answer) decides, and a per-answer switcher still never mixes. Where no such step exists,
or the outcomes differ only on the shared atom (tireworld's move-car: a shared atom's value
between two steps shows in no answer), the action still fails closed.

What the test costs an honest agent where answers run the action twice: an answer of n
draws holds two outcomes of shares p and q but for a chance (1 - p)^n + (1 - q)^n.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping


def apart(outcomes: Mapping[int, Collection[Hashable]],
          beside: Collection[Hashable]) -> list[int]:
    """The outcomes (index -> the answers their steps showed in) that showed, but in no
    answer in ``beside`` (the answers of the outcomes they must mix with)."""
    return [i for i, groups in outcomes.items() if groups and not set(groups) & set(beside)]


__all__ = ["apart"]
