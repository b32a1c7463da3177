"""Agent queries as configured in ``agents``: headers, a bearer token from a file, and
HTTPS with the agent's CA and a client certificate (mutual TLS), against the reference
agent server behind TLS that requires a client certificate."""

from __future__ import annotations

import shutil
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.adapters.sim.agent_server import AgentServer, _Handler
from capwatch.assess.agent import AgentUnavailable
from capwatch.daemon.config import load_config
from capwatch.daemon.service import HttpDirectory
from capwatch.model.pddl_reader import read_problem
from tests.daemon.helpers import EXAMPLES, example
from tests.support.kafka_broker import TlsFiles, make_certificates

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl missing")
SEEN: list[dict[str, str]] = []


class _Recording(_Handler):
    """The reference handler, keeping the headers each query arrived with."""

    def do_POST(self) -> None:
        SEEN.append(dict(self.headers.items()))
        super().do_POST()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    _, files = make_certificates(tmp_path_factory.mktemp("tls"))
    return files


@pytest.fixture
def agent_server(tls: TlsFiles) -> Iterator[AgentServer]:
    server = AgentServer(SimulatedAgent(example("rover.pddl"), seed=1))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tls.ca))
    ctx.verify_mode = ssl.CERT_REQUIRED
    d = tls.ca.parent
    ctx.load_cert_chain(str(d / "server.crt"), str(d / "server.key"))
    inner = server._server  # TLS and header recording: test-only reach into the server
    inner.socket = ctx.wrap_socket(inner.socket, server_side=True)
    inner.RequestHandlerClass = _Recording
    SEEN.clear()
    with server:
        yield server


def _directory(files: TlsFiles, tmp_path: Path, port: int, **agents: Any) -> HttpDirectory:
    (tmp_path / "token").write_text("agent-token\n")
    section = {"url_template": f"https://127.0.0.1:{port}",
               "headers": {"X-Fleet": "north"},
               "bearer_token_file": str(tmp_path / "token"),
               "tls": {"ca_file": str(files.ca), "cert_file": str(files.client_cert),
                       "key_file": str(files.client_key)}, "timeout_s": 5, **agents}
    a = load_config(text=yaml.safe_dump({"agents": section})).agents
    return HttpDirectory(a.url_template, a.urls, a.timeout_s, headers=a.request_headers(),
                         ssl_context=a.tls.context() if a.tls else None)


def _ask(directory: HttpDirectory) -> int:
    problem = read_problem(EXAMPLES / "rover-problem.pddl")
    client = directory.agent("rover-a", "rover-v1")
    (result,) = client.query(problem.init, [("navigate", "rover1", "waypoint1",
                                              "waypoint2")])
    return result.executed


def test_queries_carry_the_token_and_headers_over_mutual_tls(
        agent_server: AgentServer, tls: TlsFiles, tmp_path: Path) -> None:
    assert _ask(_directory(tls, tmp_path, agent_server.port)) in (0, 1)
    assert SEEN and SEEN[0]["Authorization"] == "Bearer agent-token"
    assert SEEN[0]["X-Fleet"] == "north"


def test_without_a_client_certificate_the_agent_refuses(
        agent_server: AgentServer, tls: TlsFiles, tmp_path: Path) -> None:
    directory = _directory(tls, tmp_path, agent_server.port,
                           tls={"ca_file": str(tls.ca)}, timeout_s=2)
    with pytest.raises(AgentUnavailable):
        _ask(directory)
    assert SEEN == []


def test_an_agent_certificate_from_an_unknown_ca_is_refused(
        agent_server: AgentServer, tls: TlsFiles, tmp_path: Path) -> None:
    directory = _directory(tls, tmp_path, agent_server.port,
                           tls={"ca_file": str(tls.ca.parent / "other-ca.crt"),
                                "cert_file": str(tls.client_cert),
                                "key_file": str(tls.client_key)}, timeout_s=2)
    with pytest.raises(AgentUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        _ask(directory)
