"""The chaos harness: capwatch driven only as an operator drives it.

Everything here goes through public entry points, so the harness does not care how the
daemon is laid out inside:

- agents are ``capwatch agent serve`` processes (the reference agent); the input stream is
  made of the episodes they report over the agent query protocol (``POST
  /capwatch/v1/episode``), and a drift is injected with ``POST /capwatch/v1/drift``;
- the daemon is ``capwatch run --config FILE`` in a subprocess, over a JSONL file or the
  real Kafka broker of tests/support, killed with real signals;
- what it did is read back from its outputs (models.jsonl, alerts.jsonl, deadletter.jsonl,
  or the Kafka topics) and from the models store's tables, read-only.

A *run* is one daemon lifetime; a *scenario* is runs over one input until the input is
done. :func:`compare` holds a scenario's outcome against an uninterrupted one on the same
input: the same model versions (content and count), the same alerts after dedup, every
record processed and the same dead letters.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "capwatch" / "examples"
CAPWATCH = str(Path(sys.executable).parent / "capwatch")
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


# --------------------------------------------------------------------------- agents


class AgentProcess:
    """``capwatch agent serve`` on a free port; its URL is read from its first line."""

    def __init__(self, domain: Path, problem: Path, seed: int, log: Path) -> None:
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [CAPWATCH, "agent", "serve", "--domain", str(domain), "--problem", str(problem),
             "--seed", str(seed), "--port", "0", "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=self._log, env=ENV, cwd=REPO_ROOT)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        if "serving domain" not in line:
            self.stop()
            raise RuntimeError(f"agent did not start: {line!r} {log.read_text()[-2000:]}")
        self.url = line.rsplit(" on ", 1)[1].strip()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def episode(self, steps: int, p_inapplicable: float) -> dict[str, Any]:
        return dict(self.post("/capwatch/v1/episode", {
            "mode": "random", "steps": steps, "p_inapplicable": p_inapplicable}))

    def drift(self, pddl: str) -> None:
        self.post("/capwatch/v1/drift", {"domain": pddl})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


@dataclass
class FleetInput:
    """A generated stream: JSONL lines (one transition event each, keyed by agent id),
    the agents' URLs, and which agents drifted."""

    lines: list[bytes]
    keys: list[str]
    urls: dict[str, str]
    drifted: list[str]
    families: dict[str, dict[str, str]]

    def write(self, path: Path) -> Path:
        path.write_bytes(b"".join(line + b"\n" for line in self.lines))
        return path


@contextlib.contextmanager
def fleet(workdir: Path, *, agents: int, drifted: int, episodes: int, drift_at: int,
          steps: int = 12, p_inapplicable: float = 0.25, seed: int = 0) -> Iterator[FleetInput]:
    """``agents`` rover agents, the first ``drifted`` of which switch to the DAAISy drift
    (sample_rock needs a full battery) after ``drift_at`` of their ``episodes``.

    Only deterministic agents: an uninterrupted and an interrupted run then ask the same
    questions and get the same answers, so their versions can be compared exactly. The
    agents stay up (drifted) while the caller runs daemons against them.
    """
    domain, problem = EXAMPLES / "rover.pddl", EXAMPLES / "rover-problem.pddl"
    drift_pddl = (EXAMPLES / "rover-sample-drift.pddl").read_text()
    ids = [f"rover-{i:03d}" for i in range(agents)]
    procs: list[AgentProcess] = []
    try:
        for i, a in enumerate(ids):
            procs.append(AgentProcess(domain, problem, seed * 1000 + i, workdir / f"{a}.log"))
        lines: list[bytes] = []
        keys: list[str] = []
        for ep in range(episodes):
            if ep == drift_at:
                for p in procs[:drifted]:
                    p.drift(drift_pddl)
            for a, p in zip(ids, procs, strict=True):
                trace = p.episode(steps, p_inapplicable)
                for k, action in enumerate(trace["actions"]):
                    event = {"type": "transition", "agent_id": a, "family": "rover-v1",
                             "episode_id": f"{a}-ep{ep}", "step": k,
                             "state": trace["states"][k], "action": action,
                             "next_state": trace["states"][k + 1],
                             "executed": trace["executed"][k]}
                    lines.append(json.dumps(event, separators=(",", ":")).encode())
                    keys.append(a)
        yield FleetInput(lines, keys, {a: p.url for a, p in zip(ids, procs, strict=True)},
                         ids[:drifted],
                         {"rover-v1": {"domain": str(domain), "problem": str(problem)}})
    finally:
        for p in procs:
            p.stop()


# --------------------------------------------------------------------------- daemon


def jsonl_config(workdir: Path, inp: FleetInput, input_path: Path, store_url: str, *,
                 follow: bool = False, http_port: int | None = None) -> dict[str, Any]:
    """``capwatch run`` over a JSONL file, writing JSONL outputs into ``workdir/out``."""
    return {
        "replica_id": "chaos",
        "source": {"kind": "jsonl", "path": str(input_path), "follow": follow},
        "output": {"kind": "jsonl", "directory": str(workdir / "out")},
        "store": {"url": store_url},
        "families": inp.families,
        "agents": {"urls": inp.urls, "timeout_s": 5.0},
        # Debounce and checkpoint intervals are the production defaults: a kill then finds
        # as much unfinished work as it would in production.
        "assessment": {"workers": 2, "lease_s": 10.0, "retry_after_s": 0.5},
        "http": {"enabled": http_port is not None, "port": http_port or 0},
        # A delivery the killed run held (claimed, not yet sent) goes out once its hold runs
        # out; a finite run does not wait for it. 1 s is less than any restart takes (a new
        # process reading the rest of the input), so the restarted run sends it.
        "alerts": {"group_wait_seconds": 0.2, "route_s": 0.1, "delivery_lease_s": 1.0},
        "log": {"level": "info", "format": "json"},
        "shutdown_grace_s": 10.0,
    }


class Daemon:
    """``capwatch run`` as an operator starts it; its log is kept for the figures."""

    def __init__(self, config: dict[str, Any], workdir: Path, name: str,
                 exit_when_idle: bool = False) -> None:
        self.config_path = workdir / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115
        cmd = [CAPWATCH, "run", "--config", str(self.config_path)]
        if exit_when_idle:
            cmd.append("--exit-when-idle")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=ENV,
                                     cwd=workdir)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_started(self, timeout_s: float = 120.0) -> float:
        """Block until the daemon logs that it consumes (→ the monotonic time it was seen);
        a daemon that exits first fails the caller with its log."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if '"daemon started"' in self.tail(1 << 20):
                self.started = time.monotonic()
                return self.started
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode} before it"
                                     f" started: {self.tail()}")
            time.sleep(0.05)
        raise AssertionError(f"daemon not started after {timeout_s:.0f}s: {self.tail()}")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"daemon still running after {timeout_s:.0f}s:"
                                 f" {self.tail()}") from None
        finally:
            self._log.flush()

    def kill(self, sig: int = signal.SIGKILL) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(30)
        self._log.close()
        return code

    def tail(self, n: int = 3000) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def log_events(self) -> list[dict[str, Any]]:
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events

    def tracebacks(self) -> int:
        """Tracebacks in the log but those kafka-python logs itself: capwatch's own count
        (a failure is one line naming what failed, not a traceback per retry), not the
        client's, which logs one when a connection it is closing at a stop still gets
        data (kafka.net.transport, seen at a third of the stops under load)."""
        count = 0
        for line in self.log_path.read_text(errors="replace").splitlines():
            if "Traceback (most recent call" not in line:
                continue
            with contextlib.suppress(ValueError):
                if str(json.loads(line).get("logger", "")).startswith("kafka."):
                    continue
            count += line.count("Traceback (most recent call")
        return count


def run_to_end(config: dict[str, Any], workdir: Path, name: str,
               timeout_s: float = 300.0) -> tuple[int, Daemon]:
    d = Daemon(config, workdir, name, exit_when_idle=True)
    return d.wait(timeout_s), d


# --------------------------------------------------------------------------- outcome


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Outcome:
    """What a scenario left behind, reduced to what must not depend on interruptions."""

    versions: dict[tuple[str, int], dict[str, Any]]
    """Stored versions of agent lineages: (agent, version) → model JSON."""
    published: dict[tuple[str, int], dict[str, Any]]
    """Published model events after dedup on (agent, version) → model JSON."""
    published_raw: int
    alerts: dict[str, tuple[str, str]]
    """Alerts after dedup, as "type|agent" → (type, agent) (see :func:`alert_pairs`)."""
    dead_letters: set[int]
    """Offsets of dead-lettered records."""
    committed: int
    """The store's checkpoint: the next record to read."""
    exits: list[int] = field(default_factory=list)
    tracebacks: int = 0

    def summary(self) -> dict[str, Any]:
        return {"versions": len(self.versions), "published": self.published_raw,
                "alerts": len(self.alerts), "dead_letters": len(self.dead_letters),
                "committed": self.committed, "exits": self.exits,
                "tracebacks": self.tracebacks}


def read_sqlite_store(path: Path) -> tuple[dict[tuple[str, int], dict[str, Any]], int]:
    """Agent versions and the checkpoint, read-only (the store is an operator's interface)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        versions = {(r[0], int(r[1])): json.loads(r[2]) for r in conn.execute(
            "SELECT agent_id, version, model_json FROM model_versions WHERE agent_id != ''")}
        row = conn.execute("SELECT COALESCE(SUM(next_offset), 0) FROM consumer_offsets"
                           ).fetchone()
        return versions, int(row[0])
    finally:
        conn.close()


def alert_pairs(alerts: Sequence[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Alerts after dedup as (type, agent) pairs, a grouped alert counting for each of its
    agents: how alerts of a family group depends on when they reach the outbox, which
    partitioning and timing change without anything being wrong."""
    pairs: dict[str, tuple[str, str]] = {}
    for a in alerts:
        agents = (a.get("evidence", {}).get("agents") or []) if a["agent_id"] == "*" \
            else [a["agent_id"]]
        for agent in agents:
            agent_id = agent if isinstance(agent, str) else str(agent.get("agent_id"))
            pairs[f"{a['alert_type']}|{agent_id}"] = (a["alert_type"], agent_id)
    return pairs


def jsonl_outcome(workdir: Path, store: Path, exits: Sequence[int] = (),
                  tracebacks: int = 0) -> Outcome:
    out = workdir / "out"
    versions, committed = read_sqlite_store(store)
    models = _jsonl(out / "models.jsonl")
    alerts = _jsonl(out / "alerts.jsonl")
    dead = _jsonl(out / "deadletter.jsonl")
    return Outcome(
        versions=versions,
        published={(m["agent_id"], m["version"]): m["model"]["json"] for m in models},
        published_raw=len(models),
        alerts=alert_pairs(alerts),
        dead_letters={d["offset"] for d in dead},
        committed=committed, exits=list(exits), tracebacks=tracebacks)


def compare(reference: Outcome, got: Outcome, records: int) -> list[str]:
    """Every way ``got`` differs from the uninterrupted ``reference``; empty when equal."""
    problems = []
    if set(got.versions) != set(reference.versions):
        problems.append(f"versions {sorted(got.versions)} instead of"
                        f" {sorted(reference.versions)}")
    else:
        problems += [f"version {k} has other content" for k in sorted(reference.versions)
                     if got.versions[k] != reference.versions[k]]
    if set(got.published) != set(reference.published):
        problems.append(f"published {sorted(got.published)} instead of"
                        f" {sorted(reference.published)}")
    if got.alerts != reference.alerts:
        extra = sorted(set(got.alerts) - set(reference.alerts))
        missing = sorted(set(reference.alerts) - set(got.alerts))
        problems.append(f"alerts differ: {len(extra)} extra {extra[:3]},"
                        f" {len(missing)} missing {missing[:3]}")
    if got.committed != records:
        problems.append(f"checkpoint at {got.committed} of {records} records")
    if got.dead_letters != reference.dead_letters:
        problems.append(f"dead letters at {sorted(got.dead_letters ^ reference.dead_letters)[:5]}"
                        " differ")
    return problems


def lost_records(reference: Outcome, got: Outcome, records: int) -> int:
    """Records whose effects are missing: unread ones, and dead letters not written."""
    return max(0, records - got.committed) + len(reference.dead_letters - got.dead_letters)


# --------------------------------------------------------------------------- pacing


class PacedWriter:
    """Appends lines to a file at a steady pace in a thread, as a live producer would."""

    def __init__(self, path: Path, lines: Sequence[bytes], per_second: float) -> None:
        self.path = path
        self.lines = lines
        self.per_second = per_second
        self.written = 0
        self._stop = threading.Event()
        self.path.write_bytes(b"")
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        chunk = max(1, int(self.per_second / 20))
        with open(self.path, "ab") as f:
            t0 = time.monotonic()
            while self.written < len(self.lines) and not self._stop.is_set():
                part = self.lines[self.written:self.written + chunk]
                f.write(b"".join(line + b"\n" for line in part))
                f.flush()
                self.written += len(part)
                # Paced against the clock, not by a fixed sleep, so slow writes catch up.
                due = t0 + self.written / self.per_second
                self._stop.wait(max(0.0, due - time.monotonic()))

    def finish(self) -> None:
        """Write whatever is left at once."""
        self._stop.set()
        self._thread.join()
        with open(self.path, "ab") as f:
            f.write(b"".join(line + b"\n" for line in self.lines[self.written:]))
        self.written = len(self.lines)


def kill_at_random(daemon: Daemon, rng: random.Random, lo_s: float, hi_s: float) -> float:
    """SIGKILL ``daemon`` at a random moment in [lo_s, hi_s] after it started consuming."""
    at = rng.uniform(lo_s, hi_s)
    daemon.wait_started()
    deadline = daemon.started + at
    while time.monotonic() < deadline and daemon.proc.poll() is None:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    daemon.kill(signal.SIGKILL)
    return at


def readyz(port: int) -> tuple[int, dict[str, Any]]:
    """The daemon's /readyz: (status, body); (0, {}) when it does not answer."""
    import urllib.error

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return int(r.status), dict(json.loads(r.read()))
    except urllib.error.HTTPError as e:
        try:
            return int(e.code), dict(json.loads(e.read()))
        except ValueError:
            return int(e.code), {}
    except (OSError, ValueError):
        return 0, {}


def wait_readyz(port: int, daemon: Daemon, want: Any, timeout_s: float,
                seen: list[tuple[float, int, dict[str, Any]]] | None = None
                ) -> tuple[int, dict[str, Any]] | None:
    """Poll /readyz until ``want(status, body)`` (→ that answer), the daemon exits or
    ``timeout_s`` passes (→ None). Every answer is appended to ``seen`` with its time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and daemon.proc.poll() is None:
        status, body = readyz(port)
        if seen is not None:
            seen.append((time.monotonic(), status, body))
        if want(status, body):
            return status, body
        time.sleep(0.25)
    return None


def names_kafka(status: int, body: dict[str, Any]) -> bool:
    """/readyz says not ready because of Kafka."""
    return status == 503 and any("Kafka" in p for p in body.get("problems", []))
