"""canary_objects.repeated over real domains: the grounding a canary names one object
twice in must be one the model's operator applies to once its precondition is made true
(a repeat putting ``(p ?a)`` and ``(not (p ?b))`` on one atom, or breaking the model's
``(not (= ?a ?b))``, would only ask the agent a step the model says never applies), and
every pair the model lets name one object must be tied in some probe."""

from __future__ import annotations

import random
from itertools import permutations
from pathlib import Path

import pytest

from capwatch.assess.canary_objects import repeated, with_fresh
from capwatch.model.domain import Action, Domain
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.paths import DATA, IPC

WHERE = [IPC / "hiking", IPC / "mprime", IPC / "freecell", IPC / "parking",
         IPC / "sokoban", DATA / "classic" / "blocksworld"]


def _applies(grounder: Grounder, action: Action, args: tuple[str, ...]) -> bool:
    """Whether the model's operator applies in the state a probe starts from: the
    grounded precondition made true."""
    binding = dict(zip(action.parameter_names, args, strict=True))
    start = ({a.ground(binding) for a in action.pre_pos}
             - {a.ground(binding) for a in action.pre_neg})
    return grounder.operator((action.name, *args)).applicable(grounder.index.encode(start))


def _allowed(grounder: Grounder, domain: Domain, action: Action,
             pools: list[tuple[str, ...]], args: tuple[str, ...]) -> set[tuple[int, int]]:
    """Every pair of parameters one of which may take the other's object (of its type)
    where the model's operator then applies."""
    types = [p.type for p in action.parameters]
    out = set()
    for i, j in permutations(range(len(args)), 2):
        if args[i] not in pools[j] and not domain.types.is_subtype(types[i], types[j]):
            continue
        trial = (*args[:j], args[i], *args[j + 1:])
        if _applies(grounder, action, trial):
            out.add((min(i, j), max(i, j)))
    return out


@pytest.mark.parametrize("where", WHERE, ids=[w.name for w in WHERE])
def test_a_repeat_is_one_the_model_allows_and_every_allowed_pair_is_tied(where: Path
                                                                        ) -> None:
    domain = read_domain(where / "domain.pddl")
    objects = read_problem(where / "problem.pddl").objects_by_type(domain)
    grounder = Grounder(domain)
    rng = random.Random(21)
    for action in domain.actions:
        pools = with_fresh(action, objects, lambda: ())
        args = tuple(rng.choice(p) for p in pools)
        while not action.admits(args) or len(set(args)) < len(args):
            args = tuple(rng.choice(p) for p in pools)
        allowed = _allowed(grounder, domain, action, pools, args)
        tied: set[tuple[int, int]] = set()
        for _ in range(200):
            got = repeated(action, pools, args, rng, domain.types)
            if not allowed:
                assert got is None, action.name
                break
            assert got is not None and len(set(got)) < len(args), action.name
            assert _applies(grounder, action, got), (action.name, got)
            tied |= {(i, j) for i in range(len(got)) for j in range(i + 1, len(got))
                     if got[i] == got[j]}
        assert allowed <= tied, (action.name, allowed - tied)
