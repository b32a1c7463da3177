"""End-to-end assessments: the truth model simulated as the agent, the benchmark inputs.

The figures asserted here are issue 3's acceptance targets at about 50% drift, computed
over every initial model at that drift (means, as the research implementation reported).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult, State
from capwatch.assess.engine import AssessmentResult, Method, assess
from capwatch.assess.observations import Trace, Transition
from capwatch.model.domain import Domain, GroundAction, LiftedAtom, Problem
from capwatch.model.grounding import Grounder
from capwatch.model.pal import AbstractModel, Location, Mode, PalTuple
from capwatch.model.pddl_reader import parse_domain, parse_plan, read_domain, read_problem
from capwatch.model.simulate import execute_plan
from tests.paths import DETERMINISTIC_NAMES, DOMAINS

# Research implementation on these inputs (issue 3): DAAISy queries, accuracy; AIA queries.
RESEARCH = {"gripper": (6.67, 0.933, 17), "miconic": (8.0, 0.824, 30),
            "blocksworld": (12.3, 0.846, 48)}


def _trace(truth: Domain, problem: Problem, plan: Sequence[GroundAction]) -> Trace:
    g = Grounder(truth)
    states = [problem.init]
    for step in plan:
        n, s = execute_plan(g, states[-1], [step])
        assert n == 1
        states.append(s)
    return Trace(tuple(states), tuple(plan), optimal=True, source="plan")


def _inputs(name: str) -> tuple[Domain, Problem, Trace]:
    truth = read_domain(DOMAINS / name / "domain.pddl")
    problem = read_problem(DOMAINS / name / "problem.pddl")
    plan = [tuple(s) for s in parse_plan((DOMAINS / name / "optimal-plan.txt").read_text())]
    return truth, problem, _trace(truth, problem, plan)


def _half_drift_models(name: str, truth: Domain) -> list[Path]:
    npals = len(AbstractModel.from_domain(truth).modes)
    files = sorted((DOMAINS / name / "initial-models").glob("domain_*.pddl"))
    return [f for f in files
            if abs(int(re.findall(r"\d+", f.stem)[0]) / npals - 0.5) <= 0.05]


def _run(name: str, method: str) -> list[tuple[AssessmentResult, float]]:
    truth, problem, trace = _inputs(name)
    true_model = AbstractModel.from_domain(truth)
    out = []
    for path in _half_drift_models(name, truth):
        initial = read_domain(path)
        result = assess(initial, [trace], SimulatedAgent(truth, seed=1), method=method,
                        objects=problem.objects_by_type(initial))
        out.append((result, result.best_guess().accuracy(true_model)))
    assert out
    return out


@pytest.mark.parametrize("name", DETERMINISTIC_NAMES)
def test_daaisy_beats_the_research_implementation_at_half_drift(name: str) -> None:
    runs = _run(name, "daaisy")
    # The final check (one query past the budget, against an agent changing during the
    # assessment) is no question about the model: the research implementation has none.
    queries = statistics.mean(r.query_count - r.checks for r, _ in runs)
    accuracy = statistics.mean(a for _, a in runs)
    research_queries, research_accuracy, _ = RESEARCH[name]
    assert accuracy >= research_accuracy
    assert queries <= research_queries


@pytest.mark.parametrize("name", DETERMINISTIC_NAMES)
def test_verify_is_exact_with_at_most_half_of_aia_reference_queries(name: str) -> None:
    runs = _run(name, "verify")
    assert all(a == 1.0 for _, a in runs)
    assert statistics.mean(r.query_count for r, _ in runs) <= RESEARCH[name][2] / 2


@pytest.mark.parametrize("name", DETERMINISTIC_NAMES)
def test_aia_learns_the_exact_model(name: str) -> None:
    runs = _run(name, "aia")
    assert all(a == 1.0 for _, a in runs)
    assert all(not r.unresolved and not r.conflicts for r, _ in runs)


@pytest.mark.parametrize("name", DETERMINISTIC_NAMES)
def test_aia_without_any_observation_finds_executing_states_itself(name: str) -> None:
    truth, _, _ = _inputs(name)
    result = assess(truth, [], SimulatedAgent(truth, seed=2), method=Method.AIA)
    assert result.best_guess().accuracy(AbstractModel.from_domain(truth)) == 1.0


def test_changes_carry_evidence_and_a_readable_summary() -> None:
    truth, _, trace = _inputs("gripper")
    initial = read_domain(DOMAINS / "gripper" / "initial-models" / "domain_10_0.pddl")
    result = assess(initial, [trace], SimulatedAgent(truth), method="verify")
    assert result.changes
    assert all(c.evidence for c in result.changes)
    assert any("requires" in line or "makes" in line for line in result.summary())
    assert result.domain().action("pick").pre_pos == truth.action("pick").pre_pos


def test_the_budget_is_respected_and_what_is_left_is_reported() -> None:
    truth, _, trace = _inputs("blocksworld")
    initial = read_domain(DOMAINS / "blocksworld" / "initial-models" / "domain_25_0.pddl")
    result = assess(initial, [trace], SimulatedAgent(truth), method="verify", budget=2)
    # Past the budget, only the final check's queries (result.checks).
    assert result.query_count - result.checks == 2
    assert all(any("surely" in p or "other value" in p for p in q.purposes)
               for q in result.queries[2:])
    assert result.budget_exhausted
    assert result.unresolved


class _CountingAgent:
    def __init__(self, inner: SimulatedAgent) -> None:
        self.inner = inner
        self.calls = 0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        self.calls += 1
        return self.inner.query(state, plan, samples)


def test_every_query_is_logged_and_counted() -> None:
    truth, _, trace = _inputs("miconic")
    initial = read_domain(DOMAINS / "miconic" / "initial-models" / "domain_18_0.pddl")
    agent = _CountingAgent(SimulatedAgent(truth))
    result = assess(initial, [trace], agent, method="daaisy")
    assert agent.calls == result.query_count == len(result.queries)
    assert all(len(q.purposes) == len(q.plan) for q in result.queries)


def test_no_drift_means_no_query_in_daaisy_mode() -> None:
    truth, _, trace = _inputs("blocksworld")
    result = assess(truth, [trace], SimulatedAgent(truth), method="daaisy")
    assert result.query_count == 0
    assert not result.changes


def test_unknown_actions_and_contradictions_are_reported_not_fatal() -> None:
    truth, _, trace = _inputs("gripper")
    s = frozenset({("free", "left")})
    bad = [Transition(s, ("fly", "left"), s, executed=True, source="x"),
           Transition(s, ("pick", "b", "r", "left"), frozenset(), source="y"),
           Transition(frozenset(), ("pick", "b", "r", "left"), s, source="z")]
    result = assess(truth, [trace, *bad], SimulatedAgent(truth), method="daaisy",
                    budget=3)
    assert any("fly" in n for n in result.notes)
    assert result.conflicts


TELEPORT = """
(define (domain hop)
  (:requirements :strips :typing)
  (:types place)
  (:predicates (at ?p - place) (road ?a - place ?b - place) (charged))
  (:action walk :parameters (?a - place ?b - place)
    :precondition (and (at ?a) (road ?a ?b))
    :effect (and (at ?b) (not (at ?a))))
  (:action teleport :parameters (?a - place ?b - place)
    :precondition (and (at ?a) {extra})
    :effect (and (at ?b) (not (at ?a)) (not (charged)))))
"""


def test_reduced_functionality_is_found_from_an_optimal_trace() -> None:
    truth = parse_domain(TELEPORT.format(extra="(charged)"))
    known = parse_domain(TELEPORT.format(extra=""))
    init = frozenset({("at", "a"), ("road", "a", "b"), ("road", "b", "c")})
    plan = [("walk", "a", "b"), ("walk", "b", "c")]
    problem = Problem("p", "hop", (), init)
    trace = _trace(truth, problem, plan)
    result = assess(known, [trace], SimulatedAgent(truth), method="daaisy",
                    objects={"place": ("a", "b", "c"), "object": ("a", "b", "c")})
    needs = PalTuple("teleport", LiftedAtom("charged", ()), Location.PRE)
    assert needs in result.affected
    assert result.model.mode(needs) is Mode.POS
    assert any("teleport" in line and "requires (charged)" in line for line in result.summary())


def test_auto_switches_to_verify_only_when_most_of_the_model_is_in_doubt() -> None:
    truth, _, trace = _inputs("gripper")
    true_model = AbstractModel.from_domain(truth)
    models = DOMAINS / "gripper" / "initial-models"
    low = assess(read_domain(models / "domain_1_0.pddl"), [trace], SimulatedAgent(truth),
                 method="auto")
    high = assess(read_domain(models / "domain_19_0.pddl"), [trace], SimulatedAgent(truth),
                  method="auto")
    assert not any("verifying the whole model" in n for n in low.notes)
    assert any("verifying the whole model" in n for n in high.notes)
    assert high.best_guess().accuracy(true_model) == 1.0


class _SizeRecordingAgent:
    def __init__(self, inner: SimulatedAgent) -> None:
        self.inner = inner
        self.sizes: list[tuple[int, int]] = []

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        self.sizes.append((len(state), len(plan)))
        return self.inner.query(state, plan, samples)


def test_a_query_state_stays_within_max_query_atoms_and_the_model_is_the_same() -> None:
    # rev13a: probes packed without a cap made a 54,178-atom query no live agent answered
    # in time; capped, the probes left out go in later queries and the verdict holds.
    truth, _, trace = _inputs("blocksworld")
    initial = read_domain(DOMAINS / "blocksworld" / "initial-models" / "domain_25_0.pddl")
    free = _SizeRecordingAgent(SimulatedAgent(truth, seed=1))
    wide = assess(initial, [trace], free, method="verify")
    cap = max(2, max(atoms for atoms, _ in free.sizes) // 4)
    capped_agent = _SizeRecordingAgent(SimulatedAgent(truth, seed=1))
    capped = assess(initial, [trace], capped_agent, method="verify", max_query_atoms=cap)
    assert max(atoms for atoms, _ in free.sizes) > cap
    assert all(atoms <= cap for atoms, steps in capped_agent.sizes if steps > 1)
    assert capped.query_count > wide.query_count
    assert not capped.budget_exhausted and not capped.unresolved
    assert capped.domain() == wide.domain()


def test_max_query_atoms_must_be_positive() -> None:
    truth, _, _ = _inputs("gripper")
    with pytest.raises(ValueError, match="max_query_atoms"):
        assess(truth, [], SimulatedAgent(truth), max_query_atoms=0)
