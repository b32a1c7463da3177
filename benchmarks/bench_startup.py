"""How long `capwatch run` takes to answer its probes, and where the start-up time goes.

Starts `capwatch run --config ...` as a child process (as an operator or Kubernetes would),
polls /healthz and /readyz every 20 ms from the moment it was spawned, and reads the
timestamps of the daemon's own start-up log lines (`http listening`, `store ready`,
`Kafka reachable`, `daemon started`, `partitions assigned`), all as seconds since the
spawn. Several trees (``--tree``, a capwatch checkout each) are run alternately, so an A/B
at a noisy load compares like with like; medians are printed per tree with the load.

By default Kafka is a closed port (the daemon waits for it: what is measured is how soon
/healthz answers, what /readyz says meanwhile and when it says it waits for Kafka);
``--kafka`` starts a real broker (tests/support) so the whole start to ready is measured.

    .venv/bin/python benchmarks/bench_startup.py --families DIR [--tree A --tree B]
        [--runs 5] [--kafka] [--pure]

``--families DIR``: each subdirectory with domain.pddl and problem.pddl is a family (the
default: the repository's rover and courier examples).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EVENTS = ("http listening", "store ready", "Kafka reachable", "daemon started",
          "partitions assigned")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _families(directory: Path | None) -> dict[str, dict[str, str]]:
    if directory is None:
        ex = ROOT / "capwatch" / "examples"
        return {"rover": {"domain": str(ex / "rover.pddl"),
                          "problem": str(ex / "rover-problem.pddl")},
                "courier": {"domain": str(ex / "courier.pddl"),
                            "problem": str(ex / "courier-problem.pddl")}}
    return {d.name: {"domain": str(d / "domain.pddl"), "problem": str(d / "problem.pddl")}
            for d in sorted(directory.iterdir()) if (d / "domain.pddl").is_file()}


def _status(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
    except (OSError, ValueError):
        return 0, None


def run_once(tree: Path, python: str, families: dict[str, dict[str, str]], bootstrap: str,
             work: Path, *, pure: bool, until_ready: bool, limit_s: float) -> dict[str, Any]:
    port = _free_port()
    cfg = {"replica_id": "bench-0", "source": {"kind": "kafka"}, "output": {"kind": "kafka"},
           "kafka": {"bootstrap_servers": bootstrap, "connect_timeout_s": 600,
                     "group_id": f"bench-startup-{port}",
                     "transitions_topic": f"bench-startup-{port}"},
           "store": {"url": str(work / f"store-{port}.db")},
           "families": families,
           "http": {"enabled": True, "host": "127.0.0.1", "port": port},
           "log": {"level": "info", "format": "json"}}
    path = work / f"capwatch-{port}.yaml"
    path.write_text(json.dumps(cfg))
    env = dict(os.environ)
    env.pop("CAPWATCH_REQUIRE_COMPILED", None)
    if pure:
        env["CAPWATCH_PURE_PYTHON"] = "1"
    log_path = work / f"daemon-{port}.log"
    base = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as err:
        t0 = time.time()
        # sys.path, not PYTHONPATH: an editable install's finder comes before PYTHONPATH.
        proc = subprocess.Popen([python, "-c", f"import sys; sys.path.insert(0, {str(tree)!r});"
                                 " from capwatch.cli import main; sys.exit(main())",
                                 "run", "--config", str(path)],
                                cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=err)
        found: dict[str, Any] = {"healthz": None, "readyz": None, "kafka awaited": None,
                                 "starting": []}
        try:
            while time.time() - t0 < limit_s and proc.poll() is None:
                if found["healthz"] is None:
                    code, _ = _status(f"{base}/healthz")
                    if code == 200:
                        found["healthz"] = time.time() - t0
                if found["healthz"] is not None:
                    code, body = _status(f"{base}/readyz")
                    if code == 200:
                        found["readyz"] = time.time() - t0
                        break
                    problems = (body or {}).get("problems") or []
                    for p in problems:
                        p = p.replace(str(work), "DIR").replace(str(port), "PORT")
                        if p not in found["starting"]:
                            found["starting"].append(p)
                    if not until_ready and any("waiting for Kafka" in p for p in problems):
                        found["kafka awaited"] = time.time() - t0
                        break
                time.sleep(0.02)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        name = event.get("event")
        if name in EVENTS and name not in found:
            at = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
            found[name] = at.timestamp() - t0
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", type=Path,
                        help="a capwatch checkout (repeatable; default: this one)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--families", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kafka", action="store_true",
                        help="start a real broker and measure until /readyz answers 200")
    parser.add_argument("--pure", action="store_true", help="CAPWATCH_PURE_PYTHON=1")
    parser.add_argument("--limit-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    families = _families(args.families)
    broker = None
    if args.kafka:
        from tests.support.kafka_broker import start_kafka_broker

        broker = start_kafka_broker()
        bootstrap = broker.bootstrap
    else:
        bootstrap = f"127.0.0.1:{_free_port()}"  # nothing listens there
    rows: dict[Path, list[dict[str, Any]]] = {t: [] for t in trees}
    loads = []
    try:
        with tempfile.TemporaryDirectory(prefix="capwatch-startup-") as d:
            for i in range(args.runs):
                for tree in trees:
                    loads.append(os.getloadavg()[0])
                    r = run_once(tree, args.python, families, bootstrap, Path(d),
                                 pure=args.pure, until_ready=args.kafka, limit_s=args.limit_s)
                    rows[tree].append(r)
                    shown = {k: (round(v, 2) if isinstance(v, float) else v)
                             for k, v in r.items()}
                    print(f"run {i + 1} {tree}: {json.dumps(shown)}", flush=True)
    finally:
        if broker is not None:
            broker.stop()
    print(f"\nload (1 min) {min(loads):.1f}-{max(loads):.1f}; {len(families)} families; "
          f"{'pure Python' if args.pure else 'compiled if built'}")
    for tree, runs in rows.items():
        print(f"{tree}:")
        for key in ("healthz", *EVENTS, "kafka awaited", "readyz"):
            values = [r[key] for r in runs if isinstance(r.get(key), float)]
            if values:
                print(f"  {key:22s} median {statistics.median(values):6.2f} s "
                      f"(min {min(values):.2f}, max {max(values):.2f}, n {len(values)})")
        starting = list(dict.fromkeys(p for r in runs for p in r["starting"]))
        print("  /readyz said meanwhile:", *starting, sep="\n    ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
