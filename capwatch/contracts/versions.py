"""Model versions: the records of the versioned model registry, and how they are built.

A *lineage* is a sequence of model versions 1, 2, 3, ... A family (the model a group of
agents was deployed with) has a baseline lineage, ``agent_id`` ``None``; an agent that
drifted gets a lineage of its own whose first version's parent is the family baseline
it was running. Until then the agent runs its family's baseline.

A version's content key makes a retried write of the same version recognisable (see
capwatch.contracts.store for the registry's role and its concurrency rules).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from capwatch.model.diff import (
    Change,
    change_from_json,
    change_to_json,
    describe_changes,
    model_changes,
)
from capwatch.model.domain import Action, Domain
from capwatch.model.pddl_writer import write_domain
from capwatch.model.serialize import domain_from_json, domain_to_json

JSON = dict[str, Any]


def unchecked_summary(coverage: Mapping[str, Any] | None) -> str | None:
    """"n capabilities could not be checked (actions) ..." or None when nothing was left
    unresolved: the line alerts, the API and the console show."""
    if not coverage or not coverage.get("unresolved"):
        return None
    n = int(coverage["unresolved"])
    actions = ", ".join(str(a) for a in coverage.get("unresolved_actions", ()))
    return (f"{n} {'capability' if n == 1 else 'capabilities'} could not be checked "
            f"({actions}); they keep their previous modes")


def as_utc(t: datetime) -> datetime:
    if t.tzinfo is None:
        raise ValueError(f"timestamp {t.isoformat()} has no time zone; capwatch stores UTC")
    return t.astimezone(UTC)


@dataclass(frozen=True, slots=True, order=True)
class ModelRef:
    """Names one model version. ``agent_id`` ``None`` is the family baseline."""

    family: str
    agent_id: str | None
    version: int

    def __str__(self) -> str:
        owner = self.agent_id if self.agent_id is not None else "baseline"
        return f"{self.family}/{owner}@{self.version}"

    def to_json(self) -> JSON:
        return {"family": self.family, "agent_id": self.agent_id, "version": self.version}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelRef:
        agent = data.get("agent_id")
        return cls(str(data["family"]), None if agent is None else str(agent),
                   int(data["version"]))


def content_key(payload: Mapping[str, Any]) -> str:
    """SHA-256 of canonical JSON: equal content gives an equal key on every host."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ModelVersion:
    """One stored model with where it came from and why."""

    ref: ModelRef
    parent: ModelRef | None
    delta_to_parent: int
    delta_to_baseline: int
    """Δ from the family baseline version this lineage forked from (0 for baselines)."""
    changed_pal_tuples: tuple[Change, ...]
    summary: tuple[str, ...]
    evidence: JSON
    model_json: JSON
    pddl: str
    created_at: datetime
    key: str = field(default="")
    """Content key: identical retries carry identical keys."""

    @property
    def family(self) -> str:
        return self.ref.family

    @property
    def agent_id(self) -> str | None:
        return self.ref.agent_id

    @property
    def version(self) -> int:
        return self.ref.version

    def domain(self) -> Domain:
        return domain_from_json(self.model_json)

    @property
    def coverage(self) -> JSON | None:
        """What the assessment behind this version checked (issue 11): counts of pal-tuples
        ``confirmed`` by evidence, ``carried_over`` from the parent unverified, and
        ``unresolved`` (published at the parent's modes), with the actions of the last two;
        None for versions no assessment recorded it for (baselines, operators, older ones)."""
        assessment = self.evidence.get("assessment")
        coverage = assessment.get("coverage") if isinstance(assessment, Mapping) else None
        return dict(coverage) if isinstance(coverage, Mapping) else None

    def identity(self) -> JSON:
        """What the content key covers: everything but the key itself."""
        return {
            "ref": self.ref.to_json(),
            "parent": self.parent.to_json() if self.parent else None,
            "delta_to_parent": self.delta_to_parent,
            "delta_to_baseline": self.delta_to_baseline,
            "changed_pal_tuples": [change_to_json(c) for c in self.changed_pal_tuples],
            "summary": list(self.summary),
            "evidence": self.evidence,
            "model": self.model_json,
            "pddl": self.pddl,
            "created_at": as_utc(self.created_at).isoformat(),
        }

    def to_json(self) -> JSON:
        """The published form (model events, ``capwatch models show --json``)."""
        data = self.identity()
        data["key"] = self.key
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ModelVersion:
        parent = data.get("parent")
        return cls(
            ref=ModelRef.from_json(data["ref"]),
            parent=ModelRef.from_json(parent) if parent else None,
            delta_to_parent=int(data["delta_to_parent"]),
            delta_to_baseline=int(data["delta_to_baseline"]),
            changed_pal_tuples=tuple(change_from_json(c) for c in data["changed_pal_tuples"]),
            summary=tuple(str(s) for s in data["summary"]),
            evidence=dict(data["evidence"]),
            model_json=dict(data["model"]),
            pddl=str(data["pddl"]),
            created_at=datetime.fromisoformat(str(data["created_at"])),
            key=str(data.get("key", "")),
        )


def build_version(
    ref: ModelRef,
    domain: Domain,
    created_at: datetime,
    *,
    parent: ModelVersion | None = None,
    baseline: Domain | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> ModelVersion:
    """Make the record for a new version: Δ, changed pal-tuples and summary from the parent.

    ``baseline`` is the family baseline the lineage forked from; it defaults to the parent
    for a lineage's first agent version and is the domain itself for a baseline.
    """
    if ref.version < 1:
        raise ValueError("versions start at 1")
    if parent is not None:
        old = parent.domain()
        changes = model_changes(old, domain)
        summary = describe_changes(old, domain, changes)
    else:
        changes, summary = [], []
    if ref.agent_id is None:
        base_delta = 0
    else:
        if baseline is None and parent is not None and parent.agent_id is None:
            baseline = parent.domain()
        if baseline is None:
            raise ValueError(f"{ref}: an agent version needs the family baseline to measure Δ")
        base_delta = len(model_changes(baseline, domain))
    version = ModelVersion(
        ref=ref, parent=parent.ref if parent else None, delta_to_parent=len(changes),
        delta_to_baseline=base_delta, changed_pal_tuples=tuple(changes),
        summary=tuple(summary), evidence=dict(evidence or {}),
        model_json=domain_to_json(domain), pddl=write_domain(domain),
        created_at=as_utc(created_at),
    )
    return with_key(version)


def with_key(v: ModelVersion) -> ModelVersion:
    return ModelVersion(v.ref, v.parent, v.delta_to_parent, v.delta_to_baseline,
                        v.changed_pal_tuples, v.summary, v.evidence, v.model_json, v.pddl,
                        v.created_at, content_key(v.identity()))


@dataclass(frozen=True, slots=True)
class VersionDiff:
    """What differs between two stored versions, in pal-tuples and in words."""

    a: ModelRef
    b: ModelRef
    changes: tuple[Change, ...]
    summary: tuple[str, ...]

    @property
    def delta(self) -> int:
        return len(self.changes)

    def to_json(self) -> JSON:
        return {"a": self.a.to_json(), "b": self.b.to_json(), "delta": self.delta,
                "changes": [change_to_json(c) for c in self.changes],
                "summary": list(self.summary)}


def diff_versions(a: ModelVersion, b: ModelVersion) -> VersionDiff:
    old, new = a.domain(), b.domain()
    changes = model_changes(old, new)
    return VersionDiff(a.ref, b.ref, tuple(changes),
                       tuple(describe_changes(old, new, changes)))


@dataclass(frozen=True, slots=True)
class LineageSummary:
    family: str
    agent_id: str | None
    latest_version: int
    updated_at: datetime
    delta_to_baseline: int


def _shape(a: Action) -> tuple[Any, ...]:
    """An action but for its outcomes' probabilities."""
    return (a.name, a.parameters, a.pre_pos, a.pre_neg, a.equal, a.distinct, a.numeric,
            frozenset((o.add, o.delete) for o in a.outcomes), len(a.outcomes))


def within_intervals_of_baseline(version: ModelVersion, estimated_from: Domain | None,
                                 baseline: Domain) -> bool:
    """Whether ``version``'s model is ``baseline``'s but for outcome probabilities its own
    assessment cannot tell from the baseline's: every action whose probabilities differ
    was re-estimated by that assessment, and each of the baseline's probabilities lies
    within the estimate's simultaneous interval (the rule by which the assessor keeps a
    model rather than publish an estimate: ``daemon.assessor._agrees``).

    ``estimated_from``: the model the assessment sampled (the version's parent), whose
    outcome order the estimates are listed in. An agent that drifted and came back
    (oper20: 0.8 -> 0.5, then 0.792 [0.775, 0.809]) learns a version that is not the
    baseline's text, yet is the baseline as far as its evidence can tell.
    """
    model = version.domain()
    if model == baseline:
        return True
    if (model.name, model.predicates, model.types, model.constants, model.functions) != (
            baseline.name, baseline.predicates, baseline.types, baseline.constants,
            baseline.functions):
        return False
    mine, base = model.action_map, baseline.action_map
    if set(mine) != set(base) or any(_shape(a) != _shape(base[n]) for n, a in mine.items()):
        return False
    assessment = version.evidence.get("assessment")
    estimates = assessment.get("estimates") if isinstance(assessment, Mapping) else None
    sampled_map = estimated_from.action_map if estimated_from is not None else {}
    for name, a in mine.items():
        b = base[name]
        if a == b:
            continue
        est = estimates.get(name) if isinstance(estimates, Mapping) else None
        sampled = sampled_map.get(name)
        if not isinstance(est, Mapping) or sampled is None:
            return False
        low, high = est.get("low"), est.get("high")
        n = len(sampled.outcomes)
        if not isinstance(low, list) or not isinstance(high, list) or len(low) != n \
                or len(high) != n:
            return False
        bounds = {(o.add, o.delete): (float(lo), float(hi))
                  for o, lo, hi in zip(sampled.outcomes, low, high, strict=True)}
        for o in b.outcomes:
            lo_hi = bounds.get((o.add, o.delete))
            if lo_hi is None or not lo_hi[0] <= o.probability <= lo_hi[1]:
                return False
    return True
