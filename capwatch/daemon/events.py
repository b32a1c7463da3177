"""Turning a stored model version into the model event the daemon publishes.

Alerts are built by capwatch.alerts (one per changed action, content-derived dedup
keys) and put on the wire by capwatch.alerts.sinks.alert_event.
"""

from __future__ import annotations

from typing import Literal

from capwatch.contracts.versions import ModelVersion, unchecked_summary
from capwatch.contracts.wire import ChangedPalTuple, Coverage, ModelPayload, ModelVersionEvent
from capwatch.model.pal import Mode


def _mode(m: Mode) -> Literal["+", "-", "0", "?"]:
    return m.value


def coverage_of(v: ModelVersion) -> Coverage | None:
    coverage = v.coverage
    if coverage is None:
        return None
    fields = {k: coverage[k] for k in Coverage.model_fields if k in coverage}
    return Coverage.model_validate({**fields, "unchecked": unchecked_summary(coverage)})


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
        time=v.created_at, evidence=dict(v.evidence), coverage=coverage_of(v),
    )
