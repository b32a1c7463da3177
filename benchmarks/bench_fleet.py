"""Issue 13's in-process rows on a fleet other than the simulated one
(``bench_daemon.py --fleet DIR`` or ``--generated NAME``; docs/performance.md).

The fleet is read from files (``fleets.load``): its families' domain models and its
stream of wire events, which are handled exactly as ``capwatch run`` handles a JSONL
source's lines (keyed by agent id, as a Kafka producer keys them). Rows:

- decode, per message, both decoders;
- pipeline, first pass: the whole stream in order, agents admitted as they appear;
- pipeline, steady state: the same stream again (new offsets) with every agent held,
  ``--repeat`` times (min and median);
- admission: records of agents never seen before (record k of the stream re-keyed to a
  new id, every other byte unchanged), the first ``admit[0]`` and on to ``admit[1]``;
- over Kafka (unless ``--no-kafka``): the stream on a real broker, ``capwatch run`` against
  bare consumers of the same topic, both clients (``bench_kafka.kafka_rows``);
- memory: 100,000 agents seen under the default limit; in fresh processes, agents seen
  once, all held, and agents that replayed the first 30 records of a fleet agent each,
  then went idle, all held.

CPU seconds of this process (``time.process_time``), the load average printed with them.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast
from unittest import mock

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleets
import planned
import producers
from bench_daemon import Replay, anon_bytes, feed, rss_bytes

from capwatch import native
from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.assess.agent import AgentQuery, AgentUnavailable
from capwatch.contracts import wire, wire_atoms, wire_fast
from capwatch.contracts.ports import Record
from capwatch.contracts.wire import DeadLetter
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.heap import release_freed, settle_heap
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.model.pddl_reader import read_domain


class NoAgents:
    """Nobody to query: an assessment would wait for workers, which are not started."""

    def agent(self, agent_id: str, family: str) -> AgentQuery:
        raise AgentUnavailable(f"{agent_id} ({family}): the benchmark queries no agent")


def pipeline(tmp: str, families: dict[str, Path], max_agents: int | None = None,
             freeze_idle_after_s: float | None = None) -> Pipeline:
    limits: dict[str, float] = {}
    if max_agents:
        limits["max_agents_in_memory"] = max_agents
    if freeze_idle_after_s is not None:
        limits["freeze_idle_after_s"] = freeze_idle_after_s
    cfg = DaemonConfig(**cast("dict[str, Any]", {
        "replica_id": "bench", "store": {"url": f"sqlite:///{Path(tmp) / 'm.db'}"},
        "families": {f: {"domain": str(d)} for f, d in families.items()},
        "output": {"kind": "log"}, "http": {"enabled": False},
        **({"limits": limits} if limits else {}),
    }))
    svc = build_service(cfg, publisher=MemoryPublisher(), source=Replay([]), agents=NoAgents())
    p = svc.pipeline
    settle_heap()  # as `capwatch run` does before its main loop
    p.open()
    return p


def records(values: list[bytes], ids: list[str], offset: int) -> list[Record]:
    return [Record("bench", 0, offset + i, a.encode(), v)
            for i, (a, v) in enumerate(zip(ids, values, strict=True))]


def new_agents(fleet: fleets.Fleet, first: int, n: int, offset: int) -> list[Record]:
    """``n`` agents never seen: record k of the stream, re-keyed to agent ``new-k``."""
    m = len(fleet.events)
    ids = [f"new-{k}" for k in range(first, first + n)]
    values = [fleets.rekey(fleet.events[(first + i) % m], a) for i, a in enumerate(ids)]
    return records(values, ids, offset)


def replays(agents: list[list[bytes]], ks: Sequence[int], steps: int, offset: int,
            prefix: str = "idle-") -> list[Record]:
    """New agents ``prefix``k for k in ``ks``, agent k replaying the first ``steps`` records
    of ``agents[k mod len(agents)]`` (cycled if it has fewer), interleaved step by step as
    a fleet's stream is."""
    values, ids = [], []
    for s in range(steps):
        for k in ks:
            own = agents[k % len(agents)]
            ids.append(f"{prefix}{k}")
            values.append(fleets.rekey(own[s % len(own)], ids[-1]))
    return records(values, ids, offset)


class _Family(msgspec.Struct):
    family: str


class _Shape(msgspec.Struct):
    family: str
    action: list[str] | None = None
    state: list[list[str]] | None = None
    actions: list[list[str]] | None = None
    """A trace event's (its states' atoms are not counted: a few of them are)."""


def describe(fleet: fleets.Fleet) -> str:
    """Agents, families, message size, transitions per message, atoms per state, share of
    probabilistic actions."""
    dec = msgspec.json.Decoder(_Shape)
    probabilistic = {f: {a.name for a in read_domain(d).actions if len(a.outcomes) > 1}
                     for f, d in fleet.families.items()}
    atoms = stoch = steps = states = 0
    for v in fleet.events:
        s = dec.decode(v)
        actions = s.actions if s.actions is not None else [s.action] if s.action else []
        steps += len(actions)
        if s.state is not None:
            atoms += len(s.state)
            states += 1
        risky = probabilistic.get(s.family, ())
        stoch += sum(a[0] in risky for a in actions if a)
    n = len(fleet.events)
    return (f"{len(set(fleet.agent_ids)):,} agents, {len(fleet.families)} families, "
            f"{n:,} messages of {sum(map(len, fleet.events)) // n:,} bytes, "
            + (f"{steps / n:.1f} transitions per message, " if steps != n else "")
            + (f"{atoms / states:.0f} atoms per state, " if states else "")
            + f"{stoch / max(1, steps):.0%} probabilistic actions")


def decode_paths(fleet: fleets.Fleet) -> str:
    """Where the hot path's decoder went over the stream in order, each agent's memo kept
    as the pipeline keeps it: messages handed to the schema's decoder (the fast path
    refused them), and states over wire_fast's small-state size parsed whole (not
    recognised from the memo nor cut into known pieces; a trace event's states are
    always parsed with the event). A fleet that falls off a fast path shows here."""
    counts = {"schema": 0, "whole": 0, "steps": 0}
    small = getattr(wire_fast, "_SMALL_STATE", 0)
    schema, whole = wire.decode, wire_fast._STATE

    def to_schema(*args: Any, **kwargs: Any) -> Any:
        counts["schema"] += 1
        return schema(*args, **kwargs)

    def parse(text: Any) -> Any:
        counts["whole"] += len(text) > small
        return whole(text)

    memos: dict[str, list[wire_fast.StateMemo | None]] = {}
    wire_atoms.forget()
    with mock.patch.object(wire, "decode", to_schema), \
            mock.patch.object(wire_fast, "_STATE", parse):
        for a, v in zip(fleet.agent_ids, fleet.events, strict=True):
            got = wire_fast.decode(v, key=a.encode(), memo=memos.setdefault(a, [None]))
            counts["steps"] += len(got) if isinstance(got, list) else 1
    n = len(fleet.events)
    return (f"  decode paths, in order with each agent's memo: {counts['schema'] / n:.1%} of "
            f"messages to the schema's decoder, {counts['whole'] / (2 * counts['steps']):.1%}"
            f" of states parsed whole ({counts['steps'] / n:.1f} transitions per message)")


def memory_child(fleet_dir: Path, agents: int, steps: int, limited: bool,
                 frozen: bool = False) -> int:
    """In a fresh process (no earlier phase's freed memory counts), holding only the first
    ``steps`` records of each fleet agent (not the stream): admit ``agents`` new agents
    that replay them, in chunks, each chunk going idle for two checkpoints before the
    next; all held, or (``limited``) under the default ``limits.max_agents_in_memory``.
    Prints the RSS before and after. ``frozen``: with ``limits.freeze_idle_after_s`` 0,
    so the idle agents are held as bytes, as the default 60 s does to agents idle that
    long; otherwise not however long the run takes, except (``limited``) past half the
    limit, where the daemon holds idle agents as bytes at once (daemon/eviction.py). All
    held: under a limit twice the agents, which never presses."""
    configure_logging("error", "json")
    fleet = fleets.load(fleet_dir)
    families = fleet.families
    own = [got[:max(steps, 2)] for got in fleet.by_agent().values()]
    del fleet
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)  # the stream read above is the benchmark's, not the daemon's
    with tempfile.TemporaryDirectory() as tmp:
        p = pipeline(tmp, families, max_agents=None if limited else 2 * agents + 10_000,
                     freeze_idle_after_s=0.0 if frozen else 1e9)
        # Every code path and family model loaded before the first figure.
        # An agent of every family among them: a family's model is the fleet's memory,
        # not its agents' (a fleet of 2,000 families counted ~40 KB a model per agent).
        family = msgspec.json.Decoder(_Family).decode
        firsts = {family(got[0]).family: k for k, got in reversed(list(enumerate(own)))}
        warm = replays(own, sorted({*range(min(len(own), 200)), *firsts.values()}),
                       max(steps, 2), 0, "warm-")
        feed(p, warm)
        offset = len(warm)
        del warm
        gc.collect()
        # The warm-up's records are the benchmark's, freed in the middle of the heap:
        # returned as the daemon's next trim would (see below).
        release_freed()
        rss0, held0 = rss_bytes(), len(p.registry)
        chunk = max(1, 5_000 // steps)
        for first in range(0, agents, chunk):
            got = replays(own, range(first, min(agents, first + chunk)), steps, offset)
            offset += len(got)
            feed(p, got)
            p.checkpoint()
            p.checkpoint()
        del got
        assert isinstance(p.source, Replay)
        p.source.records = []  # the benchmark's records, held by its source until replaced
        gc.collect()
        # Freed after the last checkpoint's trim, the last chunk's records (~5.5 KB each on
        # fleets of large messages) stayed resident: 40 agents' on 10,000 agents, 80 on
        # 20,000, ~650 B of the per-agent growth between the two (docs/performance.md,
        # session 16). The daemon trims after its next checkpoint that froze or evicted.
        release_freed()
        print(json.dumps({"rss0": rss0, "rss": rss_bytes(), "anon": anon_bytes(),
                          "held": len(p.registry) - held0,
                          "frozen": sum(w.frozen for w in p.registry),
                          "evicted": p.checkpoints.evictions, "dead": p.dead_letters,
                          "limit": p.config.limits.max_agents_in_memory}))
        p.store.close()
    return 0


def run_memory_child(fleet_dir: Path, agents: int, steps: int, limited: bool = False,
                     frozen: bool = False) -> dict[str, int]:
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("bench_daemon.py")),
                          "--memory-child", str(agents), str(steps), "--fleet", str(fleet_dir),
                          *(["--memory-limited"] if limited else []),
                          *(["--frozen"] if frozen else [])],
                         check=True, capture_output=True, text=True).stdout
    result: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return result


def run(fleet_dir: Path, *, quick: bool, repeat: int, memory: bool = True,
        kafka: bool = False) -> None:
    configure_logging("error", "json")
    fleet = fleets.load(fleet_dir)
    admit = (2_000, 5_000) if quick else (20_000, 50_000)
    seen_total = 10_000 if quick else 100_000
    idle_agents = 2_000 if quick else 20_000
    print(f"fleet {fleet.name}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
          f"{native.describe()}; "
          f"{describe(fleet)}", flush=True)
    sample = fleet.events[:20_000]
    for name, decode in (("msgspec (hot path)", wire_fast.decode),
                         ("pydantic (schema)", wire.decode)):
        t0 = time.process_time()
        bad = sum(isinstance(decode(r), DeadLetter) for r in sample)
        s = (time.process_time() - t0) / len(sample)
        print(f"  decode, {name:19} {s * 1e6:7.1f} us CPU/message ({1 / s:10,.0f}/s)"
              f"{f'; {bad} refused' if bad else ''}", flush=True)
    print(decode_paths(fleet), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        p = pipeline(tmp, fleet.families)
        stream = records(fleet.events, fleet.agent_ids, 0)
        s = feed(p, stream) / len(stream)
        print(f"  pipeline, first pass      {s * 1e6:7.1f} us CPU/record "
              f"({1 / s:10,.0f}/s; {len(p.registry):,} agents held, "
              f"{p.dead_letters:,} dead letters)", flush=True)
        offset = len(stream)
        times = []
        for _ in range(repeat):
            again = records(fleet.events, fleet.agent_ids, offset)
            offset += len(again)
            times.append(feed(p, again) / len(again))
        best, mid = min(times), statistics.median(times)
        print(f"  pipeline, steady state    {best * 1e6:7.1f} us CPU/record min, "
              f"{mid * 1e6:.1f} median of {repeat} ({1 / best:10,.0f}/s on one core; load "
              f"{os.getloadavg()[0]:.1f})   target >= 100,000/s", flush=True)
        limit = p.config.limits.max_agents_in_memory
        seen, cpu = 0, 0.0
        for n in admit:
            news = new_agents(fleet, seen, n - seen, offset)
            offset += len(news)
            gc.collect()
            step = feed(p, news)
            t0 = time.process_time()
            p.checkpoint()
            step += time.process_time() - t0
            cpu += step
            print(f"  admitting new agents, {seen:6,} -> {n:6,} {step / (n - seen) * 1e6:5.1f} us "
                  f"CPU/agent ({(n - seen) / step:8,.0f}/s; {p.checkpoints.evictions:,} evicted"
                  f" at limits.max_agents_in_memory {limit:,})"
                  f"   target >= 20,000/s", flush=True)
            seen = n
        del news
        # The stream again with that many agents held: a cost per held agent paid at
        # every turn of the loop shows here (the fleet's own agents may come back from
        # eviction, as after any stretch of silence).
        held = len(p.registry)
        again = records(fleet.events, fleet.agent_ids, offset)
        s = feed(p, again) / len(again)
        print(f"  pipeline, the stream again, {held:,} agents held {s * 1e6:5.1f} us CPU/record "
              f"({1 / s:10,.0f}/s; {p.checkpoints.restores:,} restored)", flush=True)
        p.store.close()
    if kafka:
        from bench_kafka import kafka_rows  # the rows' own module: both Kafka clients

        n = 20_000 if quick else len(fleet.events)
        kafka_rows(([(a.encode(), v) for a, v in zip(fleet.agent_ids[:n], fleet.events[:n],
                                                        strict=True)],
                    fleet.families, NoAgents()), len(set(fleet.agent_ids[:n])))
    if not memory:
        return
    child = run_memory_child(fleet_dir, seen_total, 1, limited=True)
    print(f"  memory, {seen_total:,} agents seen, limit {child['limit']:,} (fresh process): "
          f"whole-process RSS {child['rss'] / 2**20:,.0f} MB (anonymous "
          f"{child['anon'] / 2**20:,.0f} MB), {child['held']:,} held "
          f"({child['frozen']:,} as bytes), "
          f"{child['evicted']:,} evicted   target 100,000 in 512 MB", flush=True)
    child = run_memory_child(fleet_dir, seen_total, 1)
    print(f"  memory, {child['held']:,} agents seen once, all held (fresh process): RSS "
          f"{child['rss'] / 2**20:,.0f} MB (anonymous {child['anon'] / 2**20:,.0f} MB; "
          f"+{(child['rss'] - child['rss0']) / child['held']:,.0f}"
          f" bytes per agent held)", flush=True)
    for frozen in (False, True):
        child = run_memory_child(fleet_dir, idle_agents, 30, frozen=frozen)
        how = (f"idle past limits.freeze_idle_after_s ({child['frozen']:,} held as bytes)"
               if frozen else "idle for less than limits.freeze_idle_after_s")
        print(f"  memory, {child['held']:,} agents that replayed 30 records each, {how}, all "
              f"held (fresh process): +{(child['rss'] - child['rss0']) / child['held']:,.0f}"
              f" bytes RSS per agent held" + ("   target <= 2 KB per idle agent" if frozen
                                              else ""), flush=True)
    # The figure above divides by the agents all the process's growth, including the
    # decoder's process-wide tables (wire_atoms' state texts and pieces, wire_fast's steps
    # and differences: bounded, shared by every agent) filling up during the run. On a
    # fleet whose warm-up leaves them far from full (the outside producer's: 3.8 KB an
    # agent at 10,000 agents, 2.6 KB at 30,000, session 15) that is no agent's cost. What
    # one more idle agent costs is the growth between two runs of different sizes.
    half = run_memory_child(fleet_dir, idle_agents // 2, 30, frozen=True)
    added = (child["rss"] - half["rss"]) / (child["held"] - half["held"])
    print(f"  memory, idle agents held as bytes, {half['held']:,} -> {child['held']:,} agents"
          f" (fresh processes): +{added:,.0f} bytes RSS per agent added (what both runs"
          f" hold cancels: family models, most of the decoder's bounded tables)", flush=True)


def generate(names: list[str], transitions: int, into: Path) -> list[Path]:
    """The generated fleets, written under ``into`` (one directory each)."""
    out = []
    for name in names:
        t0 = time.process_time()
        fleet = {**fleets.GENERATED, "planned": planned.planned,
                 **producers.PRODUCED}[name](transitions)
        out.append(fleets.write(fleet, into / name))
        print(f"(generated {name} in {time.process_time() - t0:.0f} s CPU)", flush=True)
    return out
