"""Vocabulary and abstraction checks: problems surface at start-up, by name."""

from __future__ import annotations

import pytest

from capwatch.client import Abstraction, Vocabulary, VocabularyError
from tests.paths import REPO_ROOT

ROVER = REPO_ROOT / "capwatch" / "examples" / "rover.pddl"


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary.from_file(ROVER)


def test_vocabulary_reads_arities_from_the_domain_file(vocab: Vocabulary) -> None:
    assert vocab.domain == "rover"
    assert vocab.predicates["at"] == 2
    assert vocab.actions["sample_rock"] == 3


def test_action_mapping_with_unknown_names_fails_in_the_constructor(vocab: Vocabulary) -> None:
    with pytest.raises(VocabularyError, match=r"unknown action\(s\) 'fly', 'teleport'"):
        Abstraction(vocab, atoms=lambda raw: [], action=lambda s, a: None,
                    action_names={0: "navigate", 1: "fly", 2: "teleport"})


def test_declared_predicates_are_checked_in_the_constructor(vocab: Vocabulary) -> None:
    with pytest.raises(VocabularyError, match=r"unknown predicate\(s\) 'battery'"):
        Abstraction(vocab, atoms=lambda raw: [], action=lambda s, a: None,
                    predicates=["at", "battery"])


@pytest.mark.parametrize(("atoms", "message"), [
    ([("at", "rover1")], r"predicate 'at' takes 2 argument\(s\), found 1 in \(at rover1\)"),
    ([("at_rover", "rover1", "wp1")], r"unknown predicate 'at_rover' in domain 'rover'"),
    ([("at", "rover 1", "wp1")], r"'rover 1' .* is not a valid name"),
])
def test_a_sample_state_outside_the_vocabulary_names_the_atom(
        vocab: Vocabulary, atoms: list[tuple[str, ...]], message: str) -> None:
    abstraction: Abstraction[object, int] = Abstraction(
        vocab, atoms=lambda raw: atoms, action=lambda s, a: ("navigate", "r", "a", "b"))
    with pytest.raises(VocabularyError, match=message):
        abstraction.check_sample(object())


def test_action_hook_is_checked_for_arity_and_against_the_mapping(vocab: Vocabulary) -> None:
    abstraction: Abstraction[object, int] = Abstraction(
        vocab, atoms=lambda raw: [("at", "rover1", "wp1")],
        action=lambda s, a: ("navigate", "rover1", "wp1") if a == 0 else ("drop_sample", "rover1",
                                                                           "store1"),
        action_names={0: "navigate", 1: "sample_rock"})
    with pytest.raises(VocabularyError, match=r"action 'navigate' takes 3 argument\(s\), found 2"):
        abstraction.action(object(), 0)
    with pytest.raises(VocabularyError,
                       match="mapped to 'sample_rock' but the hook returned 'drop_sample'"):
        abstraction.action(object(), 1)


def test_a_step_without_model_counterpart_is_none(vocab: Vocabulary) -> None:
    abstraction: Abstraction[object, int] = Abstraction(
        vocab, atoms=lambda raw: [], action=lambda s, a: None)
    assert abstraction.action(object(), 3) is None


@pytest.mark.parametrize(("name", "why"), [
    ("rover\u202e1", r"U\+202E RIGHT-TO-LEFT OVERRIDE \(category Cf\)"),
    ("wp\u200b1", r"U\+200B ZERO WIDTH SPACE"),
    ("wp\ue0001", r"U\+E000 .*category Co"),
    ("wp\u20291", r"U\+2029 PARAGRAPH SEPARATOR"),
    ("wp\x7f", r"U\+007F"),
    ("wp\u00a01", r"U\+00A0 NO-BREAK SPACE, not allowed in a name"),
    ("wp(1)", r"U\+0028 LEFT PARENTHESIS"),
    ("", "a name is empty"),
    ("w" * 257, "at most 256 characters, not 257"),
])
def test_a_name_the_wire_refuses_fails_in_the_agent_naming_why(
        vocab: Vocabulary, name: str, why: str) -> None:
    """The wire's rule (wire_text), not a pattern of the client's own: before, a bidi
    override or a zero-width space in an object's name passed the client and was a dead
    letter in capwatch."""
    with pytest.raises(VocabularyError, match=f"is not a valid name: .*{why}"):
        vocab.check_atom(("at", "rover1", name))
    with pytest.raises(VocabularyError, match="is not a valid name"):
        vocab.check_action(("navigate", "rover1", "wp1", name))


def test_a_name_the_wire_takes_is_taken(vocab: Vocabulary) -> None:
    for name in ("wp1", "caf\u00e9", "cafe\u0301", "\u4e16\u754c", "w" * 256, "a-b_c.d"):
        vocab.check_atom(("at", "rover1", name))
