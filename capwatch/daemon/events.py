"""Turning a stored model version into the model event the daemon publishes.

Alerts are built by capwatch.alerts (one per changed action, content-derived dedup
keys) and put on the wire by capwatch.alerts.sinks.alert_event.
"""

from __future__ import annotations

from typing import Literal

from capwatch.contracts.versions import ModelVersion
from capwatch.contracts.wire import ChangedPalTuple, ModelPayload, ModelVersionEvent
from capwatch.model.pal import Mode


def _mode(m: Mode) -> Literal["+", "-", "0", "?"]:
    return m.value


def model_event(v: ModelVersion) -> ModelVersionEvent:
    parent = v.parent
    return ModelVersionEvent(
        agent_id=v.agent_id or "", family=v.family, version=v.version,
        parent_version=parent.version if parent else None,
        parent_agent_id=parent.agent_id if parent else None,
        delta=v.delta_to_parent, delta_to_baseline=v.delta_to_baseline,
        changes=[ChangedPalTuple(action=p.action, atom=[p.atom.predicate, *p.atom.args],
                           location=p.location.value, old=_mode(old), new=_mode(new))
                 for p, old, new in v.changed_pal_tuples],
        summary=list(v.summary), model=ModelPayload.model_validate(
            {"json": v.model_json, "pddl": v.pddl}),
        time=v.created_at, evidence=dict(v.evidence),
    )
