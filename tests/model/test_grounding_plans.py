"""grounding_plans grounds an action's atoms as ``LiftedAtom.ground`` does: the same atoms
in the same order (an index numbers them in that order), constants kept, repeated
objects, equality constraints."""

from __future__ import annotations

import itertools

import pytest

from capwatch.model import Grounder
from capwatch.model.domain import Action, GroundAction, LiftedAtom
from capwatch.model.errors import ModelError
from capwatch.model.grounding import AtomIndex, Grounded, SharedGrounding
from capwatch.model.grounding_plans import ground, plan
from capwatch.model.pddl_reader import read_domain
from tests.paths import DATA, IPC, IPC_NAMES


def _reference(action: Action, ground_action: GroundAction) -> Grounded:
    """SharedGrounding.ground as it was written before the plans (session 21)."""
    args = tuple(ground_action[1:])
    binding = dict(zip(action.parameter_names, args, strict=True))

    def atoms(lifted: frozenset[LiftedAtom]) -> tuple[tuple[str, ...], ...]:
        return tuple(a.ground(binding) for a in lifted)

    return (action, args, atoms(action.pre_pos), atoms(action.pre_neg),
            tuple((atoms(o.delete), atoms(o.add)) for o in action.outcomes),
            action.admits_binding(binding))


def _ground_actions(action: Action) -> list[GroundAction]:
    # Objects distinct, then every parameter naming one object (repeated objects), then
    # the first two naming one object: what equality constraints and PDDL's
    # delete-then-add turn on.
    n = len(action.parameters)
    out: list[GroundAction] = [(action.name, *(f"o{i}" for i in range(n))),
                               (action.name, *("o0" for _ in range(n)))]
    if n > 1:
        out.append((action.name, "o0", "o0", *(f"o{i}" for i in range(2, n))))
    return out


@pytest.mark.parametrize("name", IPC_NAMES)
def test_a_plan_grounds_every_action_as_lifted_atoms_do(name: str) -> None:
    domain = read_domain(IPC / name / "domain.pddl")
    for action in domain.actions:
        for ground_action in _ground_actions(action):
            assert ground(plan(action), ground_action) == _reference(action, ground_action)


def test_constants_are_kept_and_equality_constraints_decide_admitted() -> None:
    domains = [read_domain(IPC / n / "domain.pddl") for n in ("hiking", "mprime")]
    constrained = [a for d in domains for a in d.actions if a.has_static_constraints]
    assert constrained
    seen = set()
    for action in constrained:
        for ground_action in _ground_actions(action):
            got = ground(plan(action), ground_action)
            assert got[5] == action.admits(ground_action[1:])
            seen.add(got[5])
    assert seen == {True, False}
    hoist = read_domain(DATA / "own" / "hoist" / "domain.pddl")
    action = hoist.actions[0]
    with_constant = Action(action.name, action.parameters, action.pre_pos | {
        LiftedAtom("clear", ("floor-1", action.parameters[0].name))}, action.pre_neg,
        action.outcomes)
    atoms = ground(plan(with_constant), (action.name, *(f"x{i}" for i in
                                                        range(len(action.parameters)))))[2]
    assert ("clear", "floor-1", "x0") in atoms


def test_operators_number_atoms_as_before_on_a_shared_and_an_own_index() -> None:
    domain = read_domain(IPC / "depot" / "domain.pddl")
    ground_actions = [ga for a in domain.actions for ga in _ground_actions(a)]
    shared = SharedGrounding(domain)
    own = Grounder(domain, AtomIndex())
    reference = AtomIndex()
    for ga in ground_actions:
        _, _, pos, neg, outcomes, _ = _reference(domain.action_map[ga[0]], ga)
        for group in itertools.chain(*outcomes, (pos, neg)):
            for atom in group:
                reference.bit(atom)
        own.operator(ga)
        shared.grounder.operator(ga)
    assert own.index.atoms == reference.atoms == shared.index.atoms


def test_an_unknown_action_or_arity_is_a_model_error() -> None:
    domain = read_domain(IPC / "depot" / "domain.pddl")
    action = domain.actions[0]
    for grounder in (SharedGrounding(domain), Grounder(domain)):
        with pytest.raises(ModelError, match="unknown action 'nope'"):
            grounder.ground(("nope",)) if isinstance(grounder, SharedGrounding) \
                else grounder.operator(("nope",))
        bad = (action.name, *(["x"] * (len(action.parameters) + 1)))
        with pytest.raises(ModelError, match=f"takes {len(action.parameters)} arguments, "
                                             f"found {len(action.parameters) + 1}"):
            grounder.ground(bad) if isinstance(grounder, SharedGrounding) \
                else grounder.operator(bad)
