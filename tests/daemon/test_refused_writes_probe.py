"""A refused store write stays reported while the store refuses, and stops being reported
once it takes writes again, whether or not anything requests /readyz (the daemon's own
RefusedWritesProbe runs the probe /readyz runs). Before, without /readyz requests, only a
real write of the kind renewed or ended the report: a version write retried less often
than every 300 s let ``capwatch_store_writes_failing`` fall to 0 between refusals, so the
``CapwatchStoreWritesFailing`` rule (``for: 10m``) never fired. A real full disk: SQLite
on a tmpfs (needs root)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.daemon.service import build_service
from capwatch.daemon.store_probe import RefusedWritesProbe
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, build_version
from capwatch.models_store.sqlite import SqliteModelStore
from tests.daemon.helpers import EXAMPLES, config
from tests.support.small_disk import fill, small_tmpfs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs."""
    with small_tmpfs(tmp_path / "disk", "2m") as path:
        yield path


def _older_than(since: float, age_s: float) -> None:
    """Waits until ``age_s`` passed since ``since`` (the report's hold is real time)."""
    while time.monotonic() - since <= age_s:
        time.sleep(0.01)


def test_the_daemons_probe_keeps_a_refusal_reported_until_the_store_takes_writes(
        tmp_path: Path, small_disk: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("")
    cfg = config(tmp_path, store={"url": f"sqlite:///{small_disk / 'models.db'}"},
                 source={"kind": "jsonl", "path": str(source)})
    pipeline = build_service(cfg, publisher=MemoryPublisher(),
                             source=JsonlSource(str(source))).pipeline
    store = pipeline.store
    assert isinstance(store, SqliteModelStore)
    probe = pipeline.refused_writes
    assert isinstance(probe, RefusedWritesProbe)
    v = build_version(ModelRef("rover-v9", None, 1), read_domain(EXAMPLES / "rover.pddl"),
                      datetime.now(UTC), evidence={"filler": "x" * 200_000})
    filler = small_disk / "filler"
    try:
        probe.tick()  # nothing refused: no probe, nothing reported
        assert store.write_failures() == {}
        fill(filler)
        with pytest.raises(sqlite3.OperationalError, match="full"):
            store.put(v)
        refused = time.monotonic()
        assert set(store.write_failures()) == {"model_versions"}
        hold = 0.2
        _older_than(refused, hold)
        # No write of the kind since: a shorter hold has run out...
        assert store.write_failures(hold_s=hold) == {}
        probe.tick()
        # ...and the daemon's probe, refused too, renewed it: still reported.
        assert set(store.write_failures(hold_s=hold)) == {"model_versions"}
        filler.unlink()
        probe.tick()  # taken: the report ends with no version written
        assert store.write_failures() == {}
        assert store.history("rover-v9") == []
    finally:
        pipeline.source.close()
        store.close()


def test_the_probe_runs_only_while_a_kind_is_refused() -> None:
    calls: list[int] = []
    failing: dict[str, str] = {}
    probe = RefusedWritesProbe(lambda: failing, lambda: calls.append(1), interval_s=3600)
    probe.tick()
    assert calls == []
    failing["other"] = "disk full"
    probe.tick()
    assert calls == [1]
    probe.start()
    probe.close()  # wakes the thread at once, however long its interval
    assert probe._thread is not None and not probe._thread.is_alive()
