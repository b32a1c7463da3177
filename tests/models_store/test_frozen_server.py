"""A frozen PostgreSQL server (SIGSTOP, a stalled VM) must not hold the daemon without end.

Its sockets stay open and its kernel keeps acknowledging, so nothing at the TCP level ends
a call waiting on it: every store call used to block until the server was resumed, and
/readyz with it. Each round trip now ends within the store's statement timeout as an
outage (nothing committed, retried) and /readyz says the store is unreachable.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.daemon.infra import INFRASTRUCTURE_ERRORS, component_of
from capwatch.daemon.service import build_service
from capwatch.models_store.postgres import PostgresModelStore, ServerNotAnswering
from tests.daemon.helpers import config, good_sample
from tests.support.postgres_server import PostgresServer

pytestmark = pytest.mark.integration

JOIN_S = 60.0
"""Far beyond the 1 s deadline these tests set: only a call that never ends reaches it."""


def _server(request: pytest.FixtureRequest) -> PostgresServer:
    server: PostgresServer = request.getfixturevalue("postgres_server")
    if server.external:
        pytest.skip("freezing needs a server started by the tests")
    return server


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_store_call_to_a_frozen_server_ends_as_an_outage(
        store_url: str, request: pytest.FixtureRequest) -> None:
    server = _server(request)
    store = PostgresModelStore(store_url, statement_timeout_s=1)
    failed: list[BaseException] = []

    def call() -> None:
        try:
            store.lineages()
        except BaseException as e:
            failed.append(e)

    try:
        with server.frozen():
            caller = threading.Thread(target=call, daemon=True)
            caller.start()
            caller.join(JOIN_S)
            assert not caller.is_alive(), "a store call waited on a frozen server"
            assert len(failed) == 1 and isinstance(failed[0], ServerNotAnswering)
            assert isinstance(failed[0], INFRASTRUCTURE_ERRORS)
            assert component_of(failed[0]) == "models store"
            # Whether the probe finds the connection free (and fails to reconnect) or
            # held by another caller (and reports the last failure), it names a cause.
            other = threading.Thread(target=call, daemon=True)
            other.start()
            assert store.unreachable(0.1) is not None
            other.join(JOIN_S)
            assert not other.is_alive()
        # Resumed, the store reconnects by itself.
        assert store.unreachable(1.5) is None
        assert store.lineages() == []
    finally:
        store.close()


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_the_daemon_rides_out_a_frozen_store_and_readyz_names_it(
        store_url: str, request: pytest.FixtureRequest, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server(request)
    lines = [good_sample(f"rover-{c}", step=i) for i, c in enumerate("abcd")]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    cfg = config(tmp_path, source={"kind": "jsonl", "path": str(path)},
                 store={"url": store_url, "statement_timeout_s": 1},
                 http={"enabled": True, "host": "127.0.0.1", "port": 0})
    service = build_service(cfg, publisher=MemoryPublisher())
    pipeline = service.pipeline
    store = pipeline.registry.store
    real = store.latest
    freeze = server.frozen()
    seen: dict[str, Any] = {"frozen": False}

    def thaw() -> None:
        if seen["frozen"]:
            seen["frozen"] = False
            freeze.__exit__(None, None, None)

    def readyz() -> tuple[int, Any]:
        assert service.api is not None
        try:
            with urllib.request.urlopen(f"{service.api.url}/readyz", timeout=JOIN_S) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def frozen_once(family: str, agent_id: str | None):  # type: ignore[no-untyped-def]
        if agent_id == "rover-b" and "calls" not in seen:
            seen["calls"] = 1
            freeze.__enter__()  # frozen from inside the main loop's store call
            seen["frozen"] = True
            return real(family, agent_id)
        if agent_id == "rover-b" and seen["calls"] == 1:
            # The retry: the first call ended while the server stayed frozen.
            seen["calls"] = 2
            seen["problems"] = pipeline.problems()
            seen["readyz"] = readyz()
            thaw()
        return real(family, agent_id)

    monkeypatch.setattr(store, "latest", frozen_once)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(
        service.run(exit_when_idle=True, install_signals=False)), daemon=True)
    try:
        runner.start()
        runner.join(JOIN_S)
    finally:
        thaw()
    assert not runner.is_alive()
    assert result == [0]
    assert seen["calls"] == 2
    assert any(p.startswith("models store unavailable: ServerNotAnswering")
               for p in seen["problems"]), seen["problems"]
    status, body = seen["readyz"]
    assert status == 503
    # The main loop's outage, and the probe's once it is late or answers (it runs on a
    # thread of its own: /readyz does not wait for it).
    assert any(p.startswith(("store unreachable: ", "models store unavailable: "))
               for p in body["problems"]), body
    # Nothing lost: every record handled and committed once the store answered again.
    assert pipeline.processed == len(lines)
    assert pipeline.checkpoints.commit_offsets() == {0: len(lines)}


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_readyz_names_a_frozen_server_while_a_call_waits_on_it_not_at_its_deadline(
        store_url: str, request: pytest.FixtureRequest) -> None:
    """A call holding the connection waits for the server up to its deadline (here 60 s):
    /readyz's probe said the last transaction's outcome meanwhile (ready), so a frozen
    server was named only when that call's deadline ran out. A probe on a connection of
    its own now tells a frozen server from a slow call."""
    import time

    server = _server(request)
    store = PostgresModelStore(store_url, statement_timeout_s=JOIN_S)
    caller: threading.Thread | None = None
    try:
        assert store.unreachable(1.5) is None
        with server.frozen():
            caller = threading.Thread(target=lambda: store.lineages(), daemon=True)
            caller.start()
            deadline = time.monotonic() + 20
            while (why := store.unreachable(0.5)) is None:
                assert time.monotonic() < deadline, "a frozen server was not named"
            assert why.startswith("a call has waited "), why
            assert "probe of its own got none" in why
            assert caller.is_alive()  # named long before the call's own deadline
        caller.join(JOIN_S)
        assert not caller.is_alive()
        assert store.unreachable(1.5) is None
    finally:
        store.close()


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_a_slow_call_on_an_answering_server_is_not_called_unreachable(
        store_url: str, request: pytest.FixtureRequest) -> None:
    _server(request)
    store = PostgresModelStore(store_url, statement_timeout_s=JOIN_S)
    started = threading.Event()

    def slow() -> None:
        with store._tx(write=False) as tx:
            started.set()
            tx.rows("SELECT pg_sleep(4)")

    caller = threading.Thread(target=slow, daemon=True)
    try:
        caller.start()
        assert started.wait(JOIN_S)
        answers = [store.unreachable(0.5) for _ in range(3)]  # 1.5 s and more into it
        assert caller.is_alive()
        assert answers == [None, None, None], answers
        caller.join(JOIN_S)
    finally:
        store.close()


@pytest.mark.parametrize("store_url", ["postgresql"], indirect=True)
def test_readyz_answers_at_once_at_the_start_of_an_outage(
        store_url: str, request: pytest.FixtureRequest) -> None:
    """/readyz waited for the store's probe (the lock, then a probe of its own: 3-5 s at
    the start of an outage, the readiness probe's own timeout). It now answers from the
    probe's thread's last answer while a probe waits on the frozen server, and names the
    store once that probe is late or has answered."""
    from prometheus_client import CollectorRegistry

    from capwatch.daemon.http import ApiServer, RecentAlerts

    server = _server(request)
    store = PostgresModelStore(store_url, statement_timeout_s=JOIN_S)
    api = ApiServer(store, CollectorRegistry(), ready=lambda: True,
                    families_of=lambda a: None, alerts=RecentAlerts()).start()

    def readyz() -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(f"{api.url}/readyz", timeout=JOIN_S) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    caller: threading.Thread | None = None
    try:
        assert readyz() == (200, {"ready": True, "problems": []})
        with server.frozen():
            # A call of the main loop holds the connection, waiting on the server.
            caller = threading.Thread(target=lambda: store.lineages(), daemon=True)
            caller.start()
            while store._conn.waiting_since is None:
                assert caller.is_alive()
                threading.Event().wait(0.01)
            probe = api._store_probe()
            probe.fresh_s = 0.0  # each /readyz starts a probe when none is in flight
            while probe.probing:  # the one from before the freeze
                threading.Event().wait(0.01)
            status, body = readyz()
            # Answered while the probe it started waits on the frozen server (which
            # cannot answer it before libpq's 2 s connect timeout, past the lock's 1.5 s).
            assert probe.probing, (status, body)
            answers = [(status, body)]
            while not (status == 503 and any(p.startswith("store unreachable: ")
                                             for p in body["problems"])):
                assert len(answers) < 200, answers[-3:]
                threading.Event().wait(0.1)
                status, body = readyz()
                answers.append((status, body))
        caller.join(JOIN_S)
        assert not caller.is_alive()
        while readyz()[0] != 200:  # the store answers again
            threading.Event().wait(0.1)
    finally:
        api.close()
        store.close()
