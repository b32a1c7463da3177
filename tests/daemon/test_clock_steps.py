"""Daemon replicas over one PostgreSQL store whose wall clocks disagree (injected: the
machine's clock is shared and left alone): the server's clock decides what is due."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.model.pal import delta
from capwatch.models_store.actions import action_store, request_assessment
from tests.daemon.helpers import config, run_queued
from tests.daemon.test_reassess import _Widened

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_url(postgres_dsn: str) -> Iterator[str]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in postgres_dsn else "?"
    yield f"{postgres_dsn}{sep}options={quote(f'-csearch_path={schema}')}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_replica_stepped_back_an_hour_runs_work_another_replica_queued(
        tmp_path: Path, pg_url: str) -> None:
    agents = _Widened()

    def replica(name: str, by: timedelta) -> tuple[Pipeline, MemoryPublisher]:
        (tmp_path / name).mkdir()
        path = tmp_path / name / "in.jsonl"
        path.write_text("")
        memory = MemoryPublisher()
        cfg = config(tmp_path / name, replica_id=name, store={"url": pg_url, "clock": "auto"},
                     source={"kind": "jsonl", "path": str(path)})
        d = build_service(cfg, publisher=memory, agents=agents, source=JsonlSource(str(path)),
                          clock=lambda: datetime.now(UTC) + by).pipeline
        d.seed_families()
        return d, memory

    a, _ = replica("a", timedelta(0))
    b, published = replica("b", timedelta(hours=-1))
    try:
        request_assessment(action_store(a.store), "rover-v1", "rover-a", "verify",
                           "operator", "check", a.clock())
        # Before, b compared the work's not_before (a's clock) with its own: nothing due
        # for an hour.
        assert run_queued(b) == 1
        (event,) = published.models
        assert event.agent_id == "rover-a"
        v = b.store.latest("rover-v1", "rover-a")
        assert v is not None and delta(v.domain(), agents.domain) == 0
        assert b.store.live_queue_items() == []
    finally:
        a.store.close()
        b.store.close()
