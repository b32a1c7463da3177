"""rev13b's differential harness: deterministic drifts and agents of its own (not
fuzz_assess.py's nor probe_assess_rev12b.py's), on tests/data/domains/ipc domains those
two never drift, through the daemon's assessor path (EngineAssessor, verify, asking again
64); every model the daemon would publish, or settle as "no change", is checked against
the drifted truth action by action: every atom's precondition and effect (atoms outside
the pal vocabulary too: a repeated parameter, a constant) and the equality constraints,
except the pal-tuples the version lists unresolved.

Drifts (one seed draws its actions and atoms):

* ``multi``: three actions drift at once, each its own way (a new precondition, an
  effect dropped, a new negative precondition).
* ``swap``: one action's add and delete effect swap places (two pal-tuples at once).
* ``negpre``: a positive precondition becomes negative.
* ``repeat``: a negative precondition or an add effect over one parameter twice (outside
  the vocabulary).
* ``distinct``: two parameters of one type must now differ (``(not (= ?a ?b))``);
  ``nodistinct``: such a constraint of the known model is gone (mprime, hiking).
* ``static``: a precondition on a predicate no action changes is dropped.
* ``constant``: a precondition (positive or negative) or an add effect on an atom naming
  a constant (outside the vocabulary; woodworking, openstacks).

Agents: ``honest``; ``switch`` (the known model's answers for the first queries, the
truth's after: the drift happens during the assessment); ``switch2`` (the truth's, then a
second drift's); ``extra`` (every answer carries an atom over an object the query never
named); ``truncated`` (answers keep their first 12 atoms when longer); ``renamed`` (two
objects of one type swapped in every answer); ``relevant`` (answers list only the atoms
naming an object of the plan); ``offbyone`` (a refused step counted as executed);
``lagging`` (each answer is the previous query's); ``flaky`` (AgentUnavailable on one query in
twenty: the daemon retries, nothing may be published). Budgets: ``--budget N`` (500);
``--method daaisy|auto|aia`` (verify; daaisy's carried-over actions are no claim).

    python benchmarks/probe_assess_rev13b.py SEED0 SEED1 [drift,...] [agent,...] [domain,...]
    python benchmarks/probe_assess_rev13b.py --case DOMAIN DRIFT SEED AGENT [--budget N]

Prints one JSON line per run and, at the end, counts per agent and drift. Statuses:
``right``, ``wrong`` (a published or "no change" model differs from the truth on something
it claims decided), ``stale`` (a switching agent's model before its switch, published),
``failed_closed`` (unexplained, budget spent without a change, or the agent unavailable),
``unseen`` (the walks never contradicted the known model), ``crash``, ``hang``.
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assess_runs import agent_transitions, assess_once, failed_closed, split_walks

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery, AgentUnavailable, QueryResult, State
from capwatch.assess.observations import Transition
from capwatch.assess.replay import replay
from capwatch.daemon.assessor import AssessmentRequest
from capwatch.model.domain import Action, Domain, GroundAction, LiftedAtom, Outcome, Problem
from capwatch.model.pal import Location, PaTuple, lifted_instantiations
from capwatch.model.pddl_reader import read_domain, read_problem

IPC = Path(__file__).resolve().parent.parent / "tests" / "data" / "domains" / "ipc"
DOMAINS = ("freecell", "sokoban", "woodworking", "mprime", "openstacks", "grid", "storage",
           "parking", "ferry", "hanoi", "transport", "visitall")
DRIFTS = ("multi", "swap", "negpre", "repeat", "distinct", "nodistinct", "static", "constant")
AGENTS = ("honest", "switch", "switch2", "extra", "truncated", "renamed", "relevant",
          "offbyone", "lagging", "flaky")


def h(*parts: object) -> int:
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:12], 16)


# ------------------------------------------------------------------ drifts (own)

def gamma(d: Domain, a: Action, avoid: frozenset[LiftedAtom]) -> list[LiftedAtom]:
    return sorted(x for x in lifted_instantiations(d, a) if x not in avoid)


def effects_of(a: Action) -> tuple[frozenset[LiftedAtom], frozenset[LiftedAtom]]:
    (o,) = a.outcomes
    return o.add, o.delete


def with_effects(a: Action, add: frozenset[LiftedAtom], delete: frozenset[LiftedAtom]
                 ) -> Action:
    return a.replace(outcomes=(Outcome(add, delete, 1.0),))


def new_pre(d: Domain, a: Action, rng: random.Random) -> Action | None:
    add, delete = effects_of(a)
    cands = gamma(d, a, a.pre_pos | a.pre_neg | add | delete)
    return a.replace(pre_pos=a.pre_pos | {rng.choice(cands)}) if cands else None


def drop_effect(d: Domain, a: Action, rng: random.Random) -> Action | None:
    add, delete = effects_of(a)
    effs = sorted(add | delete)
    if len(effs) < 2:
        return None
    x = rng.choice(effs)
    return with_effects(a, add - {x}, delete - {x})


def new_negpre(d: Domain, a: Action, rng: random.Random) -> Action | None:
    _, delete = effects_of(a)
    cands = gamma(d, a, a.pre_pos | a.pre_neg | delete)
    return a.replace(pre_neg=a.pre_neg | {rng.choice(cands)}) if cands else None


def swap(d: Domain, a: Action, rng: random.Random) -> Action | None:
    add, delete = effects_of(a)
    if not add or not delete:
        return None
    x, y = rng.choice(sorted(add)), rng.choice(sorted(delete))
    b = with_effects(a, (add - {x}) | {y}, (delete - {y}) | {x})
    # an add that restates a positive precondition is no effect: keep it a real change
    return b if (y not in a.pre_pos and x not in a.pre_neg) else None


def negpre(d: Domain, a: Action, rng: random.Random) -> Action | None:
    add, delete = effects_of(a)
    cands = sorted(x for x in a.pre_pos if x not in add and x.args and
                   len(set(x.args)) == len(x.args))
    if not cands:
        return None
    x = rng.choice(cands)
    return a.replace(pre_pos=a.pre_pos - {x}, pre_neg=a.pre_neg | {x},
                     outcomes=(Outcome(add, delete - {x}, 1.0),))


def repeat(d: Domain, a: Action, rng: random.Random) -> Action | None:
    types = d.types
    cands = []
    for p in d.predicates:
        if p.arity != 2:
            continue
        for q in a.parameters:
            if all(types.is_subtype(q.type, t.type) for t in p.parameters):
                cands.append(LiftedAtom(p.name, (q.name, q.name)))
    cands = [c for c in cands if c not in a.pre_pos | a.pre_neg]
    if not cands:
        return None
    x = rng.choice(sorted(cands))
    if rng.random() < 0.5:  # an effect: shows whenever the action runs
        add, delete = effects_of(a)
        return with_effects(a, add | {x}, delete)
    # negative: the action stays possible, refused only where the atom holds
    return a.replace(pre_neg=a.pre_neg | {x})


def distinct(d: Domain, a: Action, rng: random.Random) -> Action | None:
    ps = a.parameters
    pairs = [(p.name, q.name) for i, p in enumerate(ps) for q in ps[i + 1:]
             if p.type == q.type and (p.name, q.name) not in a.distinct
             and (q.name, p.name) not in a.distinct]
    if not pairs:
        return None
    return a.replace(distinct=a.distinct | {rng.choice(pairs)})


def nodistinct(d: Domain, a: Action, rng: random.Random) -> Action | None:
    """An inequality ``(not (= ?a ?b))`` the known model has is gone."""
    if not a.distinct:
        return None
    return a.replace(distinct=a.distinct - {rng.choice(sorted(a.distinct))})


def static(d: Domain, a: Action, rng: random.Random) -> Action | None:
    changed = {x.predicate for b in d.actions for o in b.outcomes for x in o.add | o.delete}
    cands = sorted(x for x in a.pre_pos if x.predicate not in changed)
    return a.replace(pre_pos=a.pre_pos - {rng.choice(cands)}) if cands else None


def constant(d: Domain, a: Action, rng: random.Random) -> Action | None:
    """A precondition or an effect on an atom naming a constant of the domain."""
    types = d.types
    cands = []
    for p in d.predicates:
        for k, slot in enumerate(p.parameters):
            for c in d.constants:
                if not types.is_subtype(c.type, slot.type):
                    continue
                args: list[str] = []
                for i, q in enumerate(p.parameters):
                    if i == k:
                        args.append(c.name)
                        continue
                    fit = [x.name for x in a.parameters
                           if types.is_subtype(x.type, q.type) and x.name not in args]
                    if not fit:
                        break
                    args.append(fit[0])
                else:
                    cands.append(LiftedAtom(p.name, tuple(args)))
    add, delete = effects_of(a)
    cands = sorted(set(cands) - a.pre_pos - a.pre_neg - add - delete)
    if not cands:
        return None
    x = rng.choice(cands)
    how = rng.randrange(3)
    if how == 0:
        return a.replace(pre_pos=a.pre_pos | {x})
    if how == 1:
        return a.replace(pre_neg=a.pre_neg | {x})
    return with_effects(a, add | {x}, delete)


ONE: dict[str, Callable[[Domain, Action, random.Random], Action | None]] = {
    "swap": swap, "negpre": negpre, "repeat": repeat, "distinct": distinct,
    "nodistinct": nodistinct, "static": static, "constant": constant}
MULTI = (new_pre, drop_effect, new_negpre)


def drift(known: Domain, names: Sequence[str], kind: str, rng: random.Random
          ) -> tuple[Domain, list[str]] | None:
    truth, touched = known, list[str]()
    if kind == "multi":
        if len(names) < 3:
            return None
        for name, how in zip(names, MULTI, strict=False):
            b = how(truth, truth.action(name), rng)
            if b is None:
                return None
            truth, touched = truth.replace_action(b), [*touched, name]
        return truth, touched
    for name in names:
        b = ONE[kind](truth, truth.action(name), rng)
        if b is not None:
            return truth.replace_action(b), [name]
    return None


@dataclass
class Case:
    domain: str
    drift: str
    actions: list[str]
    known: Domain
    truth: Domain
    second: Domain
    """A further drift of the truth (the ``switch2`` agent's after its switch)."""
    problem: Problem


def make_case(name: str, kind: str, seed: int) -> Case | None:
    rng = random.Random(f"rev13b/{name}/{kind}/{seed}")
    folder = IPC / name
    known = read_domain(folder / "domain.pddl").without_action_literals()
    if any(len(a.outcomes) > 1 for a in known.actions):
        return None
    problem = read_problem(folder / "problem.pddl")
    walker = SimulatedAgent(known, seed=seed, problem=problem)
    ran: Counter[str] = Counter()
    for _ in range(4):
        ran.update(x[0] for x in walker.random_walk(20).actions)
    names = sorted(n for n in ran if ran[n] >= 2)
    rng.shuffle(names)
    got = drift(known, names, kind, rng)
    if got is None:
        return None
    truth, touched = got
    others = [n for n in names if n not in touched] or names
    second = drift(truth, others, "multi" if len(others) >= 3 else "swap", rng)
    return Case(name, kind, touched, known, truth, second[0] if second else truth, problem)


# ------------------------------------------------------------------ agents (own)

class Counting:
    def __init__(self, inner: AgentQuery, cap: int = 4000) -> None:
        self.inner, self.queries, self.steps, self.cap = inner, 0, 0, cap

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        self.queries += 1
        if self.queries > self.cap:
            raise RuntimeError(f"unbounded: over {self.cap} queries")
        out = self.inner.query(state, plan, samples)
        self.steps += sum(r.executed for r in out)
        return out


class Switch:
    """``before``'s answers for the first ``after`` queries, ``later``'s from then on."""

    def __init__(self, before: AgentQuery, later: AgentQuery, after: int) -> None:
        self.before, self.later, self.after, self.n = before, later, after, 0

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        self.n += 1
        return (self.before if self.n <= self.after else self.later).query(state, plan, samples)


class Extra:
    """The truth's answers, each with one more atom over an object no query names (the
    agent's own world leaking into its report)."""

    def __init__(self, inner: AgentQuery, atom: tuple[str, ...]) -> None:
        self.inner, self.atom = inner, atom

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        return [QueryResult(r.executed, r.state | {self.atom})
                for r in self.inner.query(state, plan, samples)]


class Truncated:
    """The truth's answers cut to their first ``keep`` atoms (sorted) when longer."""

    def __init__(self, inner: AgentQuery, keep: int = 12) -> None:
        self.inner, self.keep = inner, keep

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        return [QueryResult(r.executed, frozenset(sorted(r.state)[:self.keep]))
                for r in self.inner.query(state, plan, samples)]


class Renamed:
    """The truth's answers with the query's first two objects (sorted) that share a
    predicate position swapped in the final state (a name-mapping bug)."""

    def __init__(self, inner: AgentQuery) -> None:
        self.inner = inner

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        slots: dict[tuple[str, int], set[str]] = {}
        for atom in state:
            for i, o in enumerate(atom[1:]):
                slots.setdefault((atom[0], i), set()).add(o)
        pair = next((sorted(v)[:2] for _, v in sorted(slots.items()) if len(v) >= 2), None)
        out = self.inner.query(state, plan, samples)
        if pair is None:
            return out
        a, b = pair
        sw = {a: b, b: a}
        return [QueryResult(r.executed, frozenset((x[0], *(sw.get(o, o) for o in x[1:]))
                                                  for x in r.state)) for r in out]


class Relevant:
    """The truth's answers with only the atoms that name an object of the plan (0-ary
    atoms and the rest of the world left out: an agent reporting what it touched)."""

    def __init__(self, inner: AgentQuery) -> None:
        self.inner = inner

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        objs = {o for a in plan for o in a[1:]}
        return [QueryResult(r.executed, frozenset(x for x in r.state if set(x[1:]) & objs))
                for r in self.inner.query(state, plan, samples)]


class OffByOne:
    """The truth's answers, but a refused step counts as executed (state right)."""

    def __init__(self, inner: AgentQuery) -> None:
        self.inner = inner

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        return [QueryResult(min(len(plan), r.executed + (r.executed < len(plan))), r.state)
                for r in self.inner.query(state, plan, samples)]


class Lagging:
    """Answers each query with the truth's answer to the one before (a queue bug); the
    first query is answered right."""

    def __init__(self, inner: AgentQuery) -> None:
        self.inner = inner
        self.last: list[QueryResult] | None = None

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        now = self.inner.query(state, plan, samples)
        out, self.last = (self.last or now), now
        return out[:samples] if len(out) >= samples else now


class Flaky:
    """The truth, but one query in twenty (by its content) times out."""

    def __init__(self, inner: AgentQuery) -> None:
        self.inner = inner

    def query(self, state: State, plan: Sequence[GroundAction], samples: int = 1
              ) -> list[QueryResult]:
        if h(sorted(state), list(plan)) % 20 == 0:
            raise AgentUnavailable("timed out")
        return self.inner.query(state, plan, samples)


# ------------------------------------------------------------------ check

Row = tuple[str, str, str]
"""(atom, precondition mode, effect mode) of one action."""


def rows(a: Action) -> dict[LiftedAtom, tuple[str, str]]:
    (o,) = a.outcomes if len(a.outcomes) == 1 else (Outcome(),)
    out: dict[LiftedAtom, tuple[str, str]] = {}
    for x in a.pre_pos | a.pre_neg | o.add | o.delete:
        pre = "+" if x in a.pre_pos else "-" if x in a.pre_neg else "0"
        eff = "+" if x in o.add and x not in a.pre_pos else \
            "-" if x in o.delete and x not in a.pre_neg else "0"
        if (pre, eff) != ("0", "0"):
            out[x] = (pre, eff)
    return out


def compare(model: Domain, truth: Domain, unresolved: set[str]) -> list[str]:
    bad = []
    for t in truth.actions:
        m = model.action(t.name)
        if len(m.outcomes) > 1:
            bad.append(f"{t.name}: published probabilistic")
            continue
        rm, rt = rows(m), rows(t)
        for x in sorted(set(rm) | set(rt)):
            pm, pt = rm.get(x, ("0", "0")), rt.get(x, ("0", "0"))
            if pm == pt:
                continue
            pa = PaTuple(t.name, x)
            pre_wrong = pm[0] != pt[0] and str(pa.pal(Location.PRE)) not in unresolved
            eff_wrong = pm[1] != pt[1] and str(pa.pal(Location.EFF)) not in unresolved
            if pre_wrong or eff_wrong:
                bad.append(f"{t.name} {x}: published {pm} truth {pt}")
        if m.equal != t.equal or m.distinct != t.distinct:
            bad.append(f"{t.name}: constraints published {sorted(m.distinct)} "
                       f"truth {sorted(t.distinct)}")
    return bad


def observe(case: Case, agent: SimulatedAgent, seed: int
            ) -> tuple[list[Transition], list[Transition]]:
    """The truth's random walks, split by the known model as the monitor would; when
    they never contradict it, the agent's tries of the drifted actions in the walks'
    states (any objects, one named twice too: an agent in the field does try those)."""
    good, bad, states = split_walks(agent, case.known, 12, 20, 0.15)
    if bad:
        return good, bad
    rng = random.Random(seed)
    objects = case.problem.objects_by_type(case.truth)
    for _ in range(400):
        act = case.truth.action(rng.choice(case.actions))
        args = [rng.choice(objects.get(p.type, ("none",))) for p in act.parameters]
        if len(args) > 1 and rng.random() < 0.5:  # one object twice
            i, j = rng.sample(range(len(args)), 2)
            if act.parameters[i].type == act.parameters[j].type:
                args[j] = args[i]
        state = rng.choice(states)
        (r,) = agent.query(state, [(act.name, *args)])
        t = Transition(state, (act.name, *args), r.state, executed=r.executed == 1)
        if replay(case.known, [t]):
            bad.append(t)
            if len(bad) >= 2:
                break
    return good, bad


def agent_for(case: Case, seed: int, kind: str) -> tuple[AgentQuery, Domain | None]:
    """The agent, and the model its answers end with when that is not the truth."""
    truth = SimulatedAgent(case.truth, seed=seed, problem=case.problem)
    when = (2, 5, 10, 20, 40)[seed % 5]
    if kind == "honest":
        return truth, None
    if kind == "switch":
        return Switch(SimulatedAgent(case.known, seed=seed, problem=case.problem), truth,
                      when), None
    if kind == "switch2":
        return Switch(truth, SimulatedAgent(case.second, seed=seed, problem=case.problem),
                      when), case.second
    if kind == "extra":
        pred = sorted(case.known.predicates, key=lambda p: (p.arity == 0, p.name))[0]
        return Extra(truth, (pred.name, *(f"zz{i}" for i in range(pred.arity)))), None
    if kind == "truncated":
        return Truncated(truth), None
    if kind == "renamed":
        return Renamed(truth), None
    if kind == "relevant":
        return Relevant(truth), None
    if kind == "offbyone":
        return OffByOne(truth), None
    if kind == "lagging":
        return Lagging(truth), None
    if kind == "flaky":
        return Flaky(truth), None
    raise ValueError(kind)


def run(case: Case, seed: int, kind: str, budget: int = 500, method: str = "verify"
        ) -> dict[str, Any]:
    good, bad = observe(case, SimulatedAgent(case.truth, seed=seed, problem=case.problem), seed)
    rec: dict[str, Any] = {"domain": case.domain, "drift": case.drift, "actions": case.actions,
                           "seed": seed, "agent": kind, "budget": budget, "method": method}
    if not bad:
        rec["status"] = "unseen"
        return rec
    inner, final = agent_for(case, seed, kind)
    agent = Counting(inner)

    req = AssessmentRequest("a", "f", case.known, agent,
                            inconsistent=agent_transitions(bad[:2]),
                            executed=agent_transitions(good[-40:]),
                            query_budget=budget, confirm_queries=64)
    out = assess_once(req, rec, method=method, seconds=300)
    if out is None:
        return rec
    rec.update(queries=agent.queries, steps=agent.steps)
    if failed_closed(out, case.known, rec):
        return rec
    coverage = out.details.get("coverage", {})
    unres = set(coverage.get("unresolved_pal_tuples", ()))
    # daaisy's untouched actions keep the known modes unverified (carried over): no claim
    carried = set(coverage.get("carried_over_actions", ()))
    rec["unchanged"] = out.model == case.known
    rec["unresolved"] = len(unres)
    wrong = [w for w in compare(out.model, final or case.truth, unres)
             if w.split(" ")[0].rstrip(":") not in carried]
    if wrong and kind.startswith("switch") and not compare(
            out.model, case.truth if final else case.known, unres):
        rec.update(status="stale", bad=wrong[:6])
    elif wrong:
        rec.update(status="wrong", bad=wrong[:6])
    else:
        rec["status"] = "right"
    return rec


def describe(case: Case) -> None:
    for a in case.known.actions:
        for label, other in (("truth", case.truth), ("second", case.second)):
            b = other.action(a.name)
            if b != a:
                ra, rb = rows(a), rows(b)
                diff = {str(x): (ra.get(x), rb.get(x)) for x in set(ra) | set(rb)
                        if ra.get(x) != rb.get(x)}
                print(f"{label} {a.name}: {diff}"
                      f"{'' if a.distinct == b.distinct else f' distinct {sorted(b.distinct)}'}")


def main() -> None:
    args = sys.argv[1:]
    budget, method = 500, "verify"
    if "--budget" in args:
        i = args.index("--budget")
        budget = int(args[i + 1])
        del args[i:i + 2]
    if "--method" in args:
        i = args.index("--method")
        method = args[i + 1]
        del args[i:i + 2]
    if args[0] == "--case":
        case = make_case(args[1], args[2], int(args[3]))
        assert case is not None, "no such case"
        describe(case)
        print(json.dumps(run(case, int(args[3]), args[4], budget, method), indent=1,
                         default=str))
        return
    seeds = range(int(args[0]), int(args[1]))
    kinds = args[2].split(",") if len(args) > 2 else list(DRIFTS)
    agents = args[3].split(",") if len(args) > 3 else list(AGENTS)
    only = args[4].split(",") if len(args) > 4 else list(DOMAINS)
    counts: Counter[tuple[str, str, str]] = Counter()
    for name in only:
        for seed in seeds:
            for kind in kinds:
                try:
                    case = make_case(name, kind, seed)
                except Exception as exc:
                    print(json.dumps({"domain": name, "drift": kind, "seed": seed,
                                      "status": "gen_error", "error": str(exc)}), flush=True)
                    continue
                if case is None:
                    continue
                for ak in agents:
                    rec = run(case, seed, ak, budget, method)
                    counts[(ak, kind, rec["status"])] += 1
                    print(json.dumps(rec, default=str), flush=True)
    for (ak, kind, status), n in sorted(counts.items()):
        print(f"# {ak} {kind} {status} {n}", flush=True)


if __name__ == "__main__":
    main()
