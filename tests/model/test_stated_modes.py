"""``stated_modes``: the non-∅ modes of Γ from the atoms the actions state, the same as
``AbstractModel.from_domain`` less its ∅ entries on every domain the tests hold (the drift
gauges compare models with it, where enumerating Γ cost ~3 ms a model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.model.diff import mode_changes, model_changes
from capwatch.model.errors import ModelError
from capwatch.model.pal import AbstractModel, Mode, stated_modes
from capwatch.model.pddl_reader import read_domain
from tests.paths import DATA, REPO_ROOT

DOMAINS = sorted([*(REPO_ROOT / "capwatch" / "examples").glob("*.pddl"),
                  *DATA.rglob("*domain*.pddl")])


def _read(path: Path):  # type: ignore[no-untyped-def]
    try:
        return read_domain(path)
    except (ModelError, ValueError):
        return None


def test_the_stated_modes_are_the_full_modes_less_the_absent_ones() -> None:
    checked = 0
    for path in DOMAINS:
        domain = _read(path)
        if domain is None:
            continue
        full = {p: m for p, m in AbstractModel.from_domain(domain).modes.items()
                if m is not Mode.ABSENT}
        assert stated_modes(domain) == full, path
        checked += 1
    assert checked >= 100  # the examples and most of tests/data's domains


@pytest.mark.parametrize(("old", "new"), [("rover.pddl", "rover-sample-drift.pddl"),
                                          ("courier.pddl", "courier-pick-wear.pddl"),
                                          ("courier.pddl", "courier-drop-jam.pddl")])
def test_changes_from_stated_modes_are_model_changes(old: str, new: str) -> None:
    a = read_domain(REPO_ROOT / "capwatch" / "examples" / old)
    b = read_domain(REPO_ROOT / "capwatch" / "examples" / new)
    assert mode_changes(stated_modes(a), stated_modes(b)) == model_changes(a, b)
