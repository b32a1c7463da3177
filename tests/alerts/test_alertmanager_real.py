"""AlertmanagerSink against a real Alertmanager (Debian's prometheus-alertmanager): the
server must accept our payload and list the alerts back with our labels."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from capwatch.alerts import Alert, AlertmanagerSink, AlertType, Severity
from tests.support._proc import free_port, stop_process, wait_until

BINARY = os.environ.get("CAPWATCH_ALERTMANAGER") or shutil.which("prometheus-alertmanager") \
    or shutil.which("alertmanager")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(BINARY is None, reason="apt-get install -y prometheus-alertmanager"),
]


@pytest.fixture(scope="module")
def alertmanager() -> Iterator[str]:
    assert BINARY is not None
    workdir = Path(tempfile.mkdtemp(prefix="capwatch-alertmanager-"))
    (workdir / "am.yml").write_text(yaml.safe_dump(
        {"route": {"receiver": "void"}, "receivers": [{"name": "void"}]}))
    port = free_port()
    with (workdir / "am.log").open("wb") as log:
        proc = subprocess.Popen(
            [BINARY, f"--config.file={workdir / 'am.yml'}", f"--storage.path={workdir}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail((workdir / "am.log").read_text(errors="replace")[-2000:])
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        if not wait_until(ready, 30):
            pytest.fail("alertmanager not ready after 30 s")
        yield url
    finally:
        stop_process(proc, 10, "alertmanager")
        shutil.rmtree(workdir, ignore_errors=True)


def listed(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as r:
        data: list[dict[str, Any]] = json.load(r)
    return data


def test_real_alertmanager_accepts_and_lists_capwatch_alerts(alertmanager: str) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    single = Alert(AlertType.CAPABILITY_REDUCED, Severity.CRITICAL, "rover-v3", "rover-17",
                   "sample_rock", "sample_rock(?r ?s ?w) now requires (battery_full ?r)", now,
                   fingerprint="fp", evidence={"queries": 3})
    grouped = Alert(AlertType.UNEXPLAINED_INCONSISTENCY, Severity.WARNING, "gripper", None,
                    "pick", "2 agents of gripper: pick(?o ?r ?g) inconsistent", now,
                    agents=("g1", "g2"))
    AlertmanagerSink(alertmanager, resolve_after=timedelta(hours=1)).send([single, grouped])
    alerts = {a["labels"]["alertname"]: a for a in listed(alertmanager)}
    assert set(alerts) == {"CapwatchCapabilityReduced", "CapwatchUnexplainedInconsistency"}
    got = alerts["CapwatchCapabilityReduced"]
    assert got["labels"]["agent_id"] == "rover-17"
    assert got["labels"]["dedup_key"] == single.dedup_key
    assert got["annotations"]["summary"] == single.summary
    assert got["status"]["state"] == "active"
    assert "agent_id" not in alerts["CapwatchUnexplainedInconsistency"]["labels"]
    # Re-sending the same alert updates it in place: Alertmanager deduplicates by labels.
    AlertmanagerSink(alertmanager).send([single])
    assert len(listed(alertmanager)) == 2


def test_a_family_wide_probability_drift_reaches_alertmanager_as_one_alert(
        alertmanager: str, tmp_path: Path) -> None:
    """Five agents' estimates of one regression (each its own numbers), through the outbox
    over a real SQLite store: Alertmanager lists one alert for the family, no agent named
    in its labels, where it listed one per agent before session 20."""
    from capwatch.alerts import AlertOutbox, AlertPolicy, alerts_for_model_change, outbox_record
    from capwatch.model.domain import Outcome
    from capwatch.model.pddl_reader import read_domain
    from capwatch.models_store import open_store

    base = read_domain(Path(__file__).resolve().parents[2] / "capwatch" / "examples"
                       / "courier.pddl")
    pick = base.action("pick")
    now = datetime.now(UTC).replace(microsecond=0)
    rows = []
    for i, p in enumerate((0.69, 0.71, 0.7, 0.66, 0.73)):
        estimate = base.replace_action(pick.replace(outcomes=tuple(
            Outcome(o.add, o.delete, q) for o, q in zip(pick.outcomes, (p, 1 - p),
                                                        strict=True))))
        (alert,) = alerts_for_model_change(base, estimate, family="courier-am",
                                           agent_id=f"courier-am-{i}", time=now,
                                           model_version=1)
        rows.append(outbox_record(alert, f"version:courier-am-{i}"))
    store = open_store(str(tmp_path / "models.db"), clock="caller")
    try:
        store.add_alerts(rows)
        outbox = AlertOutbox(store, [AlertmanagerSink(alertmanager)],
                             AlertPolicy(group_wait=timedelta(seconds=30)))
        report = outbox.run_once(now + timedelta(seconds=30))
    finally:
        store.close()
    assert report.delivered == 1 and not report.failures
    drift = [a for a in listed(alertmanager) if a["labels"]["family"] == "courier-am"]
    assert len(drift) == 1
    (got,) = drift
    assert got["labels"]["alertname"] == "CapwatchEffectDistributionDrift"
    assert "agent_id" not in got["labels"] and got["labels"]["action"] == "pick"
    assert got["annotations"]["summary"].startswith("5 agents of courier-am: pick(")
    assert sorted(json.loads(got["annotations"]["detail"])["by_agent"]) == [
        f"courier-am-{i}" for i in range(5)]
