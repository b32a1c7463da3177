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
    """``publisher`` never leaves an agent's older version last on the models topic:
    a version it sends again goes out as the agent's newest in ``store``, and once it has
    a version acknowledged, it sends a newer one stored meanwhile after it.

    The models topic is compacted by agent: its last record of a key is the version every
    consumer keeps. A replica whose version N did not go out (cut off from the broker,
    frozen past its lease, refused) keeps sending it again, or holds it in its client
    until the connection comes back; meanwhile the work's new holder publishes N and,
    after a new drift, N+1; N then lands behind N+1
    (tests/integration/test_kafka_version_order.py). Whichever record lands last, the
    newest stored when it was acknowledged follows it: a version stored later is
    published by its own worker after that. At least once as before: the newest may go
    out twice, the same content."""
    if not isinstance(publisher, PendingPublisher):
        return  # JSONL and log outputs append in order, one writer each

    def newer(value: bytes) -> bytes | None:
        event = ModelVersionEvent.model_validate_json(value)
        if not event.agent_id:
            return None
        latest = store.latest(event.family, event.agent_id)
        if latest is None or latest.version <= event.version:
            return None
        log.warning("a newer version of the agent is stored; it is published after this "
                    "one", agent_id=event.agent_id, version=event.version,
                    newest=latest.version)
        return model_event(latest).model_dump_json().encode()

    publisher.newest_model = newer
