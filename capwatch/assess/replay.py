"""Replay the evidence an assessment learned from against the model it produced.

A version must never contradict what it was learned from: every observed transition and
every query answer is checked against the new model (PDDL semantics, so a ground action
with repeated objects deletes, then adds) before the model may be published. What the
model cannot explain is returned, so the caller can refuse to publish and say why.

Pure: no I/O, no clock; the model is grounded on demand.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from capwatch.assess.agent import AgentQuery
from capwatch.assess.homogeneity import heterogeneous
from capwatch.assess.observations import Transition
from capwatch.assess.outcomes import OUTCOME_ERROR
from capwatch.assess.result import QueryLog
from capwatch.model.consistency import Verdict, check
from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.errors import ModelError
from capwatch.model.grounding import Grounder, StateMask

MAX_BRANCHES = 64
"""States a stochastic plan may fan out to while replaying one query; past this the
query is not judged (it cannot be replayed exactly in bounded time)."""


@dataclass(frozen=True, slots=True)
class Unexplained:
    """One piece of evidence the model cannot explain."""

    source: str
    """Where it came from: the observation's source, or ``query N``."""
    state: frozenset[GroundAtom]
    plan: tuple[GroundAction, ...]
    executed: int | None
    """Steps the agent executed (None: an observation that did not say)."""
    final_state: frozenset[GroundAtom]
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"source": self.source, "plan": [list(a) for a in self.plan],
                "executed": self.executed, "reason": self.reason,
                "state": sorted(list(a) for a in self.state),
                "final_state": sorted(list(a) for a in self.final_state)}


def replay(model: Domain, observations: Iterable[Transition],
           queries: Sequence[QueryLog] = ()) -> list[Unexplained]:
    """Every observation and query answer ``model`` cannot explain (empty: all explained)."""
    grounder = Grounder(model)
    out: list[Unexplained] = []
    for t in observations:
        reason = _transition(grounder, t)
        if reason is not None:
            out.append(Unexplained(t.source or "observation", t.state, (t.action,),
                                   None if t.executed is None else int(t.executed),
                                   t.next_state, reason))
    for q in queries:
        reason = _query(grounder, q)
        if reason is not None:
            out.append(Unexplained(f"query {q.number}", q.state, q.plan, q.executed,
                                   q.final_state, reason))
    return out


def confirm(model: Domain, agent: AgentQuery, queries: Sequence[QueryLog], limit: int, *,
            mixed_error: float | None = OUTCOME_ERROR) -> tuple[list[Unexplained], int]:
    """Ask up to ``limit`` of ``queries`` again; every new answer ``model`` cannot explain.

    Each answer of an agent can be valid on its own while the answers do not hold
    together: an agent answering some queries as one model and others as another leads the
    engine to a model that explains every answer it got once, yet is neither (a wrong
    version). Asked again, such an agent answers differently where it matters, and the
    model, which explained the first answer, cannot explain both. A stochastic model
    explains any outcome it allows, so honest stochastic agents pass. When there are more
    queries than ``limit``, the ones asked again are spread evenly over the assessment;
    when there are fewer, they are asked again round after round until ``limit`` answers
    are in: an agent that picks its face at random per answer repeats its first answer
    once by chance (0.3 of the time for one answering 30% as the old model), and a
    deterministic model learnt from such answers was published wrong (fuzz_assess's
    blocksworld pal 107 and 100, alternating).

    A stochastic model explains every answer of such an agent, one at a time: an outcome
    the agent dropped is still drawn in the old model's answers. So the answers asked
    again must also be one distribution's draws (``mixed_error``, the chance of failing an
    honest agent on it; None: not tested, the operator's word that agents never switch):
    per action with more than one outcome, how many of each answer's steps went to each
    outcome (:func:`outcome_steps`), tested for homogeneity across the answers
    (:func:`capwatch.assess.homogeneity.heterogeneous`, Bonferroni over the actions
    tested). These answers are fresh: the engine stopped on what the answers it learnt
    from showed, so a test of those is looked at after every step and cannot hold its
    level at a useful power (docs/assessment.md, "the answers asked again"); asked again,
    the test is run once and holds it exactly.
    Returns the unexplained answers and the number of queries asked.
    """
    if limit <= 0 or not queries:
        return [], 0
    # A refused step fixed a precondition literal on one answer (a probe puts one atom in
    # doubt): those queries are asked first, the others spread evenly over what is left.
    # Spread over all of them, a refusal was skipped, and an agent refusing a fixed share
    # of states for reasons of its own had a precondition published that it does not
    # have (rev12b's refuser, tireworld flip_one 0: query 62 of 113, spread by two).
    refused = [q for q in queries if q.executed < len(q.plan)]
    rest = [q for q in queries if q.executed >= len(q.plan)]
    if len(refused) >= limit:
        chosen = refused[::max(1, -(-len(refused) // limit))][:limit]
    else:
        room = limit - len(refused)
        numbers = {q.number for q in refused} | {
            q.number for q in rest[::max(1, -(-len(rest) // room))][:room]}
        chosen = [q for q in queries if q.number in numbers]
    # Rounds after the first skip queries of probabilistic steps only that ran to the
    # end: the model explains any of their outcomes, so another answer could refute only
    # a precondition, which the first round tested; asked round after round, such
    # queries (64 steps asking an action again) cost thousands of agent steps for
    # nothing. A refused one stays: its refusal is a precondition, and an agent refusing
    # by the state refuses a renamed copy by chance too. It is asked as its refusal alone:
    # the refused step in the state the answer ended in (a refusal changes nothing), which
    # costs an honest agent no step where the whole query cost the steps before it, round
    # after round (hanoi, whose actions are all probabilistic: +500 to +1,400 steps).
    chance = {a.name for a in model.actions if len(a.outcomes) > 1}
    again_rounds = [q if any(a[0] not in chance for a in q.plan) else _refusal(q)
                    for q in chosen if any(a[0] not in chance for a in q.plan)
                    or q.executed < len(q.plan)]
    if again_rounds:
        chosen += [again_rounds[i % len(again_rounds)]
                   for i in range(limit - len(chosen))]
    grounder = Grounder(model)
    constants = frozenset(c.name for c in model.constants)
    out: list[Unexplained] = []
    rounds: dict[int, int] = {}
    tables: dict[str, list[list[int]]] = {}
    for q in chosen:
        # Asked again on renamed objects first, then verbatim and renamed by turns: a PDDL
        # agent's answer depends on the atoms, not on what the objects are called, so the
        # renamed answer, named back, must be one the model explains. Asked verbatim only,
        # an agent whose behaviour depends on more of the state than the model's atoms (one
        # refusing a step in some states only, or answering as the old model in some) gave
        # its answer again, and a precondition it does not have was published on one
        # refusal. The verbatim turns keep catching an agent that changes its answer to
        # the same query over time.
        turn = rounds[q.number] = rounds.get(q.number, -1) + 1
        forth, back = _renaming(q, constants, f"r{turn}") if turn % 2 == 0 else ({}, {})
        answer = agent.query(_renamed(q.state, forth), _renamed_plan(q.plan, forth), 1)[0]
        again = replace(q, executed=answer.executed,
                        final_state=_renamed(answer.state, back))
        reason = _query(grounder, again)
        if reason is not None:
            out.append(Unexplained(
                f"query {q.number} asked again", q.state, q.plan, answer.executed,
                answer.state, f"the agent answered differently the second time ({reason};"
                f" first answer: {q.executed} steps)"))
        elif mixed_error is not None:
            rows: dict[str, list[int]] = {}
            for name, outcome in outcome_steps(grounder, again):
                if outcome >= 0:
                    rows.setdefault(name, [0] * len(model.action(name).outcomes))[
                        outcome] += 1
            for name, row in rows.items():
                tables.setdefault(name, []).append(row)
    if mixed_error is not None and not out:
        # Two families at half the level each (Bonferroni): the answers asked again across
        # themselves, and pooled against the answers the version was learnt from.
        out += _mixed(tables, mixed_error / 2)
        if not out:
            out += _learnt_apart(model, grounder, queries, tables, mixed_error / 2)
    return out, len(chosen)


def _learnt_apart(model: Domain, grounder: Grounder, queries: Sequence[QueryLog],
                  tables: dict[str, list[list[int]]], error: float) -> list[Unexplained]:
    """The actions whose answers asked again, pooled, ran their outcomes in other shares
    than the answers the version was learnt from, pooled, but for a chance ``error``
    overall (the same likelihood-ratio test on a table of two rows, Bonferroni over the
    actions tested).

    The version states the learnt shares (re-estimated to the engine's tolerance, relative
    to each probability's size): fresh answers drawn from the distribution it states show
    them too. A per-answer switcher whose old model's answers fell among the few the
    engine learnt from (a removed outcome kept at 0.083 from 21 of 258 steps) shows the
    new model's shares asked again (8 of 790), where the per-answer test may lack the
    answers to reject. An honest agent's two samples are one distribution's draws (the
    engine chose when to stop on its own, which leaves its shares nearly unbiased)."""
    learnt: dict[str, list[int]] = {}
    for q in queries:
        for name, outcome in outcome_steps(grounder, q):
            if outcome >= 0:
                learnt.setdefault(name, [0] * len(model.action(name).outcomes))[
                    outcome] += 1
    pairs = {name: [learnt[name], [sum(col) for col in zip(*table, strict=True)]]
             for name, table in tables.items() if name in learnt}
    out = []
    for name, pair in sorted(pairs.items()):
        for j, p in heterogeneous(pair, error / len(pairs), likelihood=True):
            p_all = min(1.0, p * len(pairs))
            out.append(Unexplained(
                f"outcomes of {name} asked again", frozenset(), (), None, frozenset(),
                f"asked again, outcome {j + 1} of {name} ran in {pair[1][j]} of "
                f"{sum(pair[1])} steps that tell its outcomes apart, where the answers the "
                f"version was learnt from showed it in {pair[0][j]} of {sum(pair[0])}: "
                f"shares that one distribution gives with a chance of {p_all:.2g} at most "
                f"(the agent does not draw its outcomes independently; it may be answering "
                f"as two models)"))
    return out


def _mixed(tables: dict[str, list[list[int]]], error: float) -> list[Unexplained]:
    """The actions whose answers asked again do not draw their outcomes from one
    distribution but for a chance ``error`` overall (the likelihood-ratio statistic:
    :func:`capwatch.assess.homogeneity.heterogeneous`)."""
    tested = {name: t for name, t in tables.items() if len(t) > 1}
    out = []
    for name, table in sorted(tested.items()):
        for j, p in heterogeneous(table, error / len(tested), likelihood=True):
            p_all = min(1.0, p * len(tested))
            shown = sum(1 for row in table if row[j])
            out.append(Unexplained(
                f"outcomes of {name} asked again", frozenset(), (), None, frozenset(),
                f"asked again, outcome {j + 1} of {name} ran in {sum(r[j] for r in table)}"
                f" of {sum(map(sum, table))} steps that tell its outcomes apart, in {shown}"
                f" of {len(table)} answers: shares that one distribution gives with a "
                f"chance of {p_all:.2g} at most (the agent does not draw its outcomes "
                f"independently; it may be answering as two models)"))
    return out


def outcome_steps(grounder: Grounder, q: QueryLog) -> list[tuple[str, int]]:
    """Per executed step of an action with more than one outcome whose state tells every
    two of its outcomes apart in the answer, the action and the outcome the step went to
    (-1: none of them).

    A step's after-values are read from the answer's final state on the atoms no later
    executed step may change; its before-values are the query's state carried through
    the steps before it (an atom an earlier chance step may have left either way, and
    cannot be read, is unknown). Which steps count depends on the plan and the state,
    not on the outcomes that ran (but for where the answer stopped), so an agent drawing
    independently gives every answer the same shares among them, as
    :func:`capwatch.assess.outcome_shares.per_answer` does for the engine's answers."""
    # Readable: no later step of the plan may change it, executed or not. Where the answer
    # stopped depends on the outcomes (a pick that slipped leaves the drop after it
    # refused), so readability by the executed steps alone counted such a pick only when
    # it slipped: an honest agent's answers then differ in their shares (per answer, and
    # from the answers learnt from) by the plans asked, not by chance.
    plan_ops = [grounder.operator(a) for a in q.plan]
    ops = plan_ops[:q.executed]
    touched = [0] * (len(plan_ops) + 1)
    for i in range(len(plan_ops) - 1, -1, -1):
        mask = 0
        for keep, add in plan_ops[i].effects:
            mask |= ~keep | add
        touched[i] = touched[i + 1] | mask
    final = grounder.index.encode(q.final_state)
    value = grounder.index.encode(q.state)
    unknown = 0
    out: list[tuple[str, int]] = []
    for i, op in enumerate(ops):
        readable = ~touched[i + 1]
        effect = 0
        for keep, add in op.effects:
            effect |= ~keep | add
        if len(op.effects) < 2:
            keep, add = op.effects[0]
            value = (value & keep) | add
            unknown &= keep & ~add
            continue
        # Per outcome, the values it leaves on the atoms it may change, and where they are
        # known (an atom it sets, or one known before that it leaves).
        results = [((value & keep) | add) & effect for keep, add in op.effects]
        known = [(~unknown | ~keep | add) & effect for keep, add in op.effects]
        apart = all(
            (results[j] ^ results[k]) & known[j] & known[k] & readable
            for j in range(len(results)) for k in range(j + 1, len(results)))
        if apart:
            fit = [j for j in range(len(results))
                   if not (results[j] ^ final) & known[j] & readable]
            out.append((op.action.name, fit[0] if len(fit) == 1 else -1))
        # After the step: read where no later step may change it, else known where every
        # outcome leaves the same known value.
        same = effect
        for j in range(1, len(results)):
            same &= ~(results[j] ^ results[0]) & known[j] & known[0]
        value = (value & ~effect) | (final & effect & readable) | (results[0] & same & ~readable)
        unknown = (unknown & ~effect) | (effect & ~readable & ~same)
    return out


def _refusal(q: QueryLog) -> QueryLog:
    """The refused step of ``q`` alone, in the state in which it was refused."""
    k = q.executed
    return replace(q, state=q.final_state, plan=q.plan[k:k + 1], executed=0,
                   purposes=q.purposes[k:k + 1])


def _renaming(q: QueryLog, constants: frozenset[str], suffix: str
              ) -> tuple[dict[str, str], dict[str, str]]:
    """A renaming of the query's objects (constants kept) to names it does not use, and
    its inverse."""
    names = {o for a in q.state for o in a[1:]} | {o for a in q.plan for o in a[1:]}
    forth: dict[str, str] = {}
    for name in sorted(names - constants):
        new = f"{name}{suffix}"
        while new in names:
            new += suffix
        forth[name] = new
    return forth, {v: k for k, v in forth.items()}


def _renamed(atoms: Iterable[GroundAtom], names: dict[str, str]) -> frozenset[GroundAtom]:
    return frozenset((a[0], *(names.get(o, o) for o in a[1:])) for a in atoms)


def _renamed_plan(plan: Sequence[GroundAction], names: dict[str, str]
                  ) -> tuple[GroundAction, ...]:
    return tuple((a[0], *(names.get(o, o) for o in a[1:])) for a in plan)


def _operator(grounder: Grounder, action: GroundAction) -> str | None:
    try:
        grounder.operator(action)
    except ModelError as e:
        return f"{_show(action)} is not an action of the model ({e})"
    return None


def _transition(grounder: Grounder, t: Transition) -> str | None:
    bad = _operator(grounder, t.action)
    if bad is not None:
        return bad
    op = grounder.operator(t.action)
    s = grounder.index.encode(t.state)
    s2 = grounder.index.encode(t.next_state)
    if t.executed is False and s != s2:
        # A refused action changes nothing: the source contradicts itself, and no model
        # explains it (check_declared; the monitor made it evidence for this reason).
        return f"{_show(t.action)} was said not executed, but the state changed"
    if t.executed is False and op.applicable(s):
        return f"{_show(t.action)} was refused, but the model says it applies"
    verdict, _ = check(op, s, s2)
    if verdict is Verdict.INCONSISTENT:
        return f"{_show(t.action)}: no outcome of the model leads to the observed state"
    if t.executed is True and verdict is Verdict.NOT_APPLICABLE:
        return f"{_show(t.action)} executed, but its precondition does not hold in the model"
    return None


def _query(grounder: Grounder, q: QueryLog) -> str | None:
    """Plan-outcome semantics: the first ``executed`` steps run, the next one (if any) is
    refused, and the state after is one the model can reach that way."""
    for action in q.plan:
        bad = _operator(grounder, action)
        if bad is not None:
            return bad
    states: set[StateMask] = {grounder.index.encode(q.state)}
    for i, action in enumerate(q.plan[:q.executed]):
        op = grounder.operator(action)
        runnable = [s for s in states if op.applicable(s)]
        if not runnable:
            return f"step {i + 1} {_show(action)} ran, but the model refuses it there"
        states = {op.apply(s, k) for s in runnable for k in range(len(op.effects))}
        if len(states) > MAX_BRANCHES:
            return None
    if q.executed < len(q.plan):
        op = grounder.operator(q.plan[q.executed])
        stopped = {s for s in states if not op.applicable(s)}
        if not stopped:
            return (f"step {q.executed + 1} {_show(q.plan[q.executed])} was refused, but "
                    f"the model says it applies")
        states = stopped
    if grounder.index.encode(q.final_state) not in states:
        return f"after {q.executed} steps the model cannot reach the state the agent reported"
    return None


def _show(ga: Sequence[str]) -> str:
    return f"({' '.join(ga)})"

