"""rev12b's differential harness: drifts and agents of its own design (not fuzz_assess's or
tests/assess/outcome_drifts.py's), on /work/shared's domains, through the daemon's assessor
path (EngineAssessor, verify, budget 500, asking again 64); every model it would publish is
checked against the drifted truth pal-tuple by pal-tuple, outcome effects by effects, and
probabilities by their distance.

    python benchmarks/probe_assess_rev12b.py SEED0 SEED1 [drift,...] [agent,...] [domain,...]
    python benchmarks/probe_assess_rev12b.py --case DOMAIN DRIFT SEED AGENT
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from assess_runs import agent_transitions, assess_once, failed_closed, split_walks

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.daemon.assessor import AssessmentRequest
from capwatch.model.domain import Action, Domain, Outcome, Problem
from capwatch.model.pal import AbstractModel, lifted_instantiations, pal_tuples
from capwatch.model.pddl_reader import read_domain, read_problem

SHARED = Path("/work/shared")
DRIFTS = ("merge", "rare_new", "dominant_new", "noop", "flip", "flip_one", "add_pre",
          "drop_pre", "pre_and_prob")
AGENTS = ("honest", "tiny_wrong", "refuser", "statewise")


def folders() -> list[Path]:
    out: list[Path] = []
    for sub in sorted(SHARED.glob("domains*")):
        out += sorted(p for p in sub.iterdir() if p.is_dir())
    return out


def problem_of(folder: Path) -> Path:
    for name in ("problem.pddl", "problem-1.pddl", "p01.pddl"):
        if (folder / name).exists():
            return folder / name
    return sorted(folder.glob("*.pddl"))[-1]


def h(*parts: object) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:12], 16)


# ------------------------------------------------------------------ drifts (own)

def stochastic(a: Action, rng: random.Random) -> Action:
    """A deterministic action made probabilistic my way: with p in [0.25, 0.4] only its
    deletes happen (or, if it deletes nothing, only its first add)."""
    if len(a.outcomes) > 1:
        return a
    (o,) = a.outcomes
    p = rng.choice((0.25, 0.3, 0.4))
    if o.delete:
        slip = Outcome(frozenset(), o.delete, p)
    elif len(o.add) > 1:
        slip = Outcome(frozenset(sorted(o.add)[:1]), frozenset(), p)
    else:
        slip = Outcome(probability=p)
    return a.replace(outcomes=(Outcome(o.add, o.delete, 1 - p), slip))


def renorm(outs: list[Outcome]) -> tuple[Outcome, ...]:
    t = sum(o.probability for o in outs)
    return tuple(Outcome(o.add, o.delete, o.probability / t) for o in outs)


def fresh_atom(d: Domain, a: Action, rng: random.Random, avoid: set) -> object | None:
    cands = [x for x in lifted_instantiations(d, a) if x not in avoid]
    return rng.choice(cands) if cands else None


def drift(known: Domain, name: str, kind: str, rng: random.Random) -> tuple[Domain, Domain] | None:
    a = known.action(name)
    if kind in ("merge", "rare_new", "dominant_new", "flip_one", "pre_and_prob"):
        a = stochastic(a, rng)
        known = known.replace_action(a)
    outs = list(a.outcomes)
    effects = {(o.add, o.delete) for o in outs}
    all_eff = set().union(*(o.add | o.delete for o in outs))
    if kind == "merge":
        if len(outs) < 2:
            return None
        i, j = rng.sample(range(len(outs)), 2)
        m = Outcome(outs[i].add | outs[j].add, outs[i].delete | outs[j].delete,
                    outs[i].probability + outs[j].probability)
        if m.add & m.delete:
            return None
        new = [o for k, o in enumerate(outs) if k not in (i, j)] + [m]
        if len({(o.add, o.delete) for o in new}) < len(new):
            return None
        b = a.replace(outcomes=renorm(new))
    elif kind in ("rare_new", "dominant_new"):
        x = fresh_atom(known, a, rng, all_eff | a.pre_pos | a.pre_neg)
        if x is None:
            return None
        base = rng.choice(outs)
        v = Outcome(base.add | {x}, base.delete, 0.0)
        if (v.add, v.delete) in effects:
            return None
        q = 0.02 if kind == "rare_new" else 0.95
        new = [Outcome(o.add, o.delete, o.probability * (1 - q)) for o in outs]
        new.append(Outcome(v.add, v.delete, q))
        b = a.replace(outcomes=renorm(new))
    elif kind == "noop":
        b = a.replace(outcomes=(Outcome(probability=1.0),))
        if all(o.is_noop for o in outs):
            return None
    elif kind in ("flip", "flip_one"):
        if not all_eff:
            return None
        x = rng.choice(sorted(all_eff, key=str))
        idx = range(len(outs)) if kind == "flip" else [rng.choice(
            [k for k, o in enumerate(outs) if x in o.add or x in o.delete])]
        new = list(outs)
        for k in idx:
            o = outs[k]
            if x in o.add:
                new[k] = Outcome(o.add - {x}, o.delete | {x}, o.probability)
            elif x in o.delete:
                new[k] = Outcome(o.add | {x}, o.delete - {x}, o.probability)
        if len({(o.add, o.delete) for o in new}) < len(new):
            return None
        b = a.replace(outcomes=tuple(new))
    elif kind in ("add_pre", "pre_and_prob"):
        x = fresh_atom(known, a, rng, a.pre_pos | a.pre_neg | all_eff)
        if x is None:
            return None
        b = a.replace(pre_pos=a.pre_pos | {x})
        if kind == "pre_and_prob":  # and one outcome's probability near 1
            k = rng.randrange(len(outs))
            b = b.replace(outcomes=renorm([Outcome(o.add, o.delete, 0.97 if i == k else 0.03)
                                           for i, o in enumerate(outs)]))
    elif kind == "drop_pre":
        if not a.pre_pos:
            return None
        x = rng.choice(sorted(a.pre_pos, key=str))
        b = a.replace(pre_pos=a.pre_pos - {x})
    else:
        raise ValueError(kind)
    return known, known.replace_action(b)


@dataclass
class Case:
    domain: str
    drift: str
    action: str
    known: Domain
    truth: Domain
    problem: Problem


def make_case(folder: Path, kind: str, seed: int) -> Case | None:
    rng = random.Random(f"rev12b/{folder.name}/{kind}/{seed}")
    base = read_domain(folder / "domain.pddl").without_action_literals()
    problem = read_problem(problem_of(folder))
    walker = SimulatedAgent(base, seed=seed, problem=problem)
    ran: Counter[str] = Counter()
    for _ in range(4):
        ran.update(x[0] for x in walker.random_walk(15).actions)
    names = sorted(n for n in ran if ran[n] >= 2)
    rng.shuffle(names)
    for n in names[:4]:
        got = drift(base, n, kind, rng)
        if got is not None:
            return Case(folder.name, kind, n, got[0], got[1], problem)
    return None


# ------------------------------------------------------------------ agents (own)

class Counting:
    def __init__(self, inner: object, cap: int = 3000) -> None:
        self.inner, self.queries, self.steps, self.cap = inner, 0, 0, cap

    def query(self, state, plan, samples=1):
        self.queries += 1
        if self.queries > self.cap:
            raise RuntimeError(f"unbounded: over {self.cap} queries")
        out = self.inner.query(state, plan, samples)
        self.steps += sum(r.executed for r in out)
        return out


class TinyWrong:
    """Truth, but each answer with probability eps gains one atom (over the plan's objects)
    that was not there: a rare wrong step."""

    def __init__(self, truth: SimulatedAgent, eps: float, seed: int) -> None:
        self.t, self.eps, self.rng = truth, eps, random.Random(seed)

    def query(self, state, plan, samples=1):
        out = []
        for r in self.t.query(state, plan, samples):
            if r.executed and self.rng.random() < self.eps:
                objs = {o for a in plan for o in a[1:]}
                cands = sorted({(p, *args) for (p, *args) in state} - set(r.state))
                cands = [c for c in cands if set(c[1:]) & objs] or cands
                if cands:
                    r = QueryResult(r.executed, r.state | {self.rng.choice(cands)})
            out.append(r)
        return out


class Refuser:
    """Truth, but refuses (0 steps, state unchanged) the queries whose (state, plan) hash
    falls in 15%: the same query is refused every time it is asked."""

    def __init__(self, truth: SimulatedAgent) -> None:
        self.t = truth

    def query(self, state, plan, samples=1):
        if h(sorted(state), list(plan)) % 100 < 15:
            return [QueryResult(0, frozenset(state)) for _ in range(samples)]
        return self.t.query(state, plan, samples)


class Statewise:
    """The old model in a third of the states (by the state's hash), the new elsewhere."""

    def __init__(self, known: SimulatedAgent, truth: SimulatedAgent) -> None:
        self.k, self.t = known, truth

    def query(self, state, plan, samples=1):
        return (self.k if h(sorted(state)) % 3 == 0 else self.t).query(state, plan, samples)


# ------------------------------------------------------------------ check

def norm(d: Domain) -> Domain:
    return d.replace(actions=tuple(a.replace(outcomes=tuple(
        Outcome(o.add - a.pre_pos, o.delete - a.pre_neg, o.probability) for o in a.outcomes))
        for a in d.actions))


def eff(a: Action) -> set:
    return {(o.add, o.delete) for o in a.outcomes if o.probability > 0}


def fmt(a: Action) -> str:
    return "; ".join(f"{o.probability:.3f}:+{sorted(map(str, o.add))}-{sorted(map(str, o.delete))}"
                     for o in a.outcomes)


def compare(model: Domain, truth: Domain, unres: set[str]) -> tuple[list[str], list[str], float]:
    model, truth = norm(model), norm(truth)
    am, at = AbstractModel.from_domain(model), AbstractModel.from_domain(truth)
    bad, bad_unres = [], []
    for pal in pal_tuples(truth):
        if am.mode(pal) != at.mode(pal):
            (bad_unres if str(pal) in unres else bad).append(
                f"{pal}: published {am.mode(pal)} truth {at.mode(pal)}")
    perr = 0.0
    for a in truth.actions:
        m = model.action(a.name)
        if eff(a) != eff(m):
            bad.append(f"{a.name} outcomes: published {fmt(m)} | truth {fmt(a)}")
        elif len(a.outcomes) > 1:
            pm = {(o.add, o.delete): o.probability for o in m.outcomes}
            perr = max(perr, *(abs(o.probability - pm[(o.add, o.delete)]) for o in a.outcomes
                               if o.probability > 0))
    return bad, bad_unres, perr


def run(case: Case, seed: int, kind: str) -> dict:
    truth_agent = SimulatedAgent(case.truth, seed=seed, problem=case.problem)
    good, bad, _ = split_walks(truth_agent, case.known, 10, 15, 0.1)
    rec: dict = {"domain": case.domain, "drift": case.drift, "action": case.action,
                 "seed": seed, "agent": kind}
    if not bad:
        rec["status"] = "unseen"
        return rec
    known_agent = SimulatedAgent(case.known, seed=seed + 7, problem=case.problem)
    inner = {"honest": lambda: truth_agent,
             "tiny_wrong": lambda: TinyWrong(truth_agent, 0.003, seed),
             "refuser": lambda: Refuser(truth_agent),
             "statewise": lambda: Statewise(known_agent, truth_agent)}[kind]()
    agent = Counting(inner)

    req = AssessmentRequest("a", "f", case.known, agent,
                            inconsistent=agent_transitions(bad[:2]),
                            executed=agent_transitions(good[-40:]),
                            query_budget=500, confirm_queries=64)
    out = assess_once(req, rec, seconds=240)
    if out is None:
        return rec
    rec.update(queries=agent.queries, steps=agent.steps)
    if failed_closed(out, case.known, rec):
        return rec
    cov = out.details.get("coverage", {})
    unres = set(cov.get("unresolved_pal_tuples", ()))
    wrong, wrong_unres, perr = compare(out.model, case.truth, unres)
    rec["prob_err"] = round(perr, 3)
    rec["unchanged"] = out.model == case.known
    if wrong:
        rec.update(status="wrong", bad=wrong[:6])
    elif wrong_unres:
        rec.update(status="right_but_unresolved_differs", bad=wrong_unres[:6])
    else:
        rec["status"] = "right"
    return rec


def main() -> None:
    if sys.argv[1] == "--case":
        dom, kind, seed, ak = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        folder = next(f for f in folders() if f.name == dom)
        case = make_case(folder, kind, seed)
        assert case is not None
        print("drift", case.action, "\n  known:", fmt(case.known.action(case.action)),
              "pre", sorted(map(str, case.known.action(case.action).pre_pos)),
              "\n  truth:", fmt(case.truth.action(case.action)),
              "pre", sorted(map(str, case.truth.action(case.action).pre_pos)))
        print(json.dumps(run(case, seed, ak), indent=1, default=str))
        return
    seeds = range(int(sys.argv[1]), int(sys.argv[2]))
    kinds = sys.argv[3].split(",") if len(sys.argv) > 3 else list(DRIFTS)
    agents = sys.argv[4].split(",") if len(sys.argv) > 4 else list(AGENTS)
    only = sys.argv[5].split(",") if len(sys.argv) > 5 else None
    for folder in folders():
        if only and folder.name not in only:
            continue
        for seed in seeds:
            for kind in kinds:
                try:
                    case = make_case(folder, kind, seed)
                except Exception as exc:
                    print(json.dumps({"domain": folder.name, "drift": kind, "seed": seed,
                                      "status": "gen_error", "error": str(exc)}), flush=True)
                    continue
                if case is None:
                    continue
                for ak in agents:
                    print(json.dumps(run(case, seed, ak), default=str), flush=True)


if __name__ == "__main__":
    main()
