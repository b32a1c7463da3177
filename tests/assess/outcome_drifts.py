"""Drifts of a probabilistic action's outcomes, drawn at random on any domain, and the
daemon's path through one (walks, assessment, replay, asking again), for the tests of
undecided outcomes and the outcome sweep in benchmarks/bench_assess.py.

A deterministic domain is given a probabilistic action first: one its random walks run,
made to slip (an outcome that does nothing, or only part of the action's effects, with
probability 0.1-0.3). The drift then, on that action:

* ``change``: one outcome's effects change (one atom of the action added to or dropped
  from them): the old form of that outcome is gone, a new one shows;
* ``common``: every outcome's effects change alike (the part of the action that does not
  depend on chance): no outcome keeps its old form;
* ``add``: a new outcome (a variant of an existing one) appears beside the old ones, its
  probability taken from theirs in proportion;
* ``vanish``: one outcome disappears, its probability spread over the others.

Seeded by (domain, kind, seed) only: the same arguments give the same drift.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.engine import assess
from capwatch.assess.observations import Transition
from capwatch.assess.outcomes import OUTCOME_ERROR
from capwatch.assess.replay import confirm, replay
from capwatch.model.domain import Action, Domain, LiftedAtom, Outcome, Problem
from capwatch.model.pal import delta, lifted_instantiations
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.assess.walks import split_walks

KINDS = ("change", "common", "add", "vanish")
SLIPS = (0.1, 0.2, 0.3)


@dataclass(frozen=True, slots=True)
class OutcomeDrift:
    domain: str
    kind: str
    action: str
    known: Domain
    truth: Domain
    problem: Problem


def problem_file(folder: Path) -> Path:
    """The domain folder's problem (benchmarks/fuzz_assess.py uses it too)."""
    for name in ("problem.pddl", "problem-1.pddl", "p01.pddl"):
        if (folder / name).exists():
            return folder / name
    found = sorted(folder.glob("*prob*.pddl"))
    if found:
        return found[0]
    raise FileNotFoundError(f"no problem in {folder}")


def walked(domain: Domain, problem: Problem, seed: int, walks: int) -> Counter[str]:
    """How often each action ran in ``walks`` random walks of 15 steps (the actions a
    drift is drawn on: one the walks never run would stay unseen)."""
    walker = SimulatedAgent(domain, seed=seed, problem=problem)
    ran: Counter[str] = Counter()
    for _ in range(walks):
        ran.update(a[0] for a in walker.random_walk(15).actions)
    return ran


def _toggled(domain: Domain, action: Action, o: Outcome, rng: random.Random) -> Outcome:
    """The outcome with one atom of the action added to or dropped from its effects."""
    atom: LiftedAtom = rng.choice(list(lifted_instantiations(domain, action)))
    add, delete = set(o.add), set(o.delete)
    if atom in add:
        add.discard(atom)
    elif atom in delete:
        delete.discard(atom)
    elif atom in action.pre_pos:
        delete.add(atom)
    elif atom in action.pre_neg or rng.random() < 0.5:
        add.add(atom)
    else:
        delete.add(atom)
    return Outcome(frozenset(add), frozenset(delete), o.probability)


def slipping(action: Action, rng: random.Random, slips: Sequence[float] = SLIPS) -> Action:
    """A deterministic action that now slips: nothing, or part of its effects, happens
    (with a probability drawn from ``slips``; benchmarks/fuzz_assess.py draws its own)."""
    (o,) = action.outcomes
    p = rng.choice(slips)
    effects = [("add", a) for a in sorted(o.add)] + [("del", a) for a in sorted(o.delete)]
    slip = Outcome(probability=p)
    if len(effects) > 1 and rng.random() < 0.5:
        part = rng.sample(effects, rng.randrange(1, len(effects)))
        slip = Outcome(frozenset(a for k, a in part if k == "add"),
                       frozenset(a for k, a in part if k == "del"), p)
    return action.replace(outcomes=(Outcome(o.add, o.delete, 1.0 - p), slip))


def outcome_drift(folder: Path, kind: str, seed: int) -> OutcomeDrift | None:
    """A drift of ``kind`` on the domain in ``folder``, or None when the domain's walks
    run no action it could be drawn on."""
    rng = random.Random(f"{folder.name}/{kind}/{seed}")
    base = read_domain(folder / "domain.pddl").without_action_literals()
    problem = read_problem(problem_file(folder))
    ran = walked(base, problem, seed, 5)
    names = sorted(n for n in ran if any(not o.is_noop for o in base.action(n).outcomes))
    stochastic = [n for n in names if len(base.action(n).outcomes) > 1]
    if not names:
        return None
    name = rng.choice(stochastic or names)
    action = base.action(name)
    if len(action.outcomes) == 1:
        action = slipping(action, rng)
    known = base.replace_action(action)
    outcomes = list(action.outcomes)
    effects = {(o.add, o.delete) for o in outcomes}
    if kind == "vanish":
        outcomes.pop(rng.randrange(len(outcomes)))
        total = sum(o.probability for o in outcomes)
        new = [Outcome(o.add, o.delete, o.probability / total) for o in outcomes]
    else:
        i = rng.randrange(len(outcomes))
        for _ in range(50):
            variant = _toggled(known, action, outcomes[i], rng)
            if (variant.add, variant.delete) not in effects and not (variant.add & variant.delete):
                break
        else:
            return None
        if kind == "change":
            new = [variant if j == i else o for j, o in enumerate(outcomes)]
        elif kind == "common":
            shift = (variant.add - outcomes[i].add, variant.delete - outcomes[i].delete,
                     outcomes[i].add - variant.add, outcomes[i].delete - variant.delete)
            new = [Outcome((o.add | shift[0]) - shift[2] - shift[1],
                           (o.delete | shift[1]) - shift[3] - shift[0], o.probability)
                   for o in outcomes]
            if len({(o.add, o.delete) for o in new}) < len(new):
                return None
        elif kind == "add":
            q = rng.choice(SLIPS)
            new = [Outcome(o.add, o.delete, o.probability * (1.0 - q)) for o in outcomes]
            new.append(Outcome(variant.add, variant.delete, q))
        else:
            raise ValueError(f"unknown drift kind {kind!r}")
    truth = known.replace_action(action.replace(outcomes=tuple(new)))
    return OutcomeDrift(folder.name, kind, name, known, truth, problem)


def _effects(action: Action) -> set[tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]]]:
    return {(o.add, o.delete) for o in action.outcomes}


PROBABILITY_TOLERANCE = 0.1
"""How far a published outcome probability may be from the truth and still count as right
(the assessment's default ``probability_tolerance``)."""


def probability_error(model: Action, truth: Action) -> float:
    """The largest distance between an outcome's published and true probability, outcomes
    matched by their effects (those with equal effects summed)."""
    def shares(a: Action) -> dict[tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]], float]:
        out: dict[tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]], float] = {}
        for o in a.outcomes:
            out[(o.add, o.delete)] = out.get((o.add, o.delete), 0.0) + o.probability
        return out

    got, want = shares(model), shares(truth)
    return max(abs(got.get(k, 0.0) - want.get(k, 0.0)) for k in got.keys() | want.keys())


@dataclass(frozen=True, slots=True)
class Verdict:
    status: str
    """unseen (no step the known model contradicts: nothing to assess), right, wrong
    (published, but not the truth: a pal-tuple or an outcome's effects), wrong_p (the
    effects right, an outcome probability off by more than PROBABILITY_TOLERANCE),
    undecided (failed closed on the outcomes), unexplained
    (replay or asking again refused the model)."""
    queries: int
    steps: int
    """Steps the agent ran to answer the queries (asking again not counted)."""


def run_drift(drift: OutcomeDrift, seed: int, *, method: str = "verify", budget: int = 500,
              confirm_queries: int = 64, **options: object) -> Verdict:
    """The daemon's path: the recent steps the known model explains and the first one it
    does not, an assessment, replay, asking again; then the model against the truth."""
    agent = SimulatedAgent(drift.truth, seed=seed, problem=drift.problem)
    good, bad = split_walks(agent, drift.known, episodes=10, length=15, p_inapplicable=0.1)
    if not bad:
        return Verdict("unseen", 0, 0)
    evidence: list[Transition] = good[-40:] + bad[:1]
    result = assess(drift.known, evidence, agent, method=method, budget=budget,
                    **options)  # type: ignore[arg-type]
    steps = sum(q.executed for q in result.queries)
    model = result.domain()
    if result.undecided_outcomes:
        return Verdict("undecided", result.query_count, steps)
    if replay(model, evidence, result.queries):
        return Verdict("unexplained", result.query_count, steps)
    # As the daemon: answers asked again tested for one distribution unless the operator
    # declared the draws independent.
    unexplained, _ = confirm(model, agent, result.queries, confirm_queries,
                             mixed_error=None if options.get("independent_draws")
                             else OUTCOME_ERROR)
    if unexplained:
        return Verdict("unexplained", result.query_count, steps)
    right = delta(model, drift.truth) == 0 and _effects(model.action(drift.action)) == \
        _effects(drift.truth.action(drift.action))
    if right and probability_error(model.action(drift.action), drift.truth.action(
            drift.action)) > PROBABILITY_TOLERANCE:
        return Verdict("wrong_p", result.query_count, steps)
    return Verdict("right" if right else "wrong", result.query_count, steps)
