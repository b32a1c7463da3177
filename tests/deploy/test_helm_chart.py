"""The Helm chart, linted and rendered by Helm itself (Helm v4 as a library,
helm-python-sdk), every rendered manifest validated against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields are errors), and checked against what capwatch
expects of it."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from capwatch.daemon.config import load_config

helm = pytest.importorskip("helm_python", reason="dev dependency helm-python-sdk missing")
kubernetes_validate = pytest.importorskip("kubernetes_validate",
                                          reason="dev dependency kubernetes-validate missing")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "capwatch"
ALL_ON = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
POSTGRES = {"replicaCount": 1, "persistence": {"enabled": False},
            "store": {"urlSecret": {"name": "capwatch-store", "key": "url"}}}
# The values sets every rendered manifest is validated under.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "operator resources on": ALL_ON,
    "monitoring off": {"grafanaDashboard": {"enabled": False},
                       "networkPolicy": {"enabled": False},
                       "podDisruptionBudget": {"enabled": False}},
    "postgresql + SASL + TLS": {
                   **POSTGRES, **ALL_ON,
                   "config": {
                       "kafka": {"bootstrap_servers": "kafka.kafka:9093",
                                 "security_protocol": "SASL_SSL",
                                 "sasl": {"mechanism": "SCRAM-SHA-512", "username": "capwatch"},
                                 "tls": {"ca_file": "/etc/capwatch/secrets/kafka-tls/ca.crt",
                                         "cert_file": "/etc/capwatch/secrets/kafka-tls/tls.crt",
                                         "key_file": "/etc/capwatch/secrets/kafka-tls/tls.key"}},
                       "agents": {"url_template": "https://{agent_id}.agents:8443",
                                  "tls": {"ca_file": "/etc/capwatch/secrets/agents-ca/ca.crt"}},
                       "http": {"read_auth": True}},
                   "secrets": {"kafkaSaslPassword": {"name": "capwatch-kafka", "key": "password"},
                               "apiToken": {"name": "capwatch-api", "key": "token"},
                               "agentBearerToken": {"name": "agents", "key": "token"}},
                   "secretMounts": [{"name": "kafka-tls", "secretName": "capwatch-kafka-tls"},
                                    {"name": "agents-ca", "secretName": "agents-ca"}],
                   "networkPolicy": {"from": [{"namespaceSelector": {"matchLabels": {
                       "kubernetes.io/metadata.name": "monitoring"}}}],
                       "egress": [{"ports": [{"port": 9093, "protocol": "TCP"},
                                             {"port": 5432, "protocol": "TCP"}]}]}},
    "3 replicas": {"replicaCount": 3, "persistence": {"enabled": False},
                   "config": {"store": {"url": "postgresql://capwatch@postgres/capwatch"},
                              "http": {"host": "0.0.0.0"}}},
    "models mounted": {"extraVolumes": [{"name": "models",
                                         "configMap": {"name": "rover-models"}}],
                       "extraVolumeMounts": [{"name": "models",
                                              "mountPath": "/etc/capwatch-models",
                                              "readOnly": True}]},
}
# The oldest Kubernetes minor still supported by the chart's APIs, and the newest schemas.
K8S_VERSIONS = ["1.29", kubernetes_validate.latest_version()]
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}


def _all_docs(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = helm.Chart.load(str(CHART)).render(values, name="capwatch", namespace="monitoring")
    docs = []
    for name, text in out.items():
        if name.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def render(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Rendered manifests by kind (two ConfigMaps and two Services: the daemon's config and
    the client Service win)."""
    docs = {}
    for doc in sorted(_all_docs(values or {}), key=lambda d: d["metadata"]["name"],
                      reverse=True):
        docs[doc["kind"]] = doc
    return docs


def notes(values: dict[str, Any]) -> str:
    out = helm.Chart.load(str(CHART)).render(values, name="capwatch", namespace="monitoring")
    return str(out["capwatch/templates/NOTES.txt"])


def refusal(values: dict[str, Any]) -> str:
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as e:
        helm.Chart.load(str(CHART)).render(values, name="capwatch", namespace="monitoring")
    return str(e.value)


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_strict_finds_no_warning_or_error(name: str) -> None:
    report = helm.lint(str(CHART), VALUE_SETS[name], strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_manifest_is_valid_kubernetes(name: str) -> None:
    docs = _all_docs(VALUE_SETS[name])
    checked = set()
    for doc in docs:
        if doc["kind"] in OPERATOR_KINDS:
            continue  # CRDs: not in the Kubernetes schemas (checked below by promtool/shape)
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} against Kubernetes "
                            f"{version}: {e.message} at {'.'.join(map(str, e.path))}")
        checked.add(doc["kind"])
    assert {"StatefulSet", "Service", "ConfigMap"} <= checked


def test_the_validator_would_catch_a_bad_manifest() -> None:
    sts = render()["StatefulSet"]
    sts["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, K8S_VERSIONS[-1], strict=True)


def test_default_render() -> None:
    kinds = [d["kind"] for d in _all_docs({})]
    assert sorted(kinds) == ["ConfigMap", "ConfigMap", "NetworkPolicy", "PodDisruptionBudget",
                             "Secret", "Service", "Service", "ServiceAccount", "StatefulSet"]


def test_the_api_is_closed_by_default_with_a_generated_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    docs = render()
    secret = docs["Secret"]
    assert secret["metadata"]["name"] == "capwatch-api-token"
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    token = base64.b64decode(secret["data"]["token"])
    assert len(token) == 40 and token.isalnum()
    env = docs["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "CAPWATCH_HTTP__TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "capwatch-api-token", "key": "token"}}} in env
    (cm,) = [d for d in _all_docs({}) if d["kind"] == "ConfigMap"
             and "capwatch.yaml" in d["data"]]
    monkeypatch.setenv("CAPWATCH_HTTP__TOKEN", token.decode())  # as the pod gets it
    assert load_config(text=cm["data"]["capwatch.yaml"]).http.read_auth is True
    assert "get secret capwatch-api-token" in notes({})
    # The operator's own Secret replaces the generated one.
    own = _all_docs({"secrets": {"apiToken": {"name": "mine", "key": "t"}}})
    assert "Secret" not in [d["kind"] for d in own]


def test_statefulset_gives_each_replica_a_stable_id() -> None:
    docs = render(VALUE_SETS["3 replicas"])
    sts = docs["StatefulSet"]
    assert sts["spec"]["replicas"] == 3
    headless = [d for d in _all_docs(VALUE_SETS["3 replicas"])
                if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"]
    assert [h["metadata"]["name"] for h in headless] == [sts["spec"]["serviceName"]]
    env = sts["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "CAPWATCH_REPLICA_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env
    assert "volumeClaimTemplates" not in sts["spec"]  # PostgreSQL: no SQLite volume
    sqlite = render()["StatefulSet"]["spec"]
    (claim,) = sqlite["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data"
    assert "data" not in [v["name"] for v in sqlite["template"]["spec"]["volumes"]]


def test_pod_meets_pod_security_restricted() -> None:
    """The checks of the "restricted" Pod Security Standard that a pod spec carries."""
    pod = render()["StatefulSet"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert not any(k in pod for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert all("hostPath" not in v for v in pod["volumes"])
    allowed_volumes = {"configMap", "emptyDir", "persistentVolumeClaim", "secret",
                       "projected", "downwardAPI", "csi", "ephemeral", "name"}
    assert all(set(v) <= allowed_volumes for v in pod["volumes"])
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
        assert sc["runAsNonRoot"] is True and sc.get("privileged") is not True
        assert sc["readOnlyRootFilesystem"] is True
        assert "hostPort" not in c["ports"][0]
        assert {"cpu", "memory"} <= set(c["resources"]["limits"])
    sa = render()["ServiceAccount"]
    assert sa["automountServiceAccountToken"] is False


def test_probes_pdb_network_policy_and_annotations() -> None:
    values = {"podAnnotations": {"example.com/team": "fleet"}}
    docs = render(values)
    pod = docs["StatefulSet"]["spec"]["template"]
    assert pod["metadata"]["annotations"]["example.com/team"] == "fleet"
    assert "checksum/config" in pod["metadata"]["annotations"]
    c = pod["spec"]["containers"][0]
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # The startup probe, not the liveness probe, bounds a slow start.
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 120
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # A stalled main loop fails /livez (not /healthz, which a slow start must pass).
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    pdb = docs["PodDisruptionBudget"]
    assert pdb["spec"]["selector"] == docs["StatefulSet"]["spec"]["selector"]
    assert pdb["spec"]["maxUnavailable"] == 1
    np = docs["NetworkPolicy"]
    assert np["spec"]["policyTypes"] == ["Ingress"]
    assert np["spec"]["ingress"] == [{"ports": [{"port": "http", "protocol": "TCP"}]}]
    egress = render(VALUE_SETS["postgresql + SASL + TLS"])["NetworkPolicy"]["spec"]
    assert egress["policyTypes"] == ["Ingress", "Egress"]
    assert egress["ingress"][0]["from"][0]["namespaceSelector"]


def test_kafka_sasl_tls_and_tokens_come_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered config and the Secret-fed variables make a daemon config that speaks
    SASL_SSL with a client certificate and requires the API token."""
    values = VALUE_SETS["postgresql + SASL + TLS"]
    docs = render(values)
    pod = docs["StatefulSet"]["spec"]["template"]["spec"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in pod["containers"][0]["env"]
           if "secretKeyRef" in e.get("valueFrom", {})}
    assert env == {"CAPWATCH_STORE__URL": {"name": "capwatch-store", "key": "url"},
                   "CAPWATCH_KAFKA__SASL__PASSWORD": {"name": "capwatch-kafka",
                                                      "key": "password"},
                   "CAPWATCH_HTTP__TOKEN": {"name": "capwatch-api", "key": "token"},
                   "CAPWATCH_AGENTS__BEARER_TOKEN": {"name": "agents", "key": "token"}}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {"/etc/capwatch/secrets/kafka-tls", "/etc/capwatch/secrets/agents-ca"} <= mounts
    assert {"name": "secret-kafka-tls", "secret": {"secretName": "capwatch-kafka-tls",
                                                   "defaultMode": 0o440}} in pod["volumes"]
    (cm,) = [d for d in _all_docs(values) if d["kind"] == "ConfigMap"
             and "capwatch.yaml" in d["data"]]
    for name, secret in [("CAPWATCH_STORE__URL", "postgresql://cw:pw@pg/cw"),
                         ("CAPWATCH_KAFKA__SASL__PASSWORD", "kafka-pw"),
                         ("CAPWATCH_HTTP__TOKEN", "api-token"),
                         ("CAPWATCH_AGENTS__BEARER_TOKEN", "agent-token")]:
        monkeypatch.setenv(name, secret)
    config = load_config(text=cm["data"]["capwatch.yaml"])
    options = config.kafka.client_options()
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_plain_password"] == "kafka-pw"
    assert options["ssl_certfile"] == "/etc/capwatch/secrets/kafka-tls/tls.crt"
    assert config.http.api_token() == "api-token" and config.http.read_auth
    assert config.agents.request_headers() == {"Authorization": "Bearer agent-token"}
    assert "kafka-pw" not in cm["data"]["capwatch.yaml"]


def test_store_url_from_a_secret() -> None:
    c = render(POSTGRES)["StatefulSet"]["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "CAPWATCH_STORE__URL", "valueFrom": {"secretKeyRef": {
        "name": "capwatch-store", "key": "url"}}} in c["env"]


@pytest.mark.parametrize(("values", "message"), [
    ({"replicaCount": "three"}, "at '/replicaCount': got string, want integer"),
    ({"config": {"kafak": {"bootstrap_servers": "k:9092"}}},
     "at '/config': additional properties 'kafak' not allowed"),
    ({"config": {"kafka": {"bootstrap_server": "k:9092"}}},
     "additional properties 'bootstrap_server' not allowed"),
    ({"config": {"log": {"level": "verbose"}}}, "/config/log/level"),
    ({"replicaCuont": 2}, "additional properties 'replicaCuont' not allowed"),
    ({"prometheusRule": {"rules": {"noRecords": {"for": "ten minutes"}}}},
     "/prometheusRule/rules/noRecords/for"),
    ({"replicaCount": 3},
     "replicaCount 3 needs a store every replica reaches, but config.store.url is SQLite"),
    ({**POSTGRES, "persistence": {"enabled": True}}, "set persistence.enabled=false"),
    ({"config": {"http": {"host": "127.0.0.1"}}}, "config.http.host 127.0.0.1 is loopback"),
    ({"apiToken": {"generate": False}}, "config.http.read_auth needs a token"),
])
def test_bad_values_are_refused_with_a_clear_message(values: dict[str, Any],
                                                     message: str) -> None:
    assert message in refusal(values)


def test_values_schema_is_generated_from_the_daemon_config() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen", ROOT / "helm" / "gen_values_schema.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (CHART / "values.schema.json").read_text() == gen.render(), \
        "values.schema.json is stale: run .venv/bin/python helm/gen_values_schema.py"


def test_default_values_match_the_schema_and_the_daemon(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPWATCH_HTTP__TOKEN", "from-the-generated-secret")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert helm.lint(str(CHART), {}, strict=True)["errors"] == []
    load_config(text=yaml.safe_dump(values["config"]))


def test_notes_warn_about_what_an_operator_must_still_do() -> None:
    text = notes({})
    assert "statefulset/capwatch" in text and "config.families is empty" in text
    families = {"config": {"families": {"rover": {"domain": "/etc/capwatch-models/r.pddl"}}}}
    assert "config.families is empty" not in notes(families)
    assert "every model version and the" in notes({"persistence": {"enabled": False}})
    assert "every model version and the" not in notes(POSTGRES)


def test_render_with_operator_resources() -> None:
    docs = render(ALL_ON)
    rule = docs["PrometheusRule"]
    plain = yaml.safe_load((ROOT / "deploy" / "prometheus" / "capwatch-rules.yml").read_text())
    assert rule["spec"] == plain  # the plain file is the chart's rules at default values
    sm = docs["ServiceMonitor"]
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["selector"]["matchLabels"] == \
        docs["StatefulSet"]["spec"]["selector"]["matchLabels"]
    assert set(rule["metadata"]) >= {"name", "labels"}


def test_rule_thresholds_come_from_values() -> None:
    values = {**ALL_ON, "prometheusRule": {"enabled": True, "runbookUrl": "https://x/rb.md",
                                           "rules": {"consumerLagHigh": {"records": 500,
                                                                         "for": "2m"}}}}
    rules = {r["alert"]: r for g in render(values)["PrometheusRule"]["spec"]["groups"]
             for r in g["rules"]}
    lag = rules["CapwatchConsumerLagHigh"]
    assert lag["expr"].strip().endswith("> 500") and lag["for"] == "2m"
    assert lag["annotations"]["runbook_url"] == "https://x/rb.md#capwatchconsumerlaghigh"
    # Keys not given keep their defaults (Helm merges the maps).
    assert rules["CapwatchAbsent"]["for"] == "5m"


def test_family_models_can_be_mounted() -> None:
    values = VALUE_SETS["models mounted"]
    pod = render(values)["StatefulSet"]["spec"]["template"]["spec"]
    assert {"name": "models", "configMap": {"name": "rover-models"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "models", "mountPath": "/etc/capwatch-models", "readOnly": True} in mounts
    assert {"name": "config", "mountPath": "/etc/capwatch", "readOnly": True} in mounts
    default_pod = render()["StatefulSet"]["spec"]["template"]["spec"]
    assert [v["name"] for v in default_pod["volumes"]] == ["config", "tmp"]


def test_dashboard_configmap_carries_the_dashboard_json() -> None:
    cms = [d for d in _all_docs(ALL_ON) if d["kind"] == "ConfigMap"
           and d["metadata"]["name"].endswith("-dashboard")]
    (cm,) = cms
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "capwatch.json").read_text())
    assert json.loads(cm["data"]["capwatch.json"]) == shipped


def test_rendered_config_is_a_valid_daemon_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPWATCH_HTTP__TOKEN", "from-the-generated-secret")
    (cm,) = [d for d in _all_docs({}) if d["kind"] == "ConfigMap"
             and "capwatch.yaml" in d["data"]]
    config = load_config(text=cm["data"]["capwatch.yaml"])
    assert config.http.host == "0.0.0.0" and config.http.read_auth
    sts = render()["StatefulSet"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == config.http.port
    assert container["args"] == ["run", "--config", "/etc/capwatch/capwatch.yaml"]


def test_every_value_is_in_the_operations_table() -> None:
    """docs/operations.md's table of the chart's values names each top-level value of
    values.yaml, and no value the chart does not have."""
    import re

    import yaml

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    docs = (ROOT / "docs" / "operations.md").read_text()
    table = docs.split("| value | default | what |", 1)[1].split("\n\n", 1)[0]
    named = {n for cell in re.findall(r"^\| ([^|]+) \|", table, re.M)
             for n in re.findall(r"`(\w+)(?:\.\w+)*`", cell)}
    assert set(values) - named == set(), "values missing from docs/operations.md"
    assert named - set(values) == set(), "docs/operations.md names values the chart lacks"
