"""Saved drift state per (consumer group, agent), in the SQL stores (migration 0003).

The daemon writes an agent's snapshot at checkpoints and on partition revocation, before
it saves the consumer offsets, and reads a partition's snapshots on assignment. The row
carries the stream position the snapshot reflects; see docs/daemon.md for how a replay
from the committed offset uses it to count every record exactly once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from capwatch.contracts.store import DriftSnapshot
from capwatch.contracts.versions import JSON, ModelRef, as_utc
from capwatch.models_store.sql_base import SqlBase

_COLUMNS = ("agent_id, family, model_agent_id, model_version, source, source_partition, "
            "next_offset, snapshot, updated_at, topic_id")


class DriftStateSql(SqlBase):
    """Mixed into :class:`~capwatch.models_store.sql.SqlModelStore`."""

    def save_drift_snapshots(self, group: str, snapshots: Sequence[DriftSnapshot]) -> int:
        for s in snapshots:
            if not s.agent_id or s.next_offset < 0 or s.partition < 0 or not s.source:
                raise ValueError(f"bad drift snapshot for {s.agent_id!r}: "
                                 f"{s.source!r}[{s.partition}] @ {s.next_offset}")
            if not isinstance(s.state, dict):
                raise ValueError(f"drift snapshot of {s.agent_id!r} is not a JSON object")
        stamps: dict[Any, Any] = {}
        rows = []
        for s in sorted(snapshots, key=lambda s: s.agent_id):
            # A checkpoint stamps all its snapshots with one time: converted once.
            stamp = stamps.get(s.updated_at)
            if stamp is None:
                stamp = stamps[s.updated_at] = self._ts_in(as_utc(s.updated_at))
            rows.append((group, s.agent_id, s.model.family, s.model.agent_id or "",
                         s.model.version, s.source, s.partition, s.next_offset,
                         self._json_in_finite(s.state), stamp, s.topic_id))
        with self._tx() as tx:
            written = tx.run_many(
                f"INSERT INTO drift_state (consumer_group, {_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (consumer_group, agent_id) DO UPDATE SET "
                "family = excluded.family, model_agent_id = excluded.model_agent_id, "
                "model_version = excluded.model_version, source = excluded.source, "
                "source_partition = excluded.source_partition, "
                "next_offset = excluded.next_offset, snapshot = excluded.snapshot, "
                "updated_at = excluded.updated_at, topic_id = excluded.topic_id "
                # A late write by a replica that lost the partition must not take the
                # position back: it would make a replay count records twice. A position
                # on another incarnation of the topic (created again under its name,
                # offsets from 0) is no older: before migration 0009 the new topic's
                # snapshots were refused until its offsets passed the old position.
                "WHERE drift_state.source <> excluded.source "
                "OR drift_state.source_partition <> excluded.source_partition "
                "OR drift_state.next_offset <= excluded.next_offset "
                "OR (drift_state.topic_id IS NOT NULL AND excluded.topic_id IS NOT NULL "
                "AND drift_state.topic_id <> excluded.topic_id)", rows)
        return written

    def load_drift_snapshots(self, group: str, source: str,
                             partitions: Iterable[int] | None = None,
                             agent_ids: Iterable[str] | None = None) -> list[DriftSnapshot]:
        sql = f"SELECT {_COLUMNS} FROM drift_state WHERE consumer_group = ? AND source = ?"
        params: list[Any] = [group, source]
        if partitions is not None:
            wanted = sorted(set(partitions))
            if not wanted:
                return []
            sql += f" AND source_partition IN ({', '.join('?' for _ in wanted)})"
            params += wanted
        if agent_ids is not None:
            ids = sorted(set(agent_ids))
            if not ids:
                return []
            sql += f" AND agent_id IN ({', '.join('?' for _ in ids)})"
            params += ids
        with self._tx(write=False) as tx:
            rows = tx.rows(sql + " ORDER BY agent_id", params)
        return [DriftSnapshot(
            agent_id=str(r[0]), model=ModelRef(str(r[1]), str(r[2]) or None, int(r[3])),
            source=str(r[4]), partition=int(r[5]), next_offset=int(r[6]),
            state=self._state(r[7]), updated_at=self._ts_out(r[8]),
            topic_id=None if r[9] is None else str(r[9])) for r in rows]

    def _state(self, v: Any) -> JSON:
        data = self._json_out(v)
        return data if isinstance(data, dict) else {}
