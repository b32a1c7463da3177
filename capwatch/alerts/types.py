"""What capwatch alerts on, and how an alert reads.

Builders here are pure: they take the time as an argument and read no clock, so the same
evidence always gives the same alert (and the same dedup key) on every replica.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from capwatch.contracts.versions import ModelVersion, unchecked_summary
from capwatch.model.diff import (
    Change,
    change_to_json,
    is_reduction,
    model_changes,
    observable_changes,
    outcome_changes_by_action,
    probability_changes,
    probability_shifts,
)
from capwatch.model.domain import Action, Domain, Outcome
from capwatch.model.pal import PalTuple, summarise_changes


class AlertType(enum.Enum):
    CAPABILITY_REDUCED = "capability_reduced"
    """A precondition literal was added (or flipped) or an effect was removed."""
    CAPABILITY_EXPANDED = "capability_expanded"
    """A precondition literal was dropped or an effect was added."""
    EFFECT_DISTRIBUTION_DRIFT = "effect_distribution_drift"
    """Outcome frequencies no longer fit the model's probabilities."""
    UNEXPLAINED_INCONSISTENCY = "unexplained_inconsistency"
    """A transition contradicts the model and no assessment has explained it yet."""
    ASSESSMENT_FAILED = "assessment_failed"
    """The agent could not be assessed (unreachable, query budget exhausted, ...)."""
    DRIFT_NOT_CONFIRMED = "drift_not_confirmed"
    """The stream's drift detector alarmed on an action, and the agent's answers to the
    re-estimation's queries fit the model's probabilities: nothing was published."""

    @property
    def alertname(self) -> str:
        """Alertmanager's ``alertname``: CamelCase, prefixed so routes can match ``Capwatch.*``."""
        return "Capwatch" + "".join(w.capitalize() for w in self.value.split("_"))


class Severity(enum.IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r}: use info, warning or critical") from None


DEFAULT_SEVERITY: Mapping[AlertType, Severity] = {
    AlertType.CAPABILITY_REDUCED: Severity.CRITICAL,
    AlertType.CAPABILITY_EXPANDED: Severity.INFO,
    AlertType.EFFECT_DISTRIBUTION_DRIFT: Severity.WARNING,
    AlertType.UNEXPLAINED_INCONSISTENCY: Severity.WARNING,
    AlertType.ASSESSMENT_FAILED: Severity.WARNING,
    AlertType.DRIFT_NOT_CONFIRMED: Severity.INFO,
}


@dataclass(frozen=True, slots=True)
class Alert:
    type: AlertType
    severity: Severity
    family: str
    agent_id: str | None
    """``None`` for an alert that groups several agents (listed in ``agents``)."""
    action: str | None
    summary: str
    """One line in the model's vocabulary, e.g. ``pick(?o ?r ?g) now requires (free ?g)``."""
    time: datetime
    fingerprint: str = ""
    """What distinguishes this alert's content: equal fingerprints group across agents."""
    detail: Mapping[str, Any] = field(default_factory=dict)
    evidence: Mapping[str, Any] = field(default_factory=dict)
    model_version: int | None = None
    agents: tuple[str, ...] = ()
    group_summary: str | None = None
    """Phrase used when several agents are grouped, if ``summary`` is agent-specific."""
    ends_at: datetime | None = None
    """Set on an *ending*: the earlier alert with this dedup key is over at this time (the
    awaiting-assessment alert once its assessment ended). Routed alone and at once, never
    suppressed; sinks with a notion of open alerts (Alertmanager) close it."""
    group_fingerprint: str | None = None
    """What groups this alert with other agents' where ``fingerprint`` holds numbers of
    this agent's own (a probability drift's estimates, which no two agents share): the
    change's shape. The dedup key keeps ``fingerprint``, so a further drift of the same
    agent is not taken for a repeat; a merged group lists each member's ``detail``
    (``detail.by_agent``). None: ``fingerprint`` groups, and members share their detail."""

    def __post_init__(self) -> None:
        if self.time.tzinfo is None:
            raise ValueError("alert time needs a time zone")
        if self.ends_at is not None and self.ends_at.tzinfo is None:
            raise ValueError("alert end time needs a time zone")
        if not self.family:
            raise ValueError("an alert needs a family")

    @property
    def dedup_key(self) -> str:
        owner = self.agent_id if self.agent_id is not None else "*"
        return "|".join((self.type.value, self.family, owner, self.action or "-",
                         self.fingerprint))

    @property
    def group_key(self) -> tuple[str, str, str, str]:
        return (self.type.value, self.family, self.action or "-",
                self.fingerprint if self.group_fingerprint is None else self.group_fingerprint)

    def with_severity(self, severity: Severity) -> Alert:
        return replace(self, severity=severity)

    def to_json(self) -> dict[str, Any]:
        data = {
            "alert_type": self.type.value, "severity": self.severity.label,
            "family": self.family, "agent_id": self.agent_id, "agents": list(self.agents),
            "action": self.action, "summary": self.summary, "dedup_key": self.dedup_key,
            "model_version": self.model_version, "time": self.time.isoformat(),
            "detail": dict(self.detail), "evidence": dict(self.evidence),
        }
        if self.ends_at is not None:
            data["ends_at"] = self.ends_at.isoformat()
        return data


    def to_record(self) -> dict[str, Any]:
        """Everything needed to rebuild the alert (:meth:`from_record`): what the outbox
        stores. Unlike :meth:`to_json` it keeps the fingerprint and the group phrase."""
        data = self.to_json()
        data["fingerprint"] = self.fingerprint
        data["group_summary"] = self.group_summary
        if self.group_fingerprint is not None:
            data["group_fingerprint"] = self.group_fingerprint
        return data

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> Alert:
        agent = data.get("agent_id")
        version = data.get("model_version")
        group_summary = data.get("group_summary")
        ends_at = data.get("ends_at")
        grouping = data.get("group_fingerprint")
        return cls(
            type=AlertType(data["alert_type"]), severity=Severity.parse(data["severity"]),
            family=str(data["family"]), agent_id=None if agent is None else str(agent),
            action=data.get("action"), summary=str(data["summary"]),
            time=datetime.fromisoformat(str(data["time"])),
            fingerprint=str(data.get("fingerprint", "")),
            detail=dict(data.get("detail", {})), evidence=dict(data.get("evidence", {})),
            model_version=None if version is None else int(version),
            agents=tuple(str(a) for a in data.get("agents", ())),
            group_summary=None if group_summary is None else str(group_summary),
            ends_at=None if ends_at is None else datetime.fromisoformat(str(ends_at)),
            group_fingerprint=None if grouping is None else str(grouping),
        )


def fingerprint(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _by_action(changes: Iterable[Change]) -> dict[str, list[Change]]:
    grouped: dict[str, list[Change]] = {}
    for c in changes:
        grouped.setdefault(c[0].action, []).append(c)
    return grouped


def alerts_for_model_change(
    old: Domain, new: Domain, *, family: str, agent_id: str | None, time: datetime,
    model_version: int | None = None, evidence: Mapping[str, Any] | None = None,
    changes: Sequence[Change] | None = None,
    severities: Mapping[AlertType, Severity] = DEFAULT_SEVERITY,
) -> list[Alert]:
    """One alert per changed action: reduced if any change reduces, else expanded; plus an
    effect-distribution alert per action whose outcome probabilities moved."""
    if changes is None:
        changes = model_changes(old, new)
    # The version's summary describes an outcome set that changed with no mode and no
    # pairable probability moving (an outcome added or removed, a deterministic action
    # that now sometimes does nothing); it needs its own alert, or the version goes out
    # unannounced.
    reshaped = outcome_changes_by_action(old, new, changes)
    gone = {c[0].action for c in changes if c[0].action not in new.action_map}
    # Removed actions keep every change; the others announce only what behaviour can show.
    changes = [c for c in changes if c[0].action in gone] + observable_changes(
        [c for c in changes if c[0].action not in gone], new)
    ev = dict(evidence or {})
    new_actions = new.action_map
    alerts = []
    for action, cs in sorted(_by_action(changes).items()):
        kind = (AlertType.CAPABILITY_REDUCED if any(is_reduction(c) for c in cs)
                else AlertType.CAPABILITY_EXPANDED)
        if action in new_actions:
            (line,) = summarise_changes(cs, new)
        else:
            line = f"{old.action(action).header()} removed from the model"
        payload = [change_to_json(c) for c in sorted(cs, key=lambda c: c[0])]
        alerts.append(Alert(
            type=kind, severity=severities[kind], family=family, agent_id=agent_id,
            action=action, summary=line, time=time, fingerprint=fingerprint(payload),
            detail={"changes": payload,
                    "reduced": [_pal_text(c[0]) for c in cs if is_reduction(c)]},
            evidence=ev, model_version=model_version,
        ))
    shifts = probability_shifts(old, new)
    for action, line in zip(sorted(shifts), _lines_by_action(old, new), strict=True):
        probs = {"old": shifts[action][0], "new": shifts[action][1]}
        # Grouped by which outcomes became less or more likely, not by how much: each
        # agent's estimate differs by sampling alone, and a family-wide regression is one
        # page (the capability kinds group on their exact change already).
        effects = [_effect_text(o) for o in old.action(action).outcomes]
        moves = [_move(a, b) for a, b in zip(*shifts[action], strict=True)]
        shape = "; ".join(f"{e} {m}" for e, m in zip(effects, moves, strict=True)
                          if m != "unchanged")
        alerts.append(Alert(
            type=AlertType.EFFECT_DISTRIBUTION_DRIFT,
            severity=severities[AlertType.EFFECT_DISTRIBUTION_DRIFT], family=family,
            agent_id=agent_id, action=action, summary=line, time=time,
            fingerprint=fingerprint(probs), detail={"probabilities": probs}, evidence=ev,
            model_version=model_version,
            group_summary=f"{new.action(action).header()} outcome probabilities changed: "
                          f"{shape}",
            group_fingerprint=fingerprint({"outcomes": effects, "moves": moves}),
        ))
    for action, line in sorted(reshaped.items()):
        outcomes = {"old": _outcomes_json(old.action(action)),
                    "new": _outcomes_json(new.action(action))}
        # Grouped by the outcomes each model has, not their estimated probabilities.
        was = sorted(_effect_text(o) for o in old.action(action).outcomes)
        now = sorted(_effect_text(o) for o in new.action(action).outcomes)
        alerts.append(Alert(
            type=AlertType.EFFECT_DISTRIBUTION_DRIFT,
            severity=severities[AlertType.EFFECT_DISTRIBUTION_DRIFT], family=family,
            agent_id=agent_id, action=action, summary=line, time=time,
            fingerprint=fingerprint(outcomes), detail={"outcomes": outcomes}, evidence=ev,
            model_version=model_version,
            group_summary=f"{new.action(action).header()} outcomes changed: "
                          f"{', '.join(was)} → {', '.join(now)}",
            group_fingerprint=fingerprint({"old": was, "new": now}),
        ))
    return alerts


def _effect_text(outcome: Outcome) -> str:
    """An outcome's effects without its probability: "(makes (a ?x) true, (b) false)"."""
    made = [*(f"{a} true" for a in sorted(outcome.add)),
            *(f"{a} false" for a in sorted(outcome.delete))]
    return f"(makes {', '.join(made)})" if made else "(no effect)"


def _move(before: float, after: float) -> str:
    return "less likely" if after < before else "more likely" if after > before else "unchanged"


def _outcomes_json(action: Action) -> list[dict[str, Any]]:
    return [{"probability": o.probability, "add": sorted(map(str, o.add)),
             "delete": sorted(map(str, o.delete))} for o in action.outcomes]


def _lines_by_action(old: Domain, new: Domain) -> list[str]:
    return sorted(probability_changes(old, new))


def alerts_for_version(parent: ModelVersion, version: ModelVersion, *,
                       severities: Mapping[AlertType, Severity] = DEFAULT_SEVERITY
                       ) -> list[Alert]:
    """Alerts for a stored version against its parent, reusing the stored change set, plus
    one saying which capabilities could not be checked, if any (issue 11: unknown stays
    unknown, and is said)."""
    alerts = alerts_for_model_change(
        parent.domain(), version.domain(), family=version.family, agent_id=version.agent_id,
        time=version.created_at, model_version=version.version, evidence=version.evidence,
        changes=version.changed_pal_tuples, severities=severities)
    line = unchecked_summary(version.coverage)
    if line is not None and version.agent_id is not None:
        alert = assessment_failed_alert(
            family=version.family, agent_id=version.agent_id, time=version.created_at,
            reason="incomplete", message=line, evidence=version.evidence,
            severities=severities)
        alerts.append(dataclasses.replace(alert, model_version=version.version))
    return alerts


def _pal_text(pal: PalTuple) -> str:
    return f"{pal.atom} in {pal.location.value}"


def inconsistency_alert(
    *, family: str, agent_id: str, action: str, time: datetime,
    contradicted: Sequence[str], header: str | None = None,
    evidence: Mapping[str, Any] | None = None,
    severities: Mapping[AlertType, Severity] = DEFAULT_SEVERITY,
) -> Alert:
    """A transition the model cannot explain, queued for assessment.

    ``contradicted`` are the pa-tuples the transition contradicts (Table 2), as text.
    """
    name = header or action
    shown = ", ".join(contradicted[:3]) + (" ..." if len(contradicted) > 3 else "")
    base = f"{name} observed behaving inconsistently with the model; awaiting assessment"
    summary = f"{base} (contradicts {shown})" if contradicted else base
    return Alert(
        type=AlertType.UNEXPLAINED_INCONSISTENCY,
        severity=severities[AlertType.UNEXPLAINED_INCONSISTENCY], family=family,
        agent_id=agent_id, action=action, summary=summary, time=time,
        detail={"contradicted": list(contradicted)}, evidence=dict(evidence or {}),
        group_summary=base,
    )


ASSESSMENT_FAILURE_REASONS = ("agent_unreachable", "budget_exhausted", "planner_failed",
                              "error", "unexplained", "incomplete", "agent_refuses_queries")
"""``unexplained``: the assessed model contradicts evidence it was learned from, so nothing
was published; ``incomplete``: a version was published but some capabilities could not
be checked (they keep their previous modes); ``agent_refuses_queries``: the agent ran no step
of an assessment's first queries (capwatch.assess.engine.REFUSED_QUERIES), nothing published
and no retry."""


def assessment_failed_alert(
    *, family: str, agent_id: str, time: datetime, reason: str, message: str,
    action: str | None = None, evidence: Mapping[str, Any] | None = None,
    severities: Mapping[AlertType, Severity] = DEFAULT_SEVERITY,
) -> Alert:
    if reason not in ASSESSMENT_FAILURE_REASONS:
        raise ValueError(f"reason must be one of {ASSESSMENT_FAILURE_REASONS}")
    words = reason.replace("_", " ")
    return Alert(
        type=AlertType.ASSESSMENT_FAILED, severity=severities[AlertType.ASSESSMENT_FAILED],
        family=family, agent_id=agent_id, action=action,
        summary=f"assessment failed ({words}): {message}", time=time, fingerprint=reason,
        detail={"reason": reason, "message": message}, evidence=dict(evidence or {}),
        # The cause stays in a grouped alert's summary: the agents of a group failed for
        # the same reason, most often for the same cause (a bad URL template, a rejected
        # token); each agent's own message is in the grouped alert's detail.causes.
        group_summary=f"assessment failed ({words}): {message}",
    )


def drift_not_confirmed_alert(
    *, family: str, agent_id: str, action: str, time: datetime, stream: Mapping[str, Any],
    answers: Mapping[str, Any], evidence: Mapping[str, Any] | None = None,
    severities: Mapping[AlertType, Severity] = DEFAULT_SEVERITY,
) -> Alert:
    """The stream's drift alarm on ``action`` (its evidence record, ``stream``) and the
    re-estimate by queries (``answers``: probabilities and simultaneous intervals) that
    holds every probability of the model: the two disagree, so no version was made.

    Said, not silent: the stream's detector guarantees a low false-alarm rate, so a drift
    the answers do not show is as likely an agent that answers queries unlike it acts on
    the stream (another state, another build behind the endpoint) as a false alarm."""
    summary = (f"{action}: drift seen on the stream was not confirmed by the agent's "
               f"answers to queries; the model was kept")
    return Alert(
        type=AlertType.DRIFT_NOT_CONFIRMED,
        severity=severities[AlertType.DRIFT_NOT_CONFIRMED], family=family,
        agent_id=agent_id, action=action, summary=summary, time=time,
        detail={"stream": dict(stream), "answers": dict(answers)},
        evidence=dict(evidence or {}), group_summary=summary,
    )
