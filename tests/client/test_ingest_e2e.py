"""End to end over the daemon's HTTP ingest: a running ``capwatch run`` with
``source.kind: ingest`` receives a Taxi agent's transitions from the SDK's HttpTransport,
and from the real OpenTelemetry SDK's OTLP exporter, and detects the injected drift.
"""

from __future__ import annotations

import http.client
import json
import signal
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from capwatch.client import DeliveryError, HttpTransport, TransitionEmitter
from capwatch.client.gym import CapwatchWrapper
from capwatch.client.otel import span_attributes
from capwatch.contracts.ingest import INGEST_PATH
from capwatch.examples.gym import taxi
from tests.client.gym_scenarios import TOKEN as QUERY_TOKEN
from tests.client.gym_scenarios import make_taxi, run_agent, taxi_server
from tests.integration._daemon_setup import CapwatchProcess
from tests.support._proc import free_port, wait_until

INGEST_TOKEN = "ingest-secret"
FAMILY = "taxi-v4"


class Daemon(CapwatchProcess):
    def __init__(self, tmp: Path, agent_url: str, name: str = "daemon") -> None:
        self.port = free_port()
        self.tmp = tmp
        config: dict[str, Any] = {
            "replica_id": "ingest-e2e",
            "source": {"kind": "ingest"},
            "ingest": {"token": INGEST_TOKEN, "directory": str(tmp / "spool")},
            "output": {"kind": "jsonl", "directory": str(tmp / "out")},
            "store": {"url": f"sqlite:///{tmp / 'models.db'}"},
            "families": {FAMILY: {"domain": str(taxi.domain_path()),
                                  "problem": str(taxi.problem_path())}},
            "agents": {"urls": {"taxi-1": agent_url}, "bearer_token": QUERY_TOKEN},
            "assessment": {"method": "daaisy"},
            "http": {"enabled": True, "port": self.port},
            # Assess from 3 inconsistent transitions, not from whatever a loaded machine has read
            # after a short debounce: from one refusal daaisy cannot tell the precondition.
            "detection": {"debounce_transitions": 3, "debounce_s": 10.0},
            "scheduler": {"checkpoint_s": 0.5, "results_poll_s": 0.5},
            "alerts": {"group_wait_seconds": 0, "route_s": 0.2},
            "log": {"level": "info", "format": "json"},
        }
        super().__init__(config, tmp, name)
        self.url = f"http://127.0.0.1:{self.port}"
        if not wait_until(self.ready, 120):
            # The caller never gets the object to stop: a daemon left running here outlived
            # the test run (seen once on a loaded machine).
            self.kill_quietly()
            raise AssertionError(f"daemon not ready in 120 s:\n{self.tail()}")

    def ready(self) -> bool:
        self.alive()
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def models(self) -> list[dict[str, Any]]:
        path = self.tmp / "out" / "models.jsonl"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def first_offset(self, event: str) -> int | None:
        offsets = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event and "offset" in record:
                offsets.append(record["offset"])
        return min(offsets) if offsets else None


@pytest.fixture
def agent_url() -> Iterator[str]:
    with taxi_server(drifted=True) as server:
        yield server.url


def _spooled(tmp: Path) -> int:
    return sum(p.read_bytes().count(b"\n") for p in (tmp / "spool").glob("*.jsonl"))


def _wait_for_model(daemon: Daemon, timeout_s: float = 90) -> dict[str, Any]:
    assert wait_until(lambda: daemon.alive() and bool(daemon.models()), timeout_s), \
        daemon.tail()
    # Model events are published at least once (docs/daemon.md): a version repeated after
    # a crash is the same version, and consumers deduplicate on (agent, version).
    versions = {(m["agent_id"], m["version"]): m for m in daemon.models()}
    assert list(versions) == [("taxi-1", 1)], list(versions)
    return next(iter(versions.values()))


def _assert_dropoff_change(model: dict[str, Any]) -> None:
    assert model["agent_id"] == "taxi-1" and model["family"] == FAMILY
    assert [(c["action"], c["atom"], c["location"], c["old"], c["new"])
            for c in model["changes"]] == [("dropoff", ["destination", "?c"], "pre", "0", "+")]


def _run_taxi(emitter: TransitionEmitter, drifted: bool, steps: int, seed: int) -> int:
    env = make_taxi(drifted)
    wrapped = CapwatchWrapper(env, taxi.abstraction(env), emitter, executed=taxi.executed)
    run_agent(wrapped, steps, seed, use_mask=True)
    emitter.flush()
    return wrapped.emitted


def test_sdk_over_http_ingest_then_a_hard_restart_loses_nothing(tmp_path: Path,
                                                               agent_url: str) -> None:
    daemon = Daemon(tmp_path, agent_url)
    try:
        emitter = TransitionEmitter(HttpTransport(daemon.url, INGEST_TOKEN), agent_id="taxi-1",
                                    family=FAMILY, batch_size=500)
        baseline = _run_taxi(emitter, False, 2000, 1)
        drifted = _run_taxi(emitter, True, 2000, 2)
        # Every event is acknowledged, so it is in the spool: kill the daemon at once.
        assert daemon.stop(signal.SIGKILL) == -signal.SIGKILL
    finally:
        daemon.kill_quietly()
    assert _spooled(tmp_path) == baseline + drifted
    again = Daemon(tmp_path, agent_url, "restarted")
    try:
        model = _wait_for_model(again)
        _assert_dropoff_change(model)
        first = again.first_offset("assessment queued") or daemon_offset(tmp_path)
        print(f"\n[taxi over HTTP ingest] injected: dropoff blocked unless at the destination;"
              f" detected: {model['summary'][0]}; after {first - baseline + 1} drifted"
              f" transitions (spool offset {first}); {model['evidence'].get('queries')}"
              " queries")
        assert first >= baseline
        # A refused token reaches the caller instead of vanishing.
        bad = TransitionEmitter(HttpTransport(again.url, "wrong"), agent_id="taxi-1",
                                family=FAMILY)
        bad.emit({("in-taxi",)}, ("pickup", "r0c0"), {("in-taxi",)})
        with pytest.raises(DeliveryError, match="401"):
            bad.flush()
        assert again.stop(signal.SIGTERM) == 0, again.tail()
    finally:
        again.kill_quietly()
    # The replay after the crash learned nothing new: one version, however often published.
    assert {(m["agent_id"], m["version"]) for m in again.models()} == {("taxi-1", 1)}


def daemon_offset(tmp: Path) -> int:
    """The first queued assessment in the first run's log (it may have got that far)."""
    for line in (tmp / "daemon.log").read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "assessment queued":
            return int(record["offset"])
    raise AssertionError("no assessment was queued in either run")


def test_ingest_refuses_a_bad_batch_whole_and_names_the_lines(tmp_path: Path,
                                                              agent_url: str) -> None:
    daemon = Daemon(tmp_path, agent_url)
    try:
        good = {"type": "transition", "agent_id": "taxi-1", "family": FAMILY,
                "state": [["in-taxi"]], "action": ["pickup", "r0c0"],
                "next_state": [["in-taxi"]]}
        events = [good, {**good, "action": ["teleport", "r0c0"]}, {**good, "family": "x"}]
        body = "\n".join(json.dumps(e) for e in events).encode()
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        conn.request("POST", INGEST_PATH, body=body, headers={
            "Authorization": f"Bearer {INGEST_TOKEN}", "Content-Type": "application/x-ndjson"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        conn.close()
        assert response.status == 400
        assert [r["line"] for r in answer["error"]["rejected"]] == [1, 2]
        assert "unknown action 'teleport'" in answer["error"]["rejected"][0]["reason"]
        assert "unknown family 'x'" in answer["error"]["rejected"][1]["reason"]
        assert sum(p.stat().st_size for p in (tmp_path / "spool").glob("*.jsonl")) == 0
    finally:
        daemon.stop(signal.SIGTERM)
        daemon.kill_quietly()


def test_opentelemetry_sdk_spans_reach_the_daemon_and_drift_is_detected(
        tmp_path: Path, agent_url: str) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    daemon = Daemon(tmp_path, agent_url)
    provider = TracerProvider(resource=Resource.create({
        "service.name": "taxi-agent", "capwatch.agent_id": "taxi-1",
        "capwatch.family": FAMILY}))
    # A generous export timeout: under load a timed-out export is retried, and one that
    # keeps timing out is dropped by the SDK, which this test must not mistake for capwatch.
    exporter = OTLPSpanExporter(endpoint=f"{daemon.url}/v1/traces", timeout=60,
                                headers={"Authorization": f"Bearer {INGEST_TOKEN}"})
    # The SDK drops spans once its queue (2048 by default) is full; this agent makes 8000
    # spans in a few seconds, so the queue holds them all: a loss must be capwatch's.
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=10_000,
                                                   max_export_batch_size=256))
    tracer = provider.get_tracer("taxi-agent")
    try:
        spans = 0
        baseline = 0
        for phase, (drifted, steps, seed) in enumerate([(False, 2000, 1), (True, 2000, 2)]):
            env = make_taxi(drifted)
            hooks = taxi.abstraction(env)
            rng = np.random.default_rng(seed)
            obs, info = env.reset(seed=seed)
            for _ in range(steps):
                allowed: Sequence[int] = (np.flatnonzero(info["action_mask"]).tolist()
                                          if "action_mask" in info else [])
                action = int(rng.choice(allowed)) if len(allowed) else int(rng.integers(6))
                ground = hooks.action(obs, action)
                with tracer.start_as_current_span("taxi.step") as span:
                    nxt, _, terminated, truncated, info = env.step(action)
                    with tracer.start_as_current_span("policy"):
                        pass  # an ordinary span: not a transition, ignored by capwatch
                    if ground is not None:
                        span.set_attributes(span_attributes(
                            hooks.state(obs), ground, hooks.state(nxt),
                            executed=taxi.executed(obs, action, nxt, info)))
                        spans += 1
                obs = nxt
                if terminated or truncated:
                    obs, info = env.reset(seed=int(rng.integers(1 << 30)))
            assert provider.force_flush(60_000)
            if phase == 0:
                # Where the drifted phase starts in the daemon's stream (its spool).
                baseline = _spooled(tmp_path)
                assert baseline >= spans
        model = _wait_for_model(daemon)
        _assert_dropoff_change(model)
        first = daemon.first_offset("assessment queued")
        assert first is not None and first >= baseline
        print(f"\n[taxi over OTLP] injected: dropoff blocked unless at the destination;"
              f" detected: {model['summary'][0]}; after {first - baseline + 1} drifted"
              f" transitions (spans); {model['evidence'].get('queries')} queries;"
              f" {spans} transition spans sent, {_spooled(tmp_path)} stored")
    finally:
        provider.shutdown()
        daemon.stop(signal.SIGTERM)
        daemon.kill_quietly()


def test_otlp_json_answers_partial_success_for_bad_spans(tmp_path: Path,
                                                         agent_url: str) -> None:
    daemon = Daemon(tmp_path, agent_url)
    try:
        env = gym.make(taxi.ENV_ID)
        hooks = taxi.abstraction(env)
        obs, _ = env.reset(seed=0)
        good = span_attributes(hooks.state(obs), hooks.action(obs, 0) or ("pickup", "r0c0"),
                               hooks.state(obs), agent_id="taxi-1", family=FAMILY)

        def kv(attrs: dict[str, Any]) -> list[dict[str, Any]]:
            out = []
            for k, v in attrs.items():
                value = ({"arrayValue": {"values": [{"stringValue": x} for x in v]}}
                         if isinstance(v, list) else {"stringValue": v})
                out.append({"key": k, "value": value})
            return out

        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
            {"traceId": "00" * 16, "spanId": "01" * 8, "name": "ok", "attributes": kv(good)},
            {"traceId": "00" * 16, "spanId": "02" * 8, "name": "bad",
             "attributes": kv({**good, "capwatch.action": "(fly r0c0)"})}]}]}]}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
        conn.request("POST", "/v1/traces", body=body, headers={
            "Authorization": f"Bearer {INGEST_TOKEN}", "Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        conn.close()
        assert response.status == 200
        assert answer["partialSuccess"]["rejectedSpans"] == "1"
        assert "unknown action 'fly'" in answer["partialSuccess"]["errorMessage"]
        spooled = b"".join(p.read_bytes() for p in (tmp_path / "spool").glob("*.jsonl"))
        assert spooled.count(b"\n") == 1
        with urllib.request.urlopen(f"{daemon.url}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        for result in ("accepted", "refused"):
            assert (f'capwatch_ingest_events_total{{endpoint="otlp",result="{result}"}} 1.0'
                    in metrics)
        assert f"capwatch_ingest_spool_bytes {float(len(spooled))}" in metrics
    finally:
        daemon.stop(signal.SIGTERM)
        daemon.kill_quietly()
