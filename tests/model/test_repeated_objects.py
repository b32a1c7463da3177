"""Ground actions that name one object twice follow PDDL semantics: delete, then add.

tests/data/domains/own/hoist: move_down(?hfrom ?hto) deletes (at ?hfrom) and adds (at ?hto);
move_down(h1, h1) therefore keeps (at h1). move_up forbids ?hfrom = ?hto.
"""

from __future__ import annotations

import itertools

import pytest

from capwatch.model import (
    Grounder,
    LiftedAtom,
    Verdict,
    check,
    explain,
    joint_explains,
    shared_ground_atoms,
)
from capwatch.model.consistency import entangled_values
from capwatch.model.pal import (
    LEGAL_PA_VALUES,
    Mode,
    PaTuple,
    PaValue,
    Presence,
    pa_values_consistent_with,
)
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.model.simulate import execute_plan
from tests.paths import DATA

HOIST = DATA / "own" / "hoist"
DOMAIN = read_domain(HOIST / "domain.pddl")
AT_FROM, AT_TO = LiftedAtom("at", ("?hfrom",)), LiftedAtom("at", ("?hto",))


def test_delete_then_add_in_grounding_and_the_consistency_check() -> None:
    g = Grounder(DOMAIN)
    op = g.operator(("move_down", "h1", "h1"))
    assert op.admitted
    s = g.index.encode({("at", "h1")})
    after = g.index.encode({("at", "h1"), ("visited", "h1")})
    assert op.apply(s) == after  # (at h1) deleted, then added back
    assert check(op, s, after)[0] is Verdict.APPLIED
    # Add-then-delete would lose (at h1): that is not what the model predicts.
    assert check(op, s, g.index.encode({("visited", "h1")}))[0] is Verdict.INCONSISTENT


def test_a_plan_with_a_repeated_object_executes() -> None:
    problem = read_problem(HOIST / "problem.pddl")
    plan = [("move_down", "h1", "h1"), ("move_down", "h1", "h2")]
    executed, final = execute_plan(Grounder(DOMAIN), problem.init, plan)
    assert executed == 2
    assert final == {("at", "h2"), ("visited", "h1"), ("visited", "h2"), ("below", "h2", "h1")}


def test_equality_constraints_decide_whether_a_repetition_is_allowed() -> None:
    g = Grounder(DOMAIN)
    up = g.operator(("move_up", "h1", "h1"))
    assert not up.admitted and not DOMAIN.action("move_up").admits(("h1", "h1"))
    s = g.index.encode({("at", "h1"), ("below", "h1", "h1")})
    assert not up.applicable(s)
    assert check(up, s, s)[0] is Verdict.NOT_APPLICABLE


def test_shared_ground_atoms_names_what_a_repetition_merges() -> None:
    shared = shared_ground_atoms(DOMAIN, ("move_down", "h1", "h1"))
    assert shared[("at", "h1")] == (AT_FROM, AT_TO)
    assert shared[("visited", "h1")] == (LiftedAtom("visited", ("?hfrom",)),
                                         LiftedAtom("visited", ("?hto",)))
    assert shared_ground_atoms(DOMAIN, ("move_down", "h1", "h2")) == {}


def test_joint_semantics_reduce_to_table_2_for_one_atom() -> None:
    for before in (True, False):
        for after in (True, False):
            allowed = {v for v in LEGAL_PA_VALUES if joint_explains([v], (before, after))}
            assert allowed == pa_values_consistent_with((before, after))


def test_the_explanation_blames_only_what_no_partner_can_explain() -> None:
    """The agent ran move_down(h1, h1) and (at h1) vanished. With (at ?hto) added, PDDL
    keeps (at h1) whatever (at ?hfrom) does, so (at ?hto) must have changed; the current
    value of (at ?hfrom) (+ pre, delete) explains the observation with a partner that no
    longer adds, so it is not blamed."""
    why = explain(DOMAIN, ("move_down", "h1", "h1"), frozenset({("at", "h1")}),
                  frozenset({("visited", "h1")}))
    assert why.executed is True
    assert ("at", "h1") in why.entangled
    blamed = {c.pa.atom: c for c in why.contradicted}
    assert set(blamed) == {AT_TO}
    assert all(v[1] is not Mode.POS for v in blamed[AT_TO].possible)
    assert blamed[AT_TO].current == (Mode.ABSENT, Mode.POS)


def test_a_transition_the_model_explains_is_not_a_conflict() -> None:
    """Per-atom Table 2 would flag (at ?hfrom) (deleted, yet still true): jointly it is fine."""
    state = frozenset({("at", "h1")})
    nxt = frozenset({("at", "h1"), ("visited", "h1")})
    g = Grounder(DOMAIN)
    op = g.operator(("move_down", "h1", "h1"))
    assert check(op, g.index.encode(state), g.index.encode(nxt))[0] is Verdict.APPLIED
    why = explain(DOMAIN, ("move_down", "h1", "h1"), state, nxt)
    assert not why.contradicted
    assert PaTuple("move_down", AT_FROM) not in {c.pa for c in why.contradicted}


def test_a_shared_grounding_gives_every_agent_the_same_operators() -> None:
    from capwatch.model.errors import ModelError
    from capwatch.model.grounding import SharedGrounding

    shared = SharedGrounding(DOMAIN)
    actions = [("move_down", "h1", "h1"), ("move_up", "h1", "h1"), ("move_down", "h1", "h2")]
    for agent in range(2):
        own, with_shared = Grounder(DOMAIN), Grounder(DOMAIN, shared=shared)
        if agent:  # another agent's index numbers atoms in another order
            with_shared.index.bit(("visited", "h2"))
            own.index.bit(("visited", "h2"))
        for a in actions:
            assert with_shared.operator(a) == own.operator(a)
    assert Grounder(DOMAIN, shared=SharedGrounding(read_domain(HOIST / "domain.pddl"))
                    ).shared is None  # shared only by the very domain it was made for
    for bad in [("fly", "h1"), ("move_down", "h1")]:
        with pytest.raises(ModelError) as plain:
            Grounder(DOMAIN).operator(bad)
        with pytest.raises(ModelError) as via_shared:
            Grounder(DOMAIN, shared=shared).operator(bad)
        assert str(via_shared.value) == str(plain.value)


ALL_VALUES = [(pre, eff) for pre in (Mode.POS, Mode.NEG, Mode.ABSENT)
              for eff in (Mode.POS, Mode.NEG, Mode.ABSENT)]


def _enumerated(fixed: list[list[PaValue]], others: int, presence: Presence
                ) -> frozenset[PaValue]:
    """Every combination of the partners' values tried (what the closed form replaces)."""
    return frozenset(
        v for v in LEGAL_PA_VALUES
        if any(joint_explains([v, *combo, *values], presence)
               for combo in itertools.product(LEGAL_PA_VALUES, repeat=others)
               for values in fixed))


def test_entangled_values_agree_with_trying_every_combination_of_partners() -> None:
    """Exhaustively over presences, up to three free partners and up to two fixed atoms
    in one or two outcomes (fixed atoms take any modelled value, even ⟨+,+⟩)."""
    fixed_lists: list[list[PaValue]] = [[]] + [[a] for a in ALL_VALUES] + [
        [a, b] for a in ALL_VALUES for b in ALL_VALUES]
    checked = 0
    for presence in [(p, q) for p in (False, True) for q in (False, True)]:
        for others in range(4):
            for first in fixed_lists:
                for outcomes in ([first], [first, [(Mode.ABSENT, Mode.NEG)] * len(first)]):
                    assert entangled_values(outcomes, others, presence) == _enumerated(
                        outcomes, others, presence), (outcomes, others, presence)
                    checked += 1
    assert checked == 4 * 4 * len(fixed_lists) * 2
