"""The per-pa-tuple version space: Table 2 narrowing, failure clauses, conflicts."""

from __future__ import annotations

from capwatch.assess.versionspace import (
    ALL_VALUES,
    PRE_ABSENT,
    TABLE2,
    VersionSpace,
    mask_of,
    modes_of,
    values_of,
)
from capwatch.model.domain import LiftedAtom
from capwatch.model.pal import Mode, PaTuple

P = PaTuple("pick", LiftedAtom("free", ("?g",)))
Q = PaTuple("pick", LiftedAtom("at", ("?b", "?r")))
R = PaTuple("pick", LiftedAtom("carry", ("?b", "?g")))


def _space() -> VersionSpace:
    return VersionSpace({P: ALL_VALUES, Q: ALL_VALUES, R: ALL_VALUES})


def test_table2_masks_match_the_paper() -> None:
    assert values_of(TABLE2[(True, False)]) == [(Mode.POS, Mode.NEG), (Mode.ABSENT, Mode.NEG)]
    assert set(values_of(TABLE2[(False, True)])) == {(Mode.NEG, Mode.POS),
                                                    (Mode.ABSENT, Mode.POS)}
    assert len(values_of(TABLE2[(True, True)])) == 3
    assert len(values_of(TABLE2[(False, False)])) == 3


def test_seeing_an_atom_both_ways_fixes_an_absent_precondition() -> None:
    vs = _space()
    vs.executed("pick", {P: (True, True)}, "t1")
    vs.executed("pick", {P: (False, False)}, "t2")
    assert values_of(vs.mask(P)) == [(Mode.ABSENT, Mode.ABSENT)]
    assert vs.evidence[P] == ["t1", "t2"]


def test_a_failure_with_one_possible_culprit_fixes_that_precondition() -> None:
    vs = _space()
    vs.executed("pick", {P: (True, False), Q: (True, False), R: (False, True)}, "ran")
    # Only `free` false: if the step fails, `free` must be a positive precondition.
    vs.failed("pick", {P: False, Q: True, R: False}, "refused")
    assert values_of(vs.mask(P)) == [(Mode.POS, Mode.NEG)]
    assert vs.mask(Q) & PRE_ABSENT


def test_a_clause_waits_until_all_but_one_literal_is_excluded() -> None:
    vs = _space()
    vs.executed("pick", {P: (True, False), Q: (True, False), R: (False, True)}, "ran")
    vs.failed("pick", {P: False, Q: False, R: False}, "refused")
    assert modes_of(vs.mask(P))[0] is Mode.UNKNOWN
    vs.executed("pick", {Q: (False, False)}, "ran without at")
    assert modes_of(vs.mask(P))[0] is Mode.POS
    assert not vs.open_clauses("pick")


def test_contradictory_evidence_is_reported_and_not_absorbed() -> None:
    vs = _space()
    vs.executed("pick", {P: (True, False)}, "a")
    before = vs.mask(P)
    vs.executed("pick", {P: (False, True)}, "b")
    assert vs.mask(P) == before
    assert [c.evidence for c in vs.conflicts] == ["b"]


def test_illegal_values_have_no_bit() -> None:
    assert mask_of([(Mode.POS, Mode.POS), (Mode.NEG, Mode.NEG)]) == 0
