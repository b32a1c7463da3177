"""A real Prometheus server (Debian's ``prometheus`` binary) for integration tests.

Started on a free 127.0.0.1 port with a temporary config and TSDB directory, scraping the
targets the test names every second; stopped by its PID (SIGTERM, then SIGKILL).
``CAPWATCH_PROMETHEUS`` overrides the binary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from tests.support._proc import ManagedServer, free_port, stop_process, tail, wait_until

START_TIMEOUT_S = 60.0


class PrometheusError(RuntimeError):
    pass


def prometheus_binary() -> str | None:
    return os.environ.get("CAPWATCH_PROMETHEUS") or shutil.which("prometheus")


@dataclass
class PrometheusServer(ManagedServer):
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path
    log: IO[bytes]
    timings: dict[str, float] = field(default_factory=dict)

    def query(self, promql: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=5) as resp:
            data = json.load(resp)
        if data.get("status") != "success":
            raise PrometheusError(f"query {promql!r} failed: {data}")
        result: list[dict[str, Any]] = data["data"]["result"]
        return result

    def wait_for(self, promql: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until the query returns a non-empty vector (a scrape has landed)."""
        found: list[dict[str, Any]] = []

        def landed() -> bool:
            found[:] = self.query(promql)
            return bool(found)

        if not wait_until(landed, timeout_s, interval_s=0.5):
            raise PrometheusError(
                f"no result for {promql!r} after {timeout_s}s; targets: {self.targets()}")
        return found

    def targets(self) -> Any:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as resp:
            return json.load(resp)["data"]["activeTargets"]

    def stop(self) -> None:
        stop_process(self.process, 15.0, "prometheus")
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_prometheus(targets: list[str], metrics_path: str = "/metrics") -> PrometheusServer:
    binary = prometheus_binary()
    if binary is None:
        raise PrometheusError("prometheus not found: apt-get install -y prometheus")
    workdir = Path(tempfile.mkdtemp(prefix="capwatch-prometheus-"))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "capwatch", "metrics_path": metrics_path,
                            "static_configs": [{"targets": targets}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = PrometheusServer(f"http://127.0.0.1:{port}", proc, workdir, log)

    def ready() -> bool:
        if proc.poll() is not None:
            raise PrometheusError(f"prometheus exited with {proc.returncode}: "
                                  f"{tail(workdir / 'prometheus.log', 20)}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        if not wait_until(ready, START_TIMEOUT_S):
            raise PrometheusError(f"prometheus not ready after {START_TIMEOUT_S}s")
    except PrometheusError:
        server.stop()
        raise
    return server
