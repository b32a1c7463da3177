"""The Grafana dashboard: valid JSON, the panels the issue asks for, and PromQL that parses
(promtool) and selects only metrics capwatch exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_prometheus_rules import exported_series, metric_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm" / "capwatch" / "dashboards" / "capwatch.json"
PROMTOOL = shutil.which("promtool")


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def queries(d: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in d["panels"] if p["type"] != "row"
            for t in p["targets"]]


def concrete(expr: str) -> str:
    """Grafana variables replaced by what Grafana would substitute."""
    return expr.replace("$__rate_interval", "5m").replace("$family", ".*")


def test_dashboard_is_valid_and_complete() -> None:
    d = dashboard()
    assert d["uid"] == "capwatch-overview"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    titles = " | ".join(p["title"].lower() for p in d["panels"])
    for needed in ["drift alarms by family and action", "inconsistency rate",
                   "assessment latency", "queries", "consumer lag", "alerts by type"]:
        assert needed in titles
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"], p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24


def test_panels_select_only_exported_metrics() -> None:
    exported = exported_series()
    d = dashboard()
    family_var = next(v for v in d["templating"]["list"] if v["name"] == "family")
    m = re.fullmatch(r"label_values\((\w+), (\w+)\)", family_var["definition"])
    assert m is not None and m.group(1) in exported and m.group(2) == "family"
    for title, expr in queries(d):
        names = metric_names(concrete(expr))
        assert names, title
        assert names <= exported, f"{title}: unknown metrics {names - exported}"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: apt-get install -y prometheus")
def test_panel_promql_parses(tmp_path: Path) -> None:
    """promtool parses every expression (as recording rules), so a typo cannot ship."""
    rules = [{"record": f"capwatch:dashboard_check:{i}", "expr": concrete(expr)}
             for i, (_, expr) in enumerate(queries(dashboard()))]
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert PROMTOOL is not None
    run = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"SUCCESS: {len(rules)} rules found" in run.stdout
