"""``capwatch agent serve|query|openapi``: the reference agent and query protocol from a shell."""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import yaml

from capwatch.adapters.io.agent_client import HttpAgentClient
from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.adapters.sim.agent_server import AgentServer
from capwatch.assess.agent import AgentUnavailable
from capwatch.cli._common import fail, load_domain, load_plan, load_problem, reading
from capwatch.console.terminal import echo
from capwatch.contracts.agent_protocol import (
    DEFAULT_MAX_BODY_BYTES,
    QueryRequest,
    QueryResponse,
    openapi_document,
)
from capwatch.model.domain import Domain, GroundAtom, Problem


def register(sub: Any) -> None:
    agent = sub.add_parser("agent", help="the reference agent and the agent query protocol")
    asub = agent.add_subparsers(dest="agent_command", required=True)

    serve = asub.add_parser(
        "serve", help="serve a simulated PDDL/PPDDL agent over HTTP",
        description="Answer plan-outcome queries (POST /capwatch/v1/query) by simulating "
                    "DOMAIN; POST /capwatch/v1/drift switches the model at run time.")
    serve.add_argument("--domain", required=True, help="PDDL or PPDDL domain the agent follows")
    serve.add_argument("--problem", help="problem file: checked against the domain; enables "
                                         "POST /capwatch/v1/episode (optimal or random traces)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1; 0.0.0.0 exposes the agent)")
    serve.add_argument("--port", type=int, default=8085, help="port (0 picks a free one)")
    serve.add_argument("--seed", type=int, help="seed of the outcome RNG (reproducible answers)")
    serve.add_argument("--agent-id", help="this agent's id: queries capwatch means for another "
                                          "agent (Capwatch-Agent-Id header) get 421")
    serve.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    serve.add_argument("--no-drift", action="store_true",
                       help="disable POST /capwatch/v1/drift")
    serve.add_argument("--keep-action-literals", action="store_true",
                       help="keep pddlgym-style action literals such as (move-car ?from ?to) "
                            "in preconditions (by default they are stripped: no real agent "
                            "reports them in its state)")
    serve.add_argument("--log-level", default="INFO",
                       choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    serve.set_defaults(handler=_serve)

    query = asub.add_parser("query", help="ask an agent one plan-outcome query")
    query.add_argument("--url", required=True, help="agent base URL, e.g. http://127.0.0.1:8085")
    source = query.add_mutually_exclusive_group(required=True)
    source.add_argument("--problem", help="start from this problem's initial state")
    source.add_argument("--state", help='JSON file with the start state: [["at", "a"], ...]')
    query.add_argument("--plan", required=True, help="plan file, one (action obj ...) per line")
    query.add_argument("--samples", type=int, default=1)
    query.add_argument("--timeout", type=float, default=10.0)
    query.add_argument("--retries", type=int, default=2)
    query.set_defaults(handler=_query)

    openapi = asub.add_parser("openapi", help="print the OpenAPI 3.1 document of the protocol")
    openapi.add_argument("--output", "-o", help="write to this file instead of stdout")
    openapi.set_defaults(handler=_openapi)


def _check_problem(domain: Domain, problem: Problem) -> None:
    predicates = domain.predicate_map
    for atom in sorted(problem.init | problem.goal_pos | problem.goal_neg):
        pred = predicates.get(atom[0])
        if pred is None or pred.arity != len(atom) - 1:
            raise fail(f"problem {problem.name}: atom ({' '.join(atom)}) does not match any "
                       f"predicate of domain {domain.name}")


def _noted(signum: int, frame: object) -> None:
    """The stop signals' Python-level handler: the wakeup socket already carries them."""


def _serve(args: argparse.Namespace) -> int:
    # The daemon's log set-up: with a plain basicConfig format the records' extra fields
    # (which model the drift switched to, each query's number and plan length) were dropped.
    from capwatch.daemon.logs import configure_logging
    configure_logging(args.log_level.lower(), "console")
    domain = load_domain(args.domain)
    if not args.keep_action_literals:
        domain = domain.without_action_literals()
    problem: Problem | None = None
    if args.problem:
        problem = load_problem(args.problem)
        _check_problem(domain, problem)
    agent = SimulatedAgent(domain, seed=args.seed, problem=problem)
    # A stop signal may land on any thread whose mask lets it in, and not every thread is
    # ours: numpy's OpenBLAS pool is started at import, before any mask could be set, so
    # blocking the signals and taking them with sigwait lost a SIGINT that landed there
    # (KeyboardInterrupt, status -2) or on a blocked thread (never stopped). Whichever
    # thread takes it, the C-level handler writes its number to the wakeup socket the main
    # thread reads; the Python-level handlers do nothing, so none takes a lock (one that set
    # an Event could deadlock on the Event's own lock held by the interrupted main thread).
    stops = {signal.SIGTERM, signal.SIGINT}
    woken, wakeup = socket.socketpair()
    wakeup.setblocking(False)
    previous_fd = signal.set_wakeup_fd(wakeup.fileno(), warn_on_full_buffer=False)
    previous = {s: signal.signal(s, _noted) for s in stops}
    try:
        try:
            server = AgentServer(agent, args.host, args.port,
                                 max_body_bytes=args.max_body_bytes,
                                 allow_drift=not args.no_drift, agent_id=args.agent_id)
        except OSError as e:
            raise fail(f"cannot listen on {args.host}:{args.port}: {e.strerror}") from None
        server.start()
        # One parseable line on stdout: scripts and tests read the real port from it.
        echo(f"capwatch agent: serving domain {domain.name} on {server.url}", flush=True)
        try:
            while woken.recv(1)[0] not in stops:
                pass
        finally:
            server.close()
    finally:
        signal.set_wakeup_fd(previous_fd)
        for s, handler in previous.items():
            signal.signal(s, handler)
        woken.close()
        wakeup.close()
    echo(f"capwatch agent: stopped after {agent.stats.queries} queries", flush=True)
    return 0


def _query(args: argparse.Namespace) -> int:
    state: frozenset[GroundAtom]
    if args.problem:
        state = load_problem(args.problem).init
    else:
        with reading(args.state):
            text = Path(args.state).read_text(encoding="utf-8")
        try:
            raw = json.loads(text)
            state = QueryRequest.model_validate({"state": raw, "plan": []}).to_core()[0]
        except ValueError as e:  # JSON syntax and pydantic validation errors
            raise fail(f"{args.state}: not a JSON list of atoms: {e}") from None
    plan = load_plan(args.plan)
    try:
        client = HttpAgentClient(args.url, timeout=args.timeout, retries=args.retries)
        results = client.query(state, plan, args.samples)
    except ValueError as e:
        raise fail(str(e)) from None
    except AgentUnavailable as e:
        echo(f"capwatch: {e}", file=sys.stderr)
        return 3
    print(QueryResponse.of(results).model_dump_json())
    return 0


class _NoAliasDumper(yaml.SafeDumper):
    """Writes shared sub-documents out in full: readers of the spec should not chase anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def openapi_yaml() -> str:
    header = ("# Generated by `capwatch agent openapi -o docs/openapi/agent-query.yaml` from\n"
              "# capwatch/contracts/agent_protocol.py; edit the models, not this file.\n")
    body = yaml.dump(openapi_document(), Dumper=_NoAliasDumper, sort_keys=False,
                     allow_unicode=True, width=100)
    return header + body


def _openapi(args: argparse.Namespace) -> int:
    text = openapi_yaml()
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
