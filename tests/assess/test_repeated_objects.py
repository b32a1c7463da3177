"""Issue 11, finding 1: an agent whose drift shows only in ground actions with repeated
objects (``move_down h h``), and the replay that keeps a contradicting model unpublished."""

from __future__ import annotations

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.assess.result import QueryLog
from capwatch.model.domain import Domain
from capwatch.model.grounding import Grounder
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.simulate import execute_plan
from tests.paths import DATA

HOIST = DATA / "own" / "hoist"


def _repeated(truth: Domain, n: int = 30) -> list[Transition]:
    """The drifted agent's stream: move_down with ?hfrom = ?hto, from every height."""
    g = Grounder(truth)
    out = []
    for i in range(n):
        h = f"h{i % 3 + 1}"
        state = frozenset({("at", h)})
        executed, after = execute_plan(g, state, [("move_down", h, h)])
        out.append(Transition(state, ("move_down", h, h), after, executed=executed == 1,
                              source=f"stream[{i}]"))
    return out


def test_the_drift_shows_only_in_repeated_object_steps_and_the_old_model_cannot_explain_it(
        ) -> None:
    known = read_domain(HOIST / "domain.pddl")
    truth = read_domain(HOIST / "drift-no-arrival.pddl")
    stream = _repeated(truth)
    # Delete, then add: under the known model (at h) survives move_down h h; the drifted
    # agent loses it. Every such step contradicts the known model, none the truth.
    assert len(replay(known, stream)) == len(stream)
    assert replay(truth, stream) == []


@pytest.mark.parametrize("method", ["daaisy", "auto", "verify"])
def test_repeated_object_evidence_is_learned_from_not_looped_on(method: str) -> None:
    known = read_domain(HOIST / "domain.pddl")
    truth = read_domain(HOIST / "drift-no-arrival.pddl")
    stream = _repeated(truth)
    result = assess(known, stream, SimulatedAgent(truth), method=method, budget=500)
    # Before the joint (entangled-atom) update, daaisy and auto answered "no change" with
    # 0 queries here, a model every one of the 30 steps contradicts (finding 1).
    assert delta(result.domain(), truth) == 0
    assert not result.budget_exhausted and result.query_count <= 10
    assert replay(result.domain(), stream, result.queries) == []
    assert not result.conflicts


def test_replay_checks_plan_outcome_answers() -> None:
    known = read_domain(HOIST / "domain.pddl")
    truth = read_domain(HOIST / "drift-no-arrival.pddl")
    state = frozenset({("at", "h1"), ("below", "h2", "h1")})
    plan = (("move_down", "h1", "h2"), ("move_up", "h2", "h1"))
    n, final = execute_plan(Grounder(truth), state, plan)
    answer = QueryLog(1, state, plan, n, final, ("probe", "probe"))
    assert n == 1  # the drifted hoist is nowhere after move_down: move_up is refused
    assert replay(truth, [], [answer]) == []
    (wrong,) = replay(known, [], [answer])
    assert wrong.source == "query 1" and "refused" in wrong.reason
    assert wrong.to_json()["executed"] == 1


def test_a_refusal_the_model_says_applies_is_unexplained() -> None:
    known = read_domain(HOIST / "domain.pddl")
    state = frozenset({("at", "h1")})
    refused = Transition(state, ("move_down", "h1", "h2"), state, executed=False, source="r")
    (u,) = replay(known, [refused])
    assert "applies" in u.reason
    unknown = Transition(state, ("fly", "h1"), state, source="x")
    (v,) = replay(known, [unknown])
    assert "not an action" in v.reason


def test_the_reference_agent_deletes_then_adds() -> None:
    agent = SimulatedAgent(read_domain(HOIST / "domain.pddl"))
    (answer,) = agent.query(frozenset({("at", "h1")}), [("move_down", "h1", "h1")], 1)
    assert answer.executed == 1
    assert answer.state == frozenset({("at", "h1"), ("visited", "h1")})


def test_joint_evidence_narrows_only_what_it_determines() -> None:
    from capwatch.assess.entangled import joint_allowed
    from capwatch.assess.versionspace import ALL_VALUES, mask_of, values_of
    from capwatch.model.pal import Mode

    minus = mask_of([(Mode.POS, Mode.NEG)])
    # (at h) held and was gone after move_down h h: with one partner known to delete it,
    # the other must not add it; its precondition stays open where the step allows.
    allowed = joint_allowed([minus, ALL_VALUES], (True, False))
    assert allowed is not None and allowed[0] == minus
    assert all(v[1] is not Mode.POS and v[0] is not Mode.NEG for v in values_of(allowed[1]))
    # It stayed true: either adds it, or neither touches it; nothing is fixed alone.
    both = joint_allowed([ALL_VALUES, ALL_VALUES], (True, True))
    assert both is not None and all(values_of(m) for m in both)
    assert any(v[1] is Mode.NEG for v in values_of(both[0]))  # deleted, then re-added
    # No values explain it: nothing is allowed (the engine reports a conflict).
    assert joint_allowed([minus, minus], (True, True)) == [0, 0]
