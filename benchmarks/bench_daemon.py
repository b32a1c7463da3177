"""The daemon at fleet scale on one process (issue 13's table, the rows measured here).

- decode: wire bytes → validated transitions, the hot path's msgspec decoder and the
  pydantic schema it falls back to, per message;
- pipeline: the simulated fleet's bytes through decode, vocabulary check, the per-agent
  monitor, drift detectors and checkpoints, with a SQLite store and an in-memory
  publisher, no drift (so no assessment), after every agent was admitted: the
  steady-state cost per transition;
- admission: transitions of agents never seen before (each id once), per agent, for the
  first 20,000 and on to 50,000 (where the default ``limits.max_agents_in_memory``
  starts evicting), with the checkpoint that writes their activity rows;
- memory: the whole process's resident set size (``/proc/self/statm``, the benchmark's
  own data included) with 100,000 agents seen, under the default limit (the rest
  evicted) and, in a fresh process, with all 100,000 held; bytes per agent held (RSS
  growth over agents admitted, in a fresh process, for agents seen once and for agents
  that ran 30 transitions each and went idle) and per agent evicted (RSS growth while
  the held number stays at the limit);
- produce → published alert for a hard inconsistency at half the measured maximum rate
  over a real broker: benchmarks/bench_alert_latency.py (wall seconds, see there).

Times are CPU seconds of this process (``time.process_time``), so other load on the
machine skews them less than wall time would; the machine's core count and load are
printed with them. ``--quick`` runs smaller sizes (a smoke test of the benchmark).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, cast

from capwatch import native
from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.adapters.sim.fleet import FamilySpec, SimulatedFleet
from capwatch.contracts import wire, wire_fast
from capwatch.contracts.ports import Record
from capwatch.contracts.wire import DeadLetter
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.heap import release_freed, settle_heap
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import FleetDirectory, Service, build_service
from capwatch.model.pddl_reader import read_domain, read_problem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "capwatch" / "examples"


def fleet(agents_per_family: int) -> SimulatedFleet:
    families = {
        "rover-v1": FamilySpec("rover-v1", read_domain(EXAMPLES / "rover.pddl"),
                               read_problem(EXAMPLES / "rover-problem.pddl")),
        "courier-v1": FamilySpec("courier-v1", read_domain(EXAMPLES / "courier.pddl"),
                                 read_problem(EXAMPLES / "courier-problem.pddl")),
    }
    return SimulatedFleet.build(families, agents_per_family, seed=1)


class Replay:
    """A pre-generated stream, so the fleet simulation is not part of the measurement."""

    name = "bench"

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.pos = 0

    def start(self, on_assign: object, on_revoke: object, resume: object) -> None:
        del on_revoke, resume
        on_assign({0})  # type: ignore[operator]

    def poll(self, timeout_s: float) -> list[Record]:
        batch = self.records[self.pos:self.pos + 500]
        self.pos += len(batch)
        return batch

    def commit(self, offsets: object) -> None:
        """Progress is the store's checkpoint."""

    def exhausted(self) -> bool:
        return self.pos >= len(self.records)

    def lag(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        """Nothing to release."""


def service(tmp: str, f: SimulatedFleet, records: list[Record],
            max_agents: int | None = None, **limits: Any) -> Service:
    if max_agents:
        limits["max_agents_in_memory"] = max_agents
    cfg = DaemonConfig(**cast("dict[str, Any]", {
        "replica_id": "bench", "store": {"url": f"sqlite:///{Path(tmp) / 'm.db'}"},
        "families": {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl")},
                     "courier-v1": {"domain": str(EXAMPLES / "courier.pddl")}},
        "output": {"kind": "log"}, "http": {"enabled": False},
        **({"limits": limits} if limits else {}),
    }))
    return build_service(cfg, publisher=MemoryPublisher(), source=Replay(records),
                         agents=FleetDirectory(f))


def feed(p: Pipeline, records: list[Record]) -> float:
    """CPU seconds for the main loop to handle ``records``: its turns as ``capwatch run``
    takes them (poll, the batch, prompt alerts, results, the sweep for evidence ripe by
    time, checkpoints when due), not the batch alone."""
    source = p.source
    assert isinstance(source, Replay)
    source.records, source.pos = records, 0
    t0 = time.process_time()
    while not source.exhausted():
        p._step()  # one turn of Pipeline.run, without its outage handling
    return time.process_time() - t0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def anon_bytes() -> int:
    """The anonymous part of the RSS (the heap, ``RssAnon``; 0 where the kernel does not
    say). The rest is pages of mapped files, mostly the shared libraries' code: shared,
    clean, and as many as the page cache happens to map per fault (a freshly installed
    venv's libraries counted ~14 MB more on the same kernel than an older venv's with the
    same versions), so only this part compares across machines and venvs."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def renamed(events: list[bytes], first: int, n: int, offset0: int, steps: int = 1,
            fleet_size: int = 1) -> list[Record]:
    """Records of ``n`` distinct new agents (the simulated events, re-keyed). With
    ``steps`` > 1, new agent k replays the first ``steps`` transitions of simulated agent
    k mod ``fleet_size`` (``events`` interleaves the fleet round by round), the new agents'
    records interleaved the same way."""
    out = []
    offset = offset0
    for step in range(steps):
        for k in range(first, first + n):
            j = step * fleet_size + k % fleet_size if steps > 1 else k % len(events)
            d = json.loads(events[j])
            d["agent_id"] = f"{d['agent_id']}-n{k}"
            out.append(Record("bench", 0, offset, d["agent_id"].encode(),
                              json.dumps(d).encode()))
            offset += 1
    return out


def memory_child(agents: int, steps: int, quick: bool, frozen: bool, traced: bool) -> int:
    """In a fresh process (so no earlier phase's freed memory counts): admit ``agents``
    new agents with ``steps`` transitions each, all held, in chunks, each chunk going idle
    for two checkpoints before the next arrives; print the RSS before and after.

    ``frozen``: with ``limits.freeze_idle_after_s`` 0, so that the second checkpoint holds
    them as bytes (``Registry.compact_idle``), as the default 60 s does to agents idle that
    long; otherwise never (agents idle for less than the setting). ``traced``: also the
    bytes Python and numpy allocated and still hold (tracemalloc), for runs too short for
    the RSS growth to show anything but memory freed by the run itself being reused."""
    configure_logging("error", "json")
    agents_per_family = 20 if quick else 100
    f = fleet(agents_per_family)
    events = [e.value for e in f.events(max(steps, 5))]
    with tempfile.TemporaryDirectory() as tmp:
        svc = service(tmp, f, [], max_agents=agents + 10_000,
                      freeze_idle_after_s=0.0 if frozen else None)
        p = svc.pipeline
        settle_heap()  # as `capwatch run` does before its main loop
        p.open()
        warm = renamed(events, 10**9, 2 * agents_per_family, 0, steps, 2 * agents_per_family)
        feed(p, warm)  # every code path and family model loaded before the first figure
        offset = len(warm)
        del warm
        gc.collect()
        # The warm-up's records are the benchmark's, freed in the middle of the heap:
        # returned as the daemon's next trim would (see below).
        release_freed()
        if traced:
            tracemalloc.start()
        rss0, held0 = rss_bytes(), len(p.registry)
        chunk = max(1, 5_000 // steps)
        for first in range(0, agents, chunk):
            records = renamed(events, first, min(chunk, agents - first), offset, steps,
                              2 * agents_per_family)
            offset += len(records)
            feed(p, records)
            # These agents are idle now: two scheduled checkpoints later (10 s at the
            # default interval) their watches are trimmed (Registry.compact_idle).
            p.checkpoint()
            p.checkpoint()
        del records
        assert isinstance(p.source, Replay)
        p.source.records = []  # the benchmark's last chunk, held by its source until replaced
        gc.collect()
        # Freed after the last checkpoint's trim, the last chunk's records (~5.5 KB each on
        # fleets of large messages) stayed resident: 40 agents' on 10,000 agents, 80 on
        # 20,000, ~650 B of the per-agent growth between the two (docs/performance.md,
        # session 16). The daemon trims after its next checkpoint that froze or evicted.
        release_freed()
        assert p.dead_letters == 0 and p.checkpoints.evictions == 0
        traced_bytes = tracemalloc.get_traced_memory()[0] if traced else 0
        n_frozen = sum(w.frozen for w in p.registry)
        assert n_frozen >= len(p.registry) - held0 if frozen else n_frozen == 0
        ran = [len(w.last_executed) for w in p.registry]
        print(json.dumps({"rss0": rss0, "rss": rss_bytes(), "anon": anon_bytes(),
                          "held": len(p.registry) - held0, "traced": traced_bytes,
                          "actions": sum(ran) / len(ran), "tables": len(p.drift) / len(ran)}))
        p.store.close()
    return 0


def run_memory_child(agents: int, steps: int, quick: bool, frozen: bool = False,
                     traced: bool = False) -> dict[str, float]:
    import subprocess
    out = subprocess.run([sys.executable, __file__, "--memory-child", str(agents), str(steps),
                          *(["--quick"] if quick else []), *(["--frozen"] if frozen else []),
                          *(["--traced"] if traced else [])],
                         check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


GENERATED_FLEETS = ("ipc-mixed", "own-objects-bursty", "stochastic", "planned")
"""benchmarks/fleets.py's generated fleets and benchmarks/planned.py's (named here so that
--help needs no import)."""
PRODUCER_FLEETS = ("dumps", "compact", "jackson", "irregular", "keys-late", "traces",
                   "unsorted", "shuffled", "interleaved", "tiny-many", "long-names", "mixed")
"""benchmarks/producers.py's: one fleet written the ways other producers write."""


def other_fleets(args: argparse.Namespace) -> int:
    """The in-process rows on fleets given as files or generated (benchmarks/bench_fleet.py)."""
    import bench_fleet

    dirs: list[Path] = list(args.fleet)
    with tempfile.TemporaryDirectory() as tmp:
        if args.generated:
            names = [n for g in args.generated
                     for n in {"all": GENERATED_FLEETS, "producers": PRODUCER_FLEETS}.get(g, (g,))]
            dirs += bench_fleet.generate(names, args.transitions,
                                         args.write_fleets or Path(tmp))
        for d in dirs:
            bench_fleet.run(d, quick=args.quick, repeat=args.repeat,
                            memory=not args.no_memory, kafka=not args.no_kafka)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-kafka", action="store_true",
                        help="skip the rows over a real broker (needs java, or "
                             "KAFKA_BOOTSTRAP_SERVERS); with --fleet/--generated too")
    parser.add_argument("--memory-child", nargs=2, type=int, metavar=("AGENTS", "STEPS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--memory-limited", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fleet", type=Path, action="append", default=[], metavar="DIR",
                        help="measure the in-process rows on this fleet instead: DIR holds "
                             "<family>.pddl (or <family>/domain.pddl) files and events.jsonl "
                             "(or events.json-seq), wire events as `capwatch run` reads them "
                             "(repeatable)")
    parser.add_argument("--generated", nargs="+", metavar="NAME",
                        choices=["all", "producers", *GENERATED_FLEETS, *PRODUCER_FLEETS],
                        help="measure the in-process rows on generated fleets unlike the "
                             f"simulated one: {', '.join(GENERATED_FLEETS)} or all of them; "
                             "one fleet written as other producers write "
                             f"({', '.join(PRODUCER_FLEETS)}) or all of those (producers)")
    parser.add_argument("--transitions", type=int, default=100_000,
                        help="records per generated fleet (default 100,000)")
    parser.add_argument("--write-fleets", type=Path, metavar="DIR",
                        help="keep the generated fleets in DIR (one directory each)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="steady-state passes over a fleet's stream (default 3)")
    parser.add_argument("--no-memory", action="store_true",
                        help="with --fleet/--generated: skip the fresh-process memory rows")
    parser.add_argument("--frozen", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        agents, steps = args.memory_child
        if args.fleet:
            from bench_fleet import memory_child as fleet_memory_child

            return fleet_memory_child(args.fleet[0], agents, steps, args.memory_limited,
                                      args.frozen)
        return memory_child(agents, steps, args.quick, args.frozen, args.traced)
    if args.fleet or args.generated:
        return other_fleets(args)
    agents_per_family = 20 if args.quick else 100
    rounds = 20 if args.quick else 250
    admit = (2_000, 5_000) if args.quick else (20_000, 50_000)
    seen_total = 10_000 if args.quick else 100_000
    idle_agents, idle_steps = (2_000, 30) if args.quick else (20_000, 30)
    busy_agents, busy_steps = (300, 200) if args.quick else (2_000, 200)

    configure_logging("error", "json")
    f = fleet(agents_per_family)
    events = list(f.events(rounds))
    raw = [e.value for e in events]
    cores = os.cpu_count()
    print(f"daemon benchmark: {cores} cores, load {os.getloadavg()[0]:.1f}, "
          f"{native.describe()}; "
          f"{2 * agents_per_family} simulated agents (rover + PPDDL courier), no drift, "
          f"messages of {sum(map(len, raw)) // len(raw)} bytes")

    for name, decode in (("msgspec (hot path)", wire_fast.decode),
                         ("pydantic (schema)", wire.decode)):
        t0 = time.process_time()
        for r in raw:
            assert not isinstance(decode(r), DeadLetter)
        s = (time.process_time() - t0) / len(raw)
        print(f"  decode, {name:19} {s * 1e6:7.1f} us CPU/message ({1 / s:10,.0f}/s)")

    records = [Record("bench", 0, i, e.agent_id.encode(), e.value)
               for i, e in enumerate(events)]
    with tempfile.TemporaryDirectory() as tmp:
        # --quick: a limit its few agents reach, so eviction is exercised too.
        svc = service(tmp, f, records, max_agents=4_000 if args.quick else None)
        p = svc.pipeline
        settle_heap()  # as `capwatch run` does before its main loop
        p.open()
        warm = 2 * agents_per_family * 5
        feed(p, records[:warm])
        steady = records[warm:]
        s = feed(p, steady) / len(steady)
        assert p.processed == len(records) and p.dead_letters == 0
        print(f"  pipeline, steady state    {s * 1e6:7.1f} us CPU/transition "
              f"({1 / s:10,.0f}/s on one core)   target >= 100,000/s")
        del steady

        limit = p.config.limits.max_agents_in_memory
        offset = len(records)
        seen = 0
        cpu = 0.0
        for n in admit:
            news = renamed(raw, seen, n - seen, offset)
            offset += len(news)
            gc.collect()
            step = feed(p, news)
            # Each new agent's activity row is written by the next checkpoint: counted here,
            # however many checkpoints fell due (by wall time) during the feed.
            t0 = time.process_time()
            p.checkpoint()
            step += time.process_time() - t0
            cpu += step
            print(f"  admitting new agents, {seen:6,} -> {n:6,} {step / (n - seen) * 1e6:5.1f} us "
                  f"CPU/agent ({(n - seen) / step:8,.0f}/s; {n / cpu:8,.0f}/s over all {n:,}; "
                  f"{p.checkpoints.evictions:,} evicted at limits.max_agents_in_memory "
                  f"{limit:,})   target >= 20,000/s")
            seen = n
            del news
            if n == admit[0]:
                # The same steady stream with this many agents held: a cost per held agent
                # paid at every turn of the loop would show here, not with 200 agents.
                again = [Record("bench", 0, offset + i, r.key, r.value)
                         for i, r in enumerate(records[warm:])]
                offset += len(again)
                s = feed(p, again) / len(again)
                print(f"  pipeline, steady state, {len(p.registry):,} agents held "
                      f"{s * 1e6:5.1f} us CPU/transition ({1 / s:10,.0f}/s on one core)")
                del again
        # Agents seen beyond the limit: the held number stays at the limit, the rest are
        # evicted, so RSS growth per agent seen here is what an evicted agent costs.
        gc.collect()
        rss_a, evicted_a = rss_bytes(), p.checkpoints.evictions
        while seen < seen_total:
            chunk = min(5_000, seen_total - seen)
            feed(p, renamed(raw, seen, chunk, offset))
            seen += chunk
            offset += chunk
        gc.collect()
        rss = rss_bytes()
        per_evicted = (rss - rss_a) / max(1, p.checkpoints.evictions - evicted_a)
        print(f"  memory, {seen:,} agents seen, limits.max_agents_in_memory {limit:,}: "
              f"whole-process RSS {rss / 2**20:,.0f} MB (anonymous {anon_bytes() / 2**20:,.0f}"
              f" MB), {len(p.registry):,} held "
              f"({sum(w.frozen for w in p.registry):,} as bytes), "
              f"{p.checkpoints.evictions:,} evicted (+{per_evicted:,.0f} bytes RSS per agent "
              f"evicted)   target 100,000 in 512 MB")
        p.source.close()
        p.store.close()
    child = run_memory_child(seen_total, 1, args.quick)
    print(f"  memory, {child['held']:,} agents seen once, all held (fresh process): "
          f"whole-process RSS {child['rss'] / 2**20:,.0f} MB "
          f"(anonymous {child['anon'] / 2**20:,.0f} MB; {child['rss0'] / 2**20:,.0f} MB before "
          f"them: "
          f"+{(child['rss'] - child['rss0']) / child['held']:,.0f} bytes per agent held)")
    for agents, steps, frozen in ((idle_agents, idle_steps, False),
                                  (idle_agents, idle_steps, True)):
        child = run_memory_child(agents, steps, args.quick, frozen)
        how = ("idle past limits.freeze_idle_after_s, held as bytes (60 s by default, 0 here)"
               if frozen else "idle for less than limits.freeze_idle_after_s")
        print(f"  memory, {child['held']:,.0f} agents that ran {steps} transitions each "
              f"({child['actions']:.1f} actions, {child['tables']:.1f} drift tables), {how}, "
              f"all held (fresh process): +{(child['rss'] - child['rss0']) / child['held']:,.0f}"
              f" bytes RSS per agent held" + ("   target <= 2 KB per idle agent" if frozen else ""))
    # The row above divides by the agents all the growth since the first figure, less
    # what the run reused of memory freed before it: what one more idle agent costs is
    # the growth between two runs of different sizes (as bench_fleet prints it).
    half = run_memory_child(idle_agents // 2, idle_steps, args.quick, True)
    added = (child["rss"] - half["rss"]) / (child["held"] - half["held"])
    print(f"  memory, idle agents held as bytes, {half['held']:,.0f} -> {child['held']:,.0f} "
          f"agents (fresh processes): +{added:,.0f} bytes RSS per agent added")
    # Longer histories: RSS growth would be memory the run freed being reused, so the bytes
    # still allocated (tracemalloc) are what this row gives.
    for frozen in (False, True):
        child = run_memory_child(busy_agents, busy_steps, args.quick, frozen, traced=True)
        print(f"  memory, {child['held']:,.0f} agents that ran {busy_steps} transitions each "
              f"({child['actions']:.1f} actions, {child['tables']:.1f} drift tables), "
              f"{'held as bytes' if frozen else 'idle, not yet held as bytes'}: "
              f"{child['traced'] / child['held']:,.0f} bytes allocated per agent (tracemalloc)")
    if not args.no_kafka:
        from bench_kafka import kafka_rows, simulated  # the rows' own module: both clients

        kafka_rows(simulated(f, 20 if args.quick else 500), 2 * agents_per_family)
        from bench_alert_latency import latency_row  # the row's own module (issue 13)

        latency_row(f, events, quick=args.quick)
    print("  three replica processes, one SIGKILLed: tests/integration/test_daemon_kafka.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
