"""The daemon's evidence path: executed transitions handed to the assessment may predate
the drift (they are kept since the first buffered inconsistency, which dates the first
step that showed a change, not the change; an outcome that vanished shows none). An
outcome such steps showed must not reach a published version unconfirmed by the agent."""

from __future__ import annotations

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.observations import Transition
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor
from capwatch.model.domain import Outcome
from tests.assess.test_adversarial_outcomes import FULL, _jammed_drop, _known, _pick_steps
from tests.assess.test_outcomes import AT, CARRYING, _effects, _jammed, _with


def _wire(t: Transition, i: int) -> AgentTransition:
    return AgentTransition("a", "tray", "e", i, None, t.state, t.action, t.next_state, False,
                           executed=t.executed)


def test_a_vanished_outcome_seen_in_stale_executed_evidence_is_not_published() -> None:
    """Pick sometimes left the robot free (0.3); that outcome is gone. The daemon hands
    the assessment steps that showed it (it changes the state, so they count as executed:
    a step that changed nothing is no evidence there). Before: published with it."""
    partial = Outcome(frozenset({CARRYING}), frozenset({AT}), 0.3)
    known = _with(_known(), "pick", outcomes=(FULL, partial))
    truth = _with(_jammed(known), "pick", outcomes=(Outcome(FULL.add, FULL.delete, 1.0),))
    stale = _pick_steps(picked=4, slipped=4, slip=partial)
    request = AssessmentRequest(
        "a", "tray", known, SimulatedAgent(truth, seed=7),
        inconsistent=[_wire(_jammed_drop(), 0)],
        executed=[_wire(t, i) for i, t in enumerate(stale)],
        query_budget=300, confirm_queries=16)
    out = EngineAssessor(method="verify").assess(request)
    # Published, the model would have to be the truth; with the old slips in its own
    # evidence it cannot explain them, so it fails closed and says which.
    if not out.unexplained:
        assert _effects(out.model.action("pick")) == _effects(truth.action("pick"))
    else:
        assert {u.source for u in out.unexplained} <= {f"executed[{i}]" for i in range(8)}
    # The assessment itself learnt the truth: the slip was retired by the answers.
    assert any("retired" in n for n in out.details["notes"])
