"""Turning a stored model version into the model event the daemon publishes.

Alerts are built by capwatch.alerts (one per changed action, content-derived dedup
keys) and put on the wire by capwatch.alerts.sinks.alert_event.
"""

from __future__ import annotations

from typing import Literal

import structlog

from capwatch.adapters.io.kafka_common import PendingPublisher
from capwatch.contracts.store import ModelStore
from capwatch.contracts.versions import ModelVersion, unchecked_summary
from capwatch.contracts.wire import ChangedPalTuple, Coverage, ModelPayload, ModelVersionEvent
from capwatch.model.pal import Mode

log = structlog.get_logger("capwatch.daemon")


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


def resend_newest_versions(publisher: object, store: ModelStore) -> None:
    """A model version ``publisher`` sends again is its agent's newest in ``store``.

    The models topic is compacted by agent: its last record of a key is the version every
    consumer keeps. A replica whose version N failed to go out (cut off from the broker,
    frozen past its lease, refused) keeps sending it again; meanwhile the work's new
    holder publishes N and, after a new drift, N+1; N sent again then lands behind N+1
    (tests/integration/test_kafka_version_order.py). Sending the newest instead, the
    last record of the agent is the newest stored when it was sent. At least once as
    before: the newest may go out twice, the same content."""
    if not isinstance(publisher, PendingPublisher):
        return  # JSONL and log outputs append in order, one writer each

    def newest(value: bytes) -> bytes:
        event = ModelVersionEvent.model_validate_json(value)
        if not event.agent_id:
            return value
        latest = store.latest(event.family, event.agent_id)
        if latest is None or latest.version <= event.version:
            return value
        log.warning("a model version sent again is superseded; its agent's newest is sent "
                    "instead", agent_id=event.agent_id, version=event.version,
                    newest=latest.version)
        return model_event(latest).model_dump_json().encode()

    publisher.newest_model = newest
