"""``capwatch models republish`` puts each agent's newest stored version back on the
models topic (after the topic lost them: deleted, or made again), over the real broker
and both clients, as the daemon publishes it (keyed by agent, its own event format)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from capwatch.cli import main
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import ModelRef, build_version, open_store
from tests.integration._daemon_setup import CLIENTS, EXAMPLES, families_config
from tests.integration.test_kafka_backends import _read, create

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("client", CLIENTS)
def test_republish_puts_each_agents_newest_version_on_the_models_topic(
        client: str, kafka_bootstrap: str, kafka_topic: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    rover = read_domain(EXAMPLES / "rover.pddl")
    now = datetime.now(UTC)
    store_url = f"sqlite:///{tmp_path / 'models.db'}"
    store = open_store(store_url)
    try:
        base = store.put(build_version(ModelRef("rover-v1", None, 1), rover, now))
        a1 = store.put(build_version(ModelRef("rover-v1", "rover-1", 1), rover, now,
                                     parent=base))
        store.put(build_version(ModelRef("rover-v1", "rover-1", 2), rover, now, parent=a1,
                                baseline=rover))
        store.put(build_version(ModelRef("rover-v1", "rover-2", 1), rover, now, parent=base))
    finally:
        store.close()
    models = f"{kafka_topic}-models"
    create(kafka_bootstrap, models, 1)
    config = {
        "source": {"kind": "kafka"}, "output": {"kind": "kafka"},
        "kafka": {"client": client, "bootstrap_servers": kafka_bootstrap,
                  "transitions_topic": f"{kafka_topic}-tr", "models_topic": models,
                  "alerts_topic": f"{kafka_topic}-alerts",
                  "dead_letter_topic": f"{kafka_topic}-dlq", "group_id": f"{kafka_topic}-g"},
        "store": {"url": store_url},
        "families": families_config("rover-v1"),
    }
    path = tmp_path / "capwatch.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["models", "republish", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "published rover-v1/rover-1@2" in out and "published rover-v1/rover-2@1" in out
    records = _read(kafka_bootstrap, models, 2)
    newest = {k: json.loads(v)["version"] for k, v in records}
    assert newest == {b"rover-1": 2, b"rover-2": 1}
    assert all(json.loads(v)["family"] == "rover-v1" for _, v in records)

    # One agent only; and an output that is not Kafka is refused by name.
    assert main(["models", "republish", "--config", str(path), "--agent", "rover-2"]) == 0
    assert [k for k, _ in _read(kafka_bootstrap, models, 3)] == \
        [b"rover-1", b"rover-2", b"rover-2"]
    path.write_text(yaml.safe_dump({**config, "output": {"kind": "jsonl",
                                                         "directory": str(tmp_path)}}))
    capsys.readouterr()
    assert main(["models", "republish", "--config", str(path)]) == 2
    assert "republish writes to Kafka" in capsys.readouterr().err
