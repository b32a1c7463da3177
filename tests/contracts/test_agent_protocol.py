"""The protocol's pydantic bodies, the committed OpenAPI document, and their agreement."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

# No stubs for jsonschema in the dev extras (types-jsonschema is not one): its validator
# is Any here, as the override in pyproject.toml makes kafka and scipy.
import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from openapi_spec_validator import validate as validate_openapi
from pydantic import ValidationError

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.adapters.sim.agent_server import AgentServer
from capwatch.assess.agent import QueryResult
from capwatch.cli.agent_cmd import openapi_yaml
from capwatch.contracts.agent_protocol import (
    DRIFT_PATH,
    EPISODE_PATH,
    HEALTH_PATH,
    QUERY_PATH,
    QueryRequest,
    QueryResponse,
    openapi_document,
)
from capwatch.model.pddl_reader import read_domain, read_problem
from tests.adapters.test_agent_http import raw
from tests.paths import DOMAINS, REPO_ROOT

SPEC_PATH = REPO_ROOT / "docs" / "openapi" / "agent-query.yaml"


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(Path(SPEC_PATH).read_text(encoding="utf-8"))
    return loaded


def validator(spec: dict[str, Any], component: str) -> jsonschema.Draft202012Validator:
    # The whole document is the root so that component $refs resolve; the extra
    # top-level OpenAPI keys are unknown keywords to JSON Schema and ignored.
    return jsonschema.Draft202012Validator({**spec, "$ref": f"#/components/schemas/{component}"})


def test_committed_document_is_the_generated_one() -> None:
    assert Path(SPEC_PATH).read_text(encoding="utf-8") == openapi_yaml(), (
        "docs/openapi/agent-query.yaml is stale: run "
        "`capwatch agent openapi -o docs/openapi/agent-query.yaml`"
    )


def test_document_is_valid_openapi_3_1(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    validate_openapi(spec)
    assert set(spec["paths"]) == {QUERY_PATH, DRIFT_PATH, EPISODE_PATH, HEALTH_PATH}
    assert spec["components"]["schemas"] == openapi_document()["components"]["schemas"]


REQUESTS: list[tuple[Any, bool]] = [
    ({"state": [["at", "a"]], "plan": [["move", "a", "b"]], "samples": 3}, True),
    ({"state": [], "plan": []}, True),
    ({"state": [], "plan": [], "samples": 0}, False),
    ({"state": [], "plan": [], "samples": 1001}, False),
    ({"state": [], "plan": [], "samples": "2"}, False),
    ({"state": [], "plan": [], "samples": 2.5}, False),
    ({"state": [], "plan": [], "sample": 2}, False),
    ({"state": [["at robby"]], "plan": []}, False),
    ({"state": [["at", "(b)"]], "plan": []}, False),
    ({"state": [[]], "plan": []}, False),
    ({"state": [["p", *["o"] * 40]], "plan": []}, False),
    ({"plan": []}, False),
    ({"state": {}, "plan": []}, False),
]


@pytest.mark.parametrize(("body", "valid"), REQUESTS)
def test_pydantic_and_openapi_agree_on_requests(spec: dict[str, Any], body: Any,
                                               valid: bool) -> None:
    try:
        QueryRequest.model_validate(body)
        pydantic_ok = True
    except ValidationError:
        pydantic_ok = False
    openapi_ok = validator(spec, "QueryRequest").is_valid(body)
    assert pydantic_ok == valid
    assert openapi_ok == valid


@pytest.fixture(scope="module")
def server() -> Iterator[AgentServer]:
    domain = read_domain(DOMAINS / "gripper" / "domain.pddl")
    problem = read_problem(DOMAINS / "gripper" / "problem.pddl")
    with AgentServer(SimulatedAgent(domain, seed=0, problem=problem), poll_interval=0.02) as s:
        yield s


@pytest.mark.parametrize(("method", "path", "body", "status", "component"), [
    ("POST", QUERY_PATH, b'{"state": [["at_robby", "rooma"]], "plan": [["move", "rooma", "roomb"]],'
                         b' "samples": 2}', 200, "QueryResponse"),
    ("POST", QUERY_PATH, b'{"state": 1}', 400, "ErrorResponse"),
    ("POST", QUERY_PATH, b'{"state": [], "plan": [["fly"]]}', 400, "ErrorResponse"),
    ("GET", QUERY_PATH, None, 405, "ErrorResponse"),
    ("GET", HEALTH_PATH, None, 200, "HealthResponse"),
    ("POST", DRIFT_PATH, b'{"domain": "(define"}', 400, "ErrorResponse"),
    ("POST", EPISODE_PATH, b'{"mode": "random", "steps": 5}', 200, "EpisodeResponse"),
    ("POST", EPISODE_PATH, b'{"mode": "greedy"}', 400, "ErrorResponse"),
])
def test_real_answers_match_the_document(spec: dict[str, Any], server: AgentServer, method: str,
                                         path: str, body: bytes | None, status: int,
                                         component: str) -> None:
    got_status, answer, headers = raw(server, method, path, body)
    assert got_status == status
    assert headers["Content-Type"] == "application/json"
    documented = spec["paths"][path][method.lower()]["responses"] if status != 405 else None
    if documented is not None:
        assert str(status) in documented
    validator(spec, component).validate(answer)


def test_core_conversions_round_trip() -> None:
    state = frozenset({("on", "a", "b"), ("clear", "a")})
    plan = [("unstack", "a", "b"), ("put-down", "a")]
    request = QueryRequest.of(state, plan, samples=2)
    assert request.state == [["clear", "a"], ["on", "a", "b"]]  # sorted: stable bytes
    assert request.to_core() == (state, plan)
    results = [QueryResult(1, state), QueryResult(0, frozenset())]
    response = QueryResponse.model_validate_json(QueryResponse.of(results).model_dump_json())
    assert response.to_core() == results
