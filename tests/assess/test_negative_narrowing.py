"""A narrowing that adds a negative precondition, seen as one refusal in a state where
every atom of the action holds (canary21: blocksworld put-down now needing
``(not (clear ?x))``, gripper move ``(not (at_robby ?to))``, drop
``(not (at ?obj ?room))``).

Both of the explorer's hypothesis states (AIA's and the known model's) then set the atom
true, as the refused state does: each surely fails, and before session 21 the action was
given up with no query ("no state was found in which put-down executes"), the finding
left unexplained. The assessed model must be the drifted truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.model.domain import Domain, LiftedAtom
from capwatch.model.pal import AbstractModel, Location, pal_tuples
from capwatch.model.pddl_reader import read_domain
from tests.paths import DOMAINS, IPC

WHERE = {"blocksworld": DOMAINS, "gripper": DOMAINS, "ferry": IPC, "hanoi": IPC,
         "visitall": IPC, "storage": IPC, "transport": IPC, "parking": IPC}


def _cases() -> list[tuple[str, str, LiftedAtom]]:
    out = []
    for name, root in WHERE.items():
        domain = read_domain(root / name / "domain.pddl")
        for a in domain.actions:
            pre = a.pre_pos | a.pre_neg
            added = sorted(a.outcomes[0].add - pre)
            if added:
                out.append((name, a.name, added[0]))
    return out


CASES = _cases()


def _all_true(domain: Domain, action: str) -> tuple[frozenset[tuple[str, ...]],
                                                    tuple[str, ...]]:
    """The action on distinct objects, in the state where each of its atoms holds."""
    act = domain.action(action)
    binding = {p: f"o{i}" for i, p in enumerate(act.parameter_names)}
    state = frozenset(pal.atom.ground(binding) for pal in pal_tuples(domain)
                      if pal.action == action and pal.location is Location.PRE)
    return state, (action, *(binding[p] for p in act.parameter_names))


@pytest.mark.parametrize(("name", "action", "atom"), CASES,
                         ids=[f"{n}-{a}-{x}" for n, a, x in CASES])
def test_a_negative_precondition_gained_is_learnt(name: str, action: str,
                                                   atom: LiftedAtom) -> None:
    domain = read_domain(WHERE[name] / name / "domain.pddl")
    act = domain.action(action)
    truth = domain.replace_action(act.replace(pre_neg=act.pre_neg | {atom}))
    state, ground = _all_true(domain, action)
    refused = Transition(state, ground, state, executed=False, source="canary")
    result = assess(domain, [refused], SimulatedAgent(truth, seed=3), method="verify")
    diff = list(result.model.diff(AbstractModel.from_domain(truth)))
    assert not diff, (diff, result.notes)
    assert not replay(result.domain(), [refused], result.queries)


def test_cases_span_the_domains() -> None:
    assert {n for n, _, _ in CASES} == set(WHERE)
    assert all(Path(WHERE[n] / n).is_dir() for n in WHERE)
