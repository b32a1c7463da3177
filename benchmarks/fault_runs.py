"""Faults from outside, checked against the planted truth (docs/reliability.md, sessions 14
and 15): ``capwatch run`` over the real broker (KRaft) and PostgreSQL of tests/support,
8 reference agents (rover) of which 3 switch to ``rover-sample-drift.pddl`` a third of the
way in, 2,880 transition records; every client (``--client kafka-python``, ``process``
for kafka-python's consumer process, ``confluent``).

Long runs (1-5 min each), so not part of ``make test``. First start the services (one
broker, one PostgreSQL, the agents; keep it running; a scenario that kills or freezes the
broker wants a services file of its own, so that runs beside it are not hit)::

    python benchmarks/fault_runs.py services /tmp/f/services.json &
    python benchmarks/fault_runs.py --services /tmp/f/services.json --client confluent \\
        sigkill assess 8

Each run appends one JSON line to ``--results`` and prints it: ``verdict`` PASS when
nothing in ``problems``. Checked against the truth, not against another run: every
published and stored version has delta 0 to its agent's true model, no (agent, version)
published twice with different content, stored = published, a drifted agent with no
version has an ``assessment_failed`` alert, an undrifted one has no version, the group
committed every record. A topic deleted on purpose takes what was on it along: the
``topic models`` run reports the version published before the deletion as missing.

Scenarios (argv after the options):

- ``baseline``
- ``sigkill stream N`` / ``sigkill assess N``: the daemon SIGKILLed after the N-th chunk
  of 400 records / after N queries of the drifted agents, then started again
- ``broker-stop HOLD_S N``: the broker SIGSTOPped HOLD_S s after N queries
- ``broker-kill stream HOLD_S N`` / ``broker-kill publish HOLD_S``: the broker SIGKILLed
  after the N-th chunk / at the first version published, started again on its data dir
  and ports HOLD_S s later (the services file is updated with its new pid)
- ``topic models|alerts|deadletter``: that output topic deleted while running (the
  broker auto-creates it, with one partition)
- ``clock3 SKEW_S KILL``: three replicas whose wall clocks are 0, +SKEW_S and -SKEW_S
  (an LD_PRELOAD shim, benchmarks/clockshim.c, built with cc), lease 30 s; KILL 1: the
  right-clock replica SIGKILLed mid-assessment
- ``loris TRICKLE_S``: the drifted agents' answers trickled over TRICKLE_S s while two
  replicas join mid-assessment and one of them is SIGKILLed
- ``agent MODE``: a hostile agent in front of the drifted agents (modes in ``AGENT_MODES``)
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from fault_proxy import Mode, Proxy, body_hash
from kafka import KafkaAdminClient

import tests.chaos.harness as chaos
from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.chaos.harness import EXAMPLES, Daemon, alert_pairs, readyz
from tests.chaos.kafka_harness import (
    committed_and_end,
    kafka_daemon_config,
    make_topics,
    produce,
    read_topic,
)
from tests.support._proc import free_port, wait_until

TRUTH = read_domain(EXAMPLES / "rover-sample-drift.pddl")
BASE = read_domain(EXAMPLES / "rover.pddl")
SHIM_C = Path(__file__).resolve().parent / "clockshim.c"

AGENT_MODES: dict[str, Mode] = {
    "slow_always": lambda p, b, k: "sleep:3",  # every answer after the deadline (2 s)
    "slow_first": lambda p, b, k: "sleep:3" if k == 0 else "pass",
    "other_agent": lambda p, b, k: "alt",
    "malformed_some": lambda p, b, k: "malformed" if body_hash(b) % 3 == 0 else "pass",
    "cut_some": lambda p, b, k: "cut" if body_hash(b) % 3 == 0 else "pass",
    "cut_first": lambda p, b, k: "cut" if k == 0 else "pass",
    "huge_some": lambda p, b, k: "huge" if body_hash(b) % 3 == 0 else "pass",
    "other_some": lambda p, b, k: "alt" if body_hash(b) % 4 == 0 else "pass",
    "extra_some": lambda p, b, k: "wrong_extra" if body_hash(b) % 4 == 0 else "pass",
}


# --------------------------------------------------------------------------- services

def serve(path: Path) -> None:
    """One broker, one PostgreSQL (``synchronous_commit`` on), the agents; their
    addresses in ``path``; until SIGTERM."""
    from tests.chaos.pg_kafka import KillablePostgres
    from tests.support.kafka_broker import start_kafka_broker
    from tests.support.postgres_server import start_postgres_server

    broker = start_kafka_broker()
    pg = KillablePostgres(start_postgres_server())
    agents = path.parent / f"{path.stem}-agents"
    agents.mkdir(parents=True, exist_ok=True)
    with chaos.fleet(agents, agents=8, drifted=3, episodes=30, drift_at=10, seed=14) as inp:
        path.write_text(json.dumps({
            "bootstrap": broker.bootstrap,
            "broker_pid": broker.process.pid if broker.process else None,
            "broker_workdir": str(broker.workdir), "broker_argv": broker.argv,
            "admin_dsn": pg.admin_dsn,
            "fleet": {"lines": [x.decode() for x in inp.lines], "keys": inp.keys,
                      "urls": inp.urls, "drifted": inp.drifted,
                      "families": inp.families}}))
        print("ready", flush=True)
        stop: list[int] = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        while not stop:
            time.sleep(1)
    broker.stop()
    pg.server.stop()


# --------------------------------------------------------------------------- the oracle

def read_pg(dsn: str) -> tuple[dict[tuple[str, int], Any], list[tuple[Any, ...]]]:
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        versions = {(str(r[0]), int(r[1])): r[2] for r in conn.execute(
            "SELECT agent_id, version, model_json FROM model_versions WHERE agent_id != ''")}
        work = list(conn.execute("SELECT status, COUNT(*) FROM pending_assessments"
                                 " GROUP BY status"))
    return versions, work


def pending(dsn: str) -> int:
    try:
        return sum(int(n) for s, n in read_pg(dsn)[1] if s in ("pending", "claimed"))
    except Exception:
        return 1


def check(run: Run) -> dict[str, Any]:
    """Everything against the planted truth."""
    topics, drifted = run.topics, run.fleet["drifted"]
    problems: list[str] = []
    closed: list[str] = []
    models = [json.loads(v) for v in read_topic(topics, topics.models, 30)]
    alerts = [json.loads(v) for v in read_topic(topics, topics.alerts, 30)]
    versions, work = read_pg(run.dsn)
    committed, end = committed_and_end(topics)
    by_key: dict[tuple[str, int], list[str]] = defaultdict(list)
    for m in models:
        by_key[(m["agent_id"], m["version"])].append(
            json.dumps(m["model"]["json"], sort_keys=True))
    for k, contents in by_key.items():
        if len(set(contents)) > 1:
            problems.append(f"{k} published {len(contents)}x with DIFFERENT content")
        d = delta(domain_from_json(json.loads(contents[0])),
                  TRUTH if k[0] in drifted else BASE)
        if d != 0:
            problems.append(f"WRONG published version {k}: delta {d} to the truth")
    for k, m in versions.items():
        model = json.loads(m) if isinstance(m, str) else m
        d = delta(domain_from_json(model), TRUTH if k[0] in drifted else BASE)
        if d != 0:
            problems.append(f"WRONG stored version {k}: delta {d}")
    if set(versions) != set(by_key):
        problems.append(f"stored {sorted(versions)} != published {sorted(by_key)}")
    failed = {agent for kind, agent in alert_pairs(alerts).values()
              if kind == "assessment_failed"}
    for a in drifted:
        if not any(k[0] == a for k in by_key):
            if a in failed:
                closed.append(a)
            else:
                problems.append(f"{a} drifted, nothing published, NO assessment_failed alert")
    for a in run.fleet["urls"]:
        if a not in drifted and any(k[0] == a for k in by_key):
            problems.append(f"{a} did not drift but got a version")
    if committed != end:
        problems.append(f"committed {committed} of {end}")
    return {"problems": problems, "failed_closed": closed, "published_raw": len(models),
            "published_keys": sorted(by_key), "stored": sorted(versions),
            "alerts": sorted(alert_pairs(alerts)), "committed": committed, "end": end,
            "work": work}


# --------------------------------------------------------------------------- one run

class Run:
    """Daemons over Kafka and the services' PostgreSQL (a database of the run's own)."""

    def __init__(self, opts: argparse.Namespace, name: str, *, proxy_mode: Mode | None = None,
                 alt_for_proxy: bool = False, overrides: dict[str, Any] | None = None
                 ) -> None:
        self.opts = opts
        self.services: dict[str, Any] = json.loads(Path(opts.services).read_text())
        self.fleet: dict[str, Any] = self.services["fleet"]
        self.name = name
        stamp = int(time.time() * 1000)
        self.workdir = Path(opts.workdir) / f"{name}-{opts.client}-{stamp}"
        self.workdir.mkdir(parents=True)
        self.topics = make_topics(self.services["bootstrap"])
        self.dsn = _fresh_db(self.services["admin_dsn"], f"faults_{opts.client}_{stamp}")
        urls = dict(self.fleet["urls"])
        undrifted = [a for a in urls if a not in self.fleet["drifted"]]
        self.proxies: dict[str, Proxy] = {}
        if proxy_mode is not None:
            for i, a in enumerate(self.fleet["drifted"]):
                p = Proxy(urls[a], proxy_mode,
                          alt=self.fleet["urls"][undrifted[i]] if alt_for_proxy else None)
                self.proxies[a] = p
                urls[a] = p.url
        self.port = free_port()
        cfg = kafka_daemon_config(self.topics, self.workdir / "unused.db",
                                  self.fleet["families"], urls, http_port=self.port)
        cfg["store"] = {"url": self.dsn, "connect_timeout_s": 60.0}
        cfg["kafka"]["client"] = "confluent-kafka" if opts.client == "confluent" \
            else "kafka-python"
        cfg["kafka"]["consumer_process"] = opts.client == "process"
        for k, v in (overrides or {}).items():
            if isinstance(v, dict) and isinstance(cfg.get(k), dict):
                cfg[k].update(v)
            else:
                cfg[k] = v
        self.cfg = cfg
        self.daemons: list[Daemon] = []

    def start(self, name: str = "daemon", replica: str | None = None) -> Daemon:
        cfg = json.loads(json.dumps(self.cfg))
        if replica is not None:
            cfg["replica_id"] = replica
            cfg["http"]["port"] = self.port if not self.daemons else free_port()
        d = Daemon(cfg, self.workdir, name)
        d.wait_started()
        self.daemons.append(d)
        return d

    def lines(self) -> tuple[list[bytes], list[str]]:
        return [x.encode() for x in self.fleet["lines"]], list(self.fleet["keys"])

    def produce_all(self) -> None:
        produce(self.topics, *self.lines())

    def queries(self) -> int:
        return sum(p.n for p in self.proxies.values())

    def wait_queries(self, n: int, timeout_s: float = 200) -> None:
        wait_until(lambda: self.queries() >= n, timeout_s, 0.01)

    def wait_event(self, d: Daemon, event: str, timeout_s: float = 300) -> bool:
        return wait_until(lambda: f'"{event}"' in d.log_path.read_text(errors="replace"),
                          timeout_s, 0.05)

    def wait_done(self, timeout_s: float) -> bool:
        def done() -> bool:
            try:
                c, e = committed_and_end(self.topics)
            except Exception:  # the broker still starting again
                return False
            return bool(e) and c >= e and pending(self.dsn) == 0
        return wait_until(done, timeout_s, 0.5)

    def finish(self, fault: str, extra: dict[str, Any]) -> dict[str, Any]:
        """Stop every daemon (SIGTERM), check, report."""
        time.sleep(2)  # the last alerts' group wait (0.2 s) and route tick
        exits = [d.kill(signal.SIGTERM) if d.proc.poll() is None else d.proc.returncode
                 for d in self.daemons]
        result = check(self)
        warnings = sorted({
            (d.log_path.stem, str(e.get("event"))[:100],
             str(e.get("problem") or e.get("error") or e.get("reason") or "")[:120])
            for d in self.daemons for e in d.log_events()
            if e.get("level") in ("warning", "error")
            and not str(e.get("logger", "")).startswith("kafka")
            and "skipped" not in str(e.get("event"))})
        published = {d.log_path.stem: sum(1 for e in d.log_events()
                                          if e.get("event") == "model version published")
                     for d in self.daemons}
        line = {"case": self.name, "client": self.opts.client, "fault": fault, **extra,
                **result, "exits": exits, "tracebacks": [d.tracebacks() for d in self.daemons],
                "queries": {a: p.n for a, p in self.proxies.items()},
                "published_logged": published, "warnings": warnings,
                "workdir": str(self.workdir)}
        line["verdict"] = "PASS" if not line["problems"] else "FAIL"
        with open(self.opts.results, "a") as f:
            f.write(json.dumps(line, default=str) + "\n")
        print(json.dumps(line, indent=1, default=str))
        return line


def _fresh_db(admin_dsn: str, name: str) -> str:
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return admin_dsn.rsplit("/", 1)[0] + f"/{name}"


def _sleep_mode(seconds: float) -> Mode:
    return lambda p, b, k: f"sleep:{seconds}"


# --------------------------------------------------------------------------- scenarios

def baseline(opts: argparse.Namespace) -> None:
    r = Run(opts, "baseline")
    r.start()
    lines, keys = r.lines()
    for i in range(0, len(lines), 400):
        produce(r.topics, lines[i:i + 400], keys[i:i + 400])
        time.sleep(0.2)
    r.finish("none", {"done": r.wait_done(300)})


def sigkill(opts: argparse.Namespace, where: str, n: str) -> None:
    r = Run(opts, f"sigkill_{where}_{n}", proxy_mode=_sleep_mode(0.2))
    d = r.start()
    at_kill = (0, 0)
    if where == "stream":
        lines, keys = r.lines()
        for i in range(0, len(lines), 400):
            produce(r.topics, lines[i:i + 400], keys[i:i + 400])
            if i // 400 == int(n):
                time.sleep(random.Random(n).uniform(0.0, 0.5))
                at_kill = committed_and_end(r.topics)
                d.kill(signal.SIGKILL)
                r.start("daemon2")
            time.sleep(0.2)
    else:
        r.produce_all()
        r.wait_queries(int(n))
        at_kill = committed_and_end(r.topics)
        d.kill(signal.SIGKILL)
        r.start("daemon2")
    r.finish(f"daemon SIGKILL mid-{where} ({n}), started again",
             {"done": r.wait_done(400), "at_kill": at_kill})


def _readyz_while(r: Run, d: Daemon, seconds: float) -> str:
    seen = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        seen.append(readyz(r.port)[0] if d.proc.poll() is None else -1)
        time.sleep(1)
    return "".join("5" if s == 503 else "2" if s == 200 else "x" for s in seen)


def broker_stop(opts: argparse.Namespace, hold: str, n: str) -> None:
    r = Run(opts, f"broker_stop_{hold}", proxy_mode=_sleep_mode(0.1))
    d = r.start()
    r.produce_all()
    r.wait_queries(int(n))
    at = committed_and_end(r.topics)
    pid = int(r.services["broker_pid"])
    os.kill(pid, signal.SIGSTOP)
    try:
        seen = _readyz_while(r, d, float(hold))
    finally:
        os.kill(pid, signal.SIGCONT)
    r.finish(f"broker SIGSTOP {hold} s after {n} queries",
             {"done": r.wait_done(400), "at_fault": at, "readyz": seen})


def broker_kill(opts: argparse.Namespace, where: str, hold: str, n: str = "0") -> None:
    r = Run(opts, f"broker_kill_{where}_{hold}", proxy_mode=_sleep_mode(0.1))
    d = r.start()
    found: dict[str, Any] = {}

    def kill_and_restart() -> None:
        found["at_fault"] = committed_and_end(r.topics)
        os.kill(int(r.services["broker_pid"]), signal.SIGKILL)
        found["readyz"] = _readyz_while(r, d, float(hold))
        argv = list(r.services["broker_argv"])
        if argv[0].endswith("setpriv"):  # its parent death signal would end it with us
            argv = argv[argv.index("--") + 1:]
        with open(Path(r.services["broker_workdir"]) / "restart.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
        r.services["broker_pid"] = proc.pid
        Path(opts.services).write_text(json.dumps(r.services))

    if where == "stream":
        lines, keys = r.lines()
        for i in range(0, len(lines), 400):
            for _ in range(100):  # the broker may still be loading
                try:
                    produce(r.topics, lines[i:i + 400], keys[i:i + 400])
                    break
                except Exception:
                    time.sleep(2)
            if i // 400 == int(n):
                kill_and_restart()
            time.sleep(0.2)
    else:
        r.produce_all()
        r.wait_event(d, "model version published")  # the others are being published
        kill_and_restart()
    r.finish(f"broker SIGKILL mid-{where}, started again on its data after {hold} s",
             {"done": r.wait_done(400), **found})


def topic(opts: argparse.Namespace, which: str) -> None:
    r = Run(opts, f"topic_{which}", proxy_mode=_sleep_mode(0.3),
            overrides={"assessment": {"workers": 1}})
    d = r.start()
    agent0 = r.fleet["keys"][0]
    name = {"models": r.topics.models, "alerts": r.topics.alerts,
            "deadletter": r.topics.dead_letter}[which]
    if which == "deadletter":
        produce(r.topics, [f"not json before {i}".encode() for i in range(5)], [agent0] * 5)
        wait_until(lambda: len(read_topic(r.topics, name, 30)) >= 5, 120, 0.5)
        r.produce_all()
    else:
        r.produce_all()
        r.wait_event(d, "model version published", 200)
    alerts_before = [json.loads(v) for v in read_topic(r.topics, r.topics.alerts, 30)]
    admin = KafkaAdminClient(bootstrap_servers=r.services["bootstrap"])
    admin.delete_topics([name])
    admin.close()
    extra: dict[str, Any] = {}
    if which == "deadletter":
        time.sleep(1)
        produce(r.topics, [f"not json after {i}".encode() for i in range(20)], [agent0] * 20)
    extra["done"] = r.wait_done(300)
    if which == "deadletter":
        raw = " ".join(base64.b64decode(json.loads(v).get("raw_base64", "")).decode(
            errors="replace") for v in read_topic(r.topics, name, 30))
        missing = [i for i in range(20) if f"not json after {i}" not in raw]
        extra["dead_letters_after_missing"] = missing
    if which == "alerts":
        extra["alerts_before"] = sorted(alert_pairs(alerts_before))
    line = r.finish(f"{which} topic deleted while running (the broker auto-creates it)",
                    extra)
    if extra.get("dead_letters_after_missing"):
        line["problems"].append("dead letters produced after the deletion missing")


def clock3(opts: argparse.Namespace, skew: str, kill: str) -> None:
    shim = Path(opts.workdir) / "clockshim.so"
    if not shim.exists():
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM_C),
                        "-ldl"], check=True)
    r = Run(opts, f"clock3_{skew}_{kill}", proxy_mode=_sleep_mode(0.3),
            overrides={"assessment": {"lease_s": 30.0}})
    chaos.ENV["LD_PRELOAD"] = str(shim)
    daemons = {}
    for replica, offset in (("A", 0.0), ("B", float(skew)), ("C", -float(skew))):
        f = r.workdir / f"clock-{replica}"
        f.write_text(str(offset))
        chaos.ENV["CLOCK_SHIM_FILE"] = str(f)
        daemons[replica] = r.start(replica, replica)
    r.produce_all()
    if kill == "1":
        r.wait_queries(6, 120)
        daemons["A"].kill(signal.SIGKILL)
    t0 = time.monotonic()
    done = r.wait_done(400)
    r.finish(f"3 replicas, clocks 0 / +{skew} / -{skew} s"
             f"{', A SIGKILLed mid-assessment' if kill == '1' else ''}",
             {"done": done, "took_s": round(time.monotonic() - t0, 1)})


def loris(opts: argparse.Namespace, trickle: str) -> None:
    r = Run(opts, f"loris_{trickle}", proxy_mode=lambda p, b, k: f"trickle:{trickle}",
            overrides={"assessment": {"lease_s": 30.0}})
    r.start("A", "A")
    lines, keys = r.lines()
    produce(r.topics, lines[:2000], keys[:2000])
    r.wait_queries(2)
    r.start("B", "B")
    r.start("C", "C")
    produce(r.topics, lines[2000:], keys[2000:])
    r.wait_queries(r.queries() + 3)
    r.daemons[1].kill(signal.SIGKILL)
    t0 = time.monotonic()
    done = r.wait_done(500)
    r.finish(f"agent answers trickled over {trickle} s; B, C join mid-assessment,"
             " B SIGKILLed", {"done": done, "took_s": round(time.monotonic() - t0, 1)})


def agent(opts: argparse.Namespace, mode: str) -> None:
    r = Run(opts, f"agent_{mode}", proxy_mode=AGENT_MODES[mode], alt_for_proxy=True,
            overrides={"agents": {"timeout_s": 2.0},
                       "assessment": {"max_attempts": 3, "retry_after_s": 0.5,
                                      "agent_retry": {"attempts": 3, "backoff_s": 1.0,
                                                      "max_backoff_s": 2.0}}})
    r.start()
    r.produce_all()
    r.finish(mode, {"done": r.wait_done(400)})


SCENARIOS: dict[str, Callable[..., None]] = {
    "baseline": baseline, "sigkill": sigkill, "broker-stop": broker_stop,
    "broker-kill": broker_kill, "topic": topic, "clock3": clock3, "loris": loris,
    "agent": agent,
}


def main() -> None:
    if sys.argv[1:2] == ["services"]:
        serve(Path(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--services", required=True)
    ap.add_argument("--client", choices=["kafka-python", "process", "confluent"],
                    default="kafka-python")
    ap.add_argument("--workdir", default="/tmp/capwatch-faults")
    ap.add_argument("--results", default="/tmp/capwatch-faults/results.jsonl")
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    ap.add_argument("args", nargs="*")
    opts = ap.parse_args()
    Path(opts.workdir).mkdir(parents=True, exist_ok=True)
    SCENARIOS[opts.scenario](opts, *opts.args)
    threading.Thread(target=lambda: None).start()  # the proxies' threads are daemons
    os._exit(0)


if __name__ == "__main__":
    main()
