"""Starting against servers that are not there (yet): the log names each dependency the
daemon waits for, /healthz answers from the start, /readyz says what is awaited, and the
failure is a clear error instead of a silent half minute."""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from capwatch.cli import main
from capwatch.daemon import service as service_module
from capwatch.daemon.logs import configure_logging, reset_logging
from capwatch.daemon.redact import redact_url
from capwatch.daemon.service import DependencyError, build_service
from tests.daemon.helpers import EXAMPLES, config
from tests.support._proc import free_port


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _closed_port() -> str:
    return f"127.0.0.1:{free_port()}"  # nothing listens there


def test_health_is_served_and_each_dependency_logged_while_kafka_is_unreachable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port, broker = free_port(), _closed_port()
    # The daemon is held in its first wait between attempts until both endpoints have been
    # read, so a loaded machine cannot run the 4 s out before the test looks.
    waiting, looked = threading.Event(), threading.Event()
    real_wait = service_module.wait_for_kafka

    def held_sleep(seconds: float) -> None:
        waiting.set()
        looked.wait(60)
        time.sleep(seconds)

    monkeypatch.setattr(service_module, "wait_for_kafka",
                          lambda k, startup=None: real_wait(k, startup, held_sleep))
    cfg = config(tmp_path, source={"kind": "kafka"}, output={"kind": "kafka"},
                 kafka={"bootstrap_servers": broker, "connect_timeout_s": 4},
                 http={"enabled": True, "host": "127.0.0.1", "port": port})
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            build_service(cfg)
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=start)
    thread.start()
    try:
        assert waiting.wait(30)
        status, body = _get(f"http://127.0.0.1:{port}/healthz")
        assert status == 200
        status, body = _get(f"http://127.0.0.1:{port}/readyz")
        assert status == 503
        assert body["problems"] == [f"starting: waiting for Kafka at {broker} (PLAINTEXT)"]
    finally:
        looked.set()
        thread.join(30)
        reset_logging()
    (error,) = errors
    assert isinstance(error, DependencyError)
    assert f"Kafka at {broker} (PLAINTEXT): not reachable within 4 s" in str(error)
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert events[:3] == ["http listening", "opening the store", "store ready"]
    assert events.count("waiting for Kafka") >= 2  # retried, and said so each time
    assert "Kafka not reachable yet" in events
    # The server is gone with the failed start: the port is free again.
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)


def test_store_urls_are_logged_without_their_password() -> None:
    assert redact_url("postgresql://cw:hunter2@db:5432/cw") == "postgresql://cw:***@db:5432/cw"
    assert redact_url("sqlite:///data/x.db") == "sqlite:///data/x.db"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("template", "words"), [
    ("http://{agentid}:8080", "unknown placeholder {agentid}; it may use {agent_id} and "
                              "{family}"),
    ("{agent_id}:8080", "must start with http:// or https://"),
    ("http://{agent_id:>8}:8080", "without format or conversion"),
    ("http://{agent_id:8080", "a literal brace is written {{ or }}"),
])
def test_check_refuses_a_bad_agent_url_template(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], template: str, words: str) -> None:
    path = _write(tmp_path, f"agents:\n  url_template: '{template}'\n")
    assert main(["run", "--config", path, "--check"]) == 2
    err = capsys.readouterr().err
    assert f"url_template {template!r}" in err and words in err


def test_check_warns_about_a_configuration_without_families(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "kafka: {bootstrap_servers: 'k:9092'}\n")
    assert main(["run", "--config", path, "--check"]) == 0
    out = capsys.readouterr()
    assert "warning: families is empty" in out.err
    assert "configuration is valid with warnings" in out.out


def test_check_says_where_a_jsonl_source_reads_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    families = f"families:\n  rover: {{domain: {EXAMPLES / 'rover.pddl'}}}\n"
    stdin = _write(tmp_path, families + "source: {kind: jsonl}\n")
    assert main(["run", "--config", stdin, "--check"]) == 0
    out = capsys.readouterr()
    assert "transitions are read from standard input" in out.err
    assert "configuration is valid\n" in out.out
    missing = _write(tmp_path, families + "source: {kind: jsonl, path: nowhere.jsonl}\n")
    assert main(["run", "--config", missing, "--check"]) == 0
    out = capsys.readouterr()
    assert f"warning: source.path '{tmp_path / 'nowhere.jsonl'}' is not a file" in out.err
    assert "valid with warnings" in out.out
    there = tmp_path / "in.jsonl"
    there.write_text("")
    present = _write(tmp_path, families + f"source: {{kind: jsonl, path: '{there}'}}\n")
    assert main(["run", "--config", present, "--check"]) == 0
    out = capsys.readouterr()
    assert "warning" not in out.err and "note" not in out.err


def test_check_connect_tries_the_store_and_kafka(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    families = (f"families:\n  rover: {{domain: {EXAMPLES / 'rover.pddl'}}}\n"
                f"store: {{url: 'sqlite:///{tmp_path / 'm.db'}'}}\n")
    ok = _write(tmp_path, families + "source: {kind: jsonl, path: x.jsonl}\n"
                          "output: {kind: log}\nlog: {level: error}\n")
    assert main(["run", "--config", ok, "--check", "--connect"]) == 0
    assert "store: sqlite:///" in capsys.readouterr().out
    bad = _write(tmp_path, families + f"kafka: {{bootstrap_servers: '{_closed_port()}', "
                                      f"connect_timeout_s: 2}}\nlog: {{level: error}}\n")
    assert main(["run", "--config", bad, "--check", "--connect"]) == 1
    assert "not reachable within 2 s" in capsys.readouterr().err
    assert main(["run", "--config", ok, "--connect"]) == 2  # --connect goes with --check


def test_secret_files_are_read_by_check(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, f"families:\n  rover: {{domain: {EXAMPLES / 'rover.pddl'}}}\n"
                            f"agents: {{bearer_token_file: {tmp_path / 'missing'}}}\n")
    assert main(["run", "--config", path, "--check"]) == 2
    assert "agents.bearer_token_file: cannot read" in capsys.readouterr().err


def test_an_unreachable_postgresql_store_is_retried_then_reported(tmp_path: Path) -> None:
    url = f"postgresql://cw:hunter2@{_closed_port()}/cw"
    cfg = config(tmp_path, store={"url": url, "connect_timeout_s": 2})
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    try:
        with pytest.raises(DependencyError) as e:
            build_service(cfg)
    finally:
        reset_logging()
    assert "not reachable within 2 s" in str(e.value) and "Connection refused" in str(e.value)
    assert "hunter2" not in str(e.value) + stream.getvalue()
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert events.count("opening the store") >= 2 and "store not reachable yet" in events


def test_a_store_that_cannot_be_created_fails_at_once(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    cfg = config(tmp_path, store={"url": f"sqlite:///{tmp_path / 'file' / 'm.db'}"})
    with pytest.raises(DependencyError, match="store at sqlite:///"):
        build_service(cfg)
