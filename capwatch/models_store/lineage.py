"""Walking and extending lineages: helpers over the registry role."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from capwatch.contracts.store import ModelRegistry, StoreError, UnknownVersion
from capwatch.contracts.versions import ModelRef, ModelVersion, build_version
from capwatch.model.domain import Domain


def lineage_chain(store: ModelRegistry, ref: ModelRef) -> list[ModelVersion]:
    """The version and its ancestors across lineages, root (a baseline) first."""
    chain: list[ModelVersion] = []
    seen: set[ModelRef] = set()
    current: ModelRef | None = ref
    while current is not None:
        if current in seen:
            raise StoreError(f"parent cycle at {current}")
        seen.add(current)
        v = store.get(current)
        if v is None:
            raise UnknownVersion(f"no model version {current}")
        chain.append(v)
        current = v.parent
    return chain[::-1]


def next_ref(store: ModelRegistry, family: str, agent_id: str | None) -> ModelRef:
    latest = store.latest(family, agent_id)
    return ModelRef(family, agent_id, latest.version + 1 if latest else 1)


def record_new_model(store: ModelRegistry, family: str, agent_id: str | None, domain: Domain,
                     created_at: datetime,
                     evidence: Mapping[str, Any] | None = None) -> ModelVersion:
    """Append ``domain`` to a lineage, forking an agent lineage from its family baseline.

    Convenience for callers that do not track versions themselves; a caller that must
    retry safely should build the version once (:func:`build_version`) and retry
    :meth:`ModelRegistry.put` with that same record.
    """
    ref = next_ref(store, family, agent_id)
    parent = store.latest(family, agent_id)
    baseline: Domain | None = None
    if agent_id is not None:
        if parent is None:
            parent = store.model_at(agent_id, created_at, family)
            if parent is None:
                raise UnknownVersion(f"family {family} has no baseline to fork {agent_id} from")
        baseline = _fork_baseline(store, parent).domain()
    return store.put(build_version(ref, domain, created_at, parent=parent,
                                   baseline=baseline, evidence=evidence))


def _fork_baseline(store: ModelRegistry, v: ModelVersion) -> ModelVersion:
    for ancestor in reversed(lineage_chain(store, v.ref)):
        if ancestor.agent_id is None:
            return ancestor
    raise StoreError(f"{v.ref} descends from no family baseline")
