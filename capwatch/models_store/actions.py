"""Operator actions on the model registry, recorded with who and why (migration 0004).

An operator can ask for an assessment of a live agent now, approve or reject a version an
assessment learned, roll an agent back to an earlier version of its own ancestry, and
promote a version to its family's baseline. Each action is a row of ``operator_actions``
written in the same transaction as what it does:

- *rollback* appends a version to the agent's lineage holding the earlier model (history
  is never rewritten, so the lineage shows the rollback as a version with its reason);
- *promote* appends a baseline version holding the promoted model;
- *assess* queues work in ``pending_assessments`` (the queue the daemon's workers already
  claim), naming the method to use; a rollback queues a small item too, which tells
  whichever replica claims it to publish and install the restored version;
- *approve* and *reject* only record the judgement.

Every action is idempotent by its key: a retried request returns the stored action.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from capwatch.contracts.store import ModelStore, OutboxAlert, PendingAssessment, StoreError
from capwatch.contracts.versions import JSON, ModelRef, ModelVersion, as_utc, build_version
from capwatch.models_store.lineage import lineage_chain
from capwatch.models_store.sql_base import Row, SqlBase, Tx

ACTION_KINDS = ("assess", "approve", "reject", "rollback", "promote")
ASSESS_METHODS = ("verify", "daaisy", "aia", "auto")
MAX_ACTOR = 200
MAX_REASON = 2000


class ActionRefused(StoreError):
    """The action does not apply (no such version, nothing to roll back, ...)."""


class UnknownAgent(ActionRefused):
    """The action names an agent the store has not seen in that family."""


@dataclass(frozen=True, slots=True)
class OperatorAction:
    key: str
    kind: str
    family: str
    agent_id: str | None
    """``None``: the family baseline (a promotion)."""
    target: ModelRef | None
    """The version acted on: approved, rejected, restored or promoted."""
    actor: str
    reason: str
    created_at: datetime
    result: JSON = field(default_factory=dict)
    """What the action wrote: ``version`` (a ModelRef's JSON), ``work`` (a queue key)."""

    def to_json(self) -> JSON:
        return {"key": self.key, "kind": self.kind, "family": self.family,
                "agent_id": self.agent_id,
                "target": self.target.to_json() if self.target else None,
                "actor": self.actor, "reason": self.reason,
                "created_at": as_utc(self.created_at).isoformat(), "result": self.result}

    def describe(self) -> str:
        """One line for people: ``alice rolled back to courier-v1/baseline@1: "..."``."""
        what = {"assess": "asked for an assessment", "approve": "approved",
                "reject": "rejected", "rollback": "rolled back to",
                "promote": "promoted"}[self.kind]
        target = f" {self.target}" if self.target is not None else ""
        if self.kind == "assess":
            target = f" ({self.result.get('method', '?')})"
        if self.kind == "promote" and "version" in self.result:
            target += f" to baseline@{self.result['version']['version']}"
        return f"{self.actor} {what}{target}: {self.reason}"


@dataclass(frozen=True, slots=True)
class AgentActivity:
    """What the replicas have seen of one agent (the counts add up across saves)."""

    family: str
    agent_id: str
    transitions: int
    inconsistent: int
    last_seen: datetime
    replica: str


@runtime_checkable
class ActionStore(ModelStore, Protocol):
    """A model store that also records operator actions (both SQL backends)."""

    def record_action(self, action: OperatorAction, version: ModelVersion | None = None,
                      work: PendingAssessment | None = None) -> tuple[OperatorAction, bool]:
        """Write ``action`` with the version and work it creates, in one transaction;
        (stored action, True) or, for a key already recorded, (that action, False)."""
        ...

    def action(self, key: str) -> OperatorAction | None: ...

    def actions(self, family: str | None = None, agent_id: str | None = None, *,
                any_agent: bool = True, limit: int = 200) -> list[OperatorAction]:
        """Newest first; ``agent_id`` with ``any_agent=False`` selects one lineage
        (``None``: the baseline's)."""
        ...

    def alert_history(self, family: str | None = None, agent_id: str | None = None,
                      limit: int = 100, before: datetime | None = None) -> list[OutboxAlert]:
        """Alerts of every replica from the outbox (every status), newest first."""
        ...

    def known_agents(self) -> list[tuple[str, str]]:
        """(family, agent) of every agent the store has heard of: activity, own lineage,
        drift state, queued work or operator actions."""
        ...

    def save_activity(self, rows: Sequence[AgentActivity], group: str | None = None,
                      positions: Mapping[tuple[str, int], int] | None = None,
                      topic_id: str | None = None) -> None:
        """Add each row's counts to the agent's and move its last-seen time forward; with
        ``group``, in the same transaction, set the consumer group's activity positions
        ((topic, partition) → the next offset: the rows count every record before it),
        counted on the incarnation ``topic_id`` of the topic (Kafka's topic id; None if
        the source knows none)."""
        ...

    def activity_positions(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, partition) → the offset below which the activity counts every record
        of the consumer group's partition (:meth:`save_activity`'s ``positions``)."""
        ...

    def activity_positions_of(self, group: str
                              ) -> dict[tuple[str, int], tuple[int, str | None]]:
        """:meth:`activity_positions` with the topic id each was counted on (None: not
        known)."""
        ...

    def activity(self, family: str | None = None) -> list[AgentActivity]: ...


def action_store(store: ModelStore) -> ActionStore:
    if not isinstance(store, ActionStore):
        raise StoreError(f"{type(store).__name__} does not record operator actions")
    return store


_COLUMNS = ("key, kind, family, agent_id, target_agent_id, target_version, actor, reason, "
            "result, created_at")
_OUTBOX_COLUMNS = "key, dedup_key, group_key, family, alert_type, alert, created_at, status, " \
                  "delivery"


class ActionsSql(SqlBase):
    """Mixed into :class:`~capwatch.models_store.sql.SqlModelStore`."""

    def _put(self, tx: Tx, v: ModelVersion) -> ModelVersion:
        raise NotImplementedError  # the store's own, which checks the lineage

    def _action_from_row(self, r: Row) -> OperatorAction:
        target = ModelRef(r[2], r[4] or None, int(r[5])) if r[5] is not None else None
        return OperatorAction(key=r[0], kind=r[1], family=r[2], agent_id=r[3] or None,
                              target=target, actor=r[6], reason=r[7],
                              result=self._json_out(r[8]), created_at=self._ts_out(r[9]))

    def record_action(self, action: OperatorAction, version: ModelVersion | None = None,
                      work: PendingAssessment | None = None) -> tuple[OperatorAction, bool]:
        _validate(action)
        with self._tx() as tx:
            found = tx.rows(f"SELECT {_COLUMNS} FROM operator_actions WHERE key = ?",
                            (action.key,))
            if found:
                return self._action_from_row(found[0]), False
            if version is not None:
                self._put(tx, version)
            if work is not None:
                at = self._ts_in(as_utc(work.enqueued_at))
                due = self._ts_in(self._store_now(tx, work.enqueued_at))
                tx.run("INSERT INTO pending_assessments (key, agent_id, family, payload, "
                       "status, attempts, enqueued_at, not_before) "
                       "VALUES (?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT (key) DO NOTHING",
                       (work.key, work.agent_id, work.family, self._json_in(work.payload),
                        at, due))
            t = action.target
            tx.run(f"INSERT INTO operator_actions ({_COLUMNS}) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (action.key, action.kind, action.family, action.agent_id or "",
                    (t.agent_id or "") if t else None, t.version if t else None,
                    action.actor, action.reason, self._json_in(action.result),
                    self._ts_in(as_utc(action.created_at))))
        return action, True

    def action(self, key: str) -> OperatorAction | None:
        with self._tx(write=False) as tx:
            found = tx.rows(f"SELECT {_COLUMNS} FROM operator_actions WHERE key = ?", (key,))
        return self._action_from_row(found[0]) if found else None

    def actions(self, family: str | None = None, agent_id: str | None = None, *,
                any_agent: bool = True, limit: int = 200) -> list[OperatorAction]:
        where: list[str] = []
        params: list[Any] = []
        if family is not None:
            where.append("family = ?")
            params.append(family)
        if agent_id is not None or not any_agent:
            where.append("agent_id = ?")
            params.append(agent_id or "")
        sql = f"SELECT {_COLUMNS} FROM operator_actions"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._tx(write=False) as tx:
            rows = tx.rows(sql + " ORDER BY created_at DESC, key LIMIT ?",
                           (*params, max(1, limit)))
        return [self._action_from_row(r) for r in rows]

    def alert_history(self, family: str | None = None, agent_id: str | None = None,
                      limit: int = 100, before: datetime | None = None) -> list[OutboxAlert]:
        # Endings (capwatch.alerts.outbox.ending_key) close an alert; they are not
        # alerts of their own.
        where: list[str] = ["key NOT LIKE ?"]
        params: list[Any] = ["ended:%"]
        if family is not None:
            where.append("family = ?")
            params.append(family)
        if agent_id is not None:
            # The dedup key is "type|family|agent|action|fingerprint" (capwatch.alerts):
            # the agent's alerts without parsing each row's JSON.
            where.append("dedup_key LIKE ? ESCAPE '!'")
            params.append(f"%|{_like(family) if family else '%'}|{_like(agent_id)}|%")
        if before is not None:
            where.append("created_at < ?")
            params.append(self._ts_in(as_utc(before)))
        sql = f"SELECT {_OUTBOX_COLUMNS} FROM alert_outbox WHERE " + " AND ".join(where)
        with self._tx(write=False) as tx:
            rows = tx.rows(sql + " ORDER BY created_at DESC, key LIMIT ?",
                           (*params, max(1, limit)))
        return [OutboxAlert(key=r[0], dedup_key=r[1], group_key=r[2], family=r[3],
                            alert_type=r[4], alert=self._json_out(r[5]),
                            created_at=self._ts_out(r[6]), status=r[7], delivery=r[8])
                for r in rows]

    def known_agents(self) -> list[tuple[str, str]]:
        with self._tx(write=False) as tx:
            rows = tx.rows(
                "SELECT family, agent_id FROM agent_activity "
                "UNION SELECT family, agent_id FROM model_versions WHERE agent_id <> '' "
                "UNION SELECT family, agent_id FROM drift_state "
                "UNION SELECT family, agent_id FROM pending_assessments "
                "UNION SELECT family, agent_id FROM operator_actions WHERE agent_id <> ''")
        return sorted((str(r[0]), str(r[1])) for r in rows)

    def save_activity(self, rows: Sequence[AgentActivity], group: str | None = None,
                      positions: Mapping[tuple[str, int], int] | None = None,
                      topic_id: str | None = None) -> None:
        for (topic, partition), offset in (positions or {}).items():
            if offset < 0 or partition < 0 or not topic:
                raise ValueError(f"bad activity position {topic!r}[{partition}] = {offset}")
        stamps: dict[datetime, Any] = {}  # a checkpoint's rows share one time
        params = []
        for a in sorted(rows, key=lambda a: (a.family, a.agent_id)):
            stamp = stamps.get(a.last_seen)
            if stamp is None:
                stamp = stamps[a.last_seen] = self._ts_in(as_utc(a.last_seen))
            params.append((a.family, a.agent_id, a.transitions, a.inconsistent, stamp,
                           a.replica))
        with self._tx() as tx:
            tx.run_many(
                "INSERT INTO agent_activity (family, agent_id, transitions, "
                "inconsistent, last_seen, replica) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (family, agent_id) DO UPDATE SET "
                "transitions = agent_activity.transitions + excluded.transitions, "
                "inconsistent = agent_activity.inconsistent + excluded.inconsistent, "
                "last_seen = CASE WHEN excluded.last_seen > agent_activity.last_seen "
                "THEN excluded.last_seen ELSE agent_activity.last_seen END, "
                "replica = excluded.replica", params)
            if group is not None and positions:
                # Their own table: rows in consumer_offsets would be summed as the
                # checkpoint by whoever reads that table (session 20, reverted).
                at = self._ts_in(as_utc(max((a.last_seen for a in rows),
                                            default=datetime.now(UTC))))
                tx.run_many(
                    "INSERT INTO activity_positions (consumer_group, topic, "
                    "kafka_partition, next_offset, updated_at, topic_id) "
                    "VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (consumer_group, topic, kafka_partition) DO UPDATE SET "
                    "next_offset = excluded.next_offset, updated_at = excluded.updated_at, "
                    "topic_id = excluded.topic_id",
                    [(group, topic, partition, offset, at, topic_id)
                     for (topic, partition), offset in sorted(positions.items())])

    def activity_positions(self, group: str) -> dict[tuple[str, int], int]:
        return {k: v[0] for k, v in self.activity_positions_of(group).items()}

    def activity_positions_of(self, group: str
                              ) -> dict[tuple[str, int], tuple[int, str | None]]:
        with self._tx(write=False) as tx:
            rows = tx.rows("SELECT topic, kafka_partition, next_offset, topic_id FROM "
                           "activity_positions WHERE consumer_group = ?", (group,))
        return {(str(r[0]), int(r[1])): (int(r[2]), None if r[3] is None else str(r[3]))
                for r in rows}

    def activity(self, family: str | None = None) -> list[AgentActivity]:
        sql = ("SELECT family, agent_id, transitions, inconsistent, last_seen, replica "
               "FROM agent_activity")
        params: tuple[Any, ...] = ()
        if family is not None:
            sql += " WHERE family = ?"
            params = (family,)
        with self._tx(write=False) as tx:
            rows = tx.rows(sql + " ORDER BY family, agent_id", params)
        return [AgentActivity(r[0], r[1], int(r[2]), int(r[3]), self._ts_out(r[4]), r[5])
                for r in rows]


def _like(text: str) -> str:
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


def _validate(action: OperatorAction) -> None:
    if action.kind not in ACTION_KINDS:
        raise ActionRefused(f"unknown action {action.kind!r}: one of {', '.join(ACTION_KINDS)}")
    if not action.key or not action.family:
        raise ActionRefused("an operator action needs a key and a family")
    if not action.actor.strip() or len(action.actor) > MAX_ACTOR:
        raise ActionRefused(f"say who acts (1 to {MAX_ACTOR} characters)")
    if not action.reason.strip() or len(action.reason) > MAX_REASON:
        raise ActionRefused(f"say why (1 to {MAX_REASON} characters)")


# ------------------------------------------------------------------ the actions


def new_key() -> str:
    return uuid.uuid4().hex


def current_model(store: ModelStore, family: str, agent_id: str) -> ModelVersion:
    """The version the agent runs: its own lineage's newest, else the family baseline's."""
    v = store.latest(family, agent_id) or store.latest(family, None)
    if v is None:
        raise ActionRefused(f"family {family} has no model")
    return v


def _version(store: ModelStore, ref: ModelRef) -> ModelVersion:
    v = store.get(ref)
    if v is None:
        raise ActionRefused(f"no model version {ref}")
    return v


def review(store: ActionStore, kind: str, ref: ModelRef, actor: str, reason: str,
           now: datetime, key: str | None = None) -> OperatorAction:
    """Approve or reject a version an assessment learned for an agent."""
    if key is not None and (done := store.action(key)) is not None:
        return done
    if kind not in ("approve", "reject"):
        raise ActionRefused(f"a review approves or rejects, not {kind!r}")
    v = _version(store, ref)
    if v.agent_id is None:
        raise ActionRefused(f"{ref} is a family baseline; reviews are of learned versions")
    action = OperatorAction(key or new_key(), kind, v.family, v.agent_id, v.ref, actor,
                            reason, now)
    return store.record_action(action)[0]


def install_work(action_key: str, family: str, agent_id: str, before: ModelRef,
                 now: datetime) -> PendingAssessment:
    """Queued work that makes the replica claiming it publish and install the version an
    action wrote: its ``base`` is the version before, and the new version's evidence names
    the work's key, which the daemon's workers treat as "already stored, publish it"."""
    payload = {"agent_id": agent_id, "family": family, "partition": -1,
               "base": before.to_json(), "inconsistent": [], "executed": [], "drift": {},
               "provisional_model": None, "drift_probes": {},
               "operator": {"action": action_key}}
    return PendingAssessment(f"operator/{action_key}", agent_id, family, payload, now)


def rollback(store: ActionStore, family: str, agent_id: str, to: ModelRef, actor: str,
             reason: str, now: datetime, key: str | None = None) -> OperatorAction:
    """Give the agent the model of ``to``, one of its own earlier versions or the baseline
    version its lineage forked from (or an ancestor of that), as a new version."""
    if key is not None and (done := store.action(key)) is not None:
        return done  # a retry: the state may have moved on since, the answer has not
    key = key or new_key()
    latest = store.latest(family, agent_id)
    if latest is None:
        raise ActionRefused(f"{family}/{agent_id} has no version of its own: it runs the "
                            "family baseline, there is nothing to roll back")
    chain = lineage_chain(store, latest.ref)
    target = next((v for v in chain if v.ref == to), None)
    if target is None:
        raise ActionRefused(f"{to} is not in the ancestry of {latest.ref}: roll back to "
                            + ", ".join(str(v.ref) for v in chain[:-1][-5:]))
    if target.ref == latest.ref:
        raise ActionRefused(f"{to} is the agent's current version")
    if target.domain() == latest.domain():
        raise ActionRefused(f"{latest.ref} already holds the model of {to}")
    work = install_work(key, family, agent_id, latest.ref, now)
    baseline = next(v for v in reversed(chain) if v.agent_id is None)
    version = build_version(
        ModelRef(family, agent_id, latest.version + 1), target.domain(), now, parent=latest,
        baseline=baseline.domain(),
        evidence={"operator_action": key, "restores": target.ref.to_json(), "actor": actor,
                  "reason": reason, "assessment_key": work.key, "queries": 0})
    action = OperatorAction(key, "rollback", family, agent_id, target.ref, actor, reason, now,
                            {"version": version.ref.to_json(), "work": work.key})
    return store.record_action(action, version, work)[0]


def promote(store: ActionStore, ref: ModelRef, actor: str, reason: str, now: datetime,
            key: str | None = None) -> OperatorAction:
    """Make the model of ``ref`` the family's newest baseline version."""
    if key is not None and (done := store.action(key)) is not None:
        return done  # a retry: the state may have moved on since, the answer has not
    key = key or new_key()
    source = _version(store, ref)
    base = store.latest(ref.family, None)
    if base is None:
        raise ActionRefused(f"family {ref.family} has no baseline")
    if base.domain() == source.domain():
        raise ActionRefused(f"the baseline {base.ref} already holds the model of {ref}")
    version = build_version(
        ModelRef(ref.family, None, base.version + 1), source.domain(), now, parent=base,
        evidence={"operator_action": key, "promoted_from": ref.to_json(), "actor": actor,
                  "reason": reason})
    action = OperatorAction(key, "promote", ref.family, None, ref, actor, reason, now,
                            {"version": version.ref.to_json()})
    return store.record_action(action, version)[0]


def families_of(store: ActionStore, agent_id: str) -> list[str]:
    """The families in which the store has heard of ``agent_id`` (sorted)."""
    return sorted({f for f, a in store.known_agents() if a == agent_id})


def check_known_agent(store: ActionStore, family: str, agent_id: str) -> None:
    """Raise :class:`UnknownAgent` unless the store has seen ``agent_id`` in ``family``.

    For what an operator names (the CLI, the console, the JSON API): a typo'd id or another
    family's agent would be queued and asked for nothing (no agent answers there) or in the
    wrong vocabulary, and the action recorded would make the id known to every later
    command (oper20). Scheduled re-assessments name watched agents and skip this query."""
    families = families_of(store, agent_id)
    if family not in families:
        raise UnknownAgent(f"the store has not seen agent {agent_id} in family {family}"
                           + (f" (it knows it in {', '.join(families)})" if families else
                              " (no transitions, version, work or action names it)"))


def request_assessment(store: ActionStore, family: str, agent_id: str, method: str,
                       actor: str, reason: str, now: datetime,
                       key: str | None = None) -> OperatorAction:
    """Queue an assessment of the agent's current model with ``method``, evidence or not."""
    if key is not None and (done := store.action(key)) is not None:
        return done  # a retry: the state may have moved on since, the answer has not
    if method not in ASSESS_METHODS:
        raise ActionRefused(f"unknown method {method!r}: one of {', '.join(ASSESS_METHODS)}")
    key = key or new_key()
    base = current_model(store, family, agent_id)
    payload = {"agent_id": agent_id, "family": family, "partition": -1,
               "base": base.ref.to_json(), "inconsistent": [], "executed": [], "drift": {},
               "provisional_model": None, "drift_probes": {},
               "operator": {"action": key, "method": method}}
    work = PendingAssessment(f"operator/{key}", agent_id, family, payload, now)
    action = OperatorAction(key, "assess", family, agent_id, base.ref, actor, reason, now,
                            {"work": work.key, "method": method})
    return store.record_action(action, work=work)[0]


def reviews(actions: Sequence[OperatorAction]) -> dict[ModelRef, OperatorAction]:
    """The newest approve or reject per version (``actions`` newest first)."""
    out: dict[ModelRef, OperatorAction] = {}
    for a in actions:
        if a.kind in ("approve", "reject") and a.target is not None and a.target not in out:
            out[a.target] = a
    return out
