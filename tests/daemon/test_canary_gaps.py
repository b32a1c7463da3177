"""Session 20: the canaries' blind spots left by session 19 (docs/daemon.md, "Scheduled
re-assessment"), each made here from the domain by a general rule, not hand-picked:

- **no problem**: the family has no ``problem``; the prober has only what the agent
  reported (its last state) or nothing at all;
- **a type missing**: the family's problem lacks every object of one parameter type of
  the drifted action (the agent's own world has them);
- **shared atom**: the problem has one object per type, so the drawn grounding repeats
  objects and the dropped literal falls on another literal's atom.

Drifts: a precondition literal dropped (a widening: only a probe with it false shows it)
or an effect dropped (a lost capability), on an action the agent never runs; every other
action runs all the time. An honest agent must never be reported in any of these
settings. benchmarks/canary_gaps.py runs the same over every IPC domain and several seeds
for the table in docs/daemon.md; the tests keep a few domains and one seed."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.assess.agent import AgentQuery, QueryResult
from capwatch.assess.canary_objects import fresh_objects
from capwatch.contracts.agent_protocol import QueryRequest
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.assessor import AssessmentOutcome, AssessmentRequest, EngineAssessor
from capwatch.daemon.canary import CanaryProber
from capwatch.daemon.config import SchedulerConfig
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.work import CanaryFinding, Result
from capwatch.model.domain import (
    Action,
    Domain,
    GroundAction,
    GroundAtom,
    LiftedAtom,
    Outcome,
    Problem,
    type_members,
)
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.daemon.test_canary_widening import Watch
from tests.paths import DATA, IPC

DOMAINS = [IPC / "ferry", IPC / "parking", IPC / "transport", IPC / "hiking",
           DATA / "classic" / "gripper"]
DEFAULTS = SchedulerConfig()


class Inline(Executor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(fn(*args, **kwargs))
        return f


class Counting:
    """The agent directory: one simulated agent, its queries counted."""

    def __init__(self, agent: SimulatedAgent) -> None:
        self.sim = agent
        self.queries = 0

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        return cast(AgentQuery, self)

    def query(self, state: frozenset[GroundAtom], plan: Sequence[GroundAction],
              samples: int = 1) -> list[QueryResult]:
        self.queries += 1
        return self.sim.query(state, plan, samples)


@dataclass(frozen=True)
class Setting:
    """What the prober is given for the family, and what the agent reported."""

    kind: str
    init: frozenset[GroundAtom] | None
    """The family problem's initial state; None: the family has no problem."""
    objects: Mapping[str, tuple[str, ...]] | None
    reported: frozenset[GroundAtom]
    """The agent's last reported state (empty: it reported none)."""


def no_problem(problem: Problem, reported: bool) -> Setting:
    return Setting("no problem" + ("" if reported else ", no state"), None, None,
                   problem.init if reported else frozenset())


def lacking(domain: Domain, problem: Problem, type_name: str, reported: bool) -> Setting:
    """The problem without any object of ``type_name`` (or a subtype), and without the
    initial atoms naming one."""
    gone = {o.name for o in problem.objects if domain.types.is_subtype(o.type, type_name)}
    kept = Problem(problem.name, problem.domain_name,
                   tuple(o for o in problem.objects if o.name not in gone),
                   frozenset(a for a in problem.init if gone.isdisjoint(a[1:])))
    return Setting("a type missing" + ("" if reported else ", no state"), kept.init,
                   kept.objects_by_type(domain), problem.init if reported else frozenset())


def one_each(domain: Domain, problem: Problem) -> Setting:
    """One object per type: a grounding repeats an object wherever an action has two
    parameters of a type."""
    objects = {t: objs[:1] for t, objs in problem.objects_by_type(domain).items()}
    return Setting("shared atom", problem.init, objects, problem.init)


def _literals(action: Action) -> list[tuple[LiftedAtom, bool]]:
    return [(a, True) for a in sorted(action.pre_pos)] + [
        (a, False) for a in sorted(action.pre_neg)]


def dropped_literal(domain: Domain, action: Action, literal: tuple[LiftedAtom, bool]
                    ) -> Domain:
    atom, positive = literal
    return domain.replace_action(action.replace(pre_pos=action.pre_pos - {atom})
                                 if positive else
                                 action.replace(pre_neg=action.pre_neg - {atom}))


def widenings(domain: Domain) -> list[tuple[str, Domain]]:
    return [(a.name, dropped_literal(domain, a, lit)) for a in domain.actions
            for lit in _literals(a)]


def losses(domain: Domain) -> list[tuple[str, Domain]]:
    """A deterministic action without one of its effects (an add or a delete)."""
    out = []
    for a in domain.actions:
        if not a.is_deterministic:
            continue
        (o,) = a.outcomes
        for atom in sorted(o.add):
            out.append((a.name, domain.replace_action(a.replace(
                outcomes=(Outcome(o.add - {atom}, o.delete),)))))
        for atom in sorted(o.delete):
            out.append((a.name, domain.replace_action(a.replace(
                outcomes=(Outcome(o.add, o.delete - {atom}),)))))
    return out


def narrowings(domain: Domain) -> list[tuple[str, Domain]]:
    """A precondition gained on an atom the action's effect changes: the atom it deletes
    now required true, or the atom it adds required false."""
    out = []
    for a in domain.actions:
        pre = a.pre_pos | a.pre_neg
        for o in a.outcomes[:1]:
            for atom in sorted(o.delete - pre):
                out.append((a.name, domain.replace_action(a.replace(pre_pos=a.pre_pos | {atom}))))
            for atom in sorted(o.add - pre):
                out.append((a.name, domain.replace_action(a.replace(pre_neg=a.pre_neg | {atom}))))
    return out


def shared_atom_widenings(domain: Domain, setting: Setting) -> list[tuple[str, Domain]]:
    """Literals that every grounding from ``setting``'s pools puts on another literal's
    atom (the pools' first objects; the one-object setting has no other), dropped."""
    out = []
    pools = setting.objects or {}
    for a in domain.actions:
        if any(not pools.get(p.type) for p in a.parameters):
            continue
        binding = {p.name: pools[p.type][0] for p in a.parameters}
        if not a.admits([binding[n] for n in a.parameter_names]):
            continue
        for lit in _literals(a):
            g = lit[0].ground(binding)
            if any(b is not lit[0] and b.ground(binding) == g
                   for b in (*a.pre_pos, *a.pre_neg)):
                out.append((a.name, dropped_literal(domain, a, lit)))
    return out


def _may_name_one_object(domain: Domain, a: str, b: str) -> bool:
    """Whether some object can be of both types (one is a subtype of the other: the
    types form a tree; a union, of any of its members)."""
    return any(domain.types.is_subtype(x, y) or domain.types.is_subtype(y, x)
               for x in type_members(a) for y in type_members(b))


def _applicable_with(action: Action, binding: Mapping[str, str]) -> bool:
    """Whether some state satisfies the precondition grounded with ``binding`` and the
    constraints admit it: no positive and negative literal on one ground atom."""
    pos = {x.ground(binding) for x in action.pre_pos}
    return action.admits_binding(binding) and pos.isdisjoint(
        x.ground(binding) for x in action.pre_neg)


def _merged(action: Action, a: str, b: str) -> dict[str, str]:
    """Each parameter bound to its own name, ``b`` to ``a``'s (and the model's ``(= ..)``
    pairs already one)."""
    binding = {n: n for n in action.parameter_names}
    binding[b] = a
    for x, y in sorted(action.equal):
        if x in binding and y in binding:
            for n, v in list(binding.items()):
                if v == binding[y]:
                    binding[n] = binding[x]
    return binding


def inequalities_gained(domain: Domain) -> list[tuple[str, Domain]]:
    """An action that now needs two of its parameters to differ, ``(not (= ?a ?b))``,
    where the model lets them name one object and its precondition can hold then: the
    agent refuses only groundings that repeat an object there, and agrees with the
    model on every other."""
    out = []
    for a in domain.actions:
        params = a.parameters
        for i, p in enumerate(params):
            for q in params[i + 1:]:
                pair = tuple(sorted((p.name, q.name)))
                if (pair in a.distinct or pair in a.equal
                        or not _may_name_one_object(domain, p.type, q.type)
                        or not _applicable_with(a, _merged(a, p.name, q.name))):
                    continue
                out.append((a.name, domain.replace_action(
                    a.replace(distinct=a.distinct | {(p.name, q.name)}))))
    return out


def equalities_dropped(domain: Domain) -> list[tuple[str, Domain]]:
    """An action without one of the model's static constraints between two parameters:
    ``(not (= ?a ?b))`` dropped (the agent now runs groundings that repeat an object
    there, where its precondition can hold) or ``(= ?a ?b)`` dropped (it runs them on
    two objects)."""
    out = []
    for a in domain.actions:
        names = set(a.parameter_names)
        for x, y in sorted(a.distinct):
            if {x, y} <= names and _applicable_with(
                    a.replace(distinct=a.distinct - {(x, y)}), _merged(a, x, y)):
                out.append((a.name, domain.replace_action(
                    a.replace(distinct=a.distinct - {(x, y)}))))
        for x, y in sorted(a.equal):
            if {x, y} <= names:
                out.append((a.name, domain.replace_action(
                    a.replace(equal=a.equal - {(x, y)}))))
    return out


@dataclass
class Run:
    round: int | None
    """Canary round (``canary_s`` apart) of the first finding; None: none."""
    queries: int
    rounds: int
    finding: CanaryFinding | None


def run(domain: Domain, truth: Domain, action: str, setting: Setting, rounds: int,
        seed: int = 7) -> Run:
    """The drifted agent never runs ``action``; every other action runs every round."""
    agent = Counting(SimulatedAgent(truth, seed=1))
    found: list[Result] = []
    now = [0.0]
    prober = CanaryProber(agents=agent, metrics=DaemonMetrics(),
                          idle_s=DEFAULTS.canary_idle_s, busy_s=DEFAULTS.canary_busy_s,
                          clock=lambda: None, post=found.append,  # type: ignore[arg-type,return-value]
                          executor=Inline(), seed=seed)
    watch = Watch(domain, "f", now, last_state=setting.reported)
    problems = {} if setting.init is None else {"f": setting.init}
    objects = {} if setting.objects is None else {"f": setting.objects}
    for k in range(rounds):
        now[0] = k * DEFAULTS.canary_s
        watch.last_executed = {a.name: now[0] for a in domain.actions if a.name != action}
        prober.probe_idle([cast(AgentWatch, watch)], problems, objects)
        if found:
            finding = found[0]
            assert isinstance(finding, CanaryFinding)
            assert finding.transition.action[0] == action
            return Run(k, agent.queries, k + 1, finding)
    return Run(None, agent.queries, rounds, None)


def same_model(a: Domain, b: Domain) -> bool:
    """Every action with the same precondition (its ``(= ..)`` constraints included) and
    the same effects."""
    def key(x: Action) -> tuple[Any, ...]:
        return (x.pre_pos, x.pre_neg, x.equal, x.distinct,
                frozenset((o.add, o.delete) for o in x.outcomes))
    return {x.name: key(x) for x in a.actions} == {x.name: key(x) for x in b.actions}


def assessed(domain: Domain, truth: Domain, finding: CanaryFinding
             ) -> tuple[Domain, int]:
    """What the daemon's assessor makes of the finding (``verify``, the defaults), the
    drifted agent answering: the model and the queries it took."""
    out = assessment(domain, truth, finding)
    return out.model, out.queries


def assessment(domain: Domain, truth: Domain, finding: CanaryFinding) -> AssessmentOutcome:
    """:func:`assessed`'s whole outcome: whether it left evidence unexplained (such a model
    is not published) too."""
    return EngineAssessor(method="verify").assess(AssessmentRequest(
        "a-1", "f", domain, SimulatedAgent(truth, seed=3),
        inconsistent=[finding.transition]))


def settings(where: Path, domain: Domain, action: str, rng: random.Random
             ) -> list[Setting]:
    """The no-problem and type-missing settings for a drift of ``action`` (the missing
    type drawn among its parameters')."""
    problem = read_problem(where / "problem.pddl")
    types = sorted({p.type for p in domain.action(action).parameters})
    out = [no_problem(problem, True), no_problem(problem, False)]
    if types:
        t = rng.choice(types)
        out += [lacking(domain, problem, t, True), lacking(domain, problem, t, False)]
    return out


def _cases() -> list[tuple[Path, str, str, Domain]]:
    cases = []
    for where in DOMAINS:
        domain = read_domain(where / "domain.pddl")
        rng = random.Random(20)
        for kind, drifts in (("widening", widenings(domain)), ("loss", losses(domain))):
            rng.shuffle(drifts)
            for name, truth in drifts[:1]:
                cases.append((where, kind, name, truth))
    return cases


CASES = _cases()


@pytest.mark.parametrize(("where", "kind", "action", "truth"), CASES,
                         ids=[f"{w.name}-{k}-{a}" for w, k, a, _ in CASES])
def test_an_action_the_problem_cannot_ground_is_probed(
        where: Path, kind: str, action: str, truth: Domain) -> None:
    """Before session 20 none of these was ever probed: the family without a problem
    was skipped, and an action with a type the problem lacks was never grounded."""
    domain = read_domain(where / "domain.pddl")
    for setting in settings(where, domain, action, random.Random(20)):
        r = run(domain, truth, action, setting, 360)
        assert r.round is not None, f"{setting.kind}: {action} never reported"


@pytest.mark.parametrize("where", DOMAINS, ids=[w.name for w in DOMAINS])
def test_a_literal_on_a_shared_atom_is_made_false_alone(where: Path) -> None:
    """With one object per type, a literal on another literal's atom was made false
    together with it (or not at all), so dropping it alone never showed."""
    domain = read_domain(where / "domain.pddl")
    setting = one_each(domain, read_problem(where / "problem.pddl"))
    drifts = shared_atom_widenings(domain, setting)
    random.Random(20).shuffle(drifts)
    for action, truth in drifts[:2]:
        assert run(domain, truth, action, setting, 360).round is not None, action


@pytest.mark.parametrize("where", DOMAINS, ids=[w.name for w in DOMAINS])
def test_an_honest_agent_is_never_reported_without_problem_objects(where: Path) -> None:
    domain = read_domain(where / "domain.pddl")
    problem = read_problem(where / "problem.pddl")
    rng = random.Random(20)
    for action in domain.actions:
        for setting in [*settings(where, domain, action.name, rng),
                        one_each(domain, problem)]:
            r = run(domain, domain, action.name, setting, 30)
            assert r.round is None, (setting.kind, action.name, r.finding)
            assert r.queries > 0, (setting.kind, action.name)


def test_a_finding_on_fresh_objects_gives_the_drifted_model() -> None:
    """The finding is handed to the assessor like any other: on objects the agent never
    reported (no problem, no state), the assessment still finds the drifted action."""
    where = IPC / "ferry"
    domain = read_domain(where / "domain.pddl")
    drifts = widenings(domain)
    random.Random(20).shuffle(drifts)
    action, truth = drifts[0]
    r = run(domain, truth, action, no_problem(read_problem(where / "problem.pddl"), False),
            360)
    assert r.finding is not None
    assert any(o.startswith("canary-") for o in r.finding.transition.action[1:])
    model, _ = assessed(domain, truth, r.finding)
    assert same_model(model, truth)


def test_a_reported_state_naming_one_object_of_a_type_still_grounds_two() -> None:
    """gripper's reported state names one room (the robot's): every ``move ?from ?to``
    drawn from it was ``move rooma rooma``, where a lost delete of ``(at_robby ?from)``
    changes nothing; a fresh room fills the other parameter."""
    where = DATA / "classic" / "gripper"
    domain = read_domain(where / "domain.pddl")
    move = domain.action("move")
    (o,) = move.outcomes
    truth = domain.replace_action(move.replace(outcomes=(Outcome(o.add, frozenset()),)))
    setting = no_problem(read_problem(where / "problem.pddl"), True)
    assert {a[1] for a in setting.reported if a[0] == "at_robby"} == {"rooma"}
    for seed in range(3):
        assert run(domain, truth, "move", setting, 360, seed=seed).round is not None


def test_fresh_names_of_a_union_type_pass_the_wire() -> None:
    """``canary-<type>-<n>`` takes a union type's first member: ``(either crate store)``
    spelled out would hold spaces and parentheses, which ``wire.Name`` rejects."""
    for name in fresh_objects("(either crate store)", 2, {"canary-crate-1"}):
        assert name.startswith("canary-crate-")
        QueryRequest.of({("in", name)}, [("lift", "h", name)])


def _added_atom_narrowings() -> list[tuple[Path, str, Domain]]:
    """Per domain, two narrowings that need an atom the action adds to be false."""
    cases = []
    for where in DOMAINS:
        domain = read_domain(where / "domain.pddl")
        drifts = [(a, t) for a, t in narrowings(domain)
                  if t.action(a).pre_neg != domain.action(a).pre_neg]
        random.Random(20).shuffle(drifts)
        cases += [(where, a, t) for a, t in drifts[:2]]
    return cases


NARROWINGS = _added_atom_narrowings()


@pytest.mark.parametrize(("where", "action", "truth"), NARROWINGS,
                         ids=[f"{w.name}-{a}-{i}" for i, (w, a, _) in enumerate(NARROWINGS)])
def test_a_precondition_gained_on_an_added_atom_shows_from_designed_states(
        where: Path, action: str, truth: Domain) -> None:
    """The agent now refuses an action where an atom it adds is already true. Only a
    start state holding that atom shows it, and designed ones never did: their effect
    atoms were left as the problem or the empty state had them (false) or set to the
    value the effect changes (false again). With no problem and no state reported, only
    designed states are at hand: session 20 found 6 of 174 such drifts there."""
    domain = read_domain(where / "domain.pddl")
    setting = no_problem(read_problem(where / "problem.pddl"), False)
    assert run(domain, truth, action, setting, 360).round is not None


def _tied_by_equality() -> list[tuple[Path, str, str, Domain]]:
    """Per domain, two actions that now need two parameters to differ, every model
    constraint of hiking and mprime (the domains with some) dropped, and storage's
    actions that now need a parameter to differ from one of a supertype."""
    cases = []
    for where in DOMAINS:
        domain = read_domain(where / "domain.pddl")
        drifts = inequalities_gained(domain)
        random.Random(20).shuffle(drifts)
        cases += [(where, "gained", a, t) for a, t in drifts[:2]]
    for where in (IPC / "hiking", IPC / "mprime"):
        domain = read_domain(where / "domain.pddl")
        cases += [(where, "dropped", a, t) for a, t in equalities_dropped(domain)]
    # storage's lift and drop: ?a1 a storearea, ?a2 an area (its supertype). With no
    # problem, fresh storeareas are in no pool of areas: only the types tie them.
    storage = read_domain(IPC / "storage" / "domain.pddl")
    for a, t in inequalities_gained(storage):
        (x, y), = t.action(a).distinct - storage.action(a).distinct
        types = {p.name: p.type for p in storage.action(a).parameters}
        if types[x] != types[y]:
            cases.append((IPC / "storage", "gained", a, t))
    return cases


TIED = _tied_by_equality()


@pytest.mark.parametrize(("where", "kind", "action", "truth"), TIED,
                         ids=[f"{w.name}-{k}-{a}-{i}" for i, (w, k, a, _) in enumerate(TIED)])
def test_a_drift_tied_by_equality_shows_on_a_repeated_object(
        where: Path, kind: str, action: str, truth: Domain) -> None:
    """The agent now refuses the action when two of its parameters name one object, or
    runs it there though the model's ``(not (= ?a ?b))`` forbids it. Canaries drew their
    objects distinct wherever the pools allowed and kept to the model's constraints, so
    before session 21 no probe ever named one object twice: none of these was found."""
    domain = read_domain(where / "domain.pddl")
    problem = read_problem(where / "problem.pddl")
    for setting in (Setting("problem", problem.init, problem.objects_by_type(domain),
                            problem.init), no_problem(problem, False)):
        r = run(domain, truth, action, setting, 360)
        assert r.round is not None, f"{setting.kind}: {action} never reported"
        assert r.finding is not None
        args = r.finding.transition.action[1:]
        assert len(set(args)) < len(args) or kind == "dropped", args


@pytest.mark.parametrize("where", [IPC / "mprime", IPC / "freecell"],
                         ids=["mprime", "freecell"])
def test_an_honest_agent_is_never_reported_on_repeated_objects(where: Path) -> None:
    """Untyped mprime lets any two parameters name one object, and freecell has actions
    of up to six cards: many repeats whose precondition puts a positive and a negative
    literal on one atom, which the prober must leave (the model says the action never
    applies there)."""
    domain = read_domain(where / "domain.pddl")
    problem = read_problem(where / "problem.pddl")
    setting = Setting("problem", problem.init, problem.objects_by_type(domain), problem.init)
    for action in domain.actions:
        r = run(domain, domain, action.name, setting, 30)
        assert r.round is None, (action.name, r.finding)
