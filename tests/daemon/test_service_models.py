"""The family models the daemon loads are the ones it can monitor with."""

from __future__ import annotations

from pathlib import Path

from capwatch.daemon.config import load_config
from capwatch.daemon.service import load_families
from capwatch.model.consistency import Verdict, check
from capwatch.model.grounding import AtomIndex, Grounder
from tests.paths import STOCHASTIC


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
