"""`capwatch run` serves its probes before it loads the rest of the daemon.

The daemon's modules (the monitor, SciPy, the assessment engine) cost ~1.2 s of CPU to
import in pure Python, about 12 s at a load of 30 on 2 cores: a liveness or startup probe
that waited for them (and for the store and the brokers) could kill a pod that was only
slow. Here the import of capwatch.daemon.service is held at a gate in a real `capwatch run`
process: /healthz must answer and /readyz must say what the daemon is doing while it is
held, then, once let through, that it waits for Kafka (a closed port)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.daemon.helpers import EXAMPLES
from tests.paths import REPO_ROOT
from tests.support._proc import free_port, wait_until

# Holds `import capwatch.daemon.service` until the gate file exists (at most 120 s).
_GATED_RUN = textwrap.dedent("""
    import importlib.abc, os, sys, time
    gate, config = sys.argv[1], sys.argv[2]

    class Gate(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "capwatch.daemon.service":
                deadline = time.monotonic() + 120
                while not os.path.exists(gate) and time.monotonic() < deadline:
                    time.sleep(0.05)
            return None

    sys.meta_path.insert(0, Gate())
    from capwatch.cli import main
    sys.exit(main(["run", "--config", config]))
""")


def _get(url: str) -> tuple[int, dict[str, Any] | None]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError:
        return 0, None


def test_probes_answer_while_the_daemon_loads_and_waits_for_kafka(tmp_path: Path) -> None:
    port, broker = free_port(), f"127.0.0.1:{free_port()}"  # nothing listens on the broker
    cfg = {"replica_id": "early", "source": {"kind": "kafka"}, "output": {"kind": "kafka"},
           "kafka": {"bootstrap_servers": broker, "connect_timeout_s": 300},
           "store": {"url": str(tmp_path / "models.db")},
           "families": {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl"),
                                     "problem": str(EXAMPLES / "rover-problem.pddl")}},
           "http": {"enabled": True, "host": "127.0.0.1", "port": port},
           "log": {"level": "info", "format": "json"}}
    path = tmp_path / "capwatch.yaml"
    path.write_text(yaml.safe_dump(cfg))
    gate = tmp_path / "gate"
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "daemon.log"
    with log_path.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", _GATED_RUN, str(gate), str(path)],
                                cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err,
                                env=dict(os.environ))
        try:
            assert wait_until(lambda: _get(f"{base}/healthz")[0] == 200, 90, 0.05), \
                log_path.read_text()
            # Still held at the gate: the daemon's modules are not loaded.
            assert _get(f"{base}/livez")[0] == 200
            status, body = _get(f"{base}/readyz")
            assert status == 503
            assert body == {"ready": False, "problems": ["starting: loading capwatch's modules"]}
            status, body = _get(f"{base}/api/v1/agents")
            assert status == 503 and body is not None
            assert body["error"]["code"] == "starting"
            gate.touch()
            waiting = f"starting: waiting for Kafka at {broker} (PLAINTEXT)"
            seen: list[tuple[int, dict[str, Any] | None]] = []

            def awaits_kafka() -> bool:
                seen.append(_get(f"{base}/readyz"))
                return seen[-1] == (503, {"ready": False, "problems": [waiting]})

            assert wait_until(awaits_kafka, 90, 0.05), seen[-3:]
            assert _get(f"{base}/healthz")[0] == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    events = [json.loads(line).get("event") for line in log_path.read_text().splitlines()
              if line.startswith("{")]
    assert events.index("http listening") < events.index("opening the store") \
        < events.index("waiting for Kafka")
