"""A refusal of a step that names one object twice, when the drift is an inequality
``(not (= ?a ?b))``: equality constraints are not learnt, so no model of the vocabulary
is the truth, and the version must not be published (rev13b's
``probe_assess_rev13b.py --case parking distinct 1 honest``, in miniature).

The refused ``move o1 o1`` looks like a failure clause over the action's literals; on
repeated objects two of them fall on one ground atom, so a negative precondition on the
second, ``(not (p ?b))``, explains the refusal (``(p ?a)`` is required, and here ``?a`` is
``?b``). Where the observations leave it the only live literal, unit propagation decided
it with no probe of its own, and verify never asked the step with ``(p ?b)`` true on
distinct objects, which the agent runs: it was published.
"""

from __future__ import annotations

from pathlib import Path

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor
from capwatch.model.domain import Domain
from capwatch.model.pddl_reader import read_domain

KNOWN = """(define (domain pass)
  (:requirements :strips :typing)
  (:types obj)
  (:predicates (p ?x - obj) (q ?x - obj))
  (:action move
    :parameters (?a - obj ?b - obj)
    :precondition (and (p ?a) (q ?b))
    :effect (and (not (p ?a)) (p ?b))))
"""
TRUTH = KNOWN.replace("(and (p ?a) (q ?b))", "(and (p ?a) (q ?b) (not (= ?a ?b)))")


def _domain(tmp_path: Path, name: str, text: str) -> Domain:
    path = tmp_path / f"{name}.pddl"
    path.write_text(text)
    return read_domain(path)


def _transition(i: int, state: set[tuple[str, ...]], action: tuple[str, ...],
                after: set[tuple[str, ...]], executed: bool) -> AgentTransition:
    return AgentTransition("a", "f", "e", i, None, frozenset(state), action,
                           frozenset(after), False, executed=executed)


def test_a_refusal_on_repeated_objects_is_not_explained_by_a_literal_no_probe_tried(
        tmp_path: Path) -> None:
    known, truth = _domain(tmp_path, "known", KNOWN), _domain(tmp_path, "truth", TRUTH)
    assert known != truth
    # move o2 o3 ran with (q ?a) true and (p ?b) false: (not (q ?a)) is no precondition,
    # (not (p ?b)) still may be.
    ran = _transition(0, {("p", "o2"), ("q", "o2"), ("q", "o3")}, ("move", "o2", "o3"),
                      {("q", "o2"), ("q", "o3"), ("p", "o3")}, True)
    refused = _transition(1, {("p", "o1"), ("q", "o1")}, ("move", "o1", "o1"),
                          {("p", "o1"), ("q", "o1")}, False)
    out = EngineAssessor(method="verify").assess(AssessmentRequest(
        "a", "f", known, SimulatedAgent(truth, seed=0), inconsistent=[refused],
        executed=[ran], query_budget=500, confirm_queries=64))
    # The truth is outside the vocabulary: nothing may be published but the truth itself.
    assert out.unexplained, out.model.action("move")
