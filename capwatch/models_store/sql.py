"""The SQL the SQLite and PostgreSQL stores share; each backend supplies a dialect.

Statements are written once with ``?`` placeholders; the PostgreSQL backend rewrites them.
Every public method is one transaction, so a crash leaves either all of a write or none.
"""

from __future__ import annotations

import abc
import base64
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any, TypeVar

import msgspec

from capwatch.contracts.store import (
    QUEUE_STATUSES,
    Held,
    LeaseLost,
    OutboxAlert,
    PendingAssessment,
    StoreError,
    UnknownVersion,
    VersionConflict,
)
from capwatch.contracts.versions import (
    JSON,
    LineageSummary,
    ModelRef,
    ModelVersion,
    as_utc,
    with_key,
)
from capwatch.model.diff import change_from_json, change_to_json
from capwatch.models_store.actions import ActionsSql
from capwatch.models_store.alert_outbox import AlertOutboxSql
from capwatch.models_store.drift_state import DriftStateSql
from capwatch.models_store.sql_base import (
    MODEL_VERSIONS,
    PROBE_WRITE_BYTES,
    Row,
    Tx,
    lease_until,
    validate_alerts,
)

_T = TypeVar("_T")

__all__ = ["Row", "SqlModelStore", "Tx", "as_json", "dumps", "load_migrations"]

_VERSION_COLUMNS = (
    "family, agent_id, version, parent_family, parent_agent_id, parent_version, "
    "delta_to_parent, delta_to_baseline, changed_pal_tuples, summary, evidence, model_json, "
    "pddl, created_at, content_key"
)
_QUEUE_COLUMNS = (
    "key, agent_id, family, payload, status, attempts, enqueued_at, claimed_by, lease_until, "
    "last_error, ended_at"
)


def load_migrations(dialect: str) -> list[tuple[int, str, list[str]]]:
    """(number, file name, statements) for every ``NNNN_*.sql`` file, in order."""
    root = resources.files("capwatch.models_store") / "migrations" / dialect
    found = []
    for entry in root.iterdir():
        name = entry.name
        if not name.endswith(".sql"):
            continue
        number = int(name.split("_", 1)[0])
        text = entry.read_text(encoding="utf-8")
        lines = [ln for ln in text.splitlines() if not ln.strip().startswith("--")]
        statements = [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
        found.append((number, name, statements))
    found.sort()
    numbers = [n for n, _, _ in found]
    if numbers != list(range(1, len(numbers) + 1)):
        raise StoreError(f"migrations for {dialect} are not numbered 1..n: {numbers}")
    return found


class SqlModelStore(DriftStateSql, AlertOutboxSql, ActionsSql, abc.ABC):
    """Every role of :class:`~capwatch.contracts.store.ModelStore` over a DB-API connection."""

    dialect: str

    # -- dialect hooks (the connection's are in SqlBase) ---------------------------------
    @abc.abstractmethod
    def _lock_migrations(self, tx: Tx) -> None: ...

    @abc.abstractmethod
    def _is_unique_violation(self, exc: BaseException) -> bool: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    # -- schema ----------------------------------------------------------------------------
    def migrate(self) -> int:
        """Apply missing migrations in one transaction; returns the schema version."""
        migrations = load_migrations(self.dialect)
        with self._tx() as tx:
            self._lock_migrations(tx)
            tx.run("CREATE TABLE IF NOT EXISTS schema_version ("
                   "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
            applied = {int(r[0]) for r in tx.rows("SELECT version FROM schema_version")}
            newest = max((n for n, _, _ in migrations), default=0)
            if applied and max(applied) > newest:
                raise StoreError(
                    f"the database schema is at version {max(applied)} but this capwatch "
                    f"knows only up to {newest}: upgrade capwatch before using this store")
            for number, name, statements in migrations:
                if number in applied:
                    continue
                for statement in statements:
                    tx.run(statement)
                tx.run("INSERT INTO schema_version (version, name, applied_at) "
                       "VALUES (?, ?, CURRENT_TIMESTAMP)", (number, name))
        if self.clock == "monotonic":
            self._resume_clock()  # its table exists once migrated
        return newest

    def schema_version(self) -> int:
        with self._tx(write=False) as tx:
            rows = tx.rows("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0] or 0)

    def _probe_write(self, tx: Tx, kind: str) -> bool:
        # A family no version can have ('' is refused by _validate_ref) and an id of its
        # own, so that two replicas' probes never wait on each other's row.
        tag = f"probe-{uuid.uuid4().hex}"
        filler = base64.b64encode(os.urandom(PROBE_WRITE_BYTES * 3 // 4)).decode()
        now = self._ts_in(datetime.now(UTC))
        if kind == MODEL_VERSIONS:
            tx.run(f"INSERT INTO model_versions ({_VERSION_COLUMNS}) "
                   "VALUES (?, ?, 1, NULL, NULL, NULL, 0, 0, ?, ?, ?, ?, ?, ?, ?)",
                   ("", tag, self._json_in([]), self._json_in([]), self._json_in({}),
                    self._json_in({}), filler, now, tag))
        else:
            # Any other write: the queue's table stands for them (the drift snapshots,
            # outbox and offsets are in the same database, seldom refused alone).
            tx.run("INSERT INTO pending_assessments (key, agent_id, family, payload, status, "
                   "attempts, enqueued_at, not_before) VALUES (?, ?, '', ?, 'done', 0, ?, ?)",
                   (tag, tag, self._json_in({"probe": filler}), now, now))
        return True

    # -- model versions --------------------------------------------------------------------
    def _version_from_row(self, r: Row) -> ModelVersion:
        parent = ModelRef(r[3], r[4] or None, int(r[5])) if r[3] is not None else None
        return ModelVersion(
            ref=ModelRef(r[0], r[1] or None, int(r[2])), parent=parent,
            delta_to_parent=int(r[6]), delta_to_baseline=int(r[7]),
            changed_pal_tuples=tuple(change_from_json(c) for c in self._json_out(r[8])),
            summary=tuple(self._json_out(r[9])), evidence=self._json_out(r[10]),
            model_json=self._json_out(r[11]), pddl=r[12], created_at=self._ts_out(r[13]),
            key=r[14],
        )

    @staticmethod
    def _pk(ref: ModelRef) -> tuple[str, str, int]:
        return (ref.family, ref.agent_id or "", ref.version)

    def _versions(self, tx: Tx, where: str, params: Sequence[Any]) -> list[ModelVersion]:
        rows = tx.rows(f"SELECT {_VERSION_COLUMNS} FROM model_versions WHERE {where}", params)
        return [self._version_from_row(r) for r in rows]

    def _get(self, tx: Tx, ref: ModelRef) -> ModelVersion | None:
        found = self._versions(tx, "family = ? AND agent_id = ? AND version = ?",
                               self._pk(ref))
        return found[0] if found else None

    def put(self, version: ModelVersion, alerts: Sequence[OutboxAlert] = (),
            held: Held | None = None) -> ModelVersion:
        v = with_key(version)
        _validate_ref(v.ref)
        validate_alerts(alerts)

        def attempt() -> ModelVersion:
            with self._tx(kind=MODEL_VERSIONS) as tx:
                if held is not None:
                    # First, so that the row stays locked (PostgreSQL) or the database
                    # (SQLite) until the version is in: a claim by another worker waits
                    # for the commit and then sees the renewed lease.
                    self._renew(tx, held.key, held.worker, held.now, held.lease_seconds)
                stored = self._put(tx, v)
                self._add_alerts(tx, alerts)
                return stored

        try:
            return attempt()
        except StoreError:
            raise
        except Exception as exc:
            if not self._is_unique_violation(exc):
                raise
        # Another writer inserted the same primary key between our check and our insert:
        # decide, now that it is committed, whether it was the same content.
        return attempt()

    def _put(self, tx: Tx, v: ModelVersion) -> ModelVersion:
        # Read the lineage's head before looking for our row: under READ COMMITTED each
        # statement sees newly committed rows, so the other order could see a racing
        # writer's commit only in the second query and misreport an identical retry.
        rows = tx.rows("SELECT MAX(version) FROM model_versions WHERE family = ? "
                       "AND agent_id = ?", (v.ref.family, v.ref.agent_id or ""))
        latest = int(rows[0][0] or 0)
        existing = self._get(tx, v.ref)
        if existing is not None:
            if existing.key == v.key:
                return existing
            raise VersionConflict(
                f"{v.ref} already holds a different model (stored key {existing.key[:12]}, "
                f"offered {v.key[:12]}); re-read the lineage and write the next version")
        if v.ref.version != latest + 1:
            raise VersionConflict(f"lineage {v.ref.family}/{v.ref.agent_id or 'baseline'} "
                                  f"is at version {latest}; cannot write {v.ref.version}")
        if v.parent is not None and self._get(tx, v.parent) is None:
            raise UnknownVersion(f"parent {v.parent} of {v.ref} does not exist")
        p = v.parent
        tx.run(
            f"INSERT INTO model_versions ({_VERSION_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*self._pk(v.ref), p.family if p else None, (p.agent_id or "") if p else None,
             p.version if p else None, v.delta_to_parent, v.delta_to_baseline,
             self._json_in([change_to_json(c) for c in v.changed_pal_tuples]),
             self._json_in(list(v.summary)), self._json_in(v.evidence),
             self._json_in(v.model_json), v.pddl, self._ts_in(v.created_at), v.key),
        )
        return v

    def get(self, ref: ModelRef) -> ModelVersion | None:
        with self._tx(write=False) as tx:
            return self._get(tx, ref)

    def latest(self, family: str, agent_id: str | None = None) -> ModelVersion | None:
        with self._tx(write=False) as tx:
            found = self._versions(tx, "family = ? AND agent_id = ? "
                                   "ORDER BY version DESC LIMIT 1", (family, agent_id or ""))
        return found[0] if found else None

    def own_lineages(self, agent_ids: Sequence[str]) -> set[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        ids = sorted(set(agent_ids) - {""})
        with self._tx(write=False) as tx:
            # Chunks stay below every driver's bound on parameters per statement.
            for i in range(0, len(ids), 500):
                chunk = ids[i:i + 500]
                marks = ",".join("?" * len(chunk))
                found.update((r[0], r[1]) for r in tx.rows(
                    f"SELECT DISTINCT family, agent_id FROM model_versions "
                    f"WHERE agent_id IN ({marks})", chunk))
        return found

    def history(self, family: str, agent_id: str | None = None) -> list[ModelVersion]:
        with self._tx(write=False) as tx:
            return self._versions(tx, "family = ? AND agent_id = ? ORDER BY version",
                                  (family, agent_id or ""))

    def model_at(self, agent_id: str, at: datetime,
                 family: str | None = None) -> ModelVersion | None:
        if not agent_id:
            raise ValueError("agent_id must be non-empty")
        at_param = self._ts_in(as_utc(at))
        with self._tx(write=False) as tx:
            where, params = "agent_id = ? AND created_at <= ?", [agent_id, at_param]
            if family is not None:
                where += " AND family = ?"
                params.append(family)
            found = self._versions(tx, f"{where} ORDER BY created_at DESC, version DESC "
                                   "LIMIT 1", params)
            if found:
                return found[0]
            if family is None:
                fam = tx.rows("SELECT family FROM model_versions WHERE agent_id = ? "
                              "ORDER BY created_at LIMIT 1", (agent_id,))
                if not fam:
                    return None
                family = str(fam[0][0])
            found = self._versions(tx, "family = ? AND agent_id = '' AND created_at <= ? "
                                   "ORDER BY created_at DESC, version DESC LIMIT 1",
                                   (family, at_param))
        return found[0] if found else None

    def lineages(self, family: str | None = None) -> list[LineageSummary]:
        sql = ("SELECT m.family, m.agent_id, m.version, m.created_at, m.delta_to_baseline "
               "FROM model_versions m JOIN (SELECT family, agent_id, MAX(version) AS v "
               "FROM model_versions GROUP BY family, agent_id) l ON m.family = l.family "
               "AND m.agent_id = l.agent_id AND m.version = l.v")
        params: tuple[Any, ...] = ()
        if family is not None:
            sql += " WHERE m.family = ?"
            params = (family,)
        with self._tx(write=False) as tx:
            rows = tx.rows(sql + " ORDER BY m.family, m.agent_id", params)
        return [LineageSummary(r[0], r[1] or None, int(r[2]), self._ts_out(r[3]), int(r[4]))
                for r in rows]

    def newest_versions(self) -> list[ModelRef]:
        # Not lineages(): its join reads each newest row's created_at and
        # delta_to_baseline from the table, whose rows hold whole models (~2 KB a version
        # inline in PostgreSQL), so it read the whole table (a sequential scan of 391 MB
        # at 50,000 agents x 4 versions); MAX over the primary key is an index-only scan
        # (docs/performance.md, "The drift gauges' store read").
        with self._tx(write=False) as tx:
            rows = tx.rows("SELECT family, agent_id, MAX(version) FROM model_versions "
                           "GROUP BY family, agent_id ORDER BY family, agent_id")
        return [ModelRef(r[0], r[1] or None, int(r[2])) for r in rows]

    def model_texts(self, refs: Sequence[ModelRef]) -> dict[ModelRef, str]:
        found: dict[ModelRef, str] = {}
        # A statement per 300 versions (900 parameters, below every driver's bound), each
        # its own transaction: the store's lock is not held for the whole fleet.
        for i in range(0, len(refs), 300):
            chunk = refs[i:i + 300]
            marks = ",".join(["(?, ?, ?)"] * len(chunk))
            with self._tx(write=False) as tx:
                # A join with the list, not "(family, agent_id, version) IN (VALUES
                # ...)": SQLite answers that with a scan of the whole table per statement.
                rows = tx.rows("SELECT m.family, m.agent_id, m.version, "
                               f"CAST(m.model_json AS TEXT) FROM (VALUES {marks}) AS w "
                               "JOIN model_versions m ON m.family = w.column1 AND "
                               "m.agent_id = w.column2 AND m.version = w.column3",
                               [x for r in chunk for x in self._pk(r)])
            found.update((ModelRef(r[0], r[1] or None, int(r[2])), str(r[3])) for r in rows)
        return found

    # -- pending assessments ---------------------------------------------------------------
    def _item_from_row(self, r: Row) -> PendingAssessment:
        return PendingAssessment(
            key=r[0], agent_id=r[1], family=r[2], payload=self._json_out(r[3]), status=r[4],
            attempts=int(r[5]), enqueued_at=self._ts_out(r[6]), claimed_by=r[7],
            lease_until=self._ts_out(r[8]) if r[8] is not None else None, last_error=r[9],
            ended_at=self._ts_out(r[10]) if r[10] is not None else None)

    def enqueue(self, item: PendingAssessment, alerts: Sequence[OutboxAlert] = ()) -> bool:
        return self.enqueue_many([(item, alerts)])[0]

    def enqueue_many(self, items: Sequence[tuple[PendingAssessment, Sequence[OutboxAlert]]]
                     ) -> list[bool]:
        for item, alerts in items:
            if not item.key:
                raise ValueError("a pending assessment needs a non-empty key")
            validate_alerts(alerts)
        if not items:
            return []
        created = []
        # One commit for all: a commit waits for the disk (~0.4-4 ms), and a sweep queues
        # the evidence of every agent that ripened by time since the last one.
        with self._tx() as tx:
            # Due at once, on the store's clock: with the database's, a replica whose clock
            # was stepped back does not find its own work written ahead of its now.
            due = self._ts_in(self._store_now(tx, items[0][0].enqueued_at))
            for item, alerts in items:
                at = self._ts_in(as_utc(item.enqueued_at))
                n = tx.run(
                    "INSERT INTO pending_assessments (key, agent_id, family, payload, status, "
                    "attempts, enqueued_at, not_before) "
                    "VALUES (?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT (key) DO NOTHING",
                    (item.key, item.agent_id, item.family,
                     self._json_in_finite(item.payload) if item.finite
                     else self._json_in(item.payload), at,
                     due if self.clock == "database" else at))
                self._add_alerts(tx, alerts)
                created.append(n == 1)
        return created

    def claim(self, worker: str, now: datetime, lease_seconds: float,
              limit: int = 1) -> list[PendingAssessment]:
        lease_until(now, lease_seconds, limit)  # checks the arguments before the database
        with self._tx() as tx:
            at = self._store_now(tx, now)
            now_p = self._ts_in(at)
            lease = self._ts_in(lease_until(at, lease_seconds, limit))
            keys = [r[0] for r in tx.rows(
                "SELECT key FROM pending_assessments WHERE (status = 'pending' AND "
                "not_before <= ?) OR (status = 'claimed' AND lease_until < ?) "
                f"ORDER BY enqueued_at, key LIMIT ?{self.claim_lock_clause}",
                (now_p, now_p, limit))]
            claimed = []
            for key in keys:
                tx.run("UPDATE pending_assessments SET status = 'claimed', claimed_by = ?, "
                       "lease_until = ?, attempts = attempts + 1 WHERE key = ?",
                       (worker, lease, key))
                rows = tx.rows(f"SELECT {_QUEUE_COLUMNS} FROM pending_assessments "
                               "WHERE key = ?", (key,))
                claimed.append(self._item_from_row(rows[0]))
        return claimed

    def renew(self, key: str, worker: str, now: datetime, lease_seconds: float) -> None:
        with self._tx() as tx:
            self._renew(tx, key, worker, now, lease_seconds)

    def _renew(self, tx: Tx, key: str, worker: str, now: datetime,
               lease_seconds: float) -> None:
        lease = self._ts_in(lease_until(self._store_now(tx, now), lease_seconds, 1))
        n = tx.run("UPDATE pending_assessments SET lease_until = ? "
                   "WHERE key = ? AND status = 'claimed' AND claimed_by = ?",
                   (lease, key, worker))
        if n == 0:
            self._explain_not_held(tx, key, worker)

    def complete(self, key: str, worker: str,
                 alerts: Sequence[OutboxAlert] = (), now: datetime | None = None) -> None:
        validate_alerts(alerts)
        with self._tx() as tx:
            ended = self._ts_in(self._store_now(tx, now if now is not None
                                                else datetime.now(UTC)))
            n = tx.run("UPDATE pending_assessments SET status = 'done', lease_until = NULL, "
                       "ended_at = ? WHERE key = ? AND status = 'claimed' AND claimed_by = ?",
                       (ended, key, worker))
            if n == 0:
                self._explain_not_held(tx, key, worker)
            self._add_alerts(tx, alerts)

    def release(self, key: str, worker: str, error: str, not_before: datetime,
                max_attempts: int = 5,
                failure_alerts: Sequence[OutboxAlert] = (),
                now: datetime | None = None) -> bool:
        validate_alerts(failure_alerts)
        with self._tx() as tx:
            at = self._store_now(tx, now if now is not None else datetime.now(UTC))
            due = self._store_time(tx, not_before, now if now is not None else not_before,
                                   store_now=at)
            n = tx.run(
                "UPDATE pending_assessments SET status = CASE WHEN attempts >= ? THEN 'failed' "
                "ELSE 'pending' END, claimed_by = NULL, lease_until = NULL, last_error = ?, "
                "not_before = ? WHERE key = ? AND status = 'claimed' AND claimed_by = ?",
                (max_attempts, error, self._ts_in(due), key, worker))
            if n == 0:
                self._explain_not_held(tx, key, worker)
            failed = tx.rows("SELECT status FROM pending_assessments WHERE key = ?",
                             (key,))[0][0] == "failed"
            if failed:
                tx.run("UPDATE pending_assessments SET ended_at = ? WHERE key = ?",
                       (self._ts_in(at), key))
                self._add_alerts(tx, failure_alerts)
        return bool(failed)

    def _explain_not_held(self, tx: Tx, key: str, worker: str) -> None:
        rows = tx.rows("SELECT status, claimed_by FROM pending_assessments WHERE key = ?",
                       (key,))
        if not rows:
            raise StoreError(f"no pending assessment {key!r}")
        raise LeaseLost(f"pending assessment {key!r} is {rows[0][0]} and held by "
                         f"{rows[0][1]!r}, not {worker!r}: its lease was lost")

    def queue_items(self, status: str | None = None) -> list[PendingAssessment]:
        return self._by_status(f"SELECT {_QUEUE_COLUMNS} FROM pending_assessments",
                               "enqueued_at", QUEUE_STATUSES, status, self._item_from_row)

    def live_queue_items(self) -> list[PendingAssessment]:
        with self._tx(write=False) as tx:
            rows = tx.rows(f"SELECT {_QUEUE_COLUMNS} FROM pending_assessments "
                           "WHERE status IN ('pending', 'claimed') ORDER BY enqueued_at, key")
        return [self._item_from_row(r) for r in rows]

    def queue_items_by_key(self, keys: Sequence[str]) -> dict[str, PendingAssessment]:
        wanted = sorted(set(keys))
        found: dict[str, PendingAssessment] = {}
        with self._tx(write=False) as tx:
            for start in range(0, len(wanted), 500):  # bound a statement's parameters
                chunk = wanted[start:start + 500]
                marks = ", ".join("?" for _ in chunk)
                for r in tx.rows(f"SELECT {_QUEUE_COLUMNS} FROM pending_assessments "
                                 f"WHERE key IN ({marks})", chunk):
                    item = self._item_from_row(r)
                    found[item.key] = item
        return found

    # -- consumer checkpoints --------------------------------------------------------------
    def save_offsets(self, group: str, offsets: Mapping[tuple[str, int], int],
                     at: datetime) -> None:
        for (topic, partition), offset in offsets.items():
            if offset < 0 or partition < 0 or not topic:
                raise ValueError(f"bad checkpoint {topic!r}[{partition}] = {offset}")
        at_p = self._ts_in(as_utc(at))
        with self._tx() as tx:
            for (topic, partition), offset in sorted(offsets.items()):
                tx.run("INSERT INTO consumer_offsets (consumer_group, topic, kafka_partition, "
                       "next_offset, updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT "
                       "(consumer_group, topic, kafka_partition) DO UPDATE SET "
                       "next_offset = excluded.next_offset, updated_at = excluded.updated_at",
                       (group, topic, partition, offset, at_p))

    def load_offsets(self, group: str) -> dict[tuple[str, int], int]:
        with self._tx(write=False) as tx:
            rows = tx.rows("SELECT topic, kafka_partition, next_offset FROM consumer_offsets "
                           "WHERE consumer_group = ?", (group,))
        return {(str(r[0]), int(r[1])): int(r[2]) for r in rows}


def _validate_ref(ref: ModelRef) -> None:
    if not ref.family:
        raise ValueError("a model version needs a family")
    if ref.agent_id == "":
        raise ValueError("agent_id '' is reserved for the family baseline: use None")


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


_FINITE = msgspec.json.Encoder(order="sorted")


def dumps_finite(obj: Any) -> str:
    """:func:`dumps` for a value whose floats are all finite, about eight times faster: a
    checkpoint writes one drift snapshot per agent whose tables changed, on the main loop
    (every agent admitted since the last one). The text may write a float otherwise
    (``1e-05`` as ``0.00001``), the same value; a NaN or infinity would become null, which
    is why only such values come here."""
    return _FINITE.encode(obj).decode("utf-8")


def as_json(obj: Any) -> JSON:
    if not isinstance(obj, dict):
        raise StoreError(f"expected a JSON object, found {type(obj).__name__}")
    return obj
