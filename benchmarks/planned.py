"""A fleet whose agents execute plans a real planner found (``bench_daemon.py --generated
planned``), not random walks: Fast Downward (the ``up-fast-downward`` dependency) on the
IPC and classic problems in tests/data/domains, each task starting from the problem's
initial state or from a state a short random walk reached, its goal the problem's own
or a few atoms of another reachable state.

Agents run their family's plans one after another (a plan is an episode). Most run them
as planned; some deviate, so that the monitor and the drift tests have work:

- ``flaky``: an action fails now and then (3%) and is retried: half the failures are
  reported (``executed`` false, state unchanged), half are not (``executed`` true, the
  state unchanged: an inconsistency for the monitor);
- ``drifted``: from its third plan on, one action of the agent's no longer adds one of
  its add effects (an effect drifted); a later step of the plan whose precondition the
  drifted state misses is refused (``executed`` false) and the agent gives the plan up.

Agents are busy in a skewed way (activity drawn from a Pareto law: a few agents send most
records), ids are UUIDs, events compact JSON with ``Z`` times, keys in another order than
the other fleets'. Plans are cached under ``$XDG_CACHE_HOME/capwatch-bench/plans`` (or
``~/.cache``), keyed by the domain's and the task's text, so only the first generation
on a machine runs the planner.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fleets import Fleet

from capwatch.adapters.io.fast_downward import driver_path
from capwatch.assess.search import ground_operators, static_predicates
from capwatch.model.grounding import Grounder, GroundOperator, StateMask
from capwatch.model.pddl_reader import parse_plan, read_domain, read_problem
from capwatch.model.pddl_writer import write_problem
from tests.paths import DATA, IPC

SEARCH = "lazy_greedy([ff()], preferred=[ff()])"
"""Satisficing: the fleet wants plans agents would run, not optimal ones, found fast."""
TASKS_PER_DOMAIN = 6


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "capwatch-bench" / "plans"


def fast_downward(domain_text: str, problem_text: str, timeout: float = 60.0) -> str | None:
    """The plan's text, or None if the planner found none (unsolvable, timed out)."""
    key = hashlib.sha256(f"{SEARCH}\0{domain_text}\0{problem_text}".encode()).hexdigest()
    cached = _cache_dir() / f"{key}.plan"
    if cached.exists():
        known = cached.read_text()
        return known if known != "none\n" else None
    with tempfile.TemporaryDirectory(prefix="capwatch-plan-") as tmp:
        d = Path(tmp)
        (d / "domain.pddl").write_text(domain_text)
        (d / "problem.pddl").write_text(problem_text)
        try:
            code = subprocess.run(
                [sys.executable, str(driver_path()), "--plan-file", str(d / "plan"),
                 str(d / "domain.pddl"), str(d / "problem.pddl"), "--search", SEARCH],
                cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = -1
        plan = d / "plan"
        text = plan.read_text() if code == 0 and plan.exists() else None
    if code in (0, 10, 11, 12):  # found, or proven unsolvable: worth remembering
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(text if text is not None else "none\n")
    return text


@dataclass
class _Domain:
    family_file: Path
    grounder: Grounder
    ops: dict[tuple[str, ...], GroundOperator]
    plans: list[tuple[StateMask, list[GroundOperator]]]
    """(start state, the plan's operators)."""


def _walk(mask: StateMask, ops: list[GroundOperator], rng: random.Random, n: int) -> StateMask:
    for _ in range(n):
        applicable = [op for op in ops if op.applicable(mask)]
        if not applicable:
            break
        mask = rng.choice(applicable).apply(mask)
    return mask


def plan_domain(d: Path, rng: random.Random, tasks: int = TASKS_PER_DOMAIN) -> _Domain | None:
    domain_text = (d / "domain.pddl").read_text()
    domain = read_domain(d / "domain.pddl")
    prob = read_problem(d / "problem.pddl")
    grounder = Grounder(domain)
    ops = ground_operators(grounder, prob.objects_by_type(domain), prob.init)
    static = static_predicates(domain)
    init = grounder.index.encode(prob.init)
    by_name = {(op.action.name, *op.args): op for op in ops}
    plans = []
    for t in range(tasks):
        start = init if t == 0 else _walk(init, ops, rng, rng.randint(0, 12))
        goal_pos = prob.goal_pos
        if t % 2 == 1:
            # A few fluent atoms of another reachable state: a task the problem never set.
            there = [a for a in grounder.index.decode(_walk(init, ops, rng, rng.randint(4, 25)))
                     if a[0] not in static]
            goal_pos = frozenset(rng.sample(sorted(there), min(len(there), rng.randint(1, 4))))
        task = replace(prob, name=f"task-{t}", init=grounder.index.decode(start),
                       goal_pos=goal_pos, goal_neg=frozenset())
        text = fast_downward(domain_text, write_problem(task))
        if text is None:
            continue
        steps = [by_name.get(tuple(s)) for s in parse_plan(text, "plan")]
        if steps and all(op is not None for op in steps):
            plans.append((start, [op for op in steps if op is not None]))
    if not plans:
        return None
    return _Domain(d / "domain.pddl", grounder, by_name, plans)


Wire = tuple[list[list[str]], list[str], list[list[str]], bool]


@dataclass
class _Agent:
    agent_id: str
    family: str
    domain: _Domain
    kind: str
    """"nominal", "flaky" or "drifted"."""
    drift: tuple[str, int] | None = None
    """(action name, which of its add effects no longer happens), for "drifted"."""
    episode: int = 0
    plan: list[GroundOperator] | None = None
    pos: int = 0
    state: StateMask = 0

    def next(self, rng: random.Random) -> tuple[int, str, StateMask, GroundOperator, StateMask,
                                                bool]:
        if self.plan is None or self.pos >= len(self.plan):
            start, self.plan = rng.choice(self.domain.plans)
            self.state, self.pos = start, 0
            self.episode += 1
        op = self.plan[self.pos]
        before = self.state
        if not op.applicable(before):  # a drifted effect upstream: refused, plan given up
            self.pos = len(self.plan)
            return self.pos, self._episode(), before, op, before, False
        if self.kind == "flaky" and rng.random() < 0.03:
            return self.pos, self._episode(), before, op, before, rng.random() < 0.5
        after = op.apply(before)
        if self.drift is not None and self.episode >= 3 and op.action.name == self.drift[0]:
            added = after & ~before
            bits = [b for b in range(added.bit_length()) if added >> b & 1]
            if bits:
                after &= ~(1 << bits[self.drift[1] % len(bits)])
        self.state = after
        self.pos += 1
        return self.pos - 1, self._episode(), before, op, after, True

    def _episode(self) -> str:
        return f"{self.agent_id}/plan-{self.episode}"


def planned(transitions: int, seed: int = 17) -> Fleet:
    """See the module docstring."""
    rng = random.Random(seed)
    dirs = [IPC / n for n in sorted(p.name for p in IPC.iterdir() if p.is_dir())]
    dirs += [DATA / "classic" / n for n in ("blocksworld", "gripper", "miconic")]
    domains = {d.name: got for d in dirs if (got := plan_domain(d, rng)) is not None}
    families = {f"{n}-fd{v}": dom.family_file for n, dom in domains.items() for v in (1, 2)}
    fams = sorted(families)
    agents = []
    for k in range(max(100, transitions // 100)):
        fam = fams[k % len(fams)]
        dom = domains[fam.rsplit("-", 1)[0]]
        kind = rng.choices(["nominal", "flaky", "drifted"], [0.8, 0.1, 0.1])[0]
        drift = None
        if kind == "drifted":
            names = sorted({op.action.name for _, plan in dom.plans for op in plan})
            drift = (rng.choice(names), rng.randrange(4))
        agents.append(_Agent(str(uuid.UUID(int=rng.getrandbits(128), version=4)), fam, dom,
                             kind, drift))
    weights = [rng.paretovariate(1.2) for _ in agents]
    t0 = datetime(2026, 5, 1, tzinfo=UTC)
    events, ids = [], []
    cache: dict[tuple[int, int], list[list[str]]] = {}

    def atoms(dom: _Domain, mask: StateMask) -> list[list[str]]:
        key = (id(dom), mask)
        got = cache.get(key)
        if got is None:
            got = cache[key] = sorted(list(a) for a in dom.grounder.index.decode(mask))
        return got

    chosen = rng.choices(range(len(agents)), weights, k=transitions)
    for n, k in enumerate(chosen):
        a = agents[k]
        pos, episode, before, op, after, executed = a.next(rng)
        t = t0 + timedelta(milliseconds=3 * n)
        event = {"type": "transition",
                 "time": t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z",
                 "family": a.family, "agent_id": a.agent_id, "episode_id": episode,
                 "step": pos, "action": [op.action.name, *op.args],
                 "state": atoms(a.domain, before), "next_state": atoms(a.domain, after),
                 "executed": executed}
        events.append(json.dumps(event, separators=(",", ":")).encode())
        ids.append(a.agent_id)
    return Fleet("planned", families, events, ids)
