"""The alerting rules: valid for promtool, unit-tested with promtool, documented, and not
colliding with the alerts the daemon pushes itself (the chart renders the same rules:
tests/deploy/test_helm_chart.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from capwatch.alerts.types import AlertType
from tests.daemon.test_metrics import exercised

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "capwatch-rules.yml"
RULES_TEST = ROOT / "deploy" / "prometheus" / "capwatch-rules.test.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None,
                                    reason="promtool missing: apt-get install -y prometheus")

# PromQL words that look like metric names but are functions, keywords or label names.
_NOT_METRICS = {
    "sum", "max", "min", "avg", "count", "rate", "increase", "irate", "by", "without", "on",
    "ignoring", "group_left", "group_right", "histogram_quantile", "absent", "and", "or",
    "unless", "le", "bool", "offset", "topk", "bottomk", "clamp_min", "label_values", "vector",
    "time", "timestamp", "resets", "changes",
}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (a lexer good enough for our rules)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)      # string literals
    text = re.sub(r"\{[^}]*\}", "", text)                  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)                 # range selectors
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    words = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", text))
    return {w for w in words if w not in _NOT_METRICS and not re.fullmatch(r"\d.*", w)}


def exported_series() -> set[str]:
    names = set()
    for f in text_string_to_metric_families(exercised().exposition().decode()):
        names |= {s.name for s in f.samples}
    return names


@needs_promtool
def test_promtool_check_rules() -> None:
    assert PROMTOOL is not None
    run = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS: 13 rules found" in run.stdout


@needs_promtool
def test_promtool_test_rules() -> None:
    assert PROMTOOL is not None
    run = subprocess.run([PROMTOOL, "test", "rules", RULES_TEST.name], capture_output=True,
                         text=True, timeout=120, cwd=RULES_TEST.parent)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


def test_every_alert_has_a_unit_test_and_uses_exported_metrics() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    tested = {t["alertname"] for case in yaml.safe_load(RULES_TEST.read_text())["tests"]
              for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert {r["alert"] for r in rules} == tested
    exported = exported_series()
    for r in rules:
        assert r["labels"]["severity"] in {"info", "warning", "critical"}
        assert {"summary", "description"} <= set(r["annotations"])
        unknown = metric_names(r["expr"]) - exported
        assert not unknown, f"{r['alert']} uses metrics capwatch does not export: {unknown}"


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"]]


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower())
            out.add(text.replace(" ", "-"))
    return out


def test_every_rule_waits_and_links_an_existing_runbook_section() -> None:
    anchors = _anchors(RUNBOOKS.read_text())
    for r in _rules():
        assert r.get("for"), f"{r['alert']} has no for: (one bad scrape would page)"
        url = r["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "docs/runbooks.md" and anchor in anchors, f"{r['alert']}: {url}"


def test_no_rule_is_named_like_an_alert_the_daemon_pushes() -> None:
    pushed = {t.alertname for t in AlertType}
    names = [r["alert"] for r in _rules()]
    assert len(names) == len(set(names))
    assert not pushed & set(names)
    assert "CapwatchEffectDistributionDrift" in pushed  # the name that once collided


def test_nothing_pages_critical_except_a_missing_daemon() -> None:
    critical = {r["alert"] for r in _rules() if r["labels"]["severity"] == "critical"}
    assert critical == {"CapwatchAbsent"}


def test_rules_file_is_the_rendered_chart_template() -> None:
    helm = pytest.importorskip("helm_python", reason="dev dependency helm-python-sdk missing")
    assert helm is not None
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_rules", RULES.parent / "render_rules.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert RULES.read_text() == mod.render(), \
        "capwatch-rules.yml is stale: run .venv/bin/python deploy/prometheus/render_rules.py"


def test_metric_name_lexer() -> None:
    expr = ('histogram_quantile(0.9, sum by (family, le) (rate(x_bucket{a="b{c}"}[5m]))) '
            '/ on (family) absent(y_total) > 3')
    assert metric_names(expr) == {"x_bucket", "y_total"}
