"""The transitions the store's activity counts for an agent are the records it sent, each
once, across a crash: a replica killed after a checkpoint replays from the committed
offset, which buffered evidence holds back, and each record replayed was counted again
(oper20: after SIGKILLs, agents awaiting an assessment had 15 transitions more in
``agent_activity`` than records on the topic). Through the pipeline and the store, SQLite
and a real PostgreSQL server.

The positions the counts reach are kept in ``activity_positions``, not in
``consumer_offsets``: session 20's rows there under a second group name doubled every
reader that sums that table as the checkpoint (the chaos harness, an operator's query)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from capwatch.adapters.io.streams import JsonlSource, MemoryPublisher
from capwatch.contracts.ports import Rebalance, Record
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.models_store.actions import action_store
from capwatch.models_store.sql import SqlModelStore
from tests.daemon.helpers import config, good_sample, refused_sample
from tests.daemon.test_prompt_alert_awaiting import DriftedRover
from tests.support.pg_schema import scratch_schema

SENT = {"rover-a": (6, 1), "rover-b": (6, 0)}
"""What the topic below holds per agent: (transitions, inconsistent)."""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'models.db'}"
        return
    with scratch_schema(request.getfixturevalue("postgres_dsn")) as url:
        yield url


@pytest.fixture
def topic(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    # rover-a's refused sample is buffered evidence (not ripe): it holds the commit back
    # at offset 1, past which every record, rover-b's too, is replayed after a crash.
    lines = [good_sample("rover-b", 0), refused_sample("rover-a", 0)]
    lines += [good_sample(agent, step) for step in range(1, 6)
              for agent in ("rover-a", "rover-b")]
    path.write_text("".join(line + "\n" for line in lines))
    return path


class Incarnation(JsonlSource):
    """The topic file as Kafka's topic ``topic_id`` (KnowsTopicId). ``recreated``: the
    topic was deleted and created again, and the group's committed offsets went with the
    old one (the broker deletes them), so it is read from its start."""

    def __init__(self, path: str, topic_id: str, recreated: bool = False) -> None:
        super().__init__(path)
        self.id = topic_id
        self.recreated = recreated

    def topic_id(self) -> str | None:
        return self.id

    def start(self, on_assign: Rebalance, on_revoke: Rebalance,
              resume: Mapping[int, int]) -> None:
        super().start(on_assign, on_revoke, {} if self.recreated else resume)


def _start(tmp_path: Path, path: Path, store_url: str,
           source: JsonlSource | None = None) -> Pipeline:
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 store={"url": store_url, "clock": "caller"},
                 detection={"debounce_transitions": 50, "debounce_s": 3600.0})
    d = build_service(cfg, publisher=MemoryPublisher(), agents=DriftedRover(),
                      source=source or JsonlSource(str(path))).pipeline
    d.open()
    return d


def _kill(d: Pipeline) -> None:
    """Gone without a final checkpoint, as after a SIGKILL."""
    d.source.close()
    d.store.close()


def _counts(d: Pipeline) -> dict[str, tuple[int, int]]:
    return {a.agent_id: (a.transitions, a.inconsistent)
            for a in action_store(d.store).activity()}


def _first_run(tmp_path: Path, path: Path, store_url: str,
               source: JsonlSource | None = None) -> None:
    """Handles 7 records, checkpoints (the commit held at 1) and is killed."""
    d = _start(tmp_path, path, store_url, source)
    try:
        d.handle_batch(d.source.poll(1.0)[:7])
        assert d.checkpoints.checkpoint()
        assert d.checkpoints.commit_offsets() == {0: 1}
        assert _counts(d) == {"rover-a": (4, 1), "rover-b": (3, 0)}
    finally:
        _kill(d)


def test_records_replayed_after_a_crash_are_counted_once(tmp_path: Path, topic: Path,
                                                         store_url: str) -> None:
    _first_run(tmp_path, topic, store_url)
    for _ in range(2):  # a restart, killed again after its checkpoint
        d = _start(tmp_path, topic, store_url)
        try:
            records = d.source.poll(1.0)
            assert records[0].offset == 1  # the replay
            d.handle_batch(records)
            d.checkpoints.checkpoint()
            assert _counts(d) == SENT  # before: rover-a 10, rover-b 8 after two restarts
        finally:
            _kill(d)


def test_a_restart_killed_before_its_replay_passed_the_counted_position(
        tmp_path: Path, topic: Path, store_url: str) -> None:
    """The replica after the crash checkpoints while its replay is still below the
    position the counts reached: the position saved stays there (the records up to it
    were counted by the replica before), so a third start does not count them again."""
    _first_run(tmp_path, topic, store_url)
    d = _start(tmp_path, topic, store_url)
    try:
        records = d.source.poll(1.0)
        d.handle_batch(records[:3])  # offsets 1-3, below the 7 counted
        # Another partition's agent: the checkpoint has a row to save, and with it the
        # positions of every partition (from the jsonl source's own: it has one).
        other = Record(d.source.name, 1, 0, b"rover-c", good_sample("rover-c", 0).encode())
        d.handle_batch([other])
        d.checkpoints.checkpoint()
        assert _counts(d) == {"rover-a": (4, 1), "rover-b": (3, 0), "rover-c": (1, 0)}
        # Before the position kept its assignment's: 4, and the next start counted
        # offsets 4-6 again.
        assert action_store(d.store).activity_positions("capwatch") == {
            (d.source.name, 0): 7, (d.source.name, 1): 1}
    finally:
        _kill(d)
    d = _start(tmp_path, topic, store_url)
    try:
        d.handle_batch(d.source.poll(1.0))
        d.checkpoints.checkpoint()
        assert _counts(d) == {**SENT, "rover-c": (1, 0)}
    finally:
        _kill(d)


def test_the_positions_are_not_consumer_offsets(tmp_path: Path, topic: Path,
                                                store_url: str) -> None:
    """consumer_offsets holds the group's commit alone: summed, it is the checkpoint
    (what the chaos harness and an operator's query read)."""
    _first_run(tmp_path, topic, store_url)
    d = _start(tmp_path, topic, store_url)
    try:
        assert isinstance(d.store, SqlModelStore)
        with d.store._tx(write=False) as tx:
            offsets = tx.rows("SELECT consumer_group, kafka_partition, next_offset "
                              "FROM consumer_offsets")
            positions = tx.rows("SELECT consumer_group, kafka_partition, next_offset "
                                "FROM activity_positions")
        assert [tuple(r) for r in offsets] == [("capwatch", 0, 1)]
        assert [tuple(r) for r in positions] == [("capwatch", 0, 7)]
    finally:
        _kill(d)


def test_a_topic_created_again_is_counted_from_its_start(tmp_path: Path, topic: Path,
                                                        store_url: str) -> None:
    """The topic deleted and created again under the same name and group: its offsets
    start again from 0, below the positions the counts reached on the topic before. Told
    by the topic's id (Kafka's, new with each creation), saved with the positions: they
    are not used, and the new topic's records are counted. Before session 22 the new
    topic's records up to the old position (7 here) were taken for replays and not
    counted: rover-b stayed at 3 transitions after 3 more."""
    _first_run(tmp_path, topic, store_url, Incarnation(str(topic), "id-1"))
    assert action_store_positions(store_url) == {
        (topic.name, 0): (7, "id-1")}
    topic.write_text("".join(good_sample("rover-b", step) + "\n" for step in (10, 11, 12)))
    d = _start(tmp_path, topic, store_url, Incarnation(str(topic), "id-2", recreated=True))
    try:
        records = d.source.poll(1.0)
        assert [r.offset for r in records] == [0, 1, 2]
        d.handle_batch(records)
        d.checkpoints.checkpoint()
        assert _counts(d) == {"rover-a": (4, 1), "rover-b": (6, 0)}
        assert action_store(d.store).activity_positions_of("capwatch") == {
            (topic.name, 0): (3, "id-2")}
    finally:
        _kill(d)


def test_the_same_topic_replayed_is_still_counted_once(tmp_path: Path, topic: Path,
                                                       store_url: str) -> None:
    """With topic ids known, a replay of the same topic (the same id) is skipped as
    before."""
    _first_run(tmp_path, topic, store_url, Incarnation(str(topic), "id-1"))
    d = _start(tmp_path, topic, store_url, Incarnation(str(topic), "id-1"))
    try:
        records = d.source.poll(1.0)
        assert records[0].offset == 1
        d.handle_batch(records)
        d.checkpoints.checkpoint()
        assert _counts(d) == SENT
    finally:
        _kill(d)


def action_store_positions(store_url: str) -> dict[tuple[str, int], tuple[int, str | None]]:
    from capwatch.models_store import open_store

    store = open_store(store_url)
    try:
        return action_store(store).activity_positions_of("capwatch")
    finally:
        store.close()
