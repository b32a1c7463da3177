"""The SDK's query endpoint: protocol semantics, authentication, limits, bounded workers."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from capwatch.adapters.io.agent_client import HttpAgentClient
from capwatch.client import CallableExecutor, QueryServer, Vocabulary
from capwatch.contracts.agent_protocol import AgentCannotAttempt, AgentRejectedQuery
from capwatch.model.domain import GroundAction, GroundAtom
from capwatch.model.pddl_reader import parse_domain
from tests.support.slow_client import trickling

CORRIDOR = """
(define (domain corridor)
  (:requirements :strips)
  (:predicates (at ?c) (charge ?i) (next ?a ?b))
  (:action right :parameters (?from ?to ?i)
    :precondition (and (at ?from) (next ?from ?to) (charge ?i))
    :effect (and (not (at ?from)) (at ?to) (not (charge ?i)))))
"""
VOCAB = Vocabulary.of(parse_domain(CORRIDOR, "corridor.pddl"))
TOKEN = "t0ken"


class Corridor:
    """A developer's simulator: cells 0..3, one charge used per step."""

    def __init__(self) -> None:
        self.state: set[GroundAtom] = set()
        self.resets = 0
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def set_state(self, atoms: frozenset[GroundAtom]) -> None:
        self.resets += 1
        self.started.set()
        assert self.release.wait(10)
        self.state = set(atoms)

    def execute(self, action: GroundAction) -> bool:
        _, a, b, i = action
        if {("at", a), ("next", a, b), ("charge", i)} <= self.state:
            self.state -= {("at", a), ("charge", i)}
            self.state.add(("at", b))
            return True
        return False

    def observe(self) -> frozenset[GroundAtom]:
        return frozenset(self.state)


START = frozenset({("at", "c0"), ("next", "c0", "c1"), ("next", "c1", "c2"),
                   ("next", "c2", "c3"), ("charge", "b1"), ("charge", "b2")})
PLAN = [("right", "c0", "c1", "b1"), ("right", "c1", "c2", "b2"), ("right", "c2", "c3", "b1")]


@pytest.fixture
def corridor() -> Corridor:
    return Corridor()


@pytest.fixture
def server(corridor: Corridor) -> Iterator[QueryServer]:
    with QueryServer(corridor, token=TOKEN, vocabulary=VOCAB, workers=1,
                     max_body_bytes=4096) as s:
        yield s


def _client(server: QueryServer, token: str = TOKEN) -> HttpAgentClient:
    return HttpAgentClient(server.url, retries=0, headers={"Authorization": f"Bearer {token}"})


def _post(server: QueryServer, body: bytes, headers: dict[str, str]
          ) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("POST", "/capwatch/v1/query", body=body, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def test_answers_with_the_longest_executable_prefix_per_sample(
        server: QueryServer, corridor: Corridor) -> None:
    results = _client(server).query(START, PLAN, samples=3)
    assert [r.executed for r in results] == [2, 2, 2]  # the third step reuses a spent charge
    assert results[0].state == START - {("at", "c0"), ("charge", "b1"), ("charge", "b2")} | {
        ("at", "c2")}
    assert corridor.resets == 3  # every sample starts from the query's state
    assert (server.queries, server.samples) == (1, 3)


def test_the_token_is_required(server: QueryServer) -> None:
    with pytest.raises(AgentRejectedQuery) as info:
        _client(server, token="wrong").query(START, PLAN)
    assert (info.value.status, info.value.code) == (401, "unauthorized")
    assert not isinstance(info.value, AgentCannotAttempt)  # not the query's own fault
    status, body = _post(server, b'{"state": [], "plan": []}',
                         {"Content-Type": "application/json"})
    assert status == 401 and body["error"]["code"] == "unauthorized"
    assert server.queries == 0


def test_vocabulary_outside_the_domain_is_refused_before_the_executor_runs(
        server: QueryServer, corridor: Corridor) -> None:
    with pytest.raises(AgentCannotAttempt, match="plan step 0: unknown action 'jump'"):
        _client(server).query(START, [("jump", "c0")])  # the engine's QueryNotAttempted
    with pytest.raises(AgentRejectedQuery, match=r"predicate 'at' takes 1 argument\(s\)"):
        _client(server).query(frozenset({("at", "c0", "c1")}), PLAN)
    assert corridor.resets == 0


def test_bodies_over_the_limit_and_malformed_requests_are_refused(server: QueryServer) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    status, body = _post(server, b"x" * 5000, auth)
    assert status == 413 and body["error"]["code"] == "body_too_large"
    status, body = _post(server, b"{not json", auth)
    assert status == 400 and body["error"]["code"] == "invalid_json"
    status, body = _post(server, b'{"state": [], "plan": [], "sample": 5}', auth)
    assert status == 400 and body["error"]["code"] == "invalid_request"
    status, body = _post(server, b"{}", {**auth, "Content-Type": "text/plain"})
    assert status == 415


def test_a_full_worker_pool_answers_503_at_once(corridor: Corridor) -> None:
    server = QueryServer(corridor, token=TOKEN, vocabulary=VOCAB, workers=1, backlog=0).start()
    corridor.release.clear()
    first: list[object] = []
    worker = threading.Thread(target=lambda: first.append(_client(server).query(START, PLAN)))
    worker.start()
    try:
        assert corridor.started.wait(10)  # the only worker is busy with the first query
        status, body = _post(server, b'{"state": [], "plan": []}',
                             {"Authorization": f"Bearer {TOKEN}"})
        assert status == 503 and body["error"]["code"] == "busy"
    finally:
        corridor.release.set()
        worker.join(10)
        server.close()
    assert len(first) == 1 and server.refused["busy"] == 1


def test_a_factory_gives_each_worker_its_own_executor() -> None:
    made: list[Corridor] = []

    def factory() -> Corridor:
        made.append(Corridor())
        return made[-1]

    with QueryServer(factory, token=TOKEN, vocabulary=VOCAB, workers=2) as server:
        for _ in range(4):
            [r] = _client(server).query(START, PLAN[:1])
            assert r.executed == 1
    assert 1 <= len(made) <= 2


def test_plain_functions_make_an_executor_and_health_reports_counts() -> None:
    state: set[GroundAtom] = set()

    def reset(atoms: Iterable[GroundAtom]) -> None:
        state.clear()
        state.update(atoms)

    executor = CallableExecutor(reset,
                                lambda action: False, lambda: frozenset(state))
    with QueryServer(executor, token=None, vocabulary=VOCAB) as server:
        [r] = HttpAgentClient(server.url, retries=0).query(START, PLAN)
        assert (r.executed, r.state) == (0, START)
        assert HttpAgentClient(server.url).health().queries == 1


def test_a_client_trickling_its_request_is_cut_at_the_deadline(corridor: Corridor) -> None:
    """A byte every 0.1 s never lets a 0.5 s read time out: before the SDK's server took
    the deadlines of the daemon's and the reference agent's (contracts/bounded_http), one
    such client held its only worker for as long as it went on, and every query was
    answered 503."""
    with QueryServer(corridor, token=TOKEN, vocabulary=VOCAB, workers=1, backlog=0,
                     request_timeout_s=0.5) as server, trickling(
            server.port, b"POST /capwatch/v1/query HTTP/1.1\r\nHost: x\r\nX-Slow: ") as stop:
        statuses = []
        for _ in range(100):  # 20 s at most; the client trickles on unless cut off
            statuses.append(_post(server, b'{"state": [], "plan": []}',
                                  {"Authorization": f"Bearer {TOKEN}"})[0])
            if statuses[-1] == 200:
                break
            stop.wait(0.2)
        assert statuses[-1] == 200 and statuses[0] == 503, statuses[-3:]


def test_a_query_meant_for_another_agent_is_refused(corridor: Corridor) -> None:
    """Agent ids that differ only in case ("Rover-1", "rover-1") are two agents, but a
    host-name URL template sends both to one host (DNS ignores case): the agent that
    knows its id refuses the other's queries, so its answers never become the other's
    model."""
    from capwatch.daemon.service import HttpDirectory

    with QueryServer(corridor, token=TOKEN, vocabulary=VOCAB, agent_id="rover-1") as s:
        # Both ids reach this one server, as a host-name template would send them.
        directory = HttpDirectory("http://{agent_id}:8080", {"rover-1": s.url,
                                                            "Rover-1": s.url}, 5.0,
                                  headers={"Authorization": f"Bearer {TOKEN}"})
        assert directory.agent("rover-1", "f").query(START, PLAN)[0].executed == 2
        with pytest.raises(AgentRejectedQuery) as info:
            directory.agent("Rover-1", "f").query(START, PLAN)
        assert (info.value.status, info.value.code) == (421, "wrong_agent")
        assert "'rover-1', not 'Rover-1'" in str(info.value)
        # A client that does not say whom it means (an older capwatch) is answered.
        assert _client(s).query(START, PLAN)[0].executed == 2
        assert s.queries == 2 and corridor.resets == 2
