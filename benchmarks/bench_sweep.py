"""Issue 13's in-process rows along dimensions the generated fleets do not vary
(``python benchmarks/bench_sweep.py [DIMENSION ...]``; docs/performance.md, Other fleets).

Each point is a synthetic fleet, one thing changed from a base point, so that a row that
moves names what moved it. The domain is generic: ``n`` tuples of ``arity`` objects,
each either ``lo`` or ``hi`` (a state of ``n`` atoms); an action raises or lowers one
tuple. Names (predicates, actions, objects) are padded to ``name_len`` characters. Each
family has a domain file of its own (same actions, its own domain name). Agents walk at
random, their records in random order.

Dimensions: ``atoms`` (state size 10 → 1,000), ``vocabulary`` (atoms a family's agents
name between them, each agent 40 of them: 80 → 8,000), ``families`` (1 → 2,000), ``agents``
(1,000 → 200,000, three records each; past 25,000, half the default
limits.max_agents_in_memory, every agent idle at a checkpoint is held as bytes, and past
50,000 evicted: 30,000 and 50,000 show the first alone), ``arity`` (1 → 6), ``names``
(name length 4 → 64), ``trace`` (transitions per message: 1, ``trace`` events of 10 and 50
steps).

Rows per point: pipeline first pass (every agent admitted as it appears), steady state
(the stream again, every agent held or restored), admission of new agents (the stream's
records re-keyed to new ids), whole-process RSS at the end, and in a fresh process bytes
per idle agent held as bytes (agents that replayed up to 10 records each). CPU seconds of
the point's process (each point runs in a fresh one); the load average is printed with
each point.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_fleet
import fleets
from bench_daemon import feed, rss_bytes

from capwatch.daemon.logs import configure_logging


@dataclass(frozen=True)
class Point:
    atoms: int = 40
    families: int = 4
    agents: int = 1_000
    records: int = 50_000
    """Messages in the stream."""
    arity: int = 2
    name_len: int = 8
    trace: int = 1
    """Steps per message; 1: ``transition`` events."""
    vocabulary: int = 0
    """Tuples the family's agents use between them (0: ``atoms``): each agent's state
    holds ``atoms`` of them, its own draw, so a family names up to twice as many atoms."""

    def label(self) -> str:
        return (f"atoms={self.atoms} families={self.families} agents={self.agents:,} "
                f"records={self.records:,} arity={self.arity} name_len={self.name_len} "
                f"trace={self.trace}"
                + (f" vocabulary={self.vocabulary}" if self.vocabulary else ""))


BASE = Point()
SWEEPS: dict[str, list[Point]] = {
    "atoms": [replace(BASE, atoms=n) for n in (10, 40, 100, 300, 1_000)],
    "vocabulary": [replace(BASE, vocabulary=n) for n in (40, 400, 4_000)],
    "families": [replace(BASE, families=n, agents=max(1_000, 2 * n)) for n in (1, 20, 200, 2_000)],
    "agents": [replace(BASE, agents=n, records=3 * n)
               for n in (1_000, 10_000, 30_000, 50_000, 200_000)],
    "arity": [replace(BASE, arity=n) for n in (1, 3, 6)],
    "names": [replace(BASE, name_len=n) for n in (4, 16, 64)],
    "trace": [replace(BASE, trace=n, records=BASE.records // n) for n in (1, 10, 50)],
}


def _pad(stem: str, n: int) -> str:
    return stem if len(stem) >= n else stem + "-" + "x" * (n - len(stem) - 1)


def domain_text(name: str, p: Point) -> str:
    lo, hi = _pad("lo", p.name_len), _pad("hi", p.name_len)
    params = " ".join(f"?a{i}" for i in range(p.arity))
    typed = " ".join(f"?a{i} - obj" for i in range(p.arity))

    def action(verb: str, frm: str, to: str) -> str:
        return (f"  (:action {_pad(verb, p.name_len)}\n    :parameters ({typed})\n"
                f"    :precondition ({frm} {params})\n"
                f"    :effect (and (not ({frm} {params})) ({to} {params})))\n")

    return (f"(define (domain {name})\n  (:requirements :strips :typing)\n  (:types obj)\n"
            f"  (:predicates ({lo} {typed}) ({hi} {typed}))\n"
            + action("raise", lo, hi) + action("lower", hi, lo) + ")\n")


def generate(p: Point, into: Path, seed: int = 5) -> Path:
    """The point's fleet, written as ``fleets.write`` writes one."""
    rng = random.Random(seed)
    models = into.parent / "models"
    models.mkdir(parents=True, exist_ok=True)
    families: dict[str, Path] = {}
    for f in range(p.families):
        path = models / f"sweep-{f}.pddl"
        path.write_text(domain_text(f"sweep-{f}", p))
        families[f"sweep-{f}"] = path
    m = 2
    pool = max(p.atoms, p.vocabulary)
    while m ** p.arity < pool:
        m += 1
    objects = [_pad(f"o{i}", p.name_len) for i in range(m)]
    every = [[objects[(i // m ** j) % m] for j in range(p.arity)] for i in range(pool)]
    lo, hi = _pad("lo", p.name_len), _pad("hi", p.name_len)
    up, down = _pad("raise", p.name_len), _pad("lower", p.name_len)
    fams = sorted(families)
    own = [rng.sample(every, p.atoms) for _ in range(p.agents)]
    states = [[rng.random() < 0.5 for _ in range(p.atoms)] for _ in range(p.agents)]

    def atoms(k: int) -> list[list[str]]:
        return sorted([hi if b else lo, *t] for b, t in zip(states[k], own[k], strict=True))

    def walk(k: int) -> tuple[list[list[str]], list[str], list[list[str]]]:
        bits, tuples = states[k], own[k]
        before = atoms(k)
        i = rng.randrange(len(tuples))
        action = [down if bits[i] else up, *tuples[i]]
        bits[i] = not bits[i]
        return before, action, atoms(k)

    order = [k for k in range(p.agents) for _ in range(-(-p.records // p.agents))]
    rng.shuffle(order)
    events, ids, step = [], [], [0] * p.agents
    for k in order[:p.records]:
        agent = f"agent-{k:07d}"
        head = {"agent_id": agent, "family": fams[k % len(fams)], "episode_id": f"{agent}-e"}
        if p.trace == 1:
            before, action, after = walk(k)
            event = {"type": "transition", **head, "step": step[k], "state": before,
                     "action": action, "next_state": after, "executed": True}
        else:
            steps = [walk(k) for _ in range(p.trace)]
            event = {"type": "trace", **head, "start_step": step[k],
                     "states": [steps[0][0], *(s[2] for s in steps)],
                     "actions": [s[1] for s in steps]}
        step[k] += p.trace
        events.append(json.dumps(event).encode())
        ids.append(agent)
    return fleets.write(fleets.Fleet("sweep", families, events, ids), into)


def measure(p: Point, tmp: Path, admit: int, memory_agents: int) -> dict[str, float]:
    fleet_dir = generate(p, tmp / "fleet")
    fleet = fleets.load(fleet_dir)
    out: dict[str, float] = {"load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as store:
        rss0 = rss_bytes()
        pipe = bench_fleet.pipeline(store, fleet.families)
        stream = bench_fleet.records(fleet.events, fleet.agent_ids, 0)
        n = len(stream)
        out["first_us"] = feed(pipe, stream) / n * 1e6
        offset, times = n, []
        for _ in range(2):
            again = bench_fleet.records(fleet.events, fleet.agent_ids, offset)
            offset += n
            times.append(feed(pipe, again) / n)
        del again
        out["steady_us"] = min(times) * 1e6
        out["steady_us_step"] = out["steady_us"] / p.trace
        news = bench_fleet.new_agents(fleet, 0, admit, offset)
        gc.collect()
        cpu = feed(pipe, news)
        t0 = time.process_time()
        pipe.checkpoint()
        cpu += time.process_time() - t0
        out["admit_per_s"] = admit / cpu
        del news, stream
        gc.collect()
        out["rss_mb"] = rss_bytes() / 2**20
        out["rss_growth_mb"] = (rss_bytes() - rss0) / 2**20
        out["held"] = len(pipe.registry)
        out["dead"] = pipe.dead_letters
        pipe.store.close()
    child = bench_fleet.run_memory_child(fleet_dir, memory_agents, min(10, max(1, p.records
                                                                            // p.agents)),
                                         frozen=True)
    out["idle_bytes"] = (child["rss"] - child["rss0"]) / max(1, child["held"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dimensions", nargs="*", metavar="DIMENSION",
                        help=f"any of {', '.join(SWEEPS)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    parser.add_argument("--point", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.point:
        # One point in a process of its own: no earlier point's caches, heap or
        # process-wide vocabulary count in its figures.
        configure_logging("error", "json")
        given = json.loads(args.point)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.process_time()
            r = measure(Point(**given["point"]), Path(tmp), given["admit"], given["memory"])
        print(json.dumps({**r, "cpu": time.process_time() - t0}))
        return 0
    unknown = set(args.dimensions) - set(SWEEPS)
    if unknown:
        parser.error(f"unknown dimension(s) {', '.join(sorted(unknown))}")
    configure_logging("error", "json")
    admit, memory_agents = (2_000, 2_000) if args.quick else (20_000, 20_000)
    print(f"sweep: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    for dim in args.dimensions or list(SWEEPS):
        for p in SWEEPS[dim]:
            if args.quick:
                p = replace(p, agents=max(1, p.agents // 10), records=max(1, p.records // 10),
                            families=max(1, min(p.families, p.agents // 10)))
            point = {"point": dataclasses.asdict(p), "admit": admit, "memory": memory_agents}
            out = subprocess.run([sys.executable, __file__, "--point", json.dumps(point)],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(f"{dim:8} {p.label()}: first pass {r['first_us']:6.1f} us/record, steady "
                  f"{r['steady_us']:6.1f} us/record ({r['steady_us_step']:.1f} per step), "
                  f"admission {r['admit_per_s']:7,.0f}/s, RSS {r['rss_mb']:,.0f} MB "
                  f"(+{r['rss_growth_mb']:,.0f}, {r['held']:,.0f} held), idle agent as bytes "
                  f"{r['idle_bytes']:,.0f} B, {r['dead']:.0f} dead letters; load "
                  f"{r['load']:.1f} ({r['cpu']:.0f} s CPU)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
