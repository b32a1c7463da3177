"""Fleets written the way producers other than ours would write them (``bench_daemon.py
--generated``): the same kind of random walks as benchmarks/fleets.py, on the domains in
tests/data/domains, each fleet changing one thing about how the events are written, so
that a row that moves names what moved it.

- ``dumps``: the reference: Python's ``json.dumps`` spacing, ``type`` first, atoms
  sorted, one transition per event, ``datetime.isoformat()`` times;
- ``compact``: no whitespace at all (``JSON.stringify``, Go's ``encoding/json``,
  Jackson's default), times in UTC with ``Z`` and 0-9 fractional digits, as JavaScript,
  Go and Java print them, one style per agent;
- ``jackson``: Jackson's pretty printer on one line: ``{ "key" : value, ... }``,
  ``[ "at", "r1" ]``: whitespace before every colon and closing bracket;
- ``irregular``: each agent its own whitespace (none, tabs, doubled spaces, around
  colons and brackets), kept from message to message as a writer does;
- ``keys-late``: ``type`` last, ``agent_id`` after the states, no time;
- ``traces``: ``trace`` events of 2 to 40 consecutive steps instead of transitions;
- ``unsorted``: each state's atoms in the order they became true (a producer appending
  to a list), stable from one step to the next;
- ``shuffled``: each state's atoms in a new order in every message (a hash set's
  iteration order, as Go maps give it);
- ``interleaved``: each agent runs three episodes at once and its records interleave
  them, so a record's state is seldom its previous record's next state;
- ``tiny-many``: the domains with the smallest states (2-8 atoms), one agent per three
  records;
- ``long-names``: every object named with 100-250 characters (URNs);
- ``mixed``: each agent writes in one of the ways above but the last two (a fleet of
  several producers' agents).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fleets
from fleets import Fleet, Step, _Agent

from tests.paths import DATA, IPC, STOCHASTIC

Event = dict[str, object]


@dataclass(frozen=True)
class Spacing:
    """Where a JSON writer puts whitespace (all of it, so any writer can be spelt)."""

    open: str = ""
    """After ``[`` and ``{``."""
    close: str = ""
    """Before ``]`` and ``}``."""
    comma: str = ","
    colon: str = ":"

    def dump(self, v: object) -> str:
        if isinstance(v, dict):
            inner = self.comma.join(json.dumps(k) + self.colon + self.dump(x)
                                    for k, x in v.items())
            return "{" + self.open + inner + self.close + "}" if inner else "{}"
        if isinstance(v, list | tuple):
            inner = self.comma.join(self.dump(x) for x in v)
            return "[" + self.open + inner + self.close + "]" if inner else "[" + self.open + "]"
        return json.dumps(v)


JACKSON = Spacing(" ", " ", ", ", " : ")


def _irregular(rng: random.Random) -> Spacing:
    ws = ["", " ", "  ", "\t", " \t"]
    return Spacing(rng.choice(ws), rng.choice(ws), rng.choice(ws) + "," + rng.choice(ws),
                   rng.choice(ws) + ":" + rng.choice(ws))


# ----------------------------------------------------------------------------- times

def _python(t: datetime) -> str:
    return t.isoformat()


def _javascript(t: datetime) -> str:  # Date.prototype.toISOString
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _go(t: datetime) -> str:  # time.RFC3339Nano: trailing zeros (and the dot) dropped
    frac = f"{t.microsecond:06d}{t.second * 7 % 1000:03d}".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def _java(t: datetime) -> str:  # Instant.toString: 0, 3, 6 or 9 digits
    frac = f"{t.microsecond:06d}000"
    while frac.endswith("000"):
        frac = frac[:-3]
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


# ----------------------------------------------------------------------------- agents

FIELDS = ("type", "agent_id", "family", "episode_id", "step", "time", "state", "action",
          "next_state", "executed")
LATE = ("episode_id", "step", "family", "state", "action", "next_state", "executed",
        "agent_id", "type")


@dataclass
class Style:
    """How one fleet's producers write (``None`` spacing: ``json.dumps``'s)."""

    spacing: Callable[[random.Random], Spacing | None] = lambda rng: None
    keys: tuple[str, ...] = FIELDS
    times: tuple[Callable[[datetime], str], ...] = (_python,)
    atoms: str = "sorted"
    """``sorted``, ``insertion`` (in the order they became true) or ``shuffled``."""
    trace: int = 0
    """Most steps per ``trace`` event; 0: ``transition`` events."""
    episodes: int = 1
    """Episodes each agent runs at once, its records interleaving them."""


@dataclass
class _Producer:
    agent_id: str
    family: str
    cursors: list[_Agent]
    style: Style
    spacing: Spacing | None
    time: Callable[[datetime], str]
    order: dict[str, list[tuple[str, ...]]] = field(default_factory=dict)
    """Insertion order: each episode's last state as written."""

    def write(self, event: Event) -> bytes:
        out = {k: event[k] for k in self.style.keys if k in event}
        out.update((k, v) for k, v in event.items() if k not in out)
        if self.spacing is None:
            return json.dumps(out).encode()
        return self.spacing.dump(out).encode()


def _ordered(p: _Producer, episode: str, rng: random.Random,
             before: list[list[str]], after: list[list[str]]
             ) -> tuple[list[list[str]], list[list[str]]]:
    """The two states as the producer writes them."""
    style = p.style
    if style.atoms == "shuffled":
        return rng.sample(before, len(before)), rng.sample(after, len(after))
    if style.atoms == "sorted":
        return before, after
    prev = p.order.get(episode)
    now = [tuple(a) for a in before]
    if prev is None or sorted(prev) != sorted(now):
        prev = rng.sample(now, len(now))  # an episode's first state: any order
    keep = set(map(tuple, after))
    nxt = [a for a in prev if a in keep]
    had = set(prev)
    nxt += [tuple(a) for a in after if tuple(a) not in had]
    p.order[episode] = nxt
    if len(p.order) > 8:
        p.order.pop(next(iter(p.order)))
    return [list(a) for a in prev], [list(a) for a in nxt]


def _steps(cursor: _Agent, rng: random.Random, most: int) -> tuple[int, str, list[Step]]:
    pos, episode, s = cursor.next(rng)
    steps = [s]
    want = rng.randint(2, most) if most > 1 else 1
    while len(steps) < want and cursor.pos < len(cursor.trace):
        steps.append(cursor.next(rng)[2])
    return pos, episode, steps


def _event(p: _Producer, rng: random.Random, when: datetime | None) -> Event:
    style = p.style
    cursor = rng.choice(p.cursors)
    pos, episode, steps = _steps(cursor, rng, style.trace)
    head: Event = {"agent_id": p.agent_id, "family": p.family, "episode_id": episode}
    if when is not None:
        head["time"] = p.time(when)
    if style.trace:
        states = [steps[0][0], *(s[2] for s in steps)]
        if style.atoms != "sorted":
            states = [rng.sample(s, len(s)) for s in states]
        return {"type": "trace", **head, "start_step": pos, "states": states,
                "actions": [s[1] for s in steps], "executed": [s[3] for s in steps]}
    before, action, after, executed = steps[0]
    state, next_state = _ordered(p, episode, rng, before, after)
    return {"type": "transition", **head, "step": pos, "state": state, "action": action,
            "next_state": next_state, "executed": executed}


def produce(name: str, styles: list[Style], sources: dict[str, tuple[Path, list[list[Step]],
                                                                    set[str]]],
            agents: int, transitions: int, seed: int,
            rename: Callable[[str, set[str]], Callable[[list[str]], list[str]] | None]
            = lambda family, objects: None) -> Fleet:
    """``transitions`` events of ``agents`` producers, each record from a random one, each
    producer writing in one of ``styles``."""
    rng = random.Random(seed)
    families = {n: s[0] for n, s in sources.items()}
    fams = sorted(families)
    renames = {f: rename(f, sources[f][2]) for f in fams}
    producers = []
    for k in range(agents):
        fam = fams[k % len(fams)]
        aid = f"{fam}-{rng.getrandbits(48):012x}-{k}"
        style = styles[k % len(styles)]
        cursors = [_Agent(f"{aid}.{c}" if style.episodes > 1 else aid, fam,
                          sources[fam][1], renames[fam]) for c in range(style.episodes)]
        producers.append(_Producer(aid, fam, cursors, style, style.spacing(rng),
                                   rng.choice(style.times)))
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    events, ids = [], []
    for n in range(transitions):
        p = producers[rng.randrange(agents)]
        when = t0 + timedelta(microseconds=n * 997 + rng.randrange(997)) \
            if "time" in p.style.keys else None
        events.append(p.write(_event(p, rng, when)))
        ids.append(p.agent_id)
    return Fleet(name, families, events, ids)


def _urn(rng: random.Random) -> Callable[[str, set[str]], Callable[[list[str]], list[str]]]:
    def rename(family: str, objects: set[str]) -> Callable[[list[str]], list[str]]:
        # wire.Name allows 256 characters: the object's own name is kept whole.
        long = {o: (f"urn:fleet:{family}:site-{rng.getrandbits(64):016x}:" + "/".join(
            f"{rng.getrandbits(48):012x}" for _ in range(rng.randint(6, 16))))[
                :rng.randint(100, 250) - len(o) - 1] + f":{o}" for o in objects}
        return lambda atom: [atom[0], *(long.get(o, o) for o in atom[1:])]
    return rename


def _mixed(rng: random.Random) -> dict[str, tuple[Path, list[list[Step]], set[str]]]:
    dirs = [(IPC / n, "problem.pddl") for n in sorted(p.name for p in IPC.iterdir() if p.is_dir())]
    dirs += [(DATA / "classic" / n, "problem.pddl") for n in ("blocksworld", "gripper", "miconic")]
    return fleets._sources(dirs, rng, episodes=8, length=80)


def _tiny(rng: random.Random) -> dict[str, tuple[Path, list[list[Step]], set[str]]]:
    dirs = [(DATA / "classic" / n, "problem.pddl") for n in ("blocksworld", "gripper", "miconic")]
    dirs += [(DATA / "own" / n, "problem.pddl") for n in ("hoist", "shuttle")]
    dirs += [(STOCHASTIC / "explodingblocks", "problem-1.pddl")]
    return fleets._sources(dirs, rng, episodes=20, length=40)


STYLES: dict[str, Style] = {
    "dumps": Style(),
    "compact": Style(spacing=lambda rng: Spacing(),
                     times=(_javascript, _go, _java)),
    "jackson": Style(spacing=lambda rng: JACKSON),
    "irregular": Style(spacing=_irregular),
    "keys-late": Style(keys=LATE),
    "traces": Style(trace=40),
    "unsorted": Style(atoms="insertion"),
    "shuffled": Style(atoms="shuffled"),
    "interleaved": Style(episodes=3),
}


def _kind(name: str) -> Callable[[int], Fleet]:
    def make(transitions: int, seed: int = 17) -> Fleet:
        rng = random.Random(seed)
        if name == "tiny-many":
            return produce(name, [Style()], _tiny(rng), max(50, transitions // 3),
                           transitions, seed)
        sources = _mixed(rng)
        agents = max(100, transitions // 50)
        if name == "long-names":
            return produce(name, [Style()], sources, agents, transitions, seed, _urn(rng))
        if name == "mixed":
            # Every way at once, one per agent; traces shorter, so that their steps are
            # not most of the fleet's.
            styles = [replace(s, trace=min(s.trace, 6)) for s in STYLES.values()]
            return produce(name, styles, sources, agents, transitions, seed)
        style = STYLES[name]
        # A trace event holds ~20 steps: about as many steps as the other fleets.
        n = transitions // (style.trace // 2) if style.trace else transitions
        return produce(name, [style], sources, agents, n, seed)
    make.__doc__ = f"The {name!r} fleet (benchmarks/producers.py)."
    return make


PRODUCED: dict[str, Callable[[int], Fleet]] = {
    n: _kind(n) for n in (*STYLES, "tiny-many", "long-names", "mixed")}
