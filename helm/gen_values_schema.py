"""Writes helm/capwatch/values.schema.json: the chart's own values, described here, and
``config`` (the daemon's capwatch.yaml) generated from the daemon's configuration model, so
Helm refuses a misspelt or mistyped daemon setting with the same rules the daemon applies.

Run after changing capwatch/daemon/config.py or the chart's values:
``.venv/bin/python helm/gen_values_schema.py`` (tests/deploy fails while the file is stale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).resolve().parent / "capwatch" / "values.schema.json"
DURATION = {"type": "string", "pattern": "^([0-9]+(ms|s|m|h|d|w|y))+$"}
NUMBER = {"type": "number", "exclusiveMinimum": 0}


def _obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": props, **extra}


def _rule(**thresholds: Any) -> dict[str, Any]:
    return _obj({**thresholds, "for": DURATION})


def _probe() -> dict[str, Any]:
    positive = {"type": "integer", "minimum": 1}
    return _obj({"periodSeconds": positive, "timeoutSeconds": positive,
                 "failureThreshold": positive, "successThreshold": positive,
                 "initialDelaySeconds": {"type": "integer", "minimum": 0}})


def chart_schema() -> dict[str, Any]:
    k8s_obj = {"type": "object"}
    k8s_list = {"type": "array", "items": {"type": "object"}}
    labels = {"type": "object", "additionalProperties": {"type": "string"}}
    return _obj({
        "replicaCount": {"type": "integer", "minimum": 0,
                         "description": "More than 1 needs a PostgreSQL store."},
        "image": _obj({"repository": {"type": "string", "minLength": 1},
                       "tag": {"type": "string"},
                       "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]}}),
        "imagePullSecrets": k8s_list,
        "nameOverride": {"type": "string"}, "fullnameOverride": {"type": "string"},
        "serviceAccount": _obj({"create": {"type": "boolean"}, "name": {"type": "string"},
                                "annotations": labels}),
        "automountServiceAccountToken": {"type": "boolean"},
        "podAnnotations": labels, "podLabels": labels,
        "priorityClassName": {"type": "string"},
        "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
        "config": {"$ref": "#/definitions/DaemonConfig"},
        "store": _obj({"urlSecret": _obj({"name": {"type": "string"},
                                          "key": {"type": "string", "minLength": 1}})}),
        "apiToken": _obj({"generate": {"type": "boolean"}}),
        "secrets": _obj({name: _obj({"name": {"type": "string"},
                                     "key": {"type": "string", "minLength": 1}})
                         for name in ("kafkaSaslPassword", "apiToken", "agentBearerToken")}),
        "secretMounts": {"type": "array", "items": _obj(
            {"name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                      "maxLength": 50},
             "secretName": {"type": "string", "minLength": 1}},
            required=["name", "secretName"])},
        "env": k8s_list, "envFrom": k8s_list,
        "persistence": _obj({"enabled": {"type": "boolean"},
                             "size": {"type": ["string", "integer"]},
                             "storageClassName": {"type": "string"},
                             "accessModes": {"type": "array", "items": {"type": "string"}}}),
        "resources": k8s_obj, "podSecurityContext": k8s_obj, "securityContext": k8s_obj,
        "startupProbe": _probe(), "livenessProbe": _probe(), "readinessProbe": _probe(),
        "podDisruptionBudget": _obj({"enabled": {"type": "boolean"},
                                     "maxUnavailable": {"type": ["integer", "string"]}}),
        "networkPolicy": _obj({"enabled": {"type": "boolean"}, "from": k8s_list,
                               "egress": k8s_list}),
        "extraVolumes": k8s_list, "extraVolumeMounts": k8s_list,
        "nodeSelector": labels, "tolerations": k8s_list, "affinity": k8s_obj,
        "topologySpreadConstraints": k8s_list,
        "service": _obj({"type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                         "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                         "annotations": labels}),
        "serviceMonitor": _obj({"enabled": {"type": "boolean"}, "interval": DURATION,
                                "scrapeTimeout": DURATION, "labels": labels}),
        "prometheusRule": _obj({
            "enabled": {"type": "boolean"}, "labels": labels,
            "runbookUrl": {"type": "string", "minLength": 1},
            "rules": _obj({
                "inconsistencyRateHigh": _rule(ratio={"type": "number", "exclusiveMinimum": 0,
                                                      "maximum": 1}),
                "driftAlarmsFrequent": _rule(alarms={"type": "integer", "minimum": 1},
                                             window=DURATION),
                "modelDriftedFromBaseline": _rule(palTuples={"type": "integer", "minimum": 1}),
                "assessmentFailureRateHigh": _rule(ratio={"type": "number", "minimum": 0,
                                                          "exclusiveMaximum": 1},
                                                   window=DURATION),
                "assessmentSlow": _rule(p90Seconds=NUMBER),
                "consumerLagHigh": _rule(records={"type": "integer", "minimum": 1}),
                "deadLettersHigh": _rule(messages={"type": "integer", "minimum": 0},
                                         window=DURATION),
                "agentFamilyMoves": _rule(window=DURATION),
                "alertDeliveryFailing": _rule(window=DURATION),
                "noRecords": _rule(window=DURATION),
                "storeWritesFailing": _rule(),
                "kafkaPartitionFailing": _rule(),
                "absent": _rule(),
            })}),
        "grafanaDashboard": _obj({"enabled": {"type": "boolean"}, "labels": labels,
                                  "annotations": labels}),
    })


def values_schema() -> dict[str, Any]:
    from capwatch.daemon.config import DaemonConfig

    daemon = DaemonConfig.model_json_schema(ref_template="#/definitions/{model}")
    definitions = daemon.pop("$defs")
    # replica_id comes from the pod name (CAPWATCH_REPLICA_ID), never from the file.
    daemon["properties"].pop("replica_id", None)
    definitions["DaemonConfig"] = daemon
    schema = {"$schema": "http://json-schema.org/draft-07/schema#",
              "title": "capwatch Helm chart values", **chart_schema(),
              "definitions": definitions}
    return schema


def render() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    SCHEMA.write_text(render())
    print(f"wrote {SCHEMA}", file=sys.stderr)
