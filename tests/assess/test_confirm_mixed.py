"""The answers asked again must be one distribution's draws (docs/assessment.md, "The
answers asked again"): a stochastic model explains every answer of an agent answering
some queries as a model with an outcome and the rest as one without it, one answer at a
time, so :func:`capwatch.assess.replay.confirm` also tests how the answers' steps went
to the model's outcomes for homogeneity across the answers."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult, State
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import confirm, outcome_steps, replay
from capwatch.assess.result import QueryLog
from capwatch.model.domain import Domain, GroundAction, GroundAtom, Outcome
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import read_domain
from tests.assess.test_outcome_shares import _loose_pick
from tests.assess.test_outcomes import BEFORE_PICK, FREE, PICKED, _effects, _known, _with
from tests.paths import REPO_ROOT

PICKS = 24


def _query(first: SimulatedAgent | None = None) -> QueryLog:
    """A move (deterministic: the query is asked round after round) then PICKS picks on
    objects of their own; answered once by ``first`` (all picks ran and took their parcel
    when None)."""
    state: set[GroundAtom] = {("at_robot", "mover", "a")}
    plan: list[GroundAction] = [("move", "mover", "a", "b")]
    for i in range(PICKS):
        state |= {("at_robot", f"r{i}", f"x{i}"), ("at", f"p{i}", f"x{i}"), ("free", f"r{i}")}
        plan.append(("pick", f"r{i}", f"p{i}", f"x{i}"))
    final = {("at_robot", "mover", "b")} | {
        a for i in range(PICKS) for a in (("at_robot", f"r{i}", f"x{i}"),
                                           ("carrying", f"r{i}", f"p{i}"))}
    if first is not None:
        (answer,) = first.query(frozenset(state), plan)
        return QueryLog(1, frozenset(state), tuple(plan), answer.executed, answer.state,
                        ("",) * len(plan))
    return QueryLog(1, frozenset(state), tuple(plan), len(plan), frozenset(final),
                    ("",) * len(plan))


class _Switcher:
    """Answers every third query as ``old`` (an outcome the agent no longer has still
    drawn there) and the others as ``new``."""

    def __init__(self, old: Domain, new: Domain) -> None:
        self.old, self.new = SimulatedAgent(old, seed=1), SimulatedAgent(new, seed=2)
        self.asked = itertools.count()

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        agent = self.old if next(self.asked) % 3 == 0 else self.new
        return agent.query(state, plan, samples)


def test_outcome_steps_reads_each_pick_from_the_final_state() -> None:
    model = _loose_pick(_known(), 0.9)
    q = _query()
    slipped = {3, 7}
    final = set(q.final_state)
    for i in slipped:
        final -= {("carrying", f"r{i}", f"p{i}")}
        final |= {("at", f"p{i}", f"x{i}"), ("free", f"r{i}")}
    steps = outcome_steps(Grounder(model), QueryLog(1, q.state, q.plan, q.executed,
                                                    frozenset(final), q.purposes))
    assert steps == [("pick", 1 if i in slipped else 0) for i in range(PICKS)]
    # A step neither outcome explains (the parcel gone, nothing carried) fits none.
    final -= {("at", "p3", "x3")}
    steps = outcome_steps(Grounder(model), QueryLog(1, q.state, q.plan, q.executed,
                                                    frozenset(final), q.purposes))
    assert steps[3] == ("pick", -1)


def test_a_step_whose_atoms_a_later_step_changes_is_not_counted() -> None:
    """pick then drop of the same parcel: the final state shows the drop, not how the
    pick went (a slipped pick leaves nothing to drop, so the drop is refused: only an
    answer that ran both is read, and its pick is not counted)."""
    model = _loose_pick(_known(), 0.9)
    state = frozenset({("at_robot", "r", "x"), ("at", "p", "x"), ("free", "r"),
                       ("at_robot", "s", "y"), ("at", "q", "y"), ("free", "s")})
    plan = (("pick", "r", "p", "x"), ("drop", "r", "p", "x"), ("pick", "s", "q", "y"))
    final = frozenset({("at_robot", "r", "x"), ("at", "p", "x"), ("free", "r"),
                       ("at_robot", "s", "y"), ("carrying", "s", "q")})
    q = QueryLog(1, state, plan, 3, final, ("",) * 3)
    assert outcome_steps(Grounder(model), q) == [("pick", 0)]


def test_a_switcher_of_a_removed_outcome_fails_confirm() -> None:
    """The version states pick's slip (the old model's answers showed it); the agent
    slips only in the answers it gives as the old model. Each answer is one the version
    explains: before this test, ``confirm`` found nothing."""
    known = _known()
    published = _loose_pick(known, 0.9)
    agent = _Switcher(_loose_pick(known, 0.5), _loose_pick(known, 1.0))
    unexplained, asked = confirm(published, agent, [_query()], 64)
    assert asked == 64
    assert [u.source for u in unexplained] == ["outcomes of pick asked again"]
    assert "outcome 1 of pick" in unexplained[0].reason or \
        "outcome 2 of pick" in unexplained[0].reason
    # The operator's word that the agents draw independently: not tested.
    agent = _Switcher(_loose_pick(known, 0.5), _loose_pick(known, 1.0))
    assert confirm(published, agent, [_query()], 64, mixed_error=None)[0] == []


@pytest.mark.parametrize("share", [0.5, 0.9, 0.99])
def test_honest_agents_pass_confirm(share: float) -> None:
    model = _loose_pick(_known(), share)
    for seed in range(8):
        agent = SimulatedAgent(model, seed=seed)
        unexplained, asked = confirm(model, agent, [_query(agent)], 64)
        assert unexplained == [] and asked == 64, (seed, unexplained)


class _ByAnswer:
    """The old model in a random 30% of the answers (seeded), the new one in the rest
    (benchmarks/probe_switcher17.py)."""

    def __init__(self, old: Domain, new: Domain, seed: int) -> None:
        self.old, self.new = SimulatedAgent(old, seed=seed), SimulatedAgent(new, seed=seed)
        self.rng = random.Random(seed)

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        return (self.old if self.rng.random() < 0.3 else self.new).query(state, plan, samples)


@pytest.mark.parametrize("seed", [1, 3, 4, 8])
def test_a_switcher_of_a_removed_outcome_is_not_published_with_it(seed: int) -> None:
    """assess17's constructed case: pick loses (free ?r) and its slip; the agent answers
    30% of the queries as the old shares. The daemon's path (the engine, replay, 64
    queries asked again) published pick with the slip in these seeds (7 of 12 on main,
    seeds 1, 3, 4, 6, 7, 8, 9); seeds 1, 3 and 8 pass Pearson's dispersion on the
    answers asked again, not the likelihood ratio."""
    known = _known()
    pick = known.action("pick")
    truth = _with(known, "pick", pre_pos=pick.pre_pos - {FREE}, outcomes=tuple(
        Outcome(o.add, o.delete, 1.0) for o in pick.outcomes if o.add))
    evidence = [Transition(BEFORE_PICK - {("free", "r1")}, ("pick", "r1", "p1", "hall"),
                           PICKED, executed=True)]
    agent = _ByAnswer(_loose_pick(known, 0.9), truth, seed)
    result = assess(known, evidence, agent, method="verify", budget=500)
    if result.undecided_outcomes:
        return
    model = result.domain()
    if replay(model, evidence, result.queries):
        return
    unexplained, _ = confirm(model, agent, result.queries, 64)
    assert unexplained or _effects(model.action("pick")) == _effects(truth.action("pick"))


def test_answers_asked_again_in_other_shares_than_the_learnt_ones_fail_confirm() -> None:
    """The version states pick's slip at the share its answers showed (~0.1, four answers
    of 24 picks); asked again, the agent slips in ~1% of the picks, one or two an answer,
    evenly: one distribution's draws, which the per-answer test keeps, but not the one the
    version states (the per-answer switcher of session 18 whose old model's answers fell
    among the engine's: 21 slips of 258 learnt, 8 of 790 asked again). Before, confirm
    found nothing."""
    known = _known()
    model = _loose_pick(known, 0.9)
    learnt = [replace(_query(SimulatedAgent(model, seed=s)), number=s) for s in range(4)]
    slips = sum(1 for q in learnt for a in q.plan[1:] if ("at", a[2], a[3]) in q.final_state)
    assert 4 <= slips <= 20, slips
    agent = SimulatedAgent(_loose_pick(known, 0.99), seed=7)
    unexplained, asked = confirm(model, agent, learnt, 64)
    assert asked == 64
    assert [u.source for u in unexplained] == ["outcomes of pick asked again"]
    assert "learnt from" in unexplained[0].reason
    # The same answers asked again of an agent that still slips at 0.1: nothing.
    agent = SimulatedAgent(model, seed=7)
    assert confirm(model, agent, learnt, 64)[0] == []


def test_which_steps_count_does_not_hang_on_the_steps_own_outcome() -> None:
    # pick then drop in the same room: a pick that took its parcel lets the drop run, which
    # undoes every atom the pick changed; one that slipped leaves the drop refused, the
    # answer ending after the pick. Read by the executed steps alone, the pick counted
    # only when it slipped (an honest agent's answers to such plans all 'slips'): beside
    # answers to picks alone, the per-answer test failed an honest courier in 23 of 300
    # runs at level 0.01 (20 pick-drop and 20 pick-only plans of 8 robots; 3 of 300 with
    # pick-only plans), 2-3 of 300 at the daemon's 5e-4.
    courier = read_domain(REPO_ROOT / "capwatch" / "examples" / "courier.pddl")
    grounder = Grounder(courier)
    state = frozenset({("at_robot", "r", "x"), ("at", "p", "x"), ("free", "r")})
    plan = (("pick", "r", "p", "x"), ("drop", "r", "p", "x"))
    took = QueryLog(1, state, plan, 2, state, ("",) * 2)
    slipped = QueryLog(2, state, plan, 1, state, ("",) * 2)
    assert [n for n, _ in outcome_steps(grounder, took)] == \
        [n for n, _ in outcome_steps(grounder, slipped)]
    # A pick whose atoms nothing later may change counts whatever it did.
    alone = (("pick", "r", "p", "x"),)
    picked = state - {("at", "p", "x"), ("free", "r")} | {("carrying", "r", "p")}
    assert [n for n, _ in outcome_steps(grounder, QueryLog(3, state, alone, 1, picked,
                                                          ("",)))] == ["pick"]
    assert [n for n, _ in outcome_steps(grounder, QueryLog(4, state, alone, 1, state,
                                                          ("",)))] == ["pick"]
