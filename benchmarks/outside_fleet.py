"""A fleet as an outside producer writes it (issue 13: the figures will be remeasured on
traces that do not come from this repository's simulator): written without capwatch's
model code, simulator or the other fleets' walkers (its own PDDL reader and random-walk
executor below), after session 13's reviewer's producer (docs/performance.md, "A fleet
from an outside producer").

Agents of a few IPC domains (tests/data/domains/ipc; by default parking, barman, mprime,
openstacks, 8 agents each, 2 of them drifted: after a few hundred steps they act by a
model with one add effect dropped), each walking at random over what it believes (the
baseline, sometimes refused by its true model) with 3% blind attempts (an action on
random objects, mostly refused); episodes end at 80 steps or a dead end. Each message
is a ``transition`` event or, half the time, a ``trace`` of 2-12 steps; fields in a new
order each message, atoms in a new order each state (a hash set's iteration), optional
fields present at random; written 30% compact, 20% ``indent=2`` (multi-line), 10% with
leading whitespace and a trailing ``\\r\\n``, 40% as ``json.dumps`` with
``ensure_ascii=False``; 2% of messages sent twice (a producer's retry); the domains'
agents start in bursts, one domain after the other. Deterministic from ``--seed``.

    python benchmarks/outside_fleet.py OUT [--steps 1500] [--seed 13]
    python benchmarks/bench_daemon.py --fleet OUT --no-kafka --no-memory

``OUT`` is a ``--fleet`` directory (benchmarks/fleets.py): ``<family>.pddl`` and the
stream as ``events.json-seq`` (RFC 7464: each message after an RS byte, so that
multi-line messages stay as written).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

IPC = Path(__file__).resolve().parent.parent / "tests" / "data" / "domains" / "ipc"
DOMAINS = ("parking", "barman", "mprime", "openstacks")

Atom = tuple[str, ...]
Lit = tuple[str, tuple[str, ...]]


def _sexp(text: str) -> list[object]:
    tokens = re.findall(r"\(|\)|[^\s()]+", re.sub(r";[^\n]*", "", text).lower())
    stack: list[list[object]] = []
    cur: list[object] = []
    for t in tokens:
        if t == "(":
            stack.append(cur)
            cur = []
        elif t == ")":
            done, cur = cur, stack.pop()
            cur.append(done)
        else:
            cur.append(t)
    out = cur[0]
    assert isinstance(out, list)
    return out


def _typed(xs: list[object]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pending: list[str] = []
    i = 0
    while i < len(xs):
        if xs[i] == "-":
            t = xs[i + 1]
            name = str(t[1]) if isinstance(t, list) else str(t)  # (either a b): the first
            out += [(n, name) for n in pending]
            pending = []
            i += 2
        else:
            pending.append(str(xs[i]))
            i += 1
    return out + [(n, "object") for n in pending]


@dataclass
class Action:
    name: str
    params: list[tuple[str, str]]
    pos: list[Lit] = field(default_factory=list)
    neg: list[Lit] = field(default_factory=list)
    eq: list[tuple[str, str]] = field(default_factory=list)
    neq: list[tuple[str, str]] = field(default_factory=list)
    add: list[Lit] = field(default_factory=list)
    dele: list[Lit] = field(default_factory=list)


def _literals(e: object, a: Action, effect: bool) -> None:
    if not isinstance(e, list) or not e:
        return
    head = e[0]
    if head == "and":
        for x in e[1:]:
            _literals(x, a, effect)
    elif head == "not":
        x = e[1]
        assert isinstance(x, list)
        if x[0] == "=":
            a.neq.append((str(x[1]), str(x[2])))
        else:
            (a.dele if effect else a.neg).append((str(x[0]), tuple(map(str, x[1:]))))
    elif head == "=":
        a.eq.append((str(e[1]), str(e[2])))
    elif head not in ("increase", "decrease"):  # action costs ignored
        (a.add if effect else a.pos).append((str(head), tuple(map(str, e[1:]))))


@dataclass
class World:
    """A domain and a problem's objects: which actions apply, and their effects."""
    parents: dict[str, str]
    actions: dict[str, Action]
    objects: dict[str, str]

    def is_a(self, t: str, want: str) -> bool:
        while t != want and want != "object":
            if self.parents.get(t, t) == t:
                return False
            t = self.parents[t]
        return True

    def of_type(self, t: str) -> list[str]:
        return [o for o, ot in self.objects.items() if self.is_a(ot, t)]

    def applies(self, a: Action, s: frozenset[Atom], b: dict[str, str]) -> bool:
        def g(x: str) -> str:
            return b.get(x, x)
        return (all((p, *map(g, xs)) in s for p, xs in a.pos)
                and not any((p, *map(g, xs)) in s for p, xs in a.neg)
                and all(g(x) == g(y) for x, y in a.eq)
                and not any(g(x) == g(y) for x, y in a.neq))

    def apply(self, a: Action, s: frozenset[Atom], b: dict[str, str]) -> frozenset[Atom]:
        def g(x: str) -> str:
            return b.get(x, x)
        out = set(s) - {(p, *map(g, xs)) for p, xs in a.dele}
        return frozenset(out | {(p, *map(g, xs)) for p, xs in a.add})

    def applicable(self, s: frozenset[Atom]) -> list[tuple[str, tuple[str, ...]]]:
        """Every grounded action that applies in ``s``: the positive preconditions joined
        over the state's atoms, the other parameters by type."""
        by_pred: dict[str, list[tuple[str, ...]]] = {}
        for atom in s:
            by_pred.setdefault(atom[0], []).append(atom[1:])
        res = []
        for a in self.actions.values():
            types = dict(a.params)
            pos = sorted(a.pos, key=lambda lit: len(by_pred.get(lit[0], ())))
            found: list[dict[str, str]] = []

            def join(i: int, b: dict[str, str], a: Action = a, types: dict[str, str] = types,
                     pos: list[Lit] = pos, found: list[dict[str, str]] = found) -> None:
                if i == len(pos):
                    rest = [v for v, _ in a.params if v not in b]
                    self._fill(a, s, rest, types, dict(b), found)
                    return
                pred, xs = pos[i]
                for args in by_pred.get(pred, ()):
                    nb = dict(b)
                    for x, o in zip(xs, args, strict=False):
                        if not x.startswith("?"):
                            if x != o:
                                break
                        elif x in nb:
                            if nb[x] != o:
                                break
                        elif self.is_a(self.objects.get(o, "object"), types.get(x, "object")):
                            nb[x] = o
                        else:
                            break
                    else:
                        join(i + 1, nb)
            join(0, {})
            res += [(a.name, tuple(b[v] for v, _ in a.params)) for b in found]
        return res

    def _fill(self, a: Action, s: frozenset[Atom], rest: list[str], types: dict[str, str],
              b: dict[str, str], found: list[dict[str, str]]) -> None:
        if not rest:
            if self.applies(a, s, b):
                found.append(dict(b))
            return
        for o in self.of_type(types[rest[0]]):
            b[rest[0]] = o
            self._fill(a, s, rest[1:], types, b, found)
        del b[rest[0]]


def read(directory: Path) -> tuple[World, frozenset[Atom]]:
    """The domain and problem of ``directory``: the world and the initial state."""
    d = _sexp((directory / "domain.pddl").read_text())
    parents: dict[str, str] = {}
    objects: dict[str, str] = {}
    actions: dict[str, Action] = {}
    for sec in d[2:]:
        assert isinstance(sec, list)
        if sec[0] == ":types":
            parents.update(_typed(sec[1:]))
        elif sec[0] == ":constants":
            objects.update(_typed(sec[1:]))
        elif sec[0] == ":action":
            a = Action(str(sec[1]), [])
            for k, v in zip(sec[2::2], sec[3::2], strict=False):
                if k == ":parameters":
                    assert isinstance(v, list)
                    a.params = _typed(v)
                elif k in (":precondition", ":effect"):
                    _literals(v, a, k == ":effect")
            actions[a.name] = a
    init: set[Atom] = set()
    for sec in _sexp((directory / "problem.pddl").read_text())[2:]:
        assert isinstance(sec, list)
        if sec[0] == ":objects":
            objects.update(_typed(sec[1:]))
        elif sec[0] == ":init":
            init |= {tuple(map(str, a)) for a in sec[1:] if isinstance(a, list) and a[0] != "="}
    return World(parents, actions, objects), frozenset(init)


def drifted(w: World, rng: random.Random) -> World:
    """``w`` with one add effect of one action dropped."""
    actions = dict(w.actions)
    name = rng.choice(sorted(n for n, a in actions.items() if a.add))
    a = actions[name]
    dropped = rng.choice(a.add)
    actions[name] = Action(a.name, a.params, a.pos, a.neg, a.eq, a.neq,
                           [e for e in a.add if e != dropped], a.dele)
    return World(w.parents, actions, w.objects)


Step = tuple[frozenset[Atom], tuple[str, ...], frozenset[Atom], bool]


class Agent:
    def __init__(self, agent_id: str, family: str, base: World, init: frozenset[Atom],
                 truth: World, drift_at: int | None, rng: random.Random) -> None:
        self.id, self.family, self.base, self.truth = agent_id, family, base, truth
        self.init, self.drift_at, self.rng = init, drift_at, rng
        self.steps = self.episode = self.ep_step = 0
        self.state = init
        self.reset()

    def reset(self) -> None:
        self.episode += 1
        self.state, self.ep_step = self.init, 0

    def act(self) -> Step | None:
        """One step, or None when the episode ended in a dead end (reset)."""
        w = self.truth if self.drift_at is not None and self.steps >= self.drift_at \
            else self.base
        s, r = self.state, self.rng.random()
        if r < 0.03:  # a blind attempt
            a = w.actions[self.rng.choice(sorted(w.actions))]
            args = tuple(self.rng.choice(w.of_type(t) or sorted(w.objects)) for _, t in a.params)
        else:  # planned with what it believes, sometimes refused by the truth
            options = (self.base if r < 0.15 else w).applicable(s)
            if not options:
                self.reset()
                return None
            name, args = self.rng.choice(sorted(options))
            a = w.actions[name]
        b = {v: o for (v, _), o in zip(a.params, args, strict=True)}
        ok = w.applies(a, s, b)
        after = w.apply(a, s, b) if ok else s
        self.state = after
        self.steps += 1
        self.ep_step += 1
        if self.ep_step >= 80:
            self.reset()
        return s, (a.name, *args), after, ok


def _atoms(s: frozenset[Atom], rng: random.Random) -> list[list[str]]:
    out = [list(a) for a in sorted(s)]
    rng.shuffle(out)
    return out


def encode(event: dict[str, object], rng: random.Random, writers: str = "default") -> bytes:
    """The event as one of several producers writes it, its fields in a new order
    (``writers="other"``: another set of producers, spacing their JSON otherwise, to
    check that a change is not tuned to the default's spellings)."""
    items = list(event.items())
    rng.shuffle(items)
    obj = dict(items)
    k = rng.random()
    if writers == "other":
        if k < 0.35:
            return (json.dumps(obj, indent="\t") + "\r\n").encode()
        if k < 0.6:
            return json.dumps(obj, separators=(" , ", " : ")).encode()
        if k < 0.8:
            return (json.dumps(obj, indent=4, sort_keys=True) + "\n").encode()
        return ("\n" + json.dumps(obj, separators=(",", ": ")) + "\n\n").encode()
    if k < 0.3:
        return json.dumps(obj, separators=(",", ":")).encode()
    if k < 0.5:
        return (json.dumps(obj, indent=2) + "\n").encode()
    if k < 0.6:
        return ("  \t" + json.dumps(obj) + " \r\n").encode()
    return json.dumps(obj, ensure_ascii=False).encode()


def generate(out: Path, steps: int = 1500, seed: int = 13, per_domain: int = 8,
             domains: tuple[str, ...] = DOMAINS, duplicates: float = 0.02,
             trace_steps: tuple[int, int] = (2, 12), trace_share: float = 0.5,
             writers: str = "default") -> int:
    """Write the fleet to ``out``; returns the number of messages."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    waves: list[list[Agent]] = []
    for d in domains:
        base, init = read(IPC / d)
        family = f"{d}-prod"
        shutil.copyfile(IPC / d / "domain.pddl", out / f"{family}.pddl")
        wave = []
        for i in range(per_domain):
            aid = f"{d[:4]}.unit-{i:02d}" if i % 2 else f"{d}_{i:02d}"
            drift = i < 2
            wave.append(Agent(aid, family, base, init, drifted(base, rng) if drift else base,
                              rng.randint(300, 900) if drift else None,
                              random.Random(seed * 1000 + len(waves) * per_domain + i)))
        waves.append(wave)
    active: list[Agent] = []
    messages: list[bytes] = []
    t0 = datetime(2026, 11, 27, tzinfo=UTC)
    while True:
        # The next domain's agents start when the active ones have done 20% of their steps.
        if waves and (not active or min(a.steps for a in active) > steps * 0.2):
            active += waves.pop(0)
        live = [a for a in active if a.steps < steps]
        if not live and not waves:
            break
        if not live:
            continue
        a = rng.choice(live)
        want = 1 if rng.random() < 1 - trace_share else rng.randint(*trace_steps)
        taken: list[Step] = []
        while len(taken) < want:
            st = a.act()
            if st is None or (taken and taken[-1][2] != st[0]):
                break  # a trace does not cross episodes
            taken.append(st)
            if a.ep_step == 0:
                break
        if not taken:
            continue
        event: dict[str, object]
        if len(taken) == 1:
            s, act, after, ok = taken[0]
            event = {"type": "transition", "agent_id": a.id, "family": a.family,
                     "state": _atoms(s, rng), "action": list(act),
                     "next_state": _atoms(after, rng)}
            if not ok or rng.random() < 0.7:
                event["executed"] = ok
            if rng.random() < 0.5:
                event["episode_id"] = f"{a.id}/ep{a.episode}"
                event["step"] = a.steps
        else:
            event = {"type": "trace", "agent_id": a.id, "family": a.family,
                     "episode_id": f"{a.id}/ep{a.episode}", "start_step": a.steps - len(taken),
                     "states": [_atoms(taken[0][0], rng)] + [_atoms(x[2], rng) for x in taken],
                     "actions": [list(x[1]) for x in taken],
                     "executed": [x[3] for x in taken]}
            if rng.random() < 0.5:
                event["optimal"] = False
        if rng.random() < 0.3:
            event["time"] = (t0 + timedelta(milliseconds=len(messages))).isoformat() \
                .replace("+00:00", "Z")
        if rng.random() < 0.3:
            event["v"] = 1
        raw = encode(event, rng, writers)
        messages.append(raw)
        if rng.random() < duplicates:
            messages.append(raw)
    (out / "events.json-seq").write_bytes(b"".join(b"\x1e" + m + b"\n" for m in messages))
    return len(messages)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the --fleet directory to write")
    p.add_argument("--steps", type=int, default=1500, help="steps per agent (default 1,500)")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--per-domain", type=int, default=8, help="agents per domain (default 8)")
    p.add_argument("--domains", default=",".join(DOMAINS),
                   help="IPC domains of tests/data/domains/ipc, comma-separated")
    p.add_argument("--trace-steps", default="2,12",
                   help="a trace's steps, MIN,MAX (default 2,12)")
    p.add_argument("--trace-share", type=float, default=0.5,
                   help="the share of messages that are traces (default 0.5)")
    p.add_argument("--writers", choices=("default", "other"), default="default",
                   help="the producers' spellings: 'other' spaces JSON otherwise (tabs, "
                        "indent=4 with sorted keys, spaced separators)")
    args = p.parse_args()
    low, high = (int(x) for x in args.trace_steps.split(","))
    n = generate(args.out, args.steps, args.seed, args.per_domain,
                 tuple(args.domains.split(",")), trace_steps=(low, high),
                 trace_share=args.trace_share, writers=args.writers)
    print(f"{args.out}: {n} messages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
