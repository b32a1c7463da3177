"""Agent answers are checked before an assessment uses them (issue 12, lying agents)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from capwatch.assess.agent import QueryResult, State
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.answers import AnswerRejected, CheckedAgent, spot_check, unexplained
from capwatch.model.domain import GroundAction
from tests.daemon.helpers import example

ROVER = example("rover.pddl")
S = frozenset({("at", "rover1", "waypoint1"), ("equipped_rock_analysis", "rover1"),
               ("battery_half", "rover1")})
NAV = ("navigate", "rover1", "waypoint1", "waypoint2")
S2 = frozenset({("at", "rover1", "waypoint2"), ("equipped_rock_analysis", "rover1"),
                ("battery_half", "rover1")})


class Fixed:
    """An agent that answers every question with the given results, in turn."""

    def __init__(self, *answers: QueryResult) -> None:
        self.answers = list(answers)
        self.asked = 0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        r = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        return [r] * samples


def test_an_honest_answer_passes() -> None:
    agent = CheckedAgent(Fixed(QueryResult(1, S2)), ROVER)
    assert agent.query(S, [NAV])[0].state == S2


@pytest.mark.parametrize("answer,why", [
    (QueryResult(1, S2 | {("teleported", "rover1")}), "unknown predicate"),
    (QueryResult(1, S2 | {("at", "rover1")}), "takes 2"),
    (QueryResult(1, S2 | {("at", "rover9", "waypoint1")}), "object 'rover9'"),
    (QueryResult(0, S2), "executed nothing"),
    (QueryResult(2, S2), "executing 2 steps"),
])
def test_answers_outside_what_could_be_true_are_rejected(answer: QueryResult, why: str
                                                         ) -> None:
    with pytest.raises(AnswerRejected, match=why):
        CheckedAgent(Fixed(answer), ROVER).query(S, [NAV])


def test_an_oversized_answer_is_rejected() -> None:
    big = frozenset(("at", "rover1", "waypoint1") for _ in range(1)) | S
    with pytest.raises(AnswerRejected, match="limit"):
        CheckedAgent(Fixed(QueryResult(1, big)), ROVER, max_state_atoms=2).query(S, [NAV])


def test_a_deterministic_agent_answering_one_question_two_ways_is_rejected() -> None:
    agent = CheckedAgent(Fixed(QueryResult(1, S2), QueryResult(1, S)), ROVER)
    agent.query(S, [NAV])
    with pytest.raises(AnswerRejected, match="differently"):
        agent.query(S, [NAV])


def _seen(executed: bool | None, after: frozenset[tuple[str, ...]]) -> AgentTransition:
    return AgentTransition("rover-a", "rover-v1", "ep", 0, None, S, NAV, after, False,
                           executed, 0, 7)


def test_spot_checks_ask_what_the_agent_was_seen_doing() -> None:
    honest = Fixed(QueryResult(1, S2))
    assert spot_check(honest, ROVER, [_seen(True, S2)]) == 2
    with pytest.raises(AnswerRejected, match="disagree with its behaviour"):
        spot_check(Fixed(QueryResult(1, frozenset())), ROVER, [_seen(True, S2)])
    with pytest.raises(AnswerRejected):
        spot_check(Fixed(QueryResult(1, S2)), ROVER, [_seen(False, S)])


def test_unexplained_lists_what_a_model_contradicts() -> None:
    assert unexplained(ROVER, [_seen(True, S2)]) == []
    wrong = _seen(True, S)  # navigated yet stayed: the model says it moves
    assert unexplained(ROVER, [wrong]) == [wrong]
