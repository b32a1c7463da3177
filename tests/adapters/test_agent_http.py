"""The HTTP agent server and client, over real loopback sockets."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from capwatch.adapters.io.agent_client import HttpAgentClient
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.adapters.sim.agent_server import AgentServer
from capwatch.assess.agent import AgentUnavailable
from capwatch.contracts.agent_protocol import (
    EPISODE_PATH,
    MAX_SAMPLES,
    QUERY_PATH,
    AgentProtocolError,
    AgentRejectedQuery,
)
from capwatch.model.domain import Domain, LiftedAtom, Outcome
from capwatch.model.pddl_reader import parse_domain, parse_plan, read_domain, read_problem
from capwatch.model.pddl_writer import write_domain
from tests.paths import DOMAINS
from tests.support._proc import free_port

GRIPPER = DOMAINS / "gripper"
COIN = """
(define (domain coin) (:requirements :probabilistic-effects)
  (:predicates (heads) (tails) (ready))
  (:action toss :parameters () :precondition (and (ready))
    :effect (probabilistic 0.5 (and (heads)) 0.5 (and (tails)))))
"""


@pytest.fixture
def gripper_domain() -> Domain:
    return read_domain(GRIPPER / "domain.pddl")


@pytest.fixture
def server(gripper_domain: Domain) -> Iterator[AgentServer]:
    with AgentServer(SimulatedAgent(gripper_domain, seed=0), max_body_bytes=64 * 1024,
                     poll_interval=0.02) as s:
        yield s


def no_sleep(delays: list[float]) -> Callable[[float], None]:
    return delays.append


def raw(server: AgentServer, method: str, path: str, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any], dict[str, str]]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        conn.request(method, path, body=body,
                     headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), dict(resp.getheaders())
    finally:
        conn.close()


# ------------------------------------------------------------------ round trips


def test_client_gets_the_same_answer_as_the_in_process_agent(
        server: AgentServer, gripper_domain: Domain) -> None:
    init = read_problem(GRIPPER / "problem.pddl").init
    plan = parse_plan((GRIPPER / "optimal-plan.txt").read_text())
    broken = [*plan[:4], ("drop", "ball1", "roomb", "left"), *plan[5:]]  # drops twice
    client = HttpAgentClient(server.url, timeout=5)
    local = SimulatedAgent(gripper_domain)
    for p in (plan, broken, []):
        [remote] = client.query(init, p)
        assert remote == local.query(init, p)[0]
    assert client.stats.queries == 3
    health = client.health()
    assert (health.domain, health.queries, health.model_version) == ("gripper-typed", 3, 1)


def test_samples_of_a_stochastic_agent() -> None:
    with AgentServer(SimulatedAgent(parse_domain(COIN), seed=1), poll_interval=0.02) as s:
        results = HttpAgentClient(s.url).query(frozenset({("ready",)}), [("toss",)], samples=40)
    assert len(results) == 40
    kinds = {("heads",) in r.state for r in results}
    assert kinds == {True, False}


def test_more_samples_than_one_request_may_hold_are_asked_in_several() -> None:
    """A re-estimate sized to the drift audit asks thousands of samples; the protocol's
    request holds at most MAX_SAMPLES (the request was refused before it was sent)."""
    with AgentServer(SimulatedAgent(parse_domain(COIN), seed=1), poll_interval=0.02) as s:
        client = HttpAgentClient(s.url)
        results = client.query(frozenset({("ready",)}), [("toss",)],
                               samples=2 * MAX_SAMPLES + 7)
        assert len(results) == 2 * MAX_SAMPLES + 7
        assert client.stats.queries == 3 and client.stats.samples == 2 * MAX_SAMPLES + 7
    heads = sum(("heads",) in r.state for r in results)
    assert 0.45 < heads / len(results) < 0.55


def test_drift_injection_over_http(server: AgentServer, gripper_domain: Domain) -> None:
    move = gripper_domain.action("move")
    o = move.outcomes[0]
    drifted = gripper_domain.replace_action(move.replace(
        outcomes=(Outcome(o.add, o.delete - {LiftedAtom("at_robby", ("?from",))}),)))
    client = HttpAgentClient(server.url)
    init = frozenset({("at_robby", "rooma")})
    plan = [("move", "rooma", "roomb")]
    assert client.query(init, plan)[0].state == {("at_robby", "roomb")}
    answer = client.drift(write_domain(drifted))
    assert answer.model_version == 2
    assert "move" in answer.actions
    assert client.query(init, plan)[0].state == {("at_robby", "rooma"), ("at_robby", "roomb")}


def test_bad_drift_is_refused_and_keeps_the_model(server: AgentServer) -> None:
    client = HttpAgentClient(server.url)
    with pytest.raises(AgentRejectedQuery) as info:
        client.drift("(define (domain broken) (:action a :parameters (")
    assert info.value.status == 400
    assert info.value.code == "invalid_domain"
    assert "<drift request>:1:" in info.value.reason
    assert client.health().model_version == 1


def test_drift_endpoint_can_be_disabled(gripper_domain: Domain) -> None:
    agent = SimulatedAgent(gripper_domain)
    with (AgentServer(agent, allow_drift=False, poll_interval=0.02) as s,
          pytest.raises(AgentRejectedQuery) as info):
        HttpAgentClient(s.url).drift(write_domain(gripper_domain))
    assert (info.value.status, info.value.code) == (404, "drift_disabled")


def test_url_prefix_is_kept(gripper_domain: Domain) -> None:
    seen: list[str] = []

    class Recorder(Stub):
        def do_POST(self) -> None:
            seen.append(self.path)
            self.read_body()
            self.reply(200, b'{"results": [{"executed": 0, "state": []}]}')

    with serve(Recorder) as url:
        HttpAgentClient(url + "/fleet/rover-17/").query(frozenset(), [])
    assert seen == ["/fleet/rover-17" + QUERY_PATH]


def test_episode_endpoint_returns_optimal_and_random_traces(gripper_domain: Domain) -> None:
    problem = read_problem(GRIPPER / "problem.pddl")
    reference = parse_plan((GRIPPER / "optimal-plan.txt").read_text())
    agent = SimulatedAgent(gripper_domain, seed=2, problem=problem)
    with AgentServer(agent, poll_interval=0.02) as s:
        status, optimal, _ = raw(s, "POST", EPISODE_PATH, b'{"mode": "optimal"}')
        assert status == 200
        assert optimal["optimal"] and optimal["goal_reached"]
        assert len(optimal["actions"]) == len(reference)
        assert len(optimal["states"]) == len(reference) + 1
        assert {tuple(a) for a in optimal["states"][0]} == problem.init
        status, walk, _ = raw(s, "POST", EPISODE_PATH,
                              b'{"mode": "random", "steps": 30, "p_inapplicable": 0.5}')
        assert status == 200
        assert len(walk["actions"]) == 30
        assert not all(walk["executed"])
        assert not walk["optimal"]


def test_episode_endpoint_needs_a_problem(server: AgentServer) -> None:
    status, answer, _ = raw(server, "POST", EPISODE_PATH, b"{}")
    assert (status, answer["error"]["code"]) == (404, "no_problem")


# ------------------------------------------------------------------ bad requests


@pytest.mark.parametrize(("body", "code", "reason"), [
    (b"{not json", "invalid_json", "not valid JSON"),
    (b'{"state": [], "plan": [], "sample": 2}', "invalid_request", "sample"),
    (b'{"state": [], "plan": [], "samples": "2"}', "invalid_request", "samples"),
    (b'{"state": [], "plan": [], "samples": 0}', "invalid_request", "greater than or equal"),
    (b'{"state": [], "plan": [], "samples": 100000}', "invalid_request", "less than or equal"),
    (b'{"state": [["at robby", "a"]], "plan": []}', "invalid_request", "state.0.0"),
    (b'{"state": [[]], "plan": []}', "invalid_request", "state.0"),
    (b'{"state": [[1, 2]], "plan": []}', "invalid_request", "state.0.0"),
    (b'{"plan": []}', "invalid_request", "state: Field required"),
    (b'[]', "invalid_request", "QueryRequest"),
    (b'{"state": [], "plan": [["fly", "rooma"]]}', "invalid_query", "unknown action 'fly'"),
    (b'{"state": [], "plan": [["move", "rooma"]]}', "invalid_query", "takes 2 arguments"),
    (b'{"state": [["frobnicated"]], "plan": []}', "invalid_query", "unknown predicate"),
])
def test_malformed_query_gets_400_with_reason(server: AgentServer, body: bytes, code: str,
                                             reason: str) -> None:
    status, answer, _ = raw(server, "POST", QUERY_PATH, body)
    assert status == 400
    assert answer["error"]["code"] == code
    assert reason in answer["error"]["message"]
    assert HttpAgentClient(server.url).health().queries == 0  # nothing half-done


def test_wrong_content_type_is_415(server: AgentServer) -> None:
    status, answer, _ = raw(server, "POST", QUERY_PATH, b"state=1",
                            {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 415
    assert "application/json" in answer["error"]["message"]


def test_oversized_body_is_413_without_reading_it(server: AgentServer) -> None:
    big = json.dumps({"state": [["free", "x" * 200]] * 2000, "plan": []}).encode()
    assert len(big) > 64 * 1024
    status, answer, headers = raw(server, "POST", QUERY_PATH, big)
    assert status == 413
    assert answer["error"]["code"] == "body_too_large"
    assert headers.get("Connection") == "close"


def test_missing_content_length_is_411(server: AgentServer) -> None:
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(f"POST {QUERY_PATH} HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(4096):  # the server closes: it cannot know where a body ends
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 411")
    assert b"Content-Length is required" in answer


def test_unknown_path_and_wrong_method(server: AgentServer) -> None:
    status, answer, _ = raw(server, "GET", "/capwatch/v2/query")
    assert (status, answer["error"]["code"]) == (404, "not_found")
    status, answer, headers = raw(server, "GET", QUERY_PATH)
    assert (status, headers["Allow"]) == (405, "POST")


def test_connection_is_reused_after_an_error(server: AgentServer) -> None:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=5)
    try:
        hdrs = {"Content-Type": "application/json"}
        conn.request("POST", QUERY_PATH, body=b"{oops", headers=hdrs)
        first = conn.getresponse()
        assert first.status == 400
        first.read()
        conn.request("POST", QUERY_PATH, body=b'{"state": [], "plan": []}', headers=hdrs)
        second = conn.getresponse()
        assert second.status == 200
        assert json.loads(second.read()) == {"results": [{"executed": 0, "state": []}]}
    finally:
        conn.close()


# ------------------------------------------------------------------ failures and retries


class Stub(BaseHTTPRequestHandler):
    """A scripted agent endpoint for the tests below; keeps the test output quiet."""

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers["Content-Length"]))

    def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class serve:
    """A throwaway HTTP server on a free loopback port running ``handler``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,),
                                       daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_server_down_raises_after_retries_with_growing_backoff() -> None:
    delays: list[float] = []
    client = HttpAgentClient(f"http://127.0.0.1:{free_port()}", timeout=1, retries=3,
                             backoff=0.1, sleep=no_sleep(delays))
    with pytest.raises(AgentUnavailable, match="after 4 attempts"):
        client.query(frozenset(), [])
    assert client.stats.attempts == 4
    assert client.stats.failures == 1
    assert len(delays) == 3
    assert delays[0] < delays[2]
    assert all(0.05 <= d <= 0.4 for d in delays)


def test_silent_server_times_out() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections (kernel backlog), never answers
    try:
        client = HttpAgentClient(f"http://127.0.0.1:{listener.getsockname()[1]}",
                                 timeout=0.2, retries=1, sleep=no_sleep([]))
        with pytest.raises(AgentUnavailable, match=r"no complete answer within 0\.2 s"):
            client.query(frozenset(), [])
        assert client.stats.attempts == 2
        # A timeout says how large the query was: an assessment's query can hold hundreds
        # of steps on thousands of fresh objects (341 steps, 54,178 atoms, 2 MB on rev13a's
        # mprime agent), which a live agent answering its other queries in time took longer
        # than the timeout over; "unavailable" alone sent the operator to the network.
        state = frozenset({("at", "a", "b"), ("free", "c")})
        with pytest.raises(AgentUnavailable) as e:
            client.query(state, [("move", "a", "b", "c")])
        assert "no complete answer within 0.2 s (the query: 1 step, 2 atoms," in str(e.value)
    finally:
        listener.close()


def test_trickling_server_hits_the_whole_answer_deadline() -> None:
    class Trickle(Stub):
        def do_POST(self) -> None:
            self.read_body()
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(1000):  # one byte every 20 ms: each read is quick, the whole is not
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.02)

    with serve(Trickle) as url:
        client = HttpAgentClient(url, timeout=0.3, retries=0)
        with pytest.raises(AgentUnavailable, match="no complete answer"):
            client.query(frozenset(), [])


def test_an_answer_cut_short_of_its_content_length_is_retried() -> None:
    """The connection closed mid-body (a proxy or network cutting it) is retried as a
    reset is; before, the truncated JSON was called a protocol error and never retried."""
    calls = {"n": 0}
    body = json.dumps({"results": [{"executed": 0, "state": [["ready"]]}]}).encode()

    class Cut(Stub):
        def do_POST(self) -> None:
            self.read_body()
            calls["n"] += 1
            if calls["n"] > 1:
                self.reply(200, body)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    with serve(Cut) as url:
        client = HttpAgentClient(url, timeout=5, retries=1, backoff=0.01)
        assert client.query(frozenset({("ready",)}), [])[0].executed == 0
    assert calls["n"] == 2


def flaky(failures: int, status: int, results: list[dict[str, Any]],
          retry_after: str | None = "0") -> type[BaseHTTPRequestHandler]:
    calls = {"n": 0}

    class Flaky(Stub):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.read_body()
            calls["n"] += 1
            if calls["n"] <= failures:
                self.reply(status, b'{"error": {"code": "busy", "message": "warming up"}}',
                           {"Retry-After": retry_after} if retry_after is not None else None)
            else:
                self.reply(200, json.dumps({"results": results,
                                            "agent": "extra fields are fine"}).encode())

    return Flaky


def test_transient_503_is_retried_honouring_retry_after() -> None:
    delays: list[float] = []
    with serve(flaky(2, 503, [{"executed": 0, "state": [["ready"]]}])) as url:
        client = HttpAgentClient(url, retries=3, backoff=5, sleep=no_sleep(delays))
        [result] = client.query(frozenset({("ready",)}), [("toss",)])
    assert result.state == {("ready",)}
    assert client.stats.attempts == 3
    assert delays == [0.0, 0.0]


def test_persistent_5xx_ends_in_agent_unavailable_with_the_servers_reason() -> None:
    with serve(flaky(100, 500, [])) as url:
        client = HttpAgentClient(url, retries=2, backoff=0, sleep=no_sleep([]))
        with pytest.raises(AgentUnavailable, match="HTTP 500: warming up"):
            client.query(frozenset(), [])
    assert client.stats.attempts == 3


def test_client_errors_are_not_retried(server: AgentServer) -> None:
    client = HttpAgentClient(server.url, retries=3, sleep=no_sleep([]))
    with pytest.raises(AgentRejectedQuery, match="unknown action 'fly'") as info:
        client.query(frozenset(), [("fly",)])
    assert isinstance(info.value, AgentUnavailable)
    assert client.stats.attempts == 1


@pytest.mark.parametrize(("results", "message"), [
    ([], "returned 0 results for 1 samples"),
    ([{"executed": 5, "state": []}], "executing 5 steps of a 1-step plan"),
    ([{"executed": -1, "state": []}], "results.0.executed"),
    ([{"executed": 0, "state": "none"}], "results.0.state"),
    # Nothing executed but the state changed: read as a refusal it hid the change (a canary
    # found it consistent), read as an execution it contradicted the count.
    ([{"executed": 0, "state": [["tossed"]]}], "executing 0 steps but a state other than"),
    ([{"executed": 0, "state": [["ready"]]}, {"executed": 0, "state": [["ready"], ["x"]]}],
     "1 atoms made true, 0 made false"),
])
def test_answers_outside_the_protocol_are_refused_without_retry(
        results: list[dict[str, Any]], message: str) -> None:
    with serve(flaky(0, 200, results)) as url:
        client = HttpAgentClient(url, retries=3, sleep=no_sleep([]))
        with pytest.raises(AgentProtocolError, match=message):
            client.query(frozenset({("ready",)}) if len(results) == 2 else frozenset(),
                         [("toss",)], samples=max(1, len(results)))
    assert client.stats.attempts == 1


def test_oversized_answer_is_refused() -> None:
    big = [{"executed": 0, "state": [["p", "x" * 100]] * 1000}]
    with serve(flaky(0, 200, big)) as url:
        client = HttpAgentClient(url, max_response_bytes=10_000)
        with pytest.raises(AgentProtocolError, match="more than 10000 bytes"):
            client.query(frozenset(), [])


@pytest.mark.parametrize("url", ["ftp://x", "localhost:8080", "http://"])
def test_bad_url_is_refused_up_front(url: str) -> None:
    with pytest.raises(ValueError, match="agent URL"):
        HttpAgentClient(url)


def _answering(body: bytes) -> type[Stub]:
    class Fixed(Stub):
        def do_POST(self) -> None:
            self.read_body()
            self.reply(200, body, {"Content-Type": "application/json"})
    return Fixed


@pytest.mark.parametrize("body", [
    # which of the two is the agent's answer is the reader's guess: refused, not learnt from
    b'{"results": [{"executed": 0, "state": [], "executed": 1}]}',
    b'{"results": [{"executed": 1, "state": [["p"]], "st\\u0061te": []}]}',
    b'{"results": [{"executed": 1, "state": []}], "results": []}',
], ids=repr)
def test_an_answer_giving_a_key_twice_is_refused(body: bytes) -> None:
    with serve(_answering(body)) as url:
        client = HttpAgentClient(url, retries=2, sleep=no_sleep([]))
        with pytest.raises(AgentProtocolError, match="appears twice"):
            client.query(frozenset(), [("toss",)])
    assert client.stats.attempts == 1


def test_a_redirect_is_not_followed() -> None:
    """An agent cannot send capwatch's queries to another host by redirecting them."""
    asked: list[str] = []

    class Other(Stub):
        def do_POST(self) -> None:
            asked.append(self.path)
            self.read_body()
            self.reply(200, b'{"results": [{"executed": 1, "state": []}]}',
                       {"Content-Type": "application/json"})

    with serve(Other) as other:
        class Redirecting(Stub):
            def do_POST(self) -> None:
                self.read_body()
                self.reply(307, b"", {"Location": other + self.path})
        with serve(Redirecting) as url:
            client = HttpAgentClient(url, retries=1, sleep=no_sleep([]))
            with pytest.raises(AgentProtocolError, match="HTTP 307"):
                client.query(frozenset(), [("toss",)])
    assert asked == []


def test_the_reference_agent_refuses_a_query_meant_for_another_agent(
        gripper_domain: Domain) -> None:
    init = read_problem(GRIPPER / "problem.pddl").init
    with AgentServer(SimulatedAgent(gripper_domain), agent_id="robot-1") as s:
        assert HttpAgentClient(s.url, agent_id="robot-1").query(init, [])[0].executed == 0
        with pytest.raises(AgentRejectedQuery) as info:
            HttpAgentClient(s.url, agent_id="Robot-1", retries=0).query(init, [])
        assert (info.value.status, info.value.code) == (421, "wrong_agent")
        assert HttpAgentClient(s.url).health().queries == 1  # health asks no identity
