"""Bodies of the agent query protocol, version 1 (design.md §4, docs/agent-query-protocol.md).

capwatch asks a black-box agent a plan-outcome query over HTTP:
``POST {agent_url}/capwatch/v1/query`` with :class:`QueryRequest`, answered by
:class:`QueryResponse`. The version lives in the path: a change that an old peer would
misread gets ``/capwatch/v2``; optional additions stay in v1.

Requests forbid unknown fields (a misspelt ``"sample"`` must not silently mean one
sample); responses ignore them, so capwatch keeps working with agents that report more.
The OpenAPI document docs/openapi/agent-query.yaml is generated from these models by
:func:`openapi_document` (``capwatch agent openapi``) and a test keeps the two equal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic.json_schema import models_json_schema

from capwatch.assess.agent import AgentUnavailable, QueryNotAttempted, QueryResult, State
from capwatch.contracts.wire import AGENT_ID_PATTERN, MAX_AGENT_ID
from capwatch.contracts.wire_text import allowed
from capwatch.model.domain import GroundAction, GroundAtom

PROTOCOL_VERSION = 1
BASE_PATH = f"/capwatch/v{PROTOCOL_VERSION}"
QUERY_PATH = f"{BASE_PATH}/query"
DRIFT_PATH = f"{BASE_PATH}/drift"
EPISODE_PATH = f"{BASE_PATH}/episode"
HEALTH_PATH = "/healthz"

AGENT_ID_HEADER = "Capwatch-Agent-Id"
"""Request header naming the agent capwatch means to ask. Two agent ids that differ only
in case reach one host through a host-name URL template (DNS ignores case), so an agent
that knows its own id refuses a query meant for another (:func:`misdirected`) rather than
let its answers become the other agent's model."""


def misdirected(own_id: str | None, header: str | None) -> str | None:
    """Why a query whose :data:`AGENT_ID_HEADER` is ``header`` is not for the agent
    ``own_id``; None when it is (or either side does not say: older peers)."""
    if own_id is None or header is None or header == own_id:
        return None
    return (f"this is agent {own_id!r}, not {header!r} (agent ids are compared exactly; "
            f"ids that differ only in case need agents.urls, not a host-name template)")


# Limits a reference agent enforces; they bound the work one request can cause.
MAX_SAMPLES = 1000
MAX_PLAN_LENGTH = 10_000
MAX_STATE_ATOMS = 100_000
MAX_ARITY = 32
MAX_DOMAIN_CHARS = 1_000_000
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024


# Failures, as types: the daemon decides on the class (retry with backoff or not), never on
# the message text.


class InvalidQuery(ValueError):
    """A query the agent cannot even attempt: unknown action or predicate, wrong arity.

    Raised on the agent's side; its HTTP server answers it with a 400."""


class AgentRejectedQuery(AgentUnavailable):
    """The agent answered with a client error (4xx): asking again would not help."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"agent rejected the request ({status} {code}): {message}")
        self.status = status
        self.code = code
        self.reason = message


class AgentCannotAttempt(AgentRejectedQuery, QueryNotAttempted):
    """The agent's ``invalid_query``: a query it cannot attempt (:class:`InvalidQuery`)."""


class AgentProtocolError(AgentUnavailable):
    """The agent answered, but not in the protocol (wrong schema, wrong number of results)."""

Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256, pattern=r"^[^\s()\x00-\x1f]+$"),
    BeforeValidator(allowed),
]
"""A predicate, action or object name: no whitespace or parentheses, nothing wire_text
refuses (the wire's rule: an answer's atom is evidence shown to operators too)."""

Atom = Annotated[list[Name], Field(min_length=1, max_length=MAX_ARITY + 1)]
"""``["on", "a", "b"]`` (a ground atom) or ``["stack", "a", "b"]`` (a ground action)."""


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Response(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class QueryRequest(_Request):
    """A plan-outcome query ⟨s_I, π⟩ (papers/daaisy.md Def. 6)."""

    state: list[Atom] = Field(
        max_length=MAX_STATE_ATOMS,
        description="s_I: every ground atom true in the initial state (closed world).",
    )
    plan: list[Atom] = Field(
        max_length=MAX_PLAN_LENGTH,
        description="π: ground actions to execute in order, each [action, object, ...].",
    )
    samples: int = Field(
        default=1, ge=1, le=MAX_SAMPLES, strict=True,
        description="How many independent executions to report (stochastic agents).",
    )

    def to_core(self) -> tuple[State, list[GroundAction]]:
        return frozenset(tuple(a) for a in self.state), [tuple(a) for a in self.plan]

    @classmethod
    def of(cls, state: Iterable[GroundAtom], plan: Sequence[GroundAction],
           samples: int = 1) -> QueryRequest:
        # Sorted so that the same query is always the same bytes (logs, caches, diffs).
        return cls(state=[list(a) for a in sorted(state)], plan=[list(a) for a in plan],
                   samples=samples)


class QueryResultBody(_Response):
    """⟨n_F, s_F⟩ of one sample."""

    executed: int = Field(
        ge=0, strict=True,
        description="n_F: length of the longest executable prefix of the plan.",
    )
    state: list[Atom] = Field(description="s_F: every ground atom true after that prefix.")


class QueryResponse(_Response):
    results: list[QueryResultBody] = Field(description="One result per requested sample.")

    def to_core(self) -> list[QueryResult]:
        return [QueryResult(r.executed, frozenset(tuple(a) for a in r.state))
                for r in self.results]

    @classmethod
    def of(cls, results: Iterable[QueryResult]) -> QueryResponse:
        return cls(results=[QueryResultBody(executed=r.executed,
                                            state=[list(a) for a in sorted(r.state)])
                            for r in results])


class DriftRequest(_Request):
    """Switch the reference agent to another model (drift injection for demos and tests)."""

    domain: str = Field(
        min_length=1, max_length=MAX_DOMAIN_CHARS,
        description="The new model as PDDL or PPDDL domain text.",
    )
    strip_action_literals: bool = Field(
        default=True,
        description="Drop pddlgym-style action literals such as (move-car ?from ?to) "
                    "from preconditions, as the server does for its start-up domain.",
    )


class DriftResponse(_Response):
    domain: str = Field(description="Name of the domain now simulated.")
    model_version: int = Field(ge=1, description="1 at start-up, +1 on every switch.")
    actions: list[str] = Field(description="Names of the actions of the new model.")


class EpisodeRequest(_Request):
    """Reference agent only: act on the served problem and return the trace."""

    mode: Literal["optimal", "random"] = Field(
        default="optimal",
        description="optimal: execute an optimal plan to the problem's goal (replanning after "
                    "stochastic steps); random: a random walk from the initial state.",
    )
    steps: int = Field(default=50, ge=1, le=MAX_PLAN_LENGTH, strict=True,
                       description="Most steps to take.")
    p_inapplicable: float = Field(
        default=0.0, ge=0.0, le=1.0,
        description="random mode: share of steps that attempt an inapplicable action.",
    )


class EpisodeResponse(_Response):
    """A trace: ``states[i]`` --``actions[i]``--> ``states[i+1]``."""

    states: list[list[Atom]]
    actions: list[Atom]
    executed: list[bool] = Field(description="Whether each action's precondition held.")
    optimal: bool = Field(description="True only for an optimal plan of a deterministic model.")
    goal_reached: bool


class HealthResponse(_Response):
    status: Literal["ok"] = "ok"
    protocol: int = Field(default=PROTOCOL_VERSION, description="Agent query protocol version.")
    domain: str | None = Field(default=None, description="Simulated domain, if known.")
    model_version: int | None = None
    queries: int | None = Field(default=None, description="Queries answered so far.")
    samples: int | None = Field(default=None, description="Samples answered so far.")


class ErrorDetail(_Response):
    code: str = Field(description="Stable machine-readable reason, e.g. invalid_request.")
    message: str = Field(description="What was wrong, for a human.")
    details: list[dict[str, Any]] | None = Field(
        default=None, description="Per-field validation errors: loc, msg, type.",
    )


class ErrorResponse(_Response):
    error: ErrorDetail


SCHEMA_MODELS: tuple[type[BaseModel], ...] = (
    QueryRequest, QueryResultBody, QueryResponse, DriftRequest, DriftResponse,
    EpisodeRequest, EpisodeResponse, HealthResponse, ErrorDetail, ErrorResponse,
)


def component_schemas() -> dict[str, Any]:
    """JSON Schemas of every body, referencing one another as OpenAPI components."""
    _, top = models_json_schema(
        [(m, "validation") for m in SCHEMA_MODELS],
        ref_template="#/components/schemas/{model}",
    )
    schemas: dict[str, Any] = top["$defs"]
    return dict(sorted(schemas.items()))


def _json(ref: str) -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": _json("ErrorResponse")}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the protocol (docs/openapi/agent-query.yaml)."""
    client_errors = {
        "400": _error("Malformed JSON, a body that breaks the schema, or a query the agent "
                      "cannot attempt (unknown action or predicate, wrong arity)."),
        "411": _error("Content-Length missing."),
        "413": _error("Body larger than the agent accepts."),
        "415": _error("Content-Type is not application/json."),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "capwatch agent query protocol",
            "version": f"{PROTOCOL_VERSION}.0.0",
            "summary": "How capwatch asks a black-box agent plan-outcome queries.",
            "description": (
                "An agent that implements POST /capwatch/v1/query lets capwatch find out "
                "exactly how its capabilities changed (differential assessment). "
                "See docs/agent-query-protocol.md."
            ),
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "paths": {
            QUERY_PATH: {
                "post": {
                    "operationId": "query",
                    "summary": "Execute a plan from a state; report how far it got and where.",
                    "description": (
                        "Put the agent in `state`, execute `plan` step by step and stop at the "
                        "first step whose precondition fails. Report the number of steps "
                        "executed and the state after them, once per sample."
                    ),
                    "parameters": [{
                        "name": AGENT_ID_HEADER, "in": "header", "required": False,
                        "schema": {"type": "string"},
                        "description": (
                            "The agent capwatch means to ask. An agent that knows its "
                            "own id answers 421 wrong_agent when it differs."),
                    }],
                    "requestBody": {"required": True, "content": _json("QueryRequest")},
                    "responses": {
                        "200": {"description": "One result per sample.",
                                "content": _json("QueryResponse")},
                        **client_errors,
                        "421": _error("The query names another agent (wrong_agent)."),
                        "500": _error("The agent failed while executing the plan."),
                    },
                }
            },
            DRIFT_PATH: {
                "post": {
                    "operationId": "drift",
                    "summary": "Reference agent only: switch to another model (inject drift).",
                    "requestBody": {"required": True, "content": _json("DriftRequest")},
                    "responses": {
                        "200": {"description": "The model now simulated.",
                                "content": _json("DriftResponse")},
                        **client_errors,
                        "404": _error("Drift injection is disabled on this agent."),
                    },
                }
            },
            EPISODE_PATH: {
                "post": {
                    "operationId": "episode",
                    "summary": "Reference agent only: act on the served problem, return the trace.",
                    "requestBody": {"required": True, "content": _json("EpisodeRequest")},
                    "responses": {
                        "200": {"description": "The trace of one episode.",
                                "content": _json("EpisodeResponse")},
                        **client_errors,
                        "404": _error("The agent serves no problem (start it with --problem)."),
                    },
                }
            },
            HEALTH_PATH: {
                "get": {
                    "operationId": "health",
                    "summary": "Liveness, protocol version and counters.",
                    "responses": {"200": {"description": "The agent is serving.",
                                          "content": _json("HealthResponse")}},
                }
            },
        },
        "components": {"schemas": component_schemas()},
    }


class AgentAddressError(ValueError):
    """An agent id that cannot be placed in the configured URL template."""


def agent_url(template: str, agent_id: str, family: str) -> str:
    """The agent's base URL from the configured template, e.g. ``http://{agent_id}:8080``.

    The id must match the wire format's agent-id pattern, and the URL it gives must have
    the scheme, port, path, query and fragment the template gives with any other valid id:
    an agent id can name *which* agent, never move the query to another scheme, port or
    path. (The host is the template's to decide: ``http://{agent_id}:8080`` makes the id
    the host name, by configuration.)
    """
    if len(agent_id) > MAX_AGENT_ID or not re.fullmatch(AGENT_ID_PATTERN, agent_id):
        raise AgentAddressError(f"agent id {agent_id!r} does not match the agent-id pattern")
    url = template.format(agent_id=agent_id, family=family)
    marker = "capwatch-agent-id-marker"  # a valid id that no template contains
    probe = template.format(agent_id=marker, family=family)
    got, want = urlsplit(url), urlsplit(probe)
    try:
        same = (got.scheme, got.port, got.path, got.query, got.fragment, got.username) == (
            want.scheme, want.port, want.path.replace(marker, agent_id), want.query,
            want.fragment, want.username)
    except ValueError:  # a port that is not a number
        same = False
    if not same or not got.hostname:
        raise AgentAddressError(f"agent id {agent_id!r} changes the agent URL template "
                                f"{template!r} beyond naming the agent")
    return url
