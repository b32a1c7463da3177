"""Produce → published alert for a hard inconsistency, at half the measured maximum load
(issue 13's latency row; run by ``make bench-daemon``).

1. *Maximum load*: a topic pre-filled with the simulated fleet's transitions is consumed by
   ``capwatch run`` (the service, in this process) as fast as it goes; records per wall
   second from the first record read to the last.
2. *Half of it*: a fresh daemon (its own topics, store and consumer group, Kafka output)
   consumes a producer paced at half that rate that replays the fleet's traffic (every
   agent, round robin), while hard inconsistencies are injected at known times: for a
   random agent not injected before, one of its own transitions whose next state lacks an
   atom the action adds (or keeps one it deletes), checked against the family's model to
   be a contradiction (a pa-tuple ruled out, Table 2), so nothing here depends on how the
   simulator works.
3. A consumer of the alerts topic (partitions assigned, no group join) matches each alert
   to its injection by ``agent_id`` and the record position in ``evidence.transitions``
   (``partition``, ``offset``): the latency is from the injected record's produce call to
   the alert record's arrival at that consumer. The alert's own broker timestamp
   (CreateTime, set by the daemon's producer) gives the produce → alert-sent part.

The producer (librdkafka through confluent-kafka, a dev dependency: kafka-python's
producer would take as much CPU as the daemon it feeds) and the alerts consumer run in a
child process, so they take neither the daemon's interpreter lock nor much of the
machine. Wall time, not CPU time, is what is measured here: the machine's load average,
the daemon's CPU (cores used over the run) and how far it was behind at the end are
printed with the figures, and each stage of the path: the injected record's produce
call → its append on the broker (the topic stamps the append time) → the alert's write
by the daemon (the alert's ``time``: the end of the batch that read the record) → the
alert record's send (its CreateTime) → its arrival at the consumer. The main loop's steps
are timed per call too (poll, a batch, the prompt alert's write, a checkpoint), to show
where a late alert's time went.
"""

from __future__ import annotations

import gc
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from capwatch.adapters.sim.fleet import SimulatedFleet
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.heap import settle_heap
from capwatch.daemon.service import FleetDirectory, build_service
from capwatch.model.consistency import explain
from capwatch.model.domain import Domain, GroundAtom

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "capwatch" / "examples"
FAMILIES = {"rover-v1": EXAMPLES / "rover.pddl", "courier-v1": EXAMPLES / "courier.pddl"}


def _atoms(items: Sequence[Sequence[str]]) -> frozenset[GroundAtom]:
    return frozenset(tuple(a) for a in items)


def contradiction(value: bytes, domain: Domain) -> bytes | None:
    """``value`` (a transition on the wire) made into a hard inconsistency for ``domain``:
    an atom the action added stays absent (or one it deleted stays present), if the model
    then rules a pa-tuple out; None if this transition cannot be made into one."""
    d = json.loads(value)
    if d.get("type") != "transition" or not d.get("executed", True):
        return None
    state, nxt = _atoms(d["state"]), _atoms(d["next_state"])
    action = tuple(d["action"])
    for atom in sorted(nxt - state):
        changed = nxt - {atom}
        if explain(domain, action, state, changed).contradicted:
            d["next_state"] = sorted(list(a) for a in changed)
            return json.dumps(d).encode()
    for atom in sorted(state - nxt):
        changed = nxt | {atom}
        if explain(domain, action, state, changed).contradicted:
            d["next_state"] = sorted(list(a) for a in changed)
            return json.dumps(d).encode()
    return None


def injections(events: Sequence[tuple[str, bytes]], domains: Mapping[str, Domain],
               family_of: Mapping[str, str]) -> dict[str, bytes]:
    """One hard inconsistency per agent that has a transition which can be made into one."""
    out: dict[str, bytes] = {}
    for agent, value in events:
        if agent in out:
            continue
        bad = contradiction(value, domains[family_of[agent]])
        if bad is not None:
            out[agent] = bad
    return out


def _config(tmp: str, bootstrap: str, topic: str, *, kafka_output: bool) -> DaemonConfig:
    return DaemonConfig(**cast("dict[str, Any]", {
        "replica_id": "bench", "store": {"url": f"sqlite:///{Path(tmp) / 'm.db'}"},
        "families": {f: {"domain": str(p)} for f, p in FAMILIES.items()},
        "source": {"kind": "kafka"}, "output": {"kind": "kafka" if kafka_output else "log"},
        "http": {"enabled": False},
        "kafka": {"bootstrap_servers": bootstrap, "transitions_topic": topic,
                  "models_topic": f"{topic}-m", "alerts_topic": f"{topic}-a",
                  "dead_letter_topic": f"{topic}-d",
                  "group_id": f"capwatch-{uuid.uuid4().hex[:6]}", "partitions": 3,
                  "create_topics": False},
    }))


def _topic(bootstrap: str, append_time: bool = False) -> str:
    """Fresh topics; ``append_time``: the transitions topic stamps records with the
    broker's append time, so a send's metadata says when the record reached the broker."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    from capwatch.adapters.io.kafka import ensure_topics

    topic = f"lat-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, transitions=topic, models=f"{topic}-m", alerts=f"{topic}-a",
                  dead_letter=f"{topic}-d", partitions=3)
    if append_time:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={
            "message.timestamp.type": "LogAppendTime"})])
        admin.close()
    return topic


def max_rate(f: SimulatedFleet, bootstrap: str, events: Sequence[tuple[str, bytes]]) -> float:
    """Records per second ``capwatch run`` consumes from a full topic (first to last read)."""
    topic = _topic(bootstrap)
    producer = _Producer(bootstrap)
    # At least 20,000 records, or the start-up burst is all that is measured.
    n = max(len(events), 20_000)
    for i in range(n):
        agent, value = events[i % len(events)]
        producer.send(topic, agent, value)
    producer.flush()
    with tempfile.TemporaryDirectory() as tmp:
        svc = build_service(_config(tmp, bootstrap, topic, kafka_output=False),
                            agents=FleetDirectory(f))
        settle_heap()  # as `capwatch run` does (one_run)
        runner = threading.Thread(target=svc.run, kwargs={"install_signals": False})
        runner.start()
        p = svc.pipeline
        while p.processed == 0:
            time.sleep(0.001)
        first = time.perf_counter()
        while p.processed < n:
            time.sleep(0.001)
        wall = time.perf_counter() - first
        p.stop()
        runner.join(60)
    return n / wall


@dataclass(frozen=True)
class Plan:
    bootstrap: str
    topic: str
    rate: float
    """Background records per second (injections come on top)."""
    seconds: float
    warmup_s: float
    every_s: float
    """One injection this often, after the warm-up."""
    wait_s: float
    """After the last record, how long to wait for the alerts still missing."""


class _Producer:
    """librdkafka's producer (confluent-kafka, a dev dependency): about a tenth of
    kafka-python's CPU per message, so the load generator takes little of the machine's
    two cores from the daemon it measures. linger 5 ms, like the daemon's own producer."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                            "queue.buffering.max.messages": 1_000_000})

    def send(self, topic: str, key: str, value: bytes, done: Any = None) -> None:
        while True:
            try:
                self._p.produce(topic, value=value, key=key, on_delivery=done)
                return
            except BufferError:
                self._p.poll(0.01)

    def poll(self) -> None:
        self._p.poll(0)

    def flush(self) -> None:
        self._p.flush(60)


def background_only(plan: Plan, background: Sequence[tuple[str, bytes]], share: int,
                    shares: int, out: Any) -> None:
    """A child process producing its share of the background traffic at its share of the
    rate."""
    producer = _Producer(plan.bootstrap)
    mine = list(background[share::shares])
    n = _paced(producer, plan, mine, plan.rate / shares, lambda elapsed: None)
    producer.flush()
    out.put(json.dumps({"produced": n, "cpu_s": time.process_time()}))


def _paced(producer: _Producer, plan: Plan, records: Sequence[tuple[str, bytes]],
           rate: float, tick: Any) -> int:
    """Send ``records`` round robin at ``rate`` per second for ``plan.seconds``, calling
    ``tick(elapsed)`` at least every few milliseconds; returns how many were sent."""
    t0 = time.perf_counter()
    n = 0
    while True:
        elapsed = time.perf_counter() - t0
        if elapsed >= plan.seconds:
            return n
        due = min(int(elapsed * rate) + 1, n + 200)  # a backlog must not delay ``tick``
        while n < due:
            agent, value = records[n % len(records)]
            producer.send(plan.topic, agent, value)
            n += 1
        producer.poll()
        tick(elapsed)
        if n >= int(elapsed * rate):
            time.sleep(0.001)


def traffic(plan: Plan, background: Sequence[tuple[str, bytes]], shares: int,
            inject: Sequence[tuple[str, bytes]], out: Any) -> None:
    """The child process that injects: its share of the background, the injections and
    the alerts consumer. Puts a JSON summary on ``out``: produced count, injections
    (agent, send time, partition, offset, broker append time) and alerts (arrival time,
    CreateTime, the alert's own time, agent, evidence)."""
    from kafka import KafkaConsumer, TopicPartition

    alerts_topic = f"{plan.topic}-a"
    consumer = KafkaConsumer(bootstrap_servers=plan.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=20)
    parts = None
    for _ in range(600):  # the client's metadata may not know the fresh topic yet
        parts = consumer.partitions_for_topic(alerts_topic)
        if parts:
            break
        time.sleep(0.1)
    consumer.assign([TopicPartition(alerts_topic, p) for p in sorted(parts or {0})])
    consumer.seek_to_beginning()
    seen: list[dict[str, Any]] = []
    stop = threading.Event()

    def consume() -> None:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=50).values():
                now = time.time()
                for r in records:
                    a = json.loads(r.value)
                    seen.append({"arrived": now, "created": r.timestamp / 1000,
                                 "written": datetime.fromisoformat(a["time"]).timestamp(),
                                 "alert_type": a["alert_type"], "agent_id": a["agent_id"],
                                 "evidence": a.get("evidence", {})})

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    producer = _Producer(plan.bootstrap)
    sent: list[dict[str, Any]] = []

    def positioned(entry: dict[str, Any]) -> Any:
        def done(err: Any, msg: Any) -> None:
            if err is None:
                entry["partition"], entry["offset"] = msg.partition(), msg.offset()
                entry["appended"] = msg.timestamp()[1] / 1000
        return done

    state = {"next": plan.warmup_s, "k": 0}

    def tick(elapsed: float) -> None:
        if elapsed < state["next"] or state["k"] >= len(inject):
            return
        agent, value = inject[int(state["k"])]
        entry: dict[str, Any] = {"agent_id": agent, "sent": time.time()}
        producer.send(plan.topic, agent, value, positioned(entry))
        sent.append(entry)
        state["k"] += 1
        state["next"] += plan.every_s

    wall0 = time.time()
    n = _paced(producer, plan, list(background[0::shares]), plan.rate / shares, tick)
    producer.flush()
    produced_s = time.time() - wall0
    deadline = time.time() + plan.wait_s
    while time.time() < deadline:
        if len(match(sent, list(seen))) == len(sent):
            break
        time.sleep(0.05)
    stop.set()
    reader.join(5)
    consumer.close()
    out.put(json.dumps({"produced": n, "produced_s": produced_s, "injected": sent,
                        "alerts": list(seen), "cpu_s": time.process_time()}))


def _positions(alert: Mapping[str, Any], agent: str) -> set[tuple[int, int]]:
    ev = alert["evidence"]
    if alert["agent_id"] != agent:
        ev = (ev.get("agents") or {}).get(agent)
        if not isinstance(ev, dict):
            return set()
    return {(int(t["partition"]), int(t["offset"])) for t in ev.get("transitions", ())
            if isinstance(t, dict) and t.get("partition") is not None}


def match(sent: Sequence[Mapping[str, Any]], alerts: Sequence[Mapping[str, Any]]
          ) -> dict[int, Mapping[str, Any]]:
    """Injection index → the first alert naming its agent and record position."""
    out: dict[int, Mapping[str, Any]] = {}
    for i, s in enumerate(sent):
        if "offset" not in s:
            continue
        pos = (s["partition"], s["offset"])
        for a in alerts:
            if pos in _positions(a, s["agent_id"]) and (
                    i not in out or a["arrived"] < out[i]["arrived"]):
                out[i] = a
    return out


def _q(xs: Sequence[float], q: float) -> float:
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=1000, method="inclusive")[int(q * 1000) - 1]


def one_run(f: SimulatedFleet, bootstrap: str, rate: float, plan_s: float, every_s: float,
            background: Sequence[tuple[str, bytes]], inject: Sequence[tuple[str, bytes]],
            producers: int = 1, broker_pid: int | None = None) -> dict[str, Any]:
    topic = _topic(bootstrap, append_time=True)
    plan = Plan(bootstrap, topic, rate, plan_s, warmup_s=min(5.0, plan_s / 4),
                every_s=every_s, wait_s=45.0)
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        svc = build_service(_config(tmp, bootstrap, topic, kafka_output=True),
                            agents=FleetDirectory(f))
        p = svc.pipeline
        # drain runs the scheduler's jobs too (a checkpoint, the canary round, the
        # results poll, the audit's start): each is timed by name as well.
        steps = _timed(p, ("checkpoint", "commit_flushed", "handle_batch", "alert_promptly",
                           "drain", "sweep", "canary", "poll_results", "start_audit",
                           "audit_slice"))
        steps.update(_timed(p.source, ("poll", "commit", "commit_async", "lag")))
        steps.update({f"publisher.{k}": v for k, v in _timed(p.publisher, ("flush",)).items()})
        sizes, split = _batch_split(p)
        # As `capwatch run` does before its main loop (daemon.heap): without it this row
        # measured a daemon with CPython's default collector (a young collection every
        # 700 objects, the startup heap and the fleet's records rescanned by every full
        # one) that no deployment runs with. Once a process: the settings stay.
        settle_heap()
        pauses = _gc_pauses()
        runner = threading.Thread(target=svc.run, kwargs={"install_signals": False})
        runner.start()
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        rest = ctx.Queue()
        children = [ctx.Process(target=traffic,
                                args=(plan, background, producers, inject, out))]
        children += [ctx.Process(target=background_only,
                                 args=(plan, background, i, producers, rest))
                     for i in range(1, producers)]
        cpu0 = time.process_time()
        threads0 = thread_cpu()
        broker0 = tree_cpu(broker_pid) if broker_pid is not None else 0.0
        for c in children:
            c.start()
        result = json.loads(out.get(timeout=plan_s + plan.wait_s + 120))
        children_cpu = result.get("cpu_s", 0.0)
        for _ in children[1:]:
            share = json.loads(rest.get(timeout=120))
            result["produced"] += share["produced"]
            children_cpu += share.get("cpu_s", 0.0)
        broker_cpu = tree_cpu(broker_pid) - broker0 if broker_pid is not None else None
        threads = {k: v - threads0.get(k, 0.0) for k, v in thread_cpu().items()}
        for c in children:
            c.join(30)
        cpu = time.process_time() - cpu0
        behind = result["produced"] + len(result["injected"]) - p.processed
        yielded = _yielded(p)
        p.stop()
        runner.join(60)
        gc.callbacks.remove(pauses.pop())
    sent = result["injected"]
    found = match(sent, result["alerts"])
    lat = sorted(found[i]["arrived"] - s["sent"] for i, s in enumerate(sent) if i in found)
    def stage(a: str, b: str) -> list[float]:
        return sorted((found[i][b] if b else s["appended"]) - (
            found[i][a] if a in found[i] else s[a]) for i, s in enumerate(sent) if i in found)

    kinds = sorted({found[i]["alert_type"] for i in found})
    # An injection no alert names: where it was, and what the alerts said of its agent.
    missed = [{**{k: s[k] for k in ("agent_id", "partition", "offset") if k in s},
               "alerts_of_agent": [(a["alert_type"], sorted(_positions(a, s["agent_id"])))
                                   for a in result["alerts"]
                                   if a["agent_id"] == s["agent_id"]
                                   or s["agent_id"] in (a["evidence"].get("agents") or {})]}
              for i, s in enumerate(sent) if i not in found]
    return {"rate": result["produced"] / result["produced_s"], "injected": len(sent),
            "missed": missed,
            "positioned": sum(1 for e in sent if "offset" in e),
            "alerts": len(result["alerts"]),
            "matched": len(lat), "latency": lat, "kinds": kinds,
            "stages": {"on the broker": stage("sent", ""),
                       "read and written": stage("appended", "written"),
                       "routed and sent": stage("written", "created"),
                       "on the topic": stage("created", "arrived")},
            "load": (load0, os.getloadavg()[0]), "behind": behind,
            "daemon_cpu_s": cpu, "seconds": result["produced_s"],
            "threads_cpu_s": threads, "children_cpu_s": children_cpu, "yielded": yielded,
            "broker_cpu_s": broker_cpu,
            "steps": {k: sorted(v) for k, v in steps.items() if v},
            "batches": sorted(sizes), "gc": pauses, "batch_split": split}


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_cpu(path: str) -> float:
    """utime + stime (seconds) of a /proc .../stat file; 0 if it is gone."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process so far, by thread name (threads of one
    name summed; a thread Python does not know is named by its id): which of the daemon's
    threads took the interpreter (the main loop, the assessment workers, the clients')."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        name = names.get(int(tid), f"tid {tid}")
        if name.startswith("Thread-") and "(" in name:
            name = name.split("(", 1)[1].rstrip(")")  # "Thread-3 (consume)": the target's
        out[name] = out.get(name, 0.0) + _stat_cpu(f"/proc/self/task/{tid}/stat")
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants (live ones) so far: the broker, whose
    JVM runs under a wrapper."""
    total = _stat_cpu(f"/proc/{pid}/stat")
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        children = []
    return total + sum(tree_cpu(c) for c in children)


def _yielded(p: Any) -> dict[str, float]:
    """Seconds the background threads waited for the stream (daemon.pacing), by kind of
    work; empty for a tree without it (an A/B against an older one)."""
    registry = p.metrics.registry
    out: dict[str, float] = {}
    for work in ("assessment", "canary"):
        value = registry.get_sample_value("capwatch_yielded_to_stream_seconds_total",
                                          {"work": work})
        if value is not None:
            out[work] = value
    return out


def _timed(obj: Any, names: Sequence[str]) -> dict[str, list[float]]:
    """Wall seconds of each call of the main loop's steps (where the time goes when an
    alert is late: a long poll, a checkpoint, a batch)."""
    out: dict[str, list[float]] = {}
    for name in names:
        inner = getattr(obj, name, None)
        if inner is None:  # an older tree's (an A/B against it)
            continue
        spent: list[float] = []
        out[name] = spent

        def timed(*args: Any, _inner: Any = inner, _spent: list[float] = spent,
                  **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return _inner(*args, **kwargs)
            finally:
                _spent.append(time.perf_counter() - t0)
        setattr(obj, name, timed)
    return out


def _schedstat() -> tuple[float, float]:
    """This thread's (seconds on a CPU, seconds waiting on a run queue) so far (Linux
    schedstat; zeros where there is none)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            run, wait, _ = f.read().split()
    except (OSError, ValueError):
        return 0.0, 0.0
    return int(run) / 1e9, int(wait) / 1e9


def _batch_split(p: Any) -> tuple[list[int], dict[bool, list[float]]]:
    """Records per ``handle_batch`` call, and where the calls' wall time went, split by
    whether an assessment was running when the batch began (True) or not: [records, wall
    s, CPU s, s waiting for a core (the machine's other processes), s blocked (neither:
    a batch does no network I/O, so the interpreter lock: another thread of the
    daemon's holding it)]."""
    sizes: list[int] = []
    split: dict[bool, list[float]] = {False: [0.0] * 5, True: [0.0] * 5}
    inner = p.handle_batch
    workers = getattr(p, "workers", None)
    # An older tree's workers (an A/B against it) say it only by their private map.
    running = getattr(workers, "running", None) or (
        lambda: len(getattr(workers, "_inflight", ())))

    def sized(records: Sequence[Any]) -> None:
        sizes.append(len(records))
        busy = bool(running()) if running is not None else False
        t0, (c0, q0) = time.perf_counter(), _schedstat()
        try:
            inner(records)
        finally:
            (c1, q1), wall = _schedstat(), time.perf_counter() - t0
            row = split[busy]
            row[0] += len(records)
            row[1] += wall
            row[2] += c1 - c0
            row[3] += q1 - q0
            row[4] += max(0.0, wall - (c1 - c0) - (q1 - q0))
    p.handle_batch = sized
    return sizes, split


def _gc_pauses() -> list[Any]:
    """Wall seconds of each collection of the cyclic collector in this process (the
    daemon's), by generation: [gen0, gen1, gen2, the callback (popped to remove it)]."""
    out: list[Any] = [[], [], []]
    started: list[float | None] = [None]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        elif started[0] is not None:  # not a collection that began before the callback
            out[info["generation"]].append(time.perf_counter() - started[0])
            started[0] = None
    gc.callbacks.append(callback)
    out.append(callback)
    return out


def alert_latency_rows(f: SimulatedFleet, bootstrap: str, events: Sequence[tuple[str, bytes]],
                       *, seconds: float, every_s: float, runs: int,
                       rate: float | None = None, broker_pid: int | None = None) -> None:
    """Prints the row: the maximum rate, then per run the latency quantiles at half of it."""
    from capwatch.model.pddl_reader import read_domain

    domains = {fam: read_domain(p) for fam, p in FAMILIES.items()}
    family_of = {a: f.family_of(a) for a in f.agent_ids}
    candidates = injections(events, domains, family_of)
    peak = rate if rate is not None else max_rate(f, bootstrap, events)
    half = peak / 2
    print(f"  produce -> published alert, hard inconsistency: capwatch run maximum "
          f"{peak:,.0f}/s over the broker; half load {half:,.0f}/s from "
          f"{len(family_of)} agents, one injection every {every_s:g} s "
          f"({len(candidates)} agents can take one)")
    pooled: list[float] = []
    for run in range(runs):
        rng = random.Random(run)
        order = sorted(candidates)
        rng.shuffle(order)
        inject = [(a, candidates[a]) for a in order]
        r = one_run(f, bootstrap, half, seconds, every_s, events, inject,
                    broker_pid=broker_pid)
        lat = r["latency"]
        pooled += lat
        if not lat:
            print(f"    run {run + 1}: {r['injected']} injected ({r['positioned']} "
                  f"acknowledged), {r['alerts']} alerts seen, none matched; daemon "
                  f"{r['behind']:,} records behind at the end (load {r['load'][0]:.1f}-"
                  f"{r['load'][1]:.1f})")
            continue
        print(f"    run {run + 1}: {r['rate']:,.0f}/s produced for {r['seconds']:.0f} s, "
              f"{r['matched']}/{r['injected']} alerted ({', '.join(r['kinds'])}); "
              f"p50 {_q(lat, .5):.3f} p95 {_q(lat, .95):.3f} p99 {_q(lat, .99):.3f} "
              f"max {lat[-1]:.3f} s; daemon {r['daemon_cpu_s'] / r['seconds']:.2f} cores, "
              f"{r['behind']:,} records behind at the end, "
              f"load {r['load'][0]:.1f}-{r['load'][1]:.1f}")
        for m in r["missed"]:
            print(f"      not alerted: {m}")
        print("      stages (p50/p99 s): " + "; ".join(
            f"{k} {_q(v, .5):.3f}/{_q(v, .99):.3f}" for k, v in r["stages"].items()))
        print("      main loop, wall s per call (p99/max): " + "; ".join(
            f"{k} {_q(v, .99):.3f}/{v[-1]:.3f}" for k, v in r["steps"].items()))
        # Cores over the produce time (the daemon's threads' include the wait for the last
        # alerts, as the daemon's own figure does): where the machine's two cores went.
        span = r["seconds"]
        cores = {k: v / span for k, v in r["threads_cpu_s"].items() if v / span >= 0.005}
        print("      CPU, cores: daemon threads " + ", ".join(
            f"{k} {v:.2f}" for k, v in sorted(cores.items(), key=lambda kv: -kv[1]))
            + f"; producer and alerts consumer {r['children_cpu_s'] / span:.2f}"
            + (f"; broker {r['broker_cpu_s'] / span:.2f}" if r["broker_cpu_s"] is not None
               else "")
            + "".join(f"; {k} threads waited for the stream {v:.1f} s"
                      for k, v in r["yielded"].items()))
        for busy, (n, wall, cpu_s, queued, blocked) in sorted(r["batch_split"].items()):
            if n:
                print(f"      batches {'while an assessment ran' if busy else 'otherwise'}: "
                      f"{n:,.0f} records, µs a record: wall {wall / n * 1e6:.1f} = CPU "
                      f"{cpu_s / n * 1e6:.1f} + waiting for a core {queued / n * 1e6:.1f} + "
                      f"blocked {blocked / n * 1e6:.1f}")
        if r["batches"]:
            b = r["batches"]
            print(f"      batches: {len(b):,} of median {_q(b, .5):.0f}, p99 {_q(b, .99):.0f}, "
                  f"max {b[-1]} records; gc (n, total s, max s) " + "; ".join(
                      f"gen{g} {len(v)}, {sum(v):.3f}, {max(v, default=0):.3f}"
                      for g, v in enumerate(r["gc"])))
    if pooled and runs > 1:
        pooled.sort()
        print(f"    all runs: n={len(pooled)} p50 {_q(pooled, .5):.3f} p95 "
              f"{_q(pooled, .95):.3f} p99 {_q(pooled, .99):.3f} max {pooled[-1]:.3f} s   "
              f"target p99 < 1 s")


def latency_row(f: SimulatedFleet, events: Sequence[Any], *, quick: bool,
                seconds: float = 60.0, every_s: float = 1.0, runs: int = 2,
                rate: float | None = None) -> None:
    """The row with a broker of its own (tests/support, or ``KAFKA_BOOTSTRAP_SERVERS``)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.kafka_broker import start_kafka_broker

    pairs = [(e.agent_id, e.value) for e in events]
    broker = start_kafka_broker()
    try:
        alert_latency_rows(f, broker.bootstrap, pairs, seconds=10 if quick else seconds,
                           every_s=0.4 if quick else every_s, runs=1 if quick else runs,
                           rate=rate, broker_pid=broker.process.pid
                           if broker.process is not None else None)
    finally:
        broker.stop()


def main() -> int:
    """Standalone: ``python benchmarks/bench_alert_latency.py [--quick]``."""
    import argparse

    from capwatch.daemon.logs import configure_logging

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_daemon import fleet

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=1.0,
                        help="seconds between injected inconsistencies")
    parser.add_argument("--rate", type=float, default=None,
                        help="take this as the maximum rate instead of measuring it")
    args = parser.parse_args()
    configure_logging("error", "json")
    f = fleet(20 if args.quick else 100)
    events = list(f.events(20 if args.quick else 300))
    print(f"alert latency benchmark: {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}")
    latency_row(f, events, quick=args.quick, seconds=args.seconds, every_s=args.every,
                runs=args.runs, rate=args.rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
