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
    """Every PromQL expression: panel targets and annotation queries."""
    panels = [(p["title"], t["expr"]) for p in d["panels"] if p["type"] != "row"
              for t in p["targets"]]
    notes = [(a["name"], a["expr"]) for a in d["annotations"]["list"] if "expr" in a]
    return panels + notes


def concrete(expr: str) -> str:
    """Grafana variables replaced by what Grafana would substitute."""
    for var, value in [("$__rate_interval", "5m"), ("$__interval", "1m"),
                       ("$family", ".*"), ("$namespace", ".*"), ("$job", ".*")]:
        expr = expr.replace(var, value)
    return expr


def test_dashboard_is_valid_and_complete() -> None:
    d = dashboard()
    assert d["uid"] == "capwatch-overview"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    titles = " | ".join(p["title"].lower() for p in d["panels"])
    for needed in ["drift alarms by family and action", "inconsistency rate",
                   "assessment latency", "queries", "consumer lag", "alerts by type",
                   "store writes failing"]:
        assert needed in titles
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"], p["title"]
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24


def test_stat_and_table_panels_summarise_the_fleet() -> None:
    d = dashboard()
    by_type: dict[str, list[dict[str, Any]]] = {}
    for p in d["panels"]:
        by_type.setdefault(p["type"], []).append(p)
    stats = {p["title"] for p in by_type["stat"]}
    assert {"Replicas up", "Agents drifted", "Records read", "Consumer lag"} <= stats
    (table,) = by_type["table"]
    assert all(t["format"] == "table" and t["instant"] for t in table["targets"])
    assert all("by (family)" in t["expr"] for t in table["targets"])
    assert table["transformations"][0]["options"]["byField"] == "family"
    # The overview sits above the time series.
    first_row = min(p["gridPos"]["y"] for p in by_type["timeseries"])
    assert all(p["gridPos"]["y"] < first_row for p in by_type["stat"] + by_type["table"])


def test_variables_scope_every_query_to_a_namespace_and_job() -> None:
    d = dashboard()
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == ["datasource", "namespace", "job", "family"]
    for title, expr in queries(d):
        for selector in re.findall(r"capwatch_\w+\{[^}]*\}|capwatch_\w+(?![\w{])", expr):
            assert 'namespace=~"$namespace"' in selector and 'job=~"$job"' in selector, \
                f"{title}: {selector}"


def test_model_versions_are_annotated() -> None:
    notes = {a["name"]: a for a in dashboard()["annotations"]["list"]}
    versions = notes["Model versions"]
    assert versions["enable"] is True
    assert "capwatch_model_versions_total" in versions["expr"]
    assert "{{family}}" in versions["textFormat"]


def test_panels_select_only_exported_metrics() -> None:
    exported = exported_series()
    d = dashboard()
    for var in d["templating"]["list"][1:]:
        m = re.fullmatch(r"label_values\((\w+)(\{[^}]*\})?, (\w+)\)", var["definition"])
        assert m is not None and m.group(1) in exported and m.group(3) == var["name"]
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


FLEET_GAUGES = ("capwatch_agents_drifted", "capwatch_model_delta_from_baseline")


def test_fleet_wide_gauges_are_combined_across_replicas_with_max() -> None:
    """Every replica reports the whole fleet's drift gauges (fleet_drift.py): a ``sum``
    over replicas would count each drifted agent once per replica (3 replicas, 3x)."""
    checked = 0
    for title, expr in queries(dashboard()):
        for gauge in FLEET_GAUGES:
            uses = len(re.findall(rf"\b{gauge}\{{", expr))
            under_max = len(re.findall(rf"max by \(family\) \({gauge}\{{[^}}]*\}}\)", expr))
            assert uses == under_max, f"{title}: {gauge} not taken with max by (family): {expr}"
            checked += uses
    assert checked >= 4


def test_store_writes_failing_counts_the_replicas_by_kind() -> None:
    """Each replica reports its own writes (``capwatch_store_writes_failing{kind}``, 1
    while the store refuses them): the panel adds replicas up per kind, as the rule
    CapwatchStoreWritesFailing counts them, and shows the refusals beside; it sits in
    the Pipeline row, before the Alerts row, without overlapping another panel."""
    d = dashboard()
    (panel,) = [p for p in d["panels"] if p["title"] == "Store writes failing"]
    exprs = [t["expr"] for t in panel["targets"]]
    assert any(re.fullmatch(r"sum by \(kind\) \(capwatch_store_writes_failing\{[^}]*\}\)", e)
               for e in exprs), exprs
    assert any("capwatch_store_write_failures_total" in e and "increase(" in e
               for e in exprs), exprs
    rows = {p["title"]: p["gridPos"]["y"] for p in d["panels"] if p["type"] == "row"}
    assert rows["Pipeline"] < panel["gridPos"]["y"] < rows["Alerts"]
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        g = p["gridPos"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
