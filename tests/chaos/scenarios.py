"""Chaos scenarios over a JSONL stream: an uninterrupted reference, SIGKILL at a random
moment, and the store's file system running full or turning read-only for a while.

Each scenario returns an :class:`~tests.chaos.harness.Outcome` plus what was observed on
the way (exit codes, tracebacks, what ``/readyz`` said during an outage), so the bounded
tests, the reproductions of issue 12 and ``make chaos`` share one implementation.
"""

from __future__ import annotations

import contextlib
import errno
import json
import random
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.harness import (
    Daemon,
    FleetInput,
    Outcome,
    PacedWriter,
    jsonl_config,
    jsonl_outcome,
    kill_at_random,
    read_sqlite_store,
    run_to_end,
)
from tests.chaos.hostile import Hostile
from tests.support._proc import free_port

PACE = 2000.0
"""Records per second the live writer appends: slow enough that a kill lands mid-stream."""


@dataclass
class Observed:
    outcome: Outcome
    kill_at_s: float | None = None
    fault: str = ""
    readyz_during_fault: list[int] = field(default_factory=list)
    """HTTP statuses /readyz answered while the fault lasted (0: no answer)."""
    exited_during_fault: int | None = None
    recovered: bool = False
    """/readyz answered 200 again after the fault ended."""


def reference(inp: FleetInput, workdir: Path) -> Outcome:
    """The uninterrupted run over the complete input."""
    workdir.mkdir(parents=True)
    path = inp.write(workdir / "in.jsonl")
    store = workdir / "store.db"
    code, d = run_to_end(jsonl_config(workdir, inp, path, str(store)), workdir, "run")
    if code != 0:
        raise AssertionError(f"the reference run exited {code}: {d.tail()}")
    return jsonl_outcome(workdir, store, [code], d.tracebacks())


def sigkill(inp: FleetInput, workdir: Path, rng: random.Random) -> Observed:
    """A live stream; SIGKILL at a random moment; a restart finishes the input."""
    workdir.mkdir(parents=True)
    path = workdir / "in.jsonl"
    store = workdir / "store.db"
    path.write_bytes(b"")
    first = Daemon(jsonl_config(workdir, inp, path, str(store), follow=True), workdir, "first")
    writer: PacedWriter | None = None
    try:
        first.wait_started()
        # The stream starts once the daemon consumes, as a live producer's would.
        writer = PacedWriter(path, inp.lines, PACE)
        duration = len(inp.lines) / PACE
        at = kill_at_random(first, rng, 0.0, duration)
    finally:
        if writer is not None:
            writer.finish()
        first.kill()
    code, second = run_to_end(jsonl_config(workdir, inp, path, str(store)), workdir, "second")
    tracebacks = first.tracebacks() + second.tracebacks()
    return Observed(jsonl_outcome(workdir, store, [-signal.SIGKILL, code], tracebacks),
                    kill_at_s=at, fault="SIGKILL")


@contextlib.contextmanager
def tmpfs(path: Path, size_kib: int) -> Iterator[Path]:
    """A small tmpfs of our own (needs root), unmounted on the way out."""
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (root in a sandbox that allows it)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d],
                           check=False, capture_output=True)
        if r.returncode != 0:
            return False
        subprocess.run(["umount", d], check=False, capture_output=True)
        return True


def _fill(disk: Path) -> Path:
    filler = disk / "filler"
    try:
        with open(filler, "wb") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    return filler


def _readyz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def disk_full(inp: FleetInput, workdir: Path, rng: random.Random) -> Observed:
    """A live stream whose store's file system (a small tmpfs) runs full at a random moment
    for 2 to 6 s (the default checkpoint interval is 5 s, so some outages see a checkpoint
    and some do not); then the input is finished, by the same daemon if it survived
    (SIGTERM once the input is complete) and by a restarted one otherwise.

    (A read-only remount would be the other store outage of a file system, but the kernel
    refuses it while SQLite holds the file open for writing.)"""
    kind = "disk_full"
    hold_s = rng.uniform(2.0, 6.0)
    workdir.mkdir(parents=True)
    path = workdir / "in.jsonl"
    with tmpfs(workdir / "disk", 64 * 1024) as disk:
        store = disk / "store.db"
        port = free_port()
        path.write_bytes(b"")
        first = Daemon(jsonl_config(workdir, inp, path, str(store), follow=True,
                                    http_port=port), workdir, "first")
        observed = Observed(Outcome({}, {}, 0, {}, set(), 0), fault=kind)
        exits: list[int] = []
        writer: PacedWriter | None = None
        try:
            started = first.wait_started()
            writer = PacedWriter(path, inp.lines, PACE)
            duration = len(inp.lines) / PACE
            at = rng.uniform(0.0, duration)
            observed.kill_at_s = at
            deadline = started + at
            while time.monotonic() < deadline and first.proc.poll() is None:
                time.sleep(0.05)
            filler = _fill(disk)
            end = time.monotonic() + hold_s
            while time.monotonic() < end:
                observed.readyz_during_fault.append(_readyz(port))
                time.sleep(0.25)
            observed.exited_during_fault = first.proc.poll()
            filler.unlink(missing_ok=True)
            writer.finish()
            if first.proc.poll() is None:
                # Survived: it must say it is ready again once the disk has room.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and first.proc.poll() is None:
                    if _readyz(port) == 200:
                        observed.recovered = True
                        break
                    time.sleep(0.25)
                first.proc.send_signal(signal.SIGTERM)
                exits.append(first.wait(120))
            else:
                exits.append(first.proc.returncode)
        finally:
            if writer is not None:
                writer.finish()
            first.kill()
        code, second = run_to_end(jsonl_config(workdir, inp, path, str(store)), workdir,
                                  "second")
        exits.append(code)
        observed.outcome = jsonl_outcome(workdir, store, exits,
                                         first.tracebacks() + second.tracebacks())
    return observed


@dataclass
class HostileReport:
    sent: int
    exit_code: int
    tracebacks: int
    committed: int
    by_kind: dict[str, dict[str, int]]
    """kind → sent, dead (dead-lettered), expected_dead."""
    wrong: dict[str, int]
    """kind → messages whose fate differs from what the kind expects."""
    internal_errors: int
    """Dead letters whose reason is a bug ("internal error: ...")."""
    largest_dead_letter: int
    seconds: float

    def lost(self) -> int:
        return max(0, self.sent - self.committed)


def hostile_jsonl(messages: list[Hostile], workdir: Path, families: dict[str, dict[str, str]],
                  *, max_message_bytes: int = 1_000_000) -> HostileReport:
    """Every message on one JSONL line through ``capwatch run --exit-when-idle``."""
    workdir.mkdir(parents=True)
    path = workdir / "in.jsonl"
    with open(path, "wb") as f:
        for m in messages:
            f.write(m.value + b"\n")
    store = workdir / "store.db"
    inp = FleetInput([], [], {}, [], families)
    config = jsonl_config(workdir, inp, path, str(store))
    config["limits"] = {"max_message_bytes": max_message_bytes}
    # No agent is reachable: an id that made capwatch send a query would show as a failure
    # in the log rather than as an answer.
    config["agents"] = {"url_template": "http://{agent_id}.agents.invalid:8080",
                        "timeout_s": 1.0}
    t0 = time.monotonic()
    code, d = run_to_end(config, workdir, "hostile", timeout_s=1800)
    seconds = time.monotonic() - t0
    dead_lines = (workdir / "out" / "deadletter.jsonl")
    dead: dict[int, str] = {}
    largest = 0
    internal = 0
    if dead_lines.exists():
        with open(dead_lines, "rb") as f:
            for line in f:
                largest = max(largest, len(line))
                rec = json.loads(line)
                dead[int(rec["offset"])] = rec["reason"]
                internal += rec["reason"].startswith("internal error")
    by_kind: dict[str, dict[str, int]] = {}
    wrong: dict[str, int] = {}
    for offset, m in enumerate(messages):
        k = by_kind.setdefault(m.kind, {"sent": 0, "dead": 0, "expected_dead": 0})
        k["sent"] += 1
        is_dead = offset in dead
        k["dead"] += is_dead
        k["expected_dead"] += m.expect == "dead"
        if is_dead != (m.expect == "dead"):
            wrong[m.kind] = wrong.get(m.kind, 0) + 1
    _, committed = read_sqlite_store(store)
    return HostileReport(len(messages), code, d.tracebacks(), committed, by_kind, wrong,
                         internal, largest, seconds)
