"""The Helm chart, linted and rendered by Helm itself (Helm v4 as a library,
helm-python-sdk), and checked against what capwatch expects of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from capwatch.daemon.config import load_config

helm = pytest.importorskip("helm_python", reason="dev dependency helm-python-sdk missing")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "capwatch"
ALL_ON = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}


def render(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Rendered manifests by kind (the two ConfigMaps: the daemon's config wins)."""
    docs = {}
    for doc in sorted(_all_docs(values or {}), key=lambda d: d["metadata"]["name"],
                      reverse=True):
        docs[doc["kind"]] = doc
    return docs


@pytest.mark.parametrize("values", [{}, ALL_ON, {"persistence": {"enabled": False}}])
def test_helm_lint_strict_finds_no_warning_or_error(values: dict[str, Any]) -> None:
    report = helm.lint(str(CHART), values, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_default_render_has_no_operator_resources() -> None:
    kinds = set(render())
    assert kinds == {"ConfigMap", "Deployment", "Service", "ServiceAccount",
                     "PersistentVolumeClaim"}


def test_render_with_operator_resources() -> None:
    docs = render(ALL_ON)
    rule = docs["PrometheusRule"]
    plain = yaml.safe_load((ROOT / "deploy" / "prometheus" / "capwatch-rules.yml").read_text())
    assert rule["spec"] == plain  # the same groups, label templates untouched
    sm = docs["ServiceMonitor"]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["selector"]["matchLabels"] == \
        docs["Deployment"]["spec"]["selector"]["matchLabels"]


def test_family_models_can_be_mounted() -> None:
    values = {"extraVolumes": [{"name": "models", "configMap": {"name": "rover-models"}}],
              "extraVolumeMounts": [{"name": "models", "mountPath": "/etc/capwatch-models",
                                     "readOnly": True}]}
    assert helm.lint(str(CHART), values, strict=True)["errors"] == []
    pod = render(values)["Deployment"]["spec"]["template"]["spec"]
    assert {"name": "models", "configMap": {"name": "rover-models"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "models", "mountPath": "/etc/capwatch-models", "readOnly": True} in mounts
    assert {"name": "config", "mountPath": "/etc/capwatch", "readOnly": True} in mounts
    default_pod = render()["Deployment"]["spec"]["template"]["spec"]
    assert [v["name"] for v in default_pod["volumes"]] == ["config", "data", "tmp"]


def test_dashboard_configmap_carries_the_dashboard_json() -> None:
    cms = [d for d in _all_docs(ALL_ON) if d["kind"] == "ConfigMap"
           and d["metadata"]["name"].endswith("-dashboard")]
    (cm,) = cms
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "capwatch.json").read_text())
    assert json.loads(cm["data"]["capwatch.json"]) == shipped


def test_rendered_config_is_a_valid_daemon_config(tmp_path: Path) -> None:
    (cm,) = [d for d in _all_docs({}) if d["kind"] == "ConfigMap"
             and "capwatch.yaml" in d["data"]]
    config = load_config(text=cm["data"]["capwatch.yaml"])
    assert config.http.host == "0.0.0.0"
    dep = render()["Deployment"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == config.http.port
    assert container["args"] == ["run", "--config", "/etc/capwatch/capwatch.yaml"]
    assert dep["spec"]["strategy"]["type"] == "Recreate"  # one SQLite writer at a time


def _all_docs(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = helm.Chart.load(str(CHART)).render(values, name="capwatch", namespace="monitoring")
    return [yaml.safe_load(t) for t in out.values() if t.strip()]
