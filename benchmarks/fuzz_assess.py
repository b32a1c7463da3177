"""rev11a's differential fuzzer: random drifts of real domains, the daemon's assessor path,
every published model checked against the drifted truth.  Own drifts, own checks."""
from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

from assess_runs import agent_transitions, assess_once, split_walks

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import QueryResult
from capwatch.daemon.assessor import AssessmentRequest
from capwatch.model.domain import Action, Domain, Outcome
from capwatch.model.pal import (
    LEGAL_PA_VALUES,
    AbstractModel,
    Location,
    PaTuple,
    lifted_instantiations,
    pal_tuples,
)
from capwatch.model.pddl_reader import read_domain, read_problem

REPO = Path(__file__).resolve().parent.parent
# Appended, not prepended: a capwatch on PYTHONPATH (another tree's, for an A/B) stays first.
sys.path.append(str(REPO))
from tests.assess.outcome_drifts import problem_file, slipping, walked  # noqa: E402

ROOT = REPO / "tests" / "data" / "domains"
SEED_ROOT = "/work/main/tests/data/domains"
SLIPS = (0.1, 0.15, 0.2, 0.3, 0.4)
"""The fuzzer's slip probabilities (the drift makers are tests/assess/outcome_drifts.py's)."""
"""The cases are seeded by this path, not the running tree's: seeded by the running tree's
path, every worktree drew other drifts and a documented case reproduced only in /work/main."""


def domain_dirs() -> list[Path]:
    out = []
    for sub in ("classic", "ipc", "stochastic"):
        out += sorted(p for p in (ROOT / sub).iterdir() if p.is_dir())
    for p in ("hoist", "shuttle"):
        out.append(ROOT / "own" / p)
    return out


# ---------------------------------------------------------------- drifts

def pa_of(action: Action, domain: Domain) -> list[PaTuple]:
    return [PaTuple(action.name, a) for a in lifted_instantiations(domain, action)]


def drift_pal(known: Domain, rng: random.Random, names: list[str], k: int) -> Domain:
    """k random pa-tuples of the named actions set to another legal value."""
    am = AbstractModel.from_domain(known)
    changes = {}
    for _ in range(k):
        name = rng.choice(names)
        pas = pa_of(known.action(name), known)
        if not pas:
            continue
        pa = rng.choice(pas)
        cur = am.pa_value(pa)
        val = rng.choice([v for v in LEGAL_PA_VALUES if v != cur])
        changes[pa.pal(Location.PRE)] = val[0]
        changes[pa.pal(Location.EFF)] = val[1]
    return am.with_modes(changes).to_domain()


def toggle(domain: Domain, action: Action, o: Outcome, rng: random.Random, n: int) -> Outcome:
    atoms = list(lifted_instantiations(domain, action))
    add, delete = set(o.add), set(o.delete)
    for _ in range(n):
        a = rng.choice(atoms)
        r = rng.random()
        if a in add or a in delete:
            add.discard(a)
            delete.discard(a)
            if r < 0.3:
                (delete if a in o.add else add).add(a)
        elif a in action.pre_pos:
            delete.add(a)
        elif a in action.pre_neg:
            add.add(a)
        else:
            (add if r < 0.5 else delete).add(a)
    return Outcome(frozenset(add), frozenset(delete), o.probability)


def drift_outcomes(known: Domain, action: Action, rng: random.Random, kinds: list[str]) -> Action:
    outs = list(action.outcomes)
    for kind in kinds:
        effects = {(o.add, o.delete) for o in outs}
        if kind == "vanish" and len(outs) > 1:
            outs.pop(rng.randrange(len(outs)))
            t = sum(o.probability for o in outs)
            outs = [Outcome(o.add, o.delete, o.probability / t) for o in outs]
        elif kind in ("change", "add"):
            i = rng.randrange(len(outs))
            for _ in range(50):
                v = toggle(known, action, outs[i], rng, rng.choice((1, 1, 2, 3)))
                if (v.add, v.delete) not in effects and not (v.add & v.delete):
                    break
            else:
                continue
            if kind == "change":
                outs[i] = v
            else:
                q = rng.choice((0.05, 0.1, 0.2, 0.3, 0.5))
                if rng.random() < 0.5:
                    outs = [Outcome(o.add, o.delete, o.probability * (1 - q)) for o in outs]
                else:  # taken from one outcome only
                    j = rng.randrange(len(outs))
                    q = min(q, outs[j].probability * 0.9)
                    outs = [Outcome(o.add, o.delete, o.probability - (q if k == j else 0))
                            for k, o in enumerate(outs)]
                outs.append(Outcome(v.add, v.delete, q))
        elif kind == "shift" and len(outs) > 1:
            w = [max(0.02, o.probability * rng.uniform(0.3, 2.0)) for o in outs]
            t = sum(w)
            outs = [Outcome(o.add, o.delete, x / t) for o, x in zip(outs, w, strict=True)]
    t = sum(o.probability for o in outs)
    outs = [Outcome(o.add, o.delete, o.probability / t) for o in outs]
    return action.replace(outcomes=tuple(outs))


@dataclass
class Case:
    domain: str
    kind: str
    known: Domain
    truth: Domain
    problem: object
    actions: list[str]


def make_case(folder: Path, seed: int, kind: str) -> Case | None:
    rng = random.Random(f"{SEED_ROOT}/{folder.relative_to(ROOT)}/{kind}/{seed}")
    base = read_domain(folder / "domain.pddl").without_action_literals()
    problem = read_problem(problem_file(folder))
    names = sorted(walked(base, problem, seed, 4))
    if not names:
        return None
    known = base
    if kind == "pal":
        picked = rng.sample(names, min(len(names), rng.choice((1, 1, 2, 3))))
        truth = drift_pal(known, rng, picked, rng.choice((1, 2, 3, 4)))
        return Case(folder.name, kind, known, truth, problem, picked)
    # probabilistic drifts: make some actions stochastic first (unless they are)
    picked = rng.sample(names, min(len(names), rng.choice((1, 1, 2))))
    for n in picked:
        a = known.action(n)
        if len(a.outcomes) == 1 and not a.outcomes[0].is_noop:
            known = known.replace_action(slipping(a, rng, SLIPS))
    truth = known
    for n in picked:
        a = truth.action(n)
        if len(a.outcomes) == 1:
            continue
        ks = {"prob": [rng.choice(("change", "vanish", "add", "shift"))],
              "prob2": rng.sample(["change", "vanish", "add", "shift"], 2),
              }.get(kind)
        if kind == "probpre":
            ks = [rng.choice(("change", "vanish", "add"))]
        truth = truth.replace_action(drift_outcomes(known, a, rng, ks or ["change"]))
    if kind == "probpre":  # also a precondition/effect pal drift on the same actions
        truth = drift_pal(truth, rng, picked, 1)
    if kind == "mixed":  # one prob drift + a pal drift elsewhere
        others = [n for n in names if n not in picked] or names
        truth = drift_pal(truth, rng, [rng.choice(others)], rng.choice((1, 2)))
    return Case(folder.name, kind, known, truth, problem, picked)


# ---------------------------------------------------------------- agents

class Counting:
    def __init__(self, inner, cap: int = 3000) -> None:
        self.inner, self.queries, self.samples, self.cap = inner, 0, 0, cap
        self.steps = 0
        """Steps the agent ran to answer (the assessment's and asking again's)."""

    def query(self, state, plan, samples=1):
        self.queries += 1
        self.samples += samples
        if self.queries > self.cap:
            raise RuntimeError(f"unbounded: over {self.cap} queries")
        out = self.inner.query(state, plan, samples)
        self.steps += sum(r.executed for r in out)
        return out


class Noisy:
    """Answers like the truth, but with probability eps flips one atom of the final state
    that the plan's objects mention (an inconsistent agent)."""

    def __init__(self, truth: SimulatedAgent, eps: float, seed: int) -> None:
        self.truth, self.eps, self.rng = truth, eps, random.Random(seed)

    def query(self, state, plan, samples=1):
        out = []
        for r in self.truth.query(state, plan, samples):
            if self.rng.random() < self.eps and r.state:
                objs = {o for a in plan for o in a[1:]}
                cands = sorted(a for a in r.state if set(a[1:]) & objs) or sorted(r.state)
                atom = self.rng.choice(cands)
                r = QueryResult(r.executed, r.state - {atom})
            out.append(r)
        return out


class Alternating:
    """Answers some queries as the known model, others as the truth (adversarial)."""

    def __init__(self, known: SimulatedAgent, truth: SimulatedAgent, seed: int) -> None:
        self.a, self.b, self.rng = known, truth, random.Random(seed)

    def query(self, state, plan, samples=1):
        return (self.a if self.rng.random() < 0.3 else self.b).query(state, plan, samples)


class Refusing:
    """Truth, but refuses (executes 0 steps) a random fraction of queries: like an agent
    whose first step 'failed' for reasons of its own."""

    def __init__(self, truth: SimulatedAgent, p: float, seed: int) -> None:
        self.t, self.p, self.rng = truth, p, random.Random(seed)

    def query(self, state, plan, samples=1):
        res = self.t.query(state, plan, samples)
        return [QueryResult(0, frozenset(state)) if self.rng.random() < self.p else r
                for r in res]


# ---------------------------------------------------------------- check

def effects(a: Action) -> set:
    return {(o.add, o.delete) for o in a.outcomes}


def norm_action(a: Action) -> Action:
    """Effects that restate the precondition change nothing (delete-then-add)."""
    return a.replace(outcomes=tuple(Outcome(o.add - a.pre_pos, o.delete - a.pre_neg, o.probability)
                                    for o in a.outcomes))


def norm(d: Domain) -> Domain:
    return d.replace(actions=tuple(norm_action(a) for a in d.actions))


def compare(model: Domain, truth: Domain, details: dict) -> list[str]:
    model, truth = norm(model), norm(truth)
    cov = details.get("coverage", {})
    unres = set(cov.get("unresolved_pal_tuples", ()))
    unres_actions = set(cov.get("unresolved_actions", ()))
    am, at = AbstractModel.from_domain(model), AbstractModel.from_domain(truth)
    bad = []
    for pal in pal_tuples(truth):
        if str(pal) in unres:
            continue
        if am.mode(pal) != at.mode(pal):
            bad.append(f"{pal}: published {am.mode(pal)} truth {at.mode(pal)}")
    for a in truth.actions:
        m = model.action(a.name)
        if (len(a.outcomes) > 1 or len(m.outcomes) > 1) and effects(a) != effects(m) \
                and a.name not in unres_actions:
            bad.append(f"{a.name} outcomes: published {fmt(m)} truth {fmt(a)}")
    return bad


def fmt(a: Action) -> str:
    return "; ".join(f"{o.probability:.2f}:+{sorted(map(str, o.add))}-{sorted(map(str, o.delete))}"
                     for o in a.outcomes)


def same(a: Domain, b: Domain) -> bool:
    a, b = norm(a), norm(b)
    return AbstractModel.from_domain(a).delta(AbstractModel.from_domain(b)) == 0 and all(
        effects(x) == effects(b.action(x.name)) for x in a.actions)


def run(case: Case, seed: int, agent_kind: str, budget: int = 500) -> dict:
    truth_agent = SimulatedAgent(case.truth, seed=seed, problem=case.problem)
    # the evidence: the truth's walks, split by the known model as the monitor would
    good, bad, _ = split_walks(truth_agent, case.known, 10, 15, 0.1)
    rec = {"domain": case.domain, "kind": case.kind, "seed": seed, "agent": agent_kind,
           "drift_same": same(case.known, case.truth)}
    if not bad:
        rec["status"] = "unseen"
        return rec
    if agent_kind == "honest":
        inner = truth_agent
    elif agent_kind == "noisy":
        inner = Noisy(truth_agent, 0.05, seed)
    elif agent_kind == "alternating":
        inner = Alternating(SimulatedAgent(case.known, seed=seed + 1, problem=case.problem),
                            truth_agent, seed)
    elif agent_kind == "refusing":
        inner = Refusing(truth_agent, 0.1, seed)
    else:
        raise ValueError(agent_kind)
    agent = Counting(inner)

    nb = random.Random(seed).choice((1, 1, 2, 3))
    req = AssessmentRequest("a", "f", case.known, agent,
                            inconsistent=agent_transitions(bad[:nb]),
                            executed=agent_transitions(good[-40:]),
                            query_budget=budget, confirm_queries=64)
    out = assess_once(req, rec, seconds=180)
    if out is None:
        return rec
    rec["queries"] = agent.queries
    rec["samples"] = agent.samples
    rec["steps"] = agent.steps
    rec["reported_queries"] = out.queries
    if out.unexplained:
        rec["status"] = "failed_closed"
        rec["why"] = out.unexplained[0].source
        rec["reason"] = out.unexplained[0].reason
        return rec
    if out.model == case.known:
        if out.budget_exhausted:
            rec["status"] = "failed_closed"
            rec["why"] = "budget"
            return rec
        rec["status"] = "right" if same(case.known, case.truth) else "wrong"
        rec["why"] = "published unchanged"
        if rec["status"] == "wrong":
            rec["bad"] = compare(out.model, case.truth, out.details)
        return rec
    bad_pals = compare(out.model, case.truth, out.details)
    rec["unresolved"] = out.details.get("coverage", {}).get("unresolved", 0)
    if bad_pals:
        rec["status"] = "wrong"
        rec["bad"] = bad_pals[:6]
        rec["notes"] = out.details.get("notes", [])[:6]
    else:
        rec["status"] = "right"
        # probabilities: informational
        diffs = []
        for a in case.truth.actions:
            m = out.model.action(a.name)
            if len(a.outcomes) > 1 and effects(a) == effects(m):
                pm = {(o.add, o.delete): o.probability for o in m.outcomes}
                diffs.append(max(abs(o.probability - pm[(o.add, o.delete)]) for o in a.outcomes))
        rec["prob_err"] = max(diffs) if diffs else 0.0
    return rec


def main() -> None:
    if sys.argv[1] == "--case":
        dom, kind, seed, agent = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        folder = next(f for f in domain_dirs() if f.name == dom)
        case = make_case(folder, seed, kind)
        assert case is not None
        for a in case.known.actions:
            if a != case.truth.action(a.name):
                print("drift", a.name, "\n  known:", fmt(a),
                      "\n  truth:", fmt(case.truth.action(a.name)))
        print(json.dumps(run(case, seed, agent), indent=1, default=str))
        return
    seeds = range(int(sys.argv[1]), int(sys.argv[2]))
    kinds = sys.argv[3].split(",")
    agents = sys.argv[4].split(",")
    only = sys.argv[5].split(",") if len(sys.argv) > 5 else None
    out_dir = Path(__file__).resolve().parent / "out"
    out_dir.mkdir(exist_ok=True)
    name = f"fuzz-{sys.argv[1]}-{sys.argv[2]}-{sys.argv[3]}-{sys.argv[4]}.jsonl"
    outp = open(out_dir / name, "a")  # noqa: SIM115 (held for the whole run, lines flushed)
    for folder in domain_dirs():
        if only and folder.name not in only:
            continue
        for kind in kinds:
            for seed in seeds:
                try:
                    case = make_case(folder, seed, kind)
                except Exception as exc:
                    print(json.dumps({"domain": folder.name, "kind": kind, "seed": seed,
                                      "status": "gen_error", "error": str(exc)}),
                          file=outp, flush=True)
                    continue
                if case is None:
                    continue
                for ak in agents:
                    rec = run(case, seed, ak)
                    print(json.dumps(rec, default=str), file=outp, flush=True)
                    if rec["status"] in ("wrong", "crash", "hang"):
                        print(json.dumps(rec, default=str)[:1500], flush=True)


if __name__ == "__main__":
    main()
