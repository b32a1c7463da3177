"""The alert outbox in the SQL stores (migration 0002): alerts written in the transaction
of what caused them, routed in one transaction that excludes other routers, and
delivered per sink with a lease.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from datetime import datetime

from capwatch.contracts.store import (
    DELIVERY_STATUSES,
    OUTBOX_STATUSES,
    AlertDelivery,
    OutboxAlert,
    RoutingPlan,
    RoutingPlanner,
    StoreError,
)
from capwatch.contracts.versions import as_utc
from capwatch.models_store.sql_base import Row, SqlBase, Tx, lease_until, validate_alerts

_OUTBOX_COLUMNS = (
    "key, dedup_key, group_key, family, alert_type, alert, created_at, status, delivery"
)
_DELIVERY_COLUMNS = (
    "key, alert, sinks_pending, status, created_at, not_before, attempts, last_error"
)


class AlertOutboxSql(SqlBase):
    """Mixed into :class:`~capwatch.models_store.sql.SqlModelStore`."""

    claim_lock_clause = ""

    @abc.abstractmethod
    def _lock_alert_routing(self, tx: Tx) -> None:
        """Exclude other alert routers until ``tx`` ends."""

    def _add_alerts(self, tx: Tx, alerts: Sequence[OutboxAlert]) -> int:
        added = 0
        for a in alerts:
            added += tx.run(
                f"INSERT INTO alert_outbox ({_OUTBOX_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', NULL) ON CONFLICT (key) DO NOTHING",
                (a.key, a.dedup_key, a.group_key, a.family, a.alert_type,
                 self._json_in(a.alert), self._ts_in(as_utc(a.created_at))))
        return added

    def add_alerts(self, alerts: Sequence[OutboxAlert]) -> int:
        validate_alerts(alerts)
        with self._tx() as tx:
            return self._add_alerts(tx, alerts)

    def _outbox_from_row(self, r: Row) -> OutboxAlert:
        return OutboxAlert(key=r[0], dedup_key=r[1], group_key=r[2], family=r[3],
                           alert_type=r[4], alert=self._json_out(r[5]),
                           created_at=self._ts_out(r[6]), status=r[7], delivery=r[8])

    def _delivery_from_row(self, r: Row) -> AlertDelivery:
        return AlertDelivery(key=r[0], alert=self._json_out(r[1]),
                             sinks_pending=tuple(self._json_out(r[2])), status=r[3],
                             created_at=self._ts_out(r[4]), not_before=self._ts_out(r[5]),
                             attempts=int(r[6]), last_error=r[7])

    def route_alerts(self, planner: RoutingPlanner, now: datetime) -> RoutingPlan:
        now_p = self._ts_in(as_utc(now))
        with self._tx() as tx:
            self._lock_alert_routing(tx)
            due = self._ts_in(self._store_now(tx, now))
            pending = [self._outbox_from_row(r) for r in tx.rows(
                f"SELECT {_OUTBOX_COLUMNS} FROM alert_outbox WHERE status = 'pending' "
                "ORDER BY created_at, key")]
            if not pending:
                return RoutingPlan()
            keys = sorted({a.dedup_key for a in pending})
            last_sent: dict[str, datetime] = {}
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                marks = ", ".join("?" for _ in chunk)
                for r in tx.rows(f"SELECT dedup_key, sent_at FROM alert_sent "
                                 f"WHERE dedup_key IN ({marks})", chunk):
                    last_sent[str(r[0])] = self._ts_out(r[1])
            plan = planner(pending, last_sent)
            known = {a.key for a in pending}
            for key in plan.suppressed:
                if key not in known:
                    raise StoreError(f"routing plan suppresses {key!r}, not a pending alert")
                tx.run("UPDATE alert_outbox SET status = 'suppressed', routed_at = ? "
                       "WHERE key = ?", (now_p, key))
            for d in plan.deliveries:
                if not d.sinks_pending or not set(d.members) <= known:
                    raise StoreError(f"routing plan delivery {d.key!r} names no sink or an "
                                     "alert that is not pending")
                tx.run(f"INSERT INTO alert_deliveries ({_DELIVERY_COLUMNS}) "
                       "VALUES (?, ?, ?, 'pending', ?, ?, 0, NULL)",
                       (d.key, self._json_in(d.alert), self._json_in(list(d.sinks_pending)),
                        self._ts_in(as_utc(d.created_at)), due))
                for member in d.members:
                    tx.run("UPDATE alert_outbox SET status = 'routed', delivery = ?, "
                           "routed_at = ? WHERE key = ?", (d.key, now_p, member))
            for dedup_key, at in sorted(plan.sent.items()):
                at_p = self._ts_in(as_utc(at))
                tx.run("INSERT INTO alert_sent (dedup_key, sent_at) VALUES (?, ?) "
                       "ON CONFLICT (dedup_key) DO UPDATE SET sent_at = excluded.sent_at "
                       "WHERE alert_sent.sent_at < excluded.sent_at", (dedup_key, at_p))
        return plan

    def claim_deliveries(self, now: datetime, lease_seconds: float,
                         limit: int = 100) -> list[AlertDelivery]:
        lease_until(now, lease_seconds, limit)  # checks the arguments before the database
        with self._tx() as tx:
            at = self._store_now(tx, now)
            now_p = self._ts_in(at)
            until = lease_until(at, lease_seconds, limit)
            lease = self._ts_in(until)
            rows = tx.rows(
                f"SELECT {_DELIVERY_COLUMNS} FROM alert_deliveries WHERE status = 'pending' "
                f"AND not_before <= ? ORDER BY created_at, key LIMIT ?{self.claim_lock_clause}",
                (now_p, limit))
            out = []
            for r in rows:
                tx.run("UPDATE alert_deliveries SET not_before = ?, attempts = attempts + 1 "
                       "WHERE key = ?", (lease, r[0]))
                d = self._delivery_from_row(r)
                out.append(AlertDelivery(d.key, d.alert, d.sinks_pending, d.created_at,
                                         status=d.status, attempts=d.attempts + 1,
                                         not_before=until, last_error=d.last_error))
        return out

    def finish_delivery(self, key: str, delivered: Sequence[str], now: datetime,
                        error: str | None = None,
                        retry_at: datetime | None = None) -> AlertDelivery:
        with self._tx() as tx:
            rows = self._delivery_rows(tx, key)
            if not rows:
                raise StoreError(f"no alert delivery {key!r}")
            d = self._delivery_from_row(rows[0])
            left = tuple(s for s in d.sinks_pending if s not in set(delivered))
            if left:
                due = self._ts_in(self._store_time(
                    tx, retry_at if retry_at is not None else now, now))
                tx.run("UPDATE alert_deliveries SET sinks_pending = ?, not_before = ?, "
                       "last_error = ? WHERE key = ?",
                       (self._json_in(list(left)), due, error, key))
            else:
                tx.run("UPDATE alert_deliveries SET sinks_pending = ?, status = 'sent', "
                       "sent_at = ?, last_error = ? WHERE key = ?",
                       (self._json_in([]), self._ts_in(as_utc(now)), error, key))
            rows = self._delivery_rows(tx, key)
        return self._delivery_from_row(rows[0])

    @staticmethod
    def _delivery_rows(tx: Tx, key: str) -> list[Row]:
        return tx.rows(f"SELECT {_DELIVERY_COLUMNS} FROM alert_deliveries WHERE key = ?",
                       (key,))

    def undelivered(self) -> tuple[int, int]:
        with self._tx(write=False) as tx:
            waiting = tx.rows("SELECT COUNT(*) FROM alert_outbox WHERE status = 'pending'")
            owed = tx.rows("SELECT COUNT(*) FROM alert_deliveries WHERE status = 'pending'")
        return int(waiting[0][0]), int(owed[0][0])

    def outbox(self, status: str | None = None) -> list[OutboxAlert]:
        return self._by_status(f"SELECT {_OUTBOX_COLUMNS} FROM alert_outbox", "created_at",
                               OUTBOX_STATUSES, status, self._outbox_from_row)

    def deliveries(self, status: str | None = None) -> list[AlertDelivery]:
        return self._by_status(f"SELECT {_DELIVERY_COLUMNS} FROM alert_deliveries",
                               "created_at", DELIVERY_STATUSES, status,
                               self._delivery_from_row)

    def carried_by(self, keys: Sequence[str]) -> dict[str, AlertDelivery]:
        out: dict[str, AlertDelivery] = {}
        with self._tx(write=False) as tx:
            for chunk in _chunks(sorted(set(keys))):
                marks = ", ".join("?" for _ in chunk)
                for key, delivery in tx.rows(
                        f"SELECT key, delivery FROM alert_outbox WHERE key IN ({marks}) "
                        "AND delivery IS NOT NULL", chunk):
                    rows = self._delivery_rows(tx, delivery)
                    if not rows:
                        continue
                    members = tuple(str(r[0]) for r in tx.rows(
                        "SELECT key FROM alert_outbox WHERE delivery = ? ORDER BY key",
                        (delivery,)))
                    d = self._delivery_from_row(rows[0])
                    out[str(key)] = AlertDelivery(
                        d.key, d.alert, d.sinks_pending, d.created_at, members=members,
                        status=d.status, attempts=d.attempts, not_before=d.not_before,
                        last_error=d.last_error)
        return out

    def outbox_keys(self, keys: Sequence[str]) -> set[str]:
        found: set[str] = set()
        with self._tx(write=False) as tx:
            for chunk in _chunks(sorted(set(keys))):
                marks = ", ".join("?" for _ in chunk)
                found.update(str(r[0]) for r in tx.rows(
                    f"SELECT key FROM alert_outbox WHERE key IN ({marks})", chunk))
        return found

    def prune_alerts(self, before: datetime) -> int:
        at = self._ts_in(as_utc(before))
        with self._tx() as tx:
            n = tx.run("DELETE FROM alert_outbox WHERE status <> 'pending' AND routed_at < ? "
                       "AND (delivery IS NULL OR delivery NOT IN "
                       "(SELECT key FROM alert_deliveries WHERE status = 'pending'))", (at,))
            n += tx.run("DELETE FROM alert_deliveries WHERE status = 'sent' AND sent_at < ?",
                        (at,))
            n += tx.run("DELETE FROM alert_sent WHERE sent_at < ?", (at,))
        return n


def _chunks(keys: list[str], size: int = 500) -> list[list[str]]:
    return [keys[i:i + size] for i in range(0, len(keys), size)]
