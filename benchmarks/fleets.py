"""Fleets for ``bench_daemon.py --fleet``: reading one from files, and generating fleets
unlike the simulated rover/courier fleet the default run measures.

A fleet on disk is a directory holding the families' domain models and the stream:

- ``<family>.pddl``, or ``<family>/domain.pddl``: the model each family was deployed with;
- ``events.jsonl``: transition (or trace) events in the wire format, one per line, in the
  order the stream delivers them, exactly as ``capwatch run`` reads a JSONL source;
  or ``events.json-seq`` (RFC 7464: each event after an RS byte and before a line feed),
  which keeps a producer's multi-line messages byte for byte (benchmarks/outside_fleet.py).

The generated fleets carry their own data: random walks on the domains in
tests/data/domains (none of capwatch's simulator), replayed by agents whose ids, objects,
message layout and order differ from the simulated fleet's (see ``GENERATED``).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capwatch.assess.search import ground_operators
from capwatch.model.domain import GroundAtom
from capwatch.model.grounding import Grounder
from capwatch.model.pddl_reader import read_domain, read_problem
from capwatch.model.simulate import step
from tests.paths import DATA, IPC, STOCHASTIC

EVENTS = "events.jsonl"
EVENTS_SEQ = "events.json-seq"


@dataclass
class Fleet:
    name: str
    families: dict[str, Path]
    """Family → its domain file."""
    events: list[bytes]
    """Wire events in stream order."""
    agent_ids: list[str] = field(default_factory=list)
    """Each event's agent id."""

    def by_agent(self) -> dict[str, list[bytes]]:
        """Each agent's events, in stream order; agents in order of first appearance."""
        out: dict[str, list[bytes]] = {}
        for a, e in zip(self.agent_ids, self.events, strict=True):
            out.setdefault(a, []).append(e)
        return out


class _Head(msgspec.Struct):
    agent_id: str


def load(path: Path, events: Path | None = None) -> Fleet:
    """The fleet in directory ``path`` (``events``: the stream, if not ``path/events.jsonl``)."""
    families = {p.stem: p for p in sorted(path.glob("*.pddl"))}
    families.update({p.parent.name: p for p in sorted(path.glob("*/domain.pddl"))})
    if not families:
        raise SystemExit(f"{path}: no <family>.pddl nor <family>/domain.pddl")
    seq = path / EVENTS_SEQ
    if events is None and seq.exists():
        # Each record as written: the RS before it and the one line feed after it dropped.
        lines = [r[:-1] if r.endswith(b"\n") else r for r in seq.read_bytes().split(b"\x1e")[1:]]
    else:
        lines = [ln for ln in (events or path / EVENTS).read_bytes().splitlines() if ln.strip()]
    head = msgspec.json.Decoder(_Head)
    ids = [head.decode(ln).agent_id for ln in lines]
    return Fleet(path.name, families, lines, ids)


def write(fleet: Fleet, path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for family, domain in fleet.families.items():
        shutil.copyfile(domain, path / f"{family}.pddl")
    (path / EVENTS).write_bytes(b"\n".join(fleet.events) + b"\n")
    return path


_AGENT_ID = re.compile(rb'"agent_id"\s*:\s*"([^"]*)"')


def rekey(value: bytes, agent_id: str) -> bytes:
    """The event with another agent id, every other byte as it was (the ids' alphabet
    needs no JSON escape)."""
    m = _AGENT_ID.search(value)
    if m is None:
        raise ValueError("no agent_id in the event")
    return value[:m.start(1)] + agent_id.encode() + value[m.end(1):]


# ----------------------------------------------------------------------------- walks

Step = tuple[list[list[str]], list[str], list[list[str]], bool]
"""(state, action, next state, executed), atoms as the wire carries them."""


def walks(domain_dir: Path, problem: str, rng: random.Random, episodes: int, length: int,
          p_blocked: float = 0.05, prefer_stochastic: float = 0.0) -> list[list[Step]]:
    """Random walks from the problem's initial state, grounded here (not capwatch's
    simulator): uniform over applicable actions, or over the probabilistic ones among them
    with probability ``prefer_stochastic``; with probability ``p_blocked`` a step tries an
    action whose precondition fails (refused: the state stays)."""
    # As the daemon reads a family's model: pddlgym's action literals dropped.
    domain = read_domain(domain_dir / "domain.pddl").without_action_literals()
    prob = read_problem(domain_dir / problem)
    grounder = Grounder(domain)
    ops = ground_operators(grounder, prob.objects_by_type(domain), prob.init)
    stochastic = [op for op in ops if len(op.effects) > 1]
    decode = grounder.index.decode

    def atoms(s: frozenset[GroundAtom]) -> list[list[str]]:
        return sorted(list(a) for a in s)

    out = []
    for _ in range(episodes):
        mask = grounder.index.encode(prob.init)
        before = atoms(prob.init)
        trace: list[Step] = []
        for _ in range(rng.randint(length // 4, length)):
            applicable = [op for op in ops if op.applicable(mask)]
            if rng.random() < p_blocked:
                blocked = [op for op in ops if not op.applicable(mask)]
                if blocked:
                    op = rng.choice(blocked)
                    trace.append((before, [op.action.name, *op.args], before, False))
                    continue
            if not applicable:
                break
            pool = [op for op in applicable if op in stochastic] if stochastic else []
            op = rng.choice(pool if pool and rng.random() < prefer_stochastic else applicable)
            _, mask = step(op, mask, rng)
            after = atoms(decode(mask))
            trace.append((before, [op.action.name, *op.args], after, True))
            before = after
        if trace:
            out.append(trace)
    if not out:
        raise SystemExit(f"{domain_dir.name}: no action applies in the initial state")
    return out


def _renamer(objects: set[str], tag: str) -> Callable[[list[str]], list[str]]:
    def rename(atom: list[str]) -> list[str]:
        return [atom[0], *(f"{o}-{tag}" if o in objects else o for o in atom[1:])]
    return rename


def _long_id(rng: random.Random, k: int) -> str:
    # Ids as a fleet manager hands them out: long, random, dotted.
    region = rng.choice(["eu-west-1", "us-east-2", "ap-south-1"])
    return f"{rng.getrandbits(128):032x}.unit-{k:06d}.{region}.fleet-{rng.getrandbits(40):010x}"


@dataclass
class _Agent:
    agent_id: str
    family: str
    pool: list[list[Step]]
    rename: Callable[[list[str]], list[str]] | None
    episode: int = 0
    trace: list[Step] = field(default_factory=list)
    pos: int = 0

    def next(self, rng: random.Random) -> tuple[int, str, Step]:
        if self.pos >= len(self.trace):
            self.trace, self.pos = rng.choice(self.pool), 0
            self.episode += 1
        s = self.trace[self.pos]
        self.pos += 1
        if self.rename is not None:
            r = self.rename
            s = ([r(a) for a in s[0]], r(s[1]), [r(a) for a in s[2]], s[3])
        return self.pos - 1, f"{self.agent_id}-e{self.episode}", s


def _sources(names: list[tuple[Path, str]], rng: random.Random, episodes: int, length: int,
             prefer_stochastic: float = 0.0) -> dict[str, tuple[Path, list[list[Step]], set[str]]]:
    out = {}
    for d, problem in names:
        pool = walks(d, problem, rng, episodes, length, prefer_stochastic=prefer_stochastic)
        objects = {o.name for o in read_problem(d / problem).objects}
        out[d.name] = (d / "domain.pddl", pool, objects)
    return out


def _stream(name: str, agents: list[_Agent], families: dict[str, Path], order: Iterator[int],
            transitions: int, rng: random.Random,
            encode: Callable[[dict[str, object]], bytes], with_time: bool) -> Fleet:
    events, ids = [], []
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    for n in range(transitions):
        a = agents[next(order)]
        pos, episode, (state, action, after, executed) = a.next(rng)
        event: dict[str, object] = {"type": "transition", "agent_id": a.agent_id,
                                    "family": a.family, "episode_id": episode, "step": pos,
                                    "state": state, "action": action, "next_state": after,
                                    "executed": executed}
        if with_time:
            event["time"] = (t0 + timedelta(milliseconds=n)).isoformat()
        events.append(encode(event))
        ids.append(a.agent_id)
    return Fleet(name, families, events, ids)


def _random_order(rng: random.Random, n: int) -> Iterator[int]:
    while True:
        yield rng.randrange(n)


def _bursts(rng: random.Random, n: int, burst: int) -> Iterator[int]:
    """Every agent in turn, in a shuffled order each time round, ``burst`` records each."""
    while True:
        order = list(range(n))
        rng.shuffle(order)
        for a in order:
            for _ in range(burst):
                yield a


def ipc_mixed(transitions: int, seed: int = 7) -> Fleet:
    """Every IPC and classic domain, three families each (one domain, three deployments),
    agents with long random ids, each record from a random agent (no round robin),
    ``json.dumps`` spacing with ``time`` and ``executed``; 5% refused actions."""
    rng = random.Random(seed)
    dirs = [(IPC / n, "problem.pddl") for n in sorted(p.name for p in IPC.iterdir() if p.is_dir())]
    dirs += [(DATA / "classic" / n, "problem.pddl") for n in ("blocksworld", "gripper", "miconic")]
    sources = _sources(dirs, rng, episodes=12, length=80)
    families: dict[str, Path] = {}
    agents = []
    for name, (domain, _, _) in sources.items():
        for v in "abc":
            families[f"{name}-{v}"] = domain
    fams = sorted(families)
    for k in range(max(200, transitions // 50)):
        fam = fams[k % len(fams)]
        agents.append(_Agent(_long_id(rng, k), fam, sources[fam[:-2]][1], None))
    return _stream("ipc-mixed", agents, families, _random_order(rng, len(agents)),
                   transitions, rng, lambda e: json.dumps(e).encode(), with_time=True)


def own_objects_bursty(transitions: int, seed: int = 11) -> Fleet:
    """Each agent names its objects its own way (``truck1-<tag>``): a fleet's vocabulary
    grows with its agents. One agent sends 1,000 records in a row, then another; compact
    JSON, keys in another order, no time."""
    rng = random.Random(seed)
    names = ("depot", "elevators", "ferry", "grid", "logistics", "transport", "tpp", "visitall")
    dirs = [(IPC / n, "problem.pddl") for n in names if (IPC / n).is_dir()]
    sources = _sources(dirs, rng, episodes=12, length=120)
    families = {n: s[0] for n, s in sources.items()}
    agents = []
    for k in range(max(20, transitions // 400)):
        fam = sorted(families)[k % len(families)]
        tag = f"{rng.getrandbits(32):08x}"
        agents.append(_Agent(f"robot-{tag}-{k}", fam, sources[fam][1],
                             _renamer(sources[fam][2], tag)))

    def encode(e: dict[str, object]) -> bytes:
        keys = ("state", "action", "next_state", "agent_id", "type", "family", "step",
                "episode_id", "executed")
        return json.dumps({k: e[k] for k in keys}, separators=(",", ":")).encode()

    return _stream("own-objects-bursty", agents, families, _bursts(rng, len(agents), 1000),
                   transitions, rng, encode, with_time=False)


def stochastic(transitions: int, seed: int = 13) -> Fleet:
    """The PPDDL domains, most steps a probabilistic action (its outcome drawn), two
    families each, each record from a random agent: nearly every record updates a
    sequential drift detector."""
    rng = random.Random(seed)
    dirs = [(STOCHASTIC / n, "problem-1.pddl")
            for n in ("tireworld", "explodingblocks", "probabilistic_elevators")]
    sources = _sources(dirs, rng, episodes=30, length=60, prefer_stochastic=0.9)
    families = {f"{n}-{v}": s[0] for n, s in sources.items() for v in "ab"}
    fams = sorted(families)
    agents = [_Agent(f"p{k:05d}.{fams[k % len(fams)]}", fams[k % len(fams)],
                     sources[fams[k % len(fams)][:-2]][1], None)
              for k in range(max(50, transitions // 100))]
    return _stream("stochastic", agents, families, _random_order(rng, len(agents)),
                   transitions, rng, lambda e: json.dumps(e).encode(), with_time=True)


GENERATED: dict[str, Callable[[int], Fleet]] = {
    "ipc-mixed": ipc_mixed,
    "own-objects-bursty": own_objects_bursty,
    "stochastic": stochastic,
}
