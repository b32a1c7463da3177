"""The family models the daemon loads are the ones it can monitor with."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.daemon.config import load_config
from capwatch.daemon.service import load_families
from capwatch.model.consistency import Verdict, check
from capwatch.model.errors import ModelError
from capwatch.model.grounding import AtomIndex, Grounder
from tests.paths import IPC, STOCHASTIC


def test_pddlgym_action_literals_are_stripped_so_a_real_move_is_consistent(
        tmp_path: Path) -> None:
    # The agent reports its state without "(move-car l-2-1 l-1-2)"; the family file has
    # that literal in move-car's precondition, which made every move look inconsistent.
    tw = STOCHASTIC / "tireworld"
    cfg = load_config(text=f"families:\n  tw: {{domain: {tw / 'domain.pddl'}, "
                           f"problem: {tw / 'problem-1.pddl'}}}\n")
    domains, problems = load_families(cfg)
    move = domains["tw"].action("move-car")
    assert "move-car" not in {atom.predicate for atom in move.pre_pos}

    index = AtomIndex()
    op = Grounder(domains["tw"], index).operator(("move-car", "l-2-1", "l-1-2"))
    s = problems["tw"].init
    flat = (s - {("vehicle-at", "l-2-1")}) | {("vehicle-at", "l-1-2")}
    flat -= {("not-flattire",)}
    verdict, _ = check(op, index.encode(s), index.encode(flat))
    assert verdict is Verdict.APPLIED


def test_a_family_problem_of_another_domain_is_refused_at_load(tmp_path: Path) -> None:
    # A pasted path (barman's problem under the parking family) passed `run --check`; the
    # canaries then drew objects and start states from the wrong vocabulary and every
    # probe was refused by the agent as an unknown predicate.
    cfg = load_config(text=f"families:\n  parking: {{domain: {IPC / 'parking' / 'domain.pddl'}, "
                           f"problem: {IPC / 'barman' / 'problem.pddl'}}}\n")
    with pytest.raises(ModelError) as e:
        load_families(cfg)
    message = str(e.value)
    assert "barman/problem.pddl" in message and "parking" in message
    assert "unknown predicate" in message
    # Its own problem, and the stochastic ones (whose init may name pddlgym action
    # literals the loaded domain no longer has), still load.
    tw = STOCHASTIC / "tireworld"
    cfg = load_config(text=f"families:\n  parking: {{domain: {IPC / 'parking' / 'domain.pddl'}, "
                           f"problem: {IPC / 'parking' / 'problem.pddl'}}}\n"
                           f"  tw: {{domain: {tw / 'domain.pddl'}, "
                           f"problem: {tw / 'problem-1.pddl'}}}\n")
    assert set(load_families(cfg)[1]) == {"parking", "tw"}


@pytest.mark.parametrize(("edit", "reason"), [
    # Arguments swapped: passed `run --check` before session 18; the canaries then drew
    # start states in which the car stood at no curb.
    (("(at-curb-num car_01 curb_0)", "(at-curb-num curb_0 car_01)"),
     "curb_0 is a curb, 'at-curb-num' takes a car there"),
    (("(at-curb-num car_01 curb_0)", "(at-curb-num car_99 curb_0)"),
     "object 'car_99' is not declared"),
])
def test_an_init_atom_of_the_wrong_types_is_refused_at_load(
        tmp_path: Path, edit: tuple[str, str], reason: str) -> None:
    text = (IPC / "parking" / "problem.pddl").read_text()
    assert edit[0] in text
    problem = tmp_path / "problem.pddl"
    problem.write_text(text.replace(edit[0], edit[1]))
    cfg = load_config(text=f"families:\n  parking: {{domain: {IPC / 'parking' / 'domain.pddl'}, "
                           f"problem: {problem}}}\n")
    with pytest.raises(ModelError, match=reason):
        load_families(cfg)
