"""A real Prometheus server (Debian's ``prometheus`` binary) for integration tests.

Started on a free 127.0.0.1 port with a temporary config and TSDB directory, scraping the
targets the test names every second; stopped by its PID (SIGTERM, then SIGKILL).
``CAPWATCH_PROMETHEUS`` overrides the binary.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

START_TIMEOUT_S = 60.0


class PrometheusError(RuntimeError):
    pass


def prometheus_binary() -> str | None:
    return os.environ.get("CAPWATCH_PROMETHEUS") or shutil.which("prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrometheusServer:
    url: str
    process: subprocess.Popen[bytes]
    workdir: Path

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
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(promql)
            if result:
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(f"no result for {promql!r} after {timeout_s}s; "
                                      f"targets: {self.targets()}")
            time.sleep(0.5)

    def targets(self) -> Any:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as resp:
            return json.load(resp)["data"]["activeTargets"]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)
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
    port = _free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={workdir / 'prometheus.yml'}",
         f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = PrometheusServer(f"http://127.0.0.1:{port}", proc, workdir)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            text = (workdir / "prometheus.log").read_text(errors="replace")[-2000:]
            server.stop()
            raise PrometheusError(f"prometheus exited with {proc.returncode}: {text}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise PrometheusError(f"prometheus not ready after {START_TIMEOUT_S}s")
        time.sleep(0.2)
