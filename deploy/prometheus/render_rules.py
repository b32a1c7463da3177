"""Writes capwatch-rules.yml: the Helm chart's PrometheusRule groups rendered with the
chart's default values (helm/capwatch/templates/_rules.tpl is the one source). Needs the
dev extras (helm-python-sdk). Run after editing the rules or their default thresholds:
``.venv/bin/python deploy/prometheus/render_rules.py``; tests/deploy fails while stale.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CHART = HERE.parents[1] / "helm" / "capwatch"
OUT = HERE / "capwatch-rules.yml"
HEADER = """\
# capwatch alerting rules (Prometheus rules file), GENERATED from the Helm chart's
# templates/_rules.tpl at its default values by render_rules.py: edit the template, then
# run `.venv/bin/python deploy/prometheus/render_rules.py`. The chart's PrometheusRule
# renders the same groups, with thresholds from values (prometheusRule.rules).
# Unit tests: capwatch-rules.test.yml (`promtool test rules capwatch-rules.test.yml`).
# capwatch's own model-change alerts (CapwatchCapabilityReduced, ...) go to Alertmanager
# directly from the daemon; these rules watch the daemon and the fleet's aggregates, under
# names the daemon never uses.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, s: str) -> Any:
    style = "|" if "\n" in s else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


_Dumper.add_representer(str, _str)


def rendered_groups() -> dict[str, Any]:
    import helm_python

    out = helm_python.Chart.load(str(CHART)).render(
        {"prometheusRule": {"enabled": True}}, name="capwatch", namespace="monitoring")
    rule = yaml.safe_load(out["capwatch/templates/prometheusrule.yaml"])
    spec: dict[str, Any] = rule["spec"]
    return spec


def render() -> str:
    body = yaml.dump(rendered_groups(), Dumper=_Dumper, sort_keys=False, width=4096,
                     allow_unicode=True)
    return HEADER + body


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}", file=sys.stderr)
