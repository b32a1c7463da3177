"""What the console shows, read from the models store: the fleet, one agent, one family.

Everything here is computed from the store alone (versions, work queue, alert outbox,
operator actions, per-agent activity), so every replica sharing a store shows the same
fleet and the same alert history. Pure reads; no HTTP, no HTML.

An agent's *state*, first that applies:

- ``assessing``: work for it is queued or running;
- ``failed``: its newest queued work failed for good and no version came after it;
- ``inconsistent``: its newest alert, newer than its current model, is an unexplained
  inconsistency (the evidence did not lead to a new version);
- ``drifted``: it runs a model of its own that differs from the family's baseline,
  unless only in outcome probabilities its own assessment cannot tell from the
  baseline's (each within that estimate's interval: ``within_intervals_of_baseline``);
- ``healthy``: none of the above.

An alert is *open* until an operator acts on the agent (any action) after it. The
"awaiting assessment" alert (``unexplained_inconsistency``) also closes when what it
waits for comes: its assessment ended (a version, no change, or a failure, which raises
an alert of its own), or the agent runs a model newer than the alert.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from capwatch.contracts.store import ModelStore, OutboxAlert, PendingAssessment
from capwatch.contracts.versions import (
    LineageSummary,
    ModelRef,
    ModelVersion,
    content_key,
    diff_versions,
    within_intervals_of_baseline,
)
from capwatch.model.diff import Change
from capwatch.model.domain import Action, Domain
from capwatch.models_store.actions import (
    ActionStore,
    AgentActivity,
    OperatorAction,
    action_store,
    reviews,
)
from capwatch.models_store.lineage import lineage_chain

STATES = ("healthy", "inconsistent", "assessing", "drifted", "failed")
ALERT_SCAN = 20_000
"""Newest outbox rows read for the fleet view (older alerts are pruned by keep_s anyway)."""


@dataclass(frozen=True, slots=True)
class AgentRow:
    family: str
    agent_id: str
    state: str
    version: ModelRef
    """The model the agent runs (its own lineage's newest, else the family baseline)."""
    delta_to_baseline: int
    last_event: datetime | None
    last_event_what: str
    open_alerts: int
    transitions: int
    inconsistent: int
    change: str = ""
    """The first line of its current own version's change, in the model's words."""
    more_changes: int = 0
    """How many more lines that change has (one per changed action): the fleet page says
    so beside the first, which alone read as the whole change."""
    as_baseline: bool = False
    """It runs a version of its own whose probabilities differ from the baseline's only
    within that version's intervals (an agent that drifted and came back): healthy."""

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "agent_id": self.agent_id, "state": self.state,
                "version": self.version.to_json(), "delta_to_baseline": self.delta_to_baseline,
                "last_event": self.last_event.isoformat() if self.last_event else None,
                "last_event_what": self.last_event_what, "open_alerts": self.open_alerts,
                "transitions": self.transitions, "inconsistent": self.inconsistent,
                "change": self.change, "more_changes": self.more_changes,
                "as_baseline": self.as_baseline}


def _alert_agent(row: OutboxAlert) -> str | None:
    agent = row.alert.get("agent_id")
    return str(agent) if agent else None


def _answered(row: OutboxAlert, ended: set[str], model_since: datetime) -> bool:
    """An awaiting-assessment alert whose assessment ended, or older than the model the
    agent runs now (see the module docstring)."""
    if row.alert_type != "unexplained_inconsistency":
        return False
    evidence = row.alert.get("evidence")
    key = evidence.get("assessment_key") if isinstance(evidence, dict) else None
    return key in ended or row.created_at <= model_since


def fleet(store: ModelStore, family: str | None = None,
          only: str | None = None) -> list[AgentRow]:
    """Every agent the store knows of, sorted by family and agent (``only``: just that
    agent's row, without reading the others' alerts and actions)."""
    s = action_store(store)
    lineages = s.lineages(family)
    baselines = {r.family: r for r in lineages if r.agent_id is None}
    own = {(r.family, r.agent_id): r for r in lineages if r.agent_id is not None}
    activity = {(a.family, a.agent_id): a for a in s.activity(family)}
    agents = {(f, a) for f, a in s.known_agents() if (family is None or f == family)
              and (only is None or a == only)}
    queue: dict[tuple[str, str], PendingAssessment] = {}
    ended: set[str] = set()
    for work in s.queue_items():
        if work.status in ("done", "failed"):
            ended.add(work.key)
        k = (work.family, work.agent_id)
        if k not in queue or work.enqueued_at >= queue[k].enqueued_at:
            queue[k] = work
    alerts: dict[tuple[str, str], list[OutboxAlert]] = {}
    for row in s.alert_history(family, only, limit=ALERT_SCAN):
        agent = _alert_agent(row)
        if agent is not None:
            alerts.setdefault((row.family, agent), []).append(row)
    acted: dict[tuple[str, str], OperatorAction] = {}
    for a in s.actions(family, only, limit=ALERT_SCAN):
        if a.agent_id is not None:
            acted.setdefault((a.family, a.agent_id), a)
    base_models: dict[str, Any] = {}
    base_versions: dict[str, ModelVersion | None] = {}
    rows = []
    for fam, agent in sorted(agents):
        base = baselines.get(fam)
        mine = own.get((fam, agent))
        if base is None:
            continue  # an agent of a family with no model (refused at intake)
        current: LineageSummary = mine or base
        ref = ModelRef(fam, current.agent_id, current.latest_version)
        item = queue.get((fam, agent))
        agent_alerts = alerts.get((fam, agent), [])
        last_action = acted.get((fam, agent))
        drifted = as_baseline = False
        change = ""
        more = 0
        if mine is not None:
            if fam not in base_models:
                b = base_versions[fam] = s.latest(fam, None)
                base_models[fam] = b.model_json if b else None
            v = s.latest(fam, agent)
            # Δ 0 can still be a probability change: compare the models themselves.
            drifted = mine.delta_to_baseline > 0 or (
                v is not None and v.model_json != base_models[fam])
            b = base_versions[fam]
            if drifted and v is not None and b is not None:
                as_baseline = _as_baseline(s, v, b)
                drifted = not as_baseline
            change = v.summary[0] if v is not None and v.summary else ""
            more = len(v.summary) - 1 if v is not None and v.summary else 0
        newest_alert = agent_alerts[0] if agent_alerts else None
        if item is not None and item.status in ("pending", "claimed"):
            state = "assessing"
        elif item is not None and item.status == "failed" and item.enqueued_at >= \
                current.updated_at:
            state = "failed"
        elif newest_alert is not None and newest_alert.alert_type == \
                "unexplained_inconsistency" and newest_alert.created_at > current.updated_at:
            state = "inconsistent"
        elif drifted:
            state = "drifted"
        else:
            state = "healthy"
        since = last_action.created_at if last_action else None
        open_alerts = sum(1 for a in agent_alerts if (since is None or a.created_at > since)
                          and not _answered(a, ended, current.updated_at))
        events: list[tuple[datetime, str]] = []
        act = activity.get((fam, agent), AgentActivity(fam, agent, 0, 0, current.updated_at,
                                                        ""))
        if (fam, agent) in activity:
            events.append((act.last_seen, "transitions seen"))
        if mine is not None:
            events.append((mine.updated_at, f"version {mine.latest_version}"))
        if newest_alert is not None:
            events.append((newest_alert.created_at, newest_alert.alert_type))
        # Work an action queued carries the action's time: listed first, the work's state
        # (what happened since) wins the tie.
        if item is not None:
            events.append((item.enqueued_at, f"assessment {item.status}"))
        if last_action is not None:
            events.append((last_action.created_at, f"operator {last_action.kind}"))
        when, what = max(events, key=lambda e: e[0]) if events else (None, "")
        rows.append(AgentRow(fam, agent, state, ref, current.delta_to_baseline
                             if mine is not None else 0, when, what, open_alerts,
                             act.transitions, act.inconsistent, change, more, as_baseline))
    return rows


_AS_BASELINE: dict[tuple[ModelRef, ModelRef], bool] = {}
"""(version, baseline) → :func:`within_intervals_of_baseline`: versions never change, so
each pair is judged once per process (two model loads), not at every page."""


def _as_baseline(store: ModelStore, v: ModelVersion, base: ModelVersion) -> bool:
    key = (v.ref, base.ref)
    known = _AS_BASELINE.get(key)
    if known is None:
        parent = store.get(v.parent) if v.parent is not None else None
        known = within_intervals_of_baseline(
            v, parent.domain() if parent is not None else None, base.domain())
        if len(_AS_BASELINE) >= 10_000:
            _AS_BASELINE.clear()
        _AS_BASELINE[key] = known
    return known


SORT_KEYS = ("agent", "family", "state", "version", "last_event", "open_alerts")


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[AgentRow]
    total: int
    """Rows matching the filter (before paging)."""
    page: int
    pages: int
    counts: Mapping[str, int]
    """Agents per state, over the whole filtered family (before the state filter)."""


def select(rows: Sequence[AgentRow], *, state: str | None = None, text: str | None = None,
           sort: str = "agent", descending: bool = False, page: int = 1,
           per_page: int = 50) -> Page:
    """Filter (state, substring of family or agent), sort and page the fleet."""
    counts = {s: 0 for s in STATES}
    for r in rows:
        counts[r.state] += 1
    chosen = [r for r in rows if (not state or r.state == state)
              and (not text or text.lower() in f"{r.family}/{r.agent_id}".lower())]
    order = {s: i for i, s in enumerate(("failed", "inconsistent", "assessing", "drifted",
                                         "healthy"))}
    keys: dict[str, Any] = {
        "agent": lambda r: (r.agent_id, r.family),
        "family": lambda r: (r.family, r.agent_id),
        "state": lambda r: (order[r.state], r.family, r.agent_id),
        "version": lambda r: (r.version.agent_id is None, r.version.version, r.agent_id),
        "last_event": lambda r: (r.last_event.timestamp() if r.last_event else 0.0,
                                 r.agent_id),
        "open_alerts": lambda r: (r.open_alerts, r.agent_id),
    }
    chosen.sort(key=keys.get(sort, keys["agent"]), reverse=descending)
    per_page = max(1, min(per_page, 500))
    pages = max(1, -(-len(chosen) // per_page))
    page = max(1, min(page, pages))
    return Page(chosen[(page - 1) * per_page:page * per_page], len(chosen), page, pages,
                counts)


# ------------------------------------------------------------------ one agent


@dataclass(frozen=True, slots=True)
class OutcomeRow:
    outcome: str
    model_p: float | None
    """The parent model's probability (None: the outcome is new)."""
    observed_p: float | None
    observed_low: float | None
    observed_high: float | None
    observed_n: int
    """Samples behind the observed estimate (re-estimation queries or the drift window)."""
    new_p: float | None
    """This version's probability (None: the outcome is gone)."""


@dataclass(frozen=True, slots=True)
class DriftPoint:
    """The drift statistic the store keeps: its value at the alarm, on the window."""

    action: str
    statistic: float
    threshold: float
    window: tuple[int, int]
    change_point: int | None
    detector: str
    p_value: float | None
    summary: str


@dataclass
class VersionView:
    version: ModelVersion
    changes: list[Change]
    summary: list[str]
    queries: int
    samples: int
    probabilities: dict[str, list[OutcomeRow]] = field(default_factory=dict)
    drift: list[DriftPoint] = field(default_factory=list)
    review: OperatorAction | None = None
    action: OperatorAction | None = None
    """The operator action that wrote this version (rollback, promotion)."""


@dataclass
class AgentView:
    family: str
    agent_id: str
    row: AgentRow | None
    versions: list[VersionView]
    """Oldest first: the family baseline the lineage forked from, then the agent's own."""
    actions: list[OperatorAction]
    alerts: list[OutboxAlert]
    timeline: list[tuple[datetime, str, str]]
    """(time, kind, text), oldest first: versions, actions, alerts."""


def _outcome_text(add: Iterable[Any], delete: Iterable[Any]) -> str:
    parts = [str(a) for a in sorted(add)] + [f"(not {a})" for a in sorted(delete)]
    return " ".join(parts) or "(no change)"


def _outcomes(action: Action) -> dict[str, float]:
    return {_outcome_text(o.add, o.delete): o.probability for o in action.outcomes}


def probability_rows(old: Action | None, new: Action | None,
                     evidence: Mapping[str, Any], name: str) -> list[OutcomeRow]:
    """One row per outcome of either model: model p, observed p with interval, new p."""
    before = _outcomes(old) if old is not None else {}
    after = _outcomes(new) if new is not None else {}
    observed: dict[str, tuple[float, float, float, int]] = {}
    est = ((evidence.get("assessment") or {}).get("estimates") or {}).get(name)
    drift = (evidence.get("drift") or {}).get(name)
    estimated = old if old is not None else new
    if est and estimated is not None:
        # The re-estimate lists the outcomes of the action it sampled (the model before),
        # in that action's order; the new action orders them by its own probabilities.
        for outcome, p, lo, hi in zip(estimated.outcomes, est.get("probabilities", []),
                                      est.get("low", []), est.get("high", []), strict=False):
            observed[_outcome_text(outcome.add, outcome.delete)] = (
                p, lo, hi, int(est.get("samples", 0)))
    elif drift:
        for text, p, ci in zip(drift.get("outcomes", []),
                               drift.get("estimated_probabilities", []),
                               drift.get("estimate_ci", []), strict=False):
            observed[str(text)] = (p, ci[0], ci[1], int(drift.get("n", 0)))
    rows = []
    for text in list(before) + [t for t in after if t not in before]:
        seen = observed.get(text)
        rows.append(OutcomeRow(text, before.get(text), seen[0] if seen else None,
                               seen[1] if seen else None, seen[2] if seen else None,
                               seen[3] if seen else 0, after.get(text)))
    return rows


def _probabilistic_changes(old: Domain | None, new: Domain,
                           evidence: Mapping[str, Any]) -> dict[str, list[OutcomeRow]]:
    names = set(evidence.get("drift") or {}) | set(
        (evidence.get("assessment") or {}).get("estimates") or {})
    if old is not None:
        old_map = old.action_map
        for a in new.actions:
            b = old_map.get(a.name)
            if b is not None and not a.is_deterministic and _outcomes(a) != _outcomes(b):
                names.add(a.name)
    out = {}
    for name in sorted(names):
        o = old.action_map.get(name) if old is not None else None
        n = new.action_map.get(name)
        out[name] = probability_rows(o, n, evidence, name)
    return out


def _drift_points(evidence: Mapping[str, Any]) -> list[DriftPoint]:
    points = []
    for name, d in sorted((evidence.get("drift") or {}).items()):
        window = d.get("window") or [0, int(d.get("n", 0))]
        stat = d.get("log_statistic")
        threshold = d.get("log_threshold")
        if stat is None or threshold is None:  # the audit's chi-square instead
            stat, threshold = d.get("chi2", 0.0), None
        points.append(DriftPoint(
            name, float(stat or 0.0), float(threshold) if threshold is not None else
            float("nan"), (int(window[0]), int(window[1])),
            int(d["change_point"]) if d.get("change_point") is not None else None,
            str(d.get("detector", "")), d.get("p_value"), str(d.get("summary", ""))))
    return points


def version_view(v: ModelVersion, parent: ModelVersion | None) -> VersionView:
    estimates = (v.evidence.get("assessment") or {}).get("estimates") or {}
    samples = sum(int(e.get("samples", 0)) for e in estimates.values())
    old = parent.domain() if parent is not None else None
    return VersionView(v, list(v.changed_pal_tuples), list(v.summary),
                       int(v.evidence.get("queries", 0)), samples,
                       _probabilistic_changes(old, v.domain(), v.evidence),
                       _drift_points(v.evidence))


def agent_view(store: ModelStore, family: str, agent_id: str,
               row: AgentRow | None = None) -> AgentView:
    s = action_store(store)
    own = s.history(family, agent_id)
    chain: list[ModelVersion]
    if own:
        chain = [v for v in lineage_chain(s, own[-1].ref)]
        # The family baseline it forked from, then its own versions (rollbacks make the
        # chain run through every own version anyway).
        fork = next((i for i in range(len(chain) - 1, -1, -1)
                     if chain[i].agent_id is None), 0)
        chain = chain[fork:]
    else:
        base = s.latest(family, None)
        chain = [base] if base is not None else []
    actions = s.actions(family, agent_id)
    by_key = {a.key: a for a in actions}
    judged = reviews(actions)
    views = []
    for i, v in enumerate(chain):
        view = version_view(v, chain[i - 1] if i > 0 else None)
        view.review = judged.get(v.ref)
        key = v.evidence.get("operator_action")
        view.action = by_key.get(str(key)) if key else None
        views.append(view)
    alerts = s.alert_history(family, agent_id, limit=200)
    timeline: list[tuple[datetime, str, str]] = []
    for view in views:
        v = view.version
        text = "; ".join(view.summary) or ("family baseline" if v.agent_id is None
                                           else "no change in the model's words")
        timeline.append((v.created_at, "version", f"{v.ref}: {text}"))
    for a in actions:
        timeline.append((a.created_at, "action", a.describe()))
    for al in alerts:
        timeline.append((al.created_at, "alert",
                         f"{al.alert_type}: {al.alert.get('summary', '')}"))
    timeline.sort(key=lambda t: t[0])
    return AgentView(family, agent_id, row, views, actions, alerts, timeline)


# ------------------------------------------------------------------ one family


@dataclass(frozen=True, slots=True)
class SharedChange:
    """One change (in the model's words) and the agents whose current model has it."""

    text: str
    agents: tuple[str, ...]


@dataclass
class FamilyView:
    family: str
    baseline: ModelVersion | None
    baselines: list[ModelVersion]
    rows: list[AgentRow]
    shared: list[SharedChange]
    changed_lines: set[int]
    """Line numbers (1-based) of the baseline PDDL whose action some agent changed."""
    actions: list[OperatorAction]


def family_view(store: ModelStore, family: str, rows: Sequence[AgentRow] | None = None
                ) -> FamilyView:
    s: ActionStore = action_store(store)
    baselines = s.history(family, None)
    baseline = baselines[-1] if baselines else None
    rows = list(rows) if rows is not None else fleet(store, family)
    shared: dict[str, set[str]] = {}
    changed_actions: dict[str, set[str]] = {}
    """Action → the parts some agent's model changes: "pre", "eff"."""
    seen: dict[str, tuple[list[str], dict[str, set[str]]]] = {}
    old_actions = baseline.domain().action_map if baseline is not None else {}
    for lin in s.lineages(family):
        if lin.agent_id is None or baseline is None:
            continue
        v = s.latest(family, lin.agent_id)
        if v is None:
            continue
        digest = content_key(v.model_json)
        if digest not in seen:
            # Agents that drifted alike hold equal models: compare each model once.
            d = diff_versions(baseline, v)
            parts: dict[str, set[str]] = {}
            for pal, _, _ in d.changes:
                parts.setdefault(pal.action, set()).add(pal.location.value)
            for a in v.domain().actions:
                b = old_actions.get(a.name)
                if b is not None and not a.is_deterministic and _outcomes(a) != _outcomes(b):
                    parts.setdefault(a.name, set()).add("eff")  # probabilities
            seen[digest] = (list(d.summary), parts)
        summary, parts = seen[digest]
        for line in summary:
            shared.setdefault(line, set()).add(lin.agent_id)
        for name, where in parts.items():
            changed_actions.setdefault(name, set()).update(where)
    changes = sorted((SharedChange(t, tuple(sorted(a))) for t, a in shared.items()),
                     key=lambda c: (-len(c.agents), c.text))
    lines: set[int] = set()
    if baseline is not None:
        lines = action_lines(baseline.pddl, changed_actions)
    return FamilyView(family, baseline, baselines, rows, changes, lines,
                      s.actions(family))


def action_lines(pddl: str, actions: Mapping[str, set[str]]) -> set[int]:
    """1-based numbers of the lines to mark: per changed action its ``(:action`` line and
    the lines of the parts that changed (``pre``: ``:precondition``, ``eff``: ``:effect``),
    as capwatch.model.pddl_writer lays a domain out."""
    wanted = {name.lower(): parts for name, parts in actions.items()}
    out: set[int] = set()
    depth = 0
    parts: set[str] | None = None
    section = ""
    for i, line in enumerate(pddl.splitlines(), start=1):
        stripped = line.strip().lower()
        if depth == 1 and stripped.startswith("(:action"):
            words = stripped.split()
            parts = wanted.get(words[1] if len(words) > 1 else "")
            section = ""
            if parts is not None:
                out.add(i)
        elif parts is not None and depth == 2 and stripped.startswith(":"):
            section = {":precondition": "pre", ":effect": "eff"}.get(stripped.split()[0], "")
        if parts is not None and section in parts and not stripped.startswith(")"):
            out.add(i)
        for ch in line.split(";", 1)[0]:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 1:
                    parts = None
    return out
