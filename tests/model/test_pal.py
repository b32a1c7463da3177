"""Pal-tuples, modes, Δ and Table 2 against the DAAISy paper."""

from __future__ import annotations

import re

import pytest

from capwatch.model import AbstractModel, Location, Mode, PalTuple, delta, pal_tuples
from capwatch.model.domain import LiftedAtom
from capwatch.model.pal import LEGAL_PA_VALUES, pa_values_consistent_with, summarise_changes
from capwatch.model.pddl_reader import read_domain
from tests.paths import DOMAINS, STOCHASTIC


@pytest.mark.parametrize(("name", "pals"), [("gripper", 20), ("miconic", 36),
                                            ("blocksworld", 52)])
def test_pal_count_matches_paper_table_3(name: str, pals: int) -> None:
    assert len(pal_tuples(read_domain(DOMAINS / name / "domain.pddl"))) == pals


def test_types_are_respected_and_parameters_not_repeated() -> None:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    pick = {p.atom for p in pal_tuples(domain) if p.action == "pick"}
    assert LiftedAtom("at", ("?obj", "?room")) in pick
    assert LiftedAtom("at", ("?room", "?obj")) not in pick  # a room is not a ball
    blocks = read_domain(DOMAINS / "blocksworld" / "domain.pddl")
    stack = {p.atom for p in pal_tuples(blocks) if p.action == "stack"}
    assert LiftedAtom("on", ("?y", "?x")) in stack
    assert LiftedAtom("on", ("?x", "?x")) not in stack


@pytest.mark.parametrize("name", ["gripper", "miconic", "blocksworld"])
def test_delta_of_initial_models_matches_their_file_names(name: str) -> None:
    truth = read_domain(DOMAINS / name / "domain.pddl")
    files = sorted((DOMAINS / name / "initial-models").glob("*.pddl"))
    assert files
    for path in files:
        m = re.match(r"domain_(\d+)_\d+\.pddl", path.name)
        assert m, path
        assert delta(read_domain(path), truth) == int(m.group(1)), path


def test_seven_legal_pa_values() -> None:
    assert len(LEGAL_PA_VALUES) == 7
    assert (Mode.POS, Mode.POS) not in LEGAL_PA_VALUES
    assert (Mode.NEG, Mode.NEG) not in LEGAL_PA_VALUES


def test_table_2_rows() -> None:
    # (pos, neg): the paper's own example allows exactly ⟨+,−⟩ and ⟨∅,−⟩.
    assert pa_values_consistent_with((True, False)) == {(Mode.POS, Mode.NEG),
                                                        (Mode.ABSENT, Mode.NEG)}
    assert pa_values_consistent_with((False, True)) == {(Mode.NEG, Mode.POS),
                                                        (Mode.ABSENT, Mode.POS)}
    assert pa_values_consistent_with((True, True)) == {
        (Mode.POS, Mode.ABSENT), (Mode.ABSENT, Mode.POS), (Mode.ABSENT, Mode.ABSENT)}
    assert pa_values_consistent_with((False, False)) == {
        (Mode.NEG, Mode.ABSENT), (Mode.ABSENT, Mode.NEG), (Mode.ABSENT, Mode.ABSENT)}
    # Every legal value is allowed by some presence pattern and no illegal one is.
    seen = set().union(*(pa_values_consistent_with((a, b)) for a in (True, False)
                         for b in (True, False)))
    assert seen == set(LEGAL_PA_VALUES)


def test_with_modes_round_trips_through_a_domain() -> None:
    truth = read_domain(DOMAINS / "gripper" / "domain.pddl")
    model = AbstractModel.from_domain(truth)
    pal = PalTuple("pick", LiftedAtom("free", ("?gripper",)), Location.PRE)
    assert model.mode(pal) is Mode.POS
    changed = model.with_modes({pal: Mode.ABSENT})
    domain = changed.to_domain()
    assert LiftedAtom("free", ("?gripper",)) not in domain.action("pick").pre_pos
    assert AbstractModel.from_domain(domain) == changed
    assert changed.delta(model) == 1
    assert changed.accuracy(model) == pytest.approx(1 - 1 / 20)


def test_abstract_models_have_no_single_domain() -> None:
    model = AbstractModel.from_domain(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    abstract = model.abstract(model.pals[:3])
    assert len(abstract.unknown()) == 3
    with pytest.raises(ValueError, match="unknown"):
        abstract.to_domain()


def test_summary_speaks_the_model_vocabulary() -> None:
    truth = read_domain(DOMAINS / "gripper" / "domain.pddl")
    model = AbstractModel.from_domain(truth)
    pal = PalTuple("pick", LiftedAtom("free", ("?gripper",)), Location.PRE)
    drifted = model.with_modes({pal: Mode.NEG})
    lines = summarise_changes(model.diff(drifted), truth)
    assert lines == ["pick(?obj ?room ?gripper) now requires (not (free ?gripper)) "
                     "instead of requires (free ?gripper)"]


def test_summary_lists_preconditions_before_effects() -> None:
    truth = read_domain(DOMAINS / "gripper" / "domain.pddl")
    model = AbstractModel.from_domain(truth)
    free = LiftedAtom("free", ("?gripper",))
    drifted = model.with_modes({PalTuple("pick", free, Location.PRE): Mode.ABSENT,
                                PalTuple("pick", free, Location.EFF): Mode.ABSENT})
    (line,) = summarise_changes(model.diff(drifted), truth)
    assert line == ("pick(?obj ?room ?gripper) no longer requires (free ?gripper); "
                    "no longer makes (free ?gripper) false")


@pytest.mark.parametrize(("pre", "eff"), LEGAL_PA_VALUES)
def test_every_legal_pa_value_round_trips_through_a_domain(pre: Mode, eff: Mode) -> None:
    model = AbstractModel.from_domain(read_domain(DOMAINS / "gripper" / "domain.pddl"))
    atom = LiftedAtom("at", ("?obj", "?room"))
    changed = model.with_modes({PalTuple("pick", atom, Location.PRE): pre,
                                PalTuple("pick", atom, Location.EFF): eff})
    pick = changed.to_domain().action("pick")
    assert (atom in pick.pre_pos, atom in pick.pre_neg) == (pre is Mode.POS, pre is Mode.NEG)
    for o in pick.outcomes:
        assert (atom in o.add, atom in o.delete) == (eff is Mode.POS, eff is Mode.NEG)
    assert AbstractModel.from_domain(changed.to_domain()) == changed


def test_an_effect_change_reaches_every_probabilistic_branch() -> None:
    blocks = read_domain(STOCHASTIC / "explodingblocks" / "domain.pddl")
    clear = LiftedAtom("clear", ("?x",))
    pal = PalTuple("put-down", clear, Location.EFF)
    model = AbstractModel.from_domain(blocks)
    assert model.mode(pal) is Mode.POS
    outcomes = model.with_modes({pal: Mode.NEG}).to_domain().action("put-down").outcomes
    # The branches still differ (the table may be destroyed), so both survive.
    assert sorted(o.probability for o in outcomes) == pytest.approx([0.1, 0.9])
    assert all(clear in o.delete and clear not in o.add for o in outcomes)
