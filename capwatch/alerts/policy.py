"""The alert policy (severity, suppression windows, grouping) and how a group merges.

Alerts wait ``group_wait`` in a group keyed by (type, family, action, fingerprint) so
that seven agents of one family hitting the same drift give one alert, "7 agents of
rover-v3: ...", instead of seven pages. An alert whose dedup key was let through less
than its type's suppression window ago is dropped (and counted). The alert outbox
(capwatch.alerts.outbox) applies the policy, durably, through the store.

The unexplained-inconsistency alert does not wait by default (``group_wait_by_type``):
it is the prompt one, saying within a second that an agent did something its model rules
out; the assessment's own alerts, seconds to minutes later, are the ones grouped. Alerts
of that type routed in the same pass still merge into one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from capwatch.alerts.types import DEFAULT_SEVERITY, Alert, AlertType, Severity

DEFAULT_SUPPRESSION: Mapping[AlertType, timedelta] = {
    AlertType.CAPABILITY_REDUCED: timedelta(hours=24),
    AlertType.CAPABILITY_EXPANDED: timedelta(hours=24),
    AlertType.EFFECT_DISTRIBUTION_DRIFT: timedelta(hours=6),
    AlertType.UNEXPLAINED_INCONSISTENCY: timedelta(hours=1),
    AlertType.ASSESSMENT_FAILED: timedelta(hours=1),
    # As long as a drift's: a drift the answers keep not confirming is raised again after
    # each settling, and one line per window says it.
    AlertType.DRIFT_NOT_CONFIRMED: timedelta(hours=6),
}

DEFAULT_GROUP_WAIT_BY_TYPE: Mapping[AlertType, timedelta] = {
    AlertType.UNEXPLAINED_INCONSISTENCY: timedelta(0),
}
"""Types whose groups do not wait ``group_wait`` (see the module docstring)."""


@dataclass(frozen=True)
class AlertPolicy:
    severities: Mapping[AlertType, Severity] = field(
        default_factory=lambda: dict(DEFAULT_SEVERITY))
    suppress_for: Mapping[AlertType, timedelta] = field(
        default_factory=lambda: dict(DEFAULT_SUPPRESSION))
    group_wait: timedelta = timedelta(seconds=30)
    """How long the first alert of a group waits for others (Alertmanager's group_wait)."""
    max_agents_listed: int = 20
    group_wait_by_type: Mapping[AlertType, timedelta] = field(
        default_factory=lambda: dict(DEFAULT_GROUP_WAIT_BY_TYPE))
    """Per type, instead of ``group_wait``."""

    def wait_for(self, alert_type: AlertType) -> timedelta:
        return self.group_wait_by_type.get(alert_type, self.group_wait)

    @classmethod
    def from_config(cls, data: Mapping[str, Any]) -> AlertPolicy:
        """From a config mapping such as ``{"severity": {"capability_expanded": "warning"},
        "suppress_seconds": {"assessment_failed": 600}, "group_wait_seconds": 10,
        "group_wait_by_type": {"unexplained_inconsistency": 30}}``."""
        known = {"severity", "suppress_seconds", "group_wait_seconds", "max_agents_listed",
                 "group_wait_by_type"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown alert policy keys {sorted(unknown)}; known: "
                             f"{sorted(known)}")
        severities = dict(DEFAULT_SEVERITY)
        for name, level in dict(data.get("severity", {})).items():
            severities[_alert_type(name)] = Severity.parse(str(level))
        suppress = dict(DEFAULT_SUPPRESSION)
        for name, seconds in dict(data.get("suppress_seconds", {})).items():
            if float(seconds) < 0:
                raise ValueError(f"suppress_seconds.{name} must not be negative")
            suppress[_alert_type(name)] = timedelta(seconds=float(seconds))
        wait = float(data.get("group_wait_seconds", 30))
        if wait < 0:
            raise ValueError("group_wait_seconds must not be negative")
        by_type = dict(DEFAULT_GROUP_WAIT_BY_TYPE)
        for name, seconds in dict(data.get("group_wait_by_type", {})).items():
            if float(seconds) < 0:
                raise ValueError(f"group_wait_by_type.{name} must not be negative")
            by_type[_alert_type(name)] = timedelta(seconds=float(seconds))
        return cls(severities, suppress, timedelta(seconds=wait),
                   int(data.get("max_agents_listed", 20)), by_type)


def _alert_type(name: str) -> AlertType:
    try:
        return AlertType(name)
    except ValueError:
        raise ValueError(f"unknown alert type {name!r}; known: "
                         f"{[t.value for t in AlertType]}") from None


def _causes(members: list[Alert], shown: tuple[str, ...]) -> dict[str, Any]:
    """Each listed member's own failure message, when the alerts carry one."""
    causes = {a.agent_id or "*": a.detail["message"] for a in members
              if "message" in a.detail and (a.agent_id or "*") in shown}
    return {"causes": causes} if causes else {}


def _by_agent(members: list[Alert], shown: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    mine: dict[str, list[Alert]] = {}
    for a in members:
        if (a.agent_id or "*") in shown:
            mine.setdefault(a.agent_id or "*", []).append(a)
    out: dict[str, dict[str, Any]] = {}
    for agent, own in mine.items():
        entry = dict(own[-1].detail)
        if len(own) > 1:
            entry["earlier"] = [dict(a.detail) for a in own[:-1]]
        out[agent] = entry
    return out


def merge_group(members: list[Alert], max_agents_listed: int = 20,
                tag: str | None = None) -> Alert:
    """One alert for the members of a group: the member itself if alone, else
    "N agents of FAMILY: ..." listing the agents.

    ``tag`` (a digest of the members) goes into the merged alert's fingerprint, so a later
    group of other agents with the same change gets a dedup key of its own while a
    re-delivery of this group keeps this one.
    """
    if len(members) == 1:
        return members[0]
    members = sorted(members, key=lambda a: (a.agent_id or "", a.time))
    first = members[0]
    # One agent's successive versions can share a group keyed by the change's shape
    # (0.9 -> 0.7, then 0.7 -> 0.5): it is one agent, listed and counted once.
    agents = tuple(dict.fromkeys(a.agent_id or "*" for a in members))
    phrase = first.group_summary or first.summary
    shown = agents[:max_agents_listed]
    # Members grouped by their change's shape differ in detail (each agent's estimate):
    # each listed member's is kept, where the first's alone would stand for all. An
    # agent's newest is its entry, its earlier ones under "earlier", oldest first.
    detail = dict(first.detail) if first.group_fingerprint is None else {
        "by_agent": _by_agent(members, shown)}
    return replace(
        first, agent_id=None, agents=agents,
        severity=max(a.severity for a in members),
        summary=f"{len(agents)} agents of {first.family}: {phrase}",
        evidence={"agents": {a.agent_id or "*": dict(a.evidence) for a in members
                             if (a.agent_id or "*") in shown}},
        detail={**detail, "agents": list(shown),
                "agents_not_listed": len(agents) - len(shown),
                **_causes(members, shown)},
        model_version=None,
        fingerprint=f"{first.fingerprint}~{tag}" if tag else first.fingerprint,
    )
