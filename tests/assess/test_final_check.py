"""An agent that changes during the assessment, with a small budget (rev13b, session 13).

parking's move-car-to-car drifted (its first answers are that model's); two queries into
the assessment the agent changes again: move-car-to-curb now also requires
``(behind-car ?carsrc ?car)``. move-car-to-curb's safe values come from the evidence of
the agent before that change, so every later probe of it is refused, each on the one atom
it flipped, and each refusal was read as that atom's precondition. With the budget spent
before a probe contradicted them, the version published preconditions neither model has.
The engine now asks, in one query past the spent budget, every deterministic action an
answer refused to run where the evidence says it surely does (``Designer.check``): the
changed agent refuses, the evidence conflicts and the model does not explain the answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery, QueryNotAttempted, QueryResult
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.model.domain import Domain, GroundAction, GroundAtom, LiftedAtom, Outcome
from capwatch.model.pal import Location, PaTuple
from capwatch.model.pddl_reader import parse_domain, read_domain, read_problem
from tests.assess.test_two_draws import HAND, HANDEMPTY, HOLDING

PARKING = Path(__file__).resolve().parent.parent / "data" / "domains" / "ipc" / "parking"


class _Switch:
    """``before``'s answers for the first ``after`` queries, ``later``'s from then on."""

    def __init__(self, before: AgentQuery, later: AgentQuery, after: int) -> None:
        self.before, self.later, self.after, self.n = before, later, after, 0

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.n += 1
        return (self.before if self.n <= self.after else self.later).query(state, plan, samples)


def _drifts(known: Domain) -> tuple[Domain, Domain]:
    clear = LiftedAtom("car-clear", ("?car",))
    a = known.action("move-car-to-car")
    (o,) = a.outcomes
    first = known.replace_action(a.replace(
        pre_pos=a.pre_pos - {clear}, pre_neg=a.pre_neg | {clear},
        outcomes=(Outcome(o.add, o.delete - {clear}, 1.0),)))
    b = first.action("move-car-to-curb")
    second = first.replace_action(b.replace(
        pre_pos=b.pre_pos | {LiftedAtom("behind-car", ("?carsrc", "?car"))}))
    return first, second


@pytest.mark.parametrize("budget", [8, 12])
@pytest.mark.parametrize("seed", range(3))
def test_preconditions_read_from_refusals_after_the_agent_changed_are_not_published(
        budget: int, seed: int) -> None:
    known = read_domain(PARKING / "domain.pddl").without_action_literals()
    problem = read_problem(PARKING / "problem.pddl")
    first, second = _drifts(known)
    walker = SimulatedAgent(first, seed=seed, problem=problem)
    good: list[Transition] = []
    bad: list[Transition] = []
    for _ in range(12):
        ep = walker.random_walk(20, p_inapplicable=0.15)
        for i, act in enumerate(ep.actions):
            t = Transition(ep.states[i], act, ep.states[i + 1], executed=ep.executed[i])
            (bad if replay(known, [t]) else good).append(t)
    assert bad, "the walks must contradict the known model"
    evidence = [*bad[:2], *good[-40:]]
    agent = _Switch(SimulatedAgent(first, seed=seed, problem=problem),
                    SimulatedAgent(second, seed=seed, problem=problem), 2)
    result = assess(known, evidence, agent, method="verify", budget=budget)
    assert len(result.queries) <= budget + 1  # the check goes past the budget
    model = result.domain()
    if replay(model, evidence, result.queries):
        return  # the daemon fails closed (unexplained)
    got = model.action("move-car-to-curb")
    allowed = [first.action("move-car-to-curb"), second.action("move-car-to-curb")]
    assert any(got.pre_pos <= m.pre_pos and got.pre_neg <= m.pre_neg for m in allowed), (
        sorted(map(str, got.pre_pos)), sorted(map(str, got.pre_neg)))


def _grid_drifts(known: Domain) -> tuple[Domain, Domain]:
    """rev13b's grid multi 0: three actions drift (move gains ``(not (key ?nextpos))``,
    pickup keeps ``(arm-empty)``, putdown gains ``(at-robot ?key)``), what the
    observations show; two queries into the assessment three drift again: move gains
    ``(not (locked ?curpos))``, putdown ``(holding ?curpos)``, and pickup stops deleting
    ``(at ?key ?curpos)``."""
    def drift(d: Domain, move: LiftedAtom, pick: LiftedAtom, put: LiftedAtom) -> Domain:
        a = d.action("move")
        d = d.replace_action(a.replace(pre_neg=a.pre_neg | {move}))
        b = d.action("pickup")
        (o,) = b.outcomes
        d = d.replace_action(b.replace(outcomes=(Outcome(o.add, o.delete - {pick}, 1.0),)))
        c = d.action("putdown")
        return d.replace_action(c.replace(pre_pos=c.pre_pos | {put}))
    first = drift(known, LiftedAtom("key", ("?nextpos",)), LiftedAtom("arm-empty", ()),
                  LiftedAtom("at-robot", ("?key",)))
    second = drift(first, LiftedAtom("locked", ("?curpos",)),
                   LiftedAtom("at", ("?key", "?curpos")), LiftedAtom("holding", ("?curpos",)))
    return first, second


@pytest.mark.parametrize("budget", [8, 12, 40])
@pytest.mark.parametrize("seed", range(6))
def test_an_effect_the_agent_dropped_after_the_evidence_for_it_is_not_published(
        budget: int, seed: int) -> None:
    """rev13b's grid multi 0 switch2 at budget 12 in miniature: pickup's effects were
    decided from the observations (the agent before it changed) and no answer after the
    change ran pickup (its probes sat behind refused steps), so the version stated the
    effect the agent had dropped. Whatever the budget, every deterministic action the
    version states is now run once more after the other queries; the changed agent's
    answer conflicts with the older evidence and nothing is published, or the version
    states what the agent does now."""
    grid = PARKING.parent / "grid"
    known = read_domain(grid / "domain.pddl").without_action_literals()
    problem = read_problem(grid / "problem.pddl")
    first, second = _grid_drifts(known)
    walker = SimulatedAgent(first, seed=seed, problem=problem)
    good: list[Transition] = []
    bad: list[Transition] = []
    for _ in range(12):
        ep = walker.random_walk(20, p_inapplicable=0.15)
        for i, act in enumerate(ep.actions):
            t = Transition(ep.states[i], act, ep.states[i + 1], executed=ep.executed[i])
            (bad if replay(known, [t]) else good).append(t)
    assert bad, "the walks must contradict the known model"
    evidence = [*good[-40:], *bad[:2]]
    agent = _Switch(SimulatedAgent(first, seed=seed, problem=problem),
                    SimulatedAgent(second, seed=seed, problem=problem), 2)
    result = assess(known, evidence, agent, method="verify", budget=budget)
    model = result.domain()
    if replay(model, evidence, result.queries):
        return  # the daemon fails closed (unexplained)
    at = LiftedAtom("at", ("?key", "?curpos"))
    if PaTuple("pickup", at).pal(Location.EFF) in result.unresolved:
        return  # no claim
    assert at not in model.action("pickup").outcomes[0].delete, (
        "published the effect the agent dropped")


class _MapBound:
    """An agent bound to its own world (the Gymnasium taxi's map): every designed state,
    on objects the engine names, is one it cannot be put in. After ``answers`` queries
    answered by ``agent``."""

    def __init__(self, agent: AgentQuery | None = None, answers: int = 0) -> None:
        self.agent, self.answers, self.n = agent, answers, 0

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.n += 1
        if self.agent is None or self.n > self.answers:
            raise QueryNotAttempted("'qcar1' is not a car of this lot")
        return self.agent.query(state, plan, samples)


def _parking_walks(seed: int) -> tuple[Domain, Domain, list[Transition]]:
    known = read_domain(PARKING / "domain.pddl").without_action_literals()
    first, _ = _drifts(known)
    walker = SimulatedAgent(first, seed=seed, problem=read_problem(PARKING / "problem.pddl"))
    evidence = []
    for _ in range(40):
        ep = walker.random_walk(20, p_inapplicable=0.15)
        evidence += [Transition(ep.states[i], act, ep.states[i + 1], executed=ep.executed[i])
                     for i, act in enumerate(ep.actions)]
    return known, first, evidence


def test_an_agent_that_cannot_attempt_designed_queries_keeps_the_observations_version() -> None:
    # With no query asked (budget 0, or the observations decided everything: the taxi of
    # tests/client), the final check is the first designed query the agent sees; one bound
    # to its own world refuses it. The version learnt from the observations is what it
    # was before the check existed, and says the check was not made; failing instead
    # left such agents without any version (tests/client's taxi, session 15).
    known, first, evidence = _parking_walks(0)
    reference = assess(known, evidence, SimulatedAgent(first, seed=0), method="daaisy",
                       budget=0)
    result = assess(known, evidence, _MapBound(), method="daaisy", budget=0)
    assert result.checks == 0 and not result.queries
    assert any(n.startswith("final check not made") for n in result.notes)
    assert result.domain() == reference.domain()


def test_an_agent_that_answered_designed_queries_may_not_refuse_the_check() -> None:
    # It was put in designed states before: refusing the check the same way is no
    # excuse, and nothing is published (the refusal reaches the daemon as the query's).
    known, first, evidence = _parking_walks(0)
    agent = _MapBound(SimulatedAgent(first, seed=0), answers=1)
    with pytest.raises(QueryNotAttempted):
        assess(known, evidence, agent, method="daaisy", budget=50)
    assert agent.n == 2  # one learning query answered, the check refused


def test_the_final_check_sends_every_probe_when_they_take_several_queries(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries small enough (``max_query_atoms``) that the check's probes take several:
    every one is sent. The loop's bound was the probes still unsent, which shrinks as
    they go: after k queries it stopped once k reached what was left (8 probes sent 3
    and 3 a query: the last 2 never ran, their actions' safe values unchecked)."""
    from capwatch.assess import engine
    from capwatch.assess import probes as probes_module

    known = read_domain(PARKING / "domain.pddl").without_action_literals()
    problem = read_problem(PARKING / "problem.pddl")
    walker = SimulatedAgent(known, seed=0, problem=problem)
    evidence = []
    for _ in range(6):
        ep = walker.random_walk(20, p_inapplicable=0.15)
        evidence += [Transition(ep.states[i], act, ep.states[i + 1], executed=ep.executed[i])
                     for i, act in enumerate(ep.actions)]
    checking: list[int] = []
    """The probes to check, then the steps each check query sent."""
    final_check, pack = engine._Engine._final_check, probes_module.pack

    def recorded_check(self: object, *args: object) -> None:
        checking.append(-1)  # the check starts: its first pack's probes come next
        final_check(self, *args)  # type: ignore[arg-type]

    def recorded_pack(probes: Sequence[object], *args: object, **kwargs: object) -> object:
        query = pack(probes, *args, **kwargs)  # type: ignore[arg-type]
        if checking:
            if checking[-1] == -1:
                checking[-1] = len(probes)
            if query is not None:
                checking.append(len(query.steps))
        return query

    monkeypatch.setattr(engine._Engine, "_final_check", recorded_check)
    monkeypatch.setattr(engine, "pack", recorded_pack)
    result = assess(known, evidence, SimulatedAgent(known, seed=0, problem=problem),
                    method="verify", budget=20, max_query_atoms=20)
    probes, *sent = checking
    assert len(sent) > 1, "the check must take several queries here"
    assert result.checks == len(sent)
    assert sum(sent) == probes


def _hand_switch() -> tuple[Domain, Domain, Domain, list[Transition]]:
    """The hand domain (tests/assess/test_two_draws.py): drop no longer puts the box on
    the table (the drift the evidence shows); later in the assessment the agent changes
    again, and the probabilistic pick now requires the box not held."""
    known = parse_domain(HAND)
    drop = known.action("drop")
    first = known.replace_action(drop.replace(
        outcomes=(Outcome(frozenset({HANDEMPTY}), frozenset({HOLDING}), 1.0),)))
    pick = first.action("pick")
    second = first.replace_action(pick.replace(pre_neg=pick.pre_neg | {HOLDING}))
    evidence = [Transition(frozenset({("holding", "b0")}), ("drop", "b0"),
                           frozenset({("handempty",)}), executed=True, source="drop")]
    return known, first, second, evidence


@pytest.mark.parametrize("after", range(4, 40, 6))
def test_a_precondition_a_probabilistic_action_gained_after_its_evidence_is_not_missed(
        after: int) -> None:
    """pick's safe values (the box held or not) come from answers before the change;
    later it was asked again only in states of one value (its outcomes), so the version
    said pick runs with the box held, which the changed agent refuses. The final check
    now asks probabilistic actions too (session 16): pick is refused with the box held,
    and nothing is published. Before: a wrong precondition published at 4 of these 6
    switch points (12 of 39 runs over switch points 4 to 76, seeds 0-2)."""
    known, first, second, evidence = _hand_switch()
    for seed in range(3):
        agent = _Switch(SimulatedAgent(first, seed=seed), SimulatedAgent(second, seed=seed + 9),
                        after)
        result = assess(known, evidence, agent, method="verify", budget=300)
        if result.undecided_outcomes or replay(result.domain(), evidence, result.queries):
            continue
        now = second if agent.n > after else first
        model = result.domain()
        for name in ("pick", "drop"):
            got, want = model.action(name), now.action(name)
            assert (got.pre_pos, got.pre_neg) == (want.pre_pos, want.pre_neg), (seed, name)
