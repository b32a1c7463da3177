"""Operator actions from the command line, recorded in the store with who and why.

``capwatch assess agent ID --method verify`` queues an assessment of a live agent in the
store's work queue, which a running daemon's workers claim (any replica sharing the
store); ``capwatch models approve|reject|rollback|promote`` review, restore and promote
versions. ``--by`` defaults to ``$CAPWATCH_OPERATOR`` or the login name; ``--reason`` is
required: the lineage shows both.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
from datetime import UTC, datetime
from typing import Any

from capwatch.cli.models_cmd import _Fail, _resolve, _run, parse_ref, store_options
from capwatch.console.terminal import echo
from capwatch.models_store import ModelRef, ModelStore
from capwatch.models_store.actions import (
    ASSESS_METHODS,
    OperatorAction,
    UnknownAgent,
    action_store,
    check_known_agent,
    families_of,
    promote,
    request_assessment,
    review,
    rollback,
)

OPERATOR_ENV = "CAPWATCH_OPERATOR"


def default_actor() -> str:
    try:
        return os.environ.get(OPERATOR_ENV) or getpass.getuser()
    except (KeyError, OSError):  # no login name (a container without /etc/passwd entry)
        return "unknown"


def _who(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reason", required=True, help="why (recorded, shown in the lineage)")
    parser.add_argument("--by", default=None,
                        help=f"who acts (default ${OPERATOR_ENV} or the login name)")
    parser.add_argument("--key", help="idempotency key: retrying with it records once")


def register_assess(asub: Any) -> None:
    p = asub.add_parser("agent", parents=[store_options(json_flag=True)],
                        help="queue an assessment of a live agent now (a running daemon "
                             "claims it)")
    p.add_argument("agent_id")
    p.add_argument("--family", help="the agent's family (needed if the store has not seen "
                                    "the agent)")
    p.add_argument("--method", choices=ASSESS_METHODS, default="verify")
    _who(p)
    p.set_defaults(handler=_assess)


def register_models(msub: Any) -> None:
    for kind, text in (("approve", "approve a version an assessment learned"),
                       ("reject", "reject a version an assessment learned")):
        p = msub.add_parser(kind, parents=[store_options(json_flag=True)], help=text)
        p.add_argument("ref", help="FAMILY/AGENT[@VERSION]")
        _who(p)
        p.set_defaults(handler=_review, kind=kind)
    p = msub.add_parser("rollback", parents=[store_options(json_flag=True)],
                        help="give an agent an earlier model of its ancestry, as a new version")
    p.add_argument("agent", help="FAMILY/AGENT")
    p.add_argument("--to", required=True,
                   help="FAMILY/AGENT@VERSION or FAMILY@VERSION (the baseline it forked from)")
    _who(p)
    p.set_defaults(handler=_rollback)
    p = msub.add_parser("promote", parents=[store_options(json_flag=True)],
                        help="make a version's model the family's newest baseline")
    p.add_argument("ref", help="FAMILY[/AGENT][@VERSION]")
    _who(p)
    p.set_defaults(handler=_promote)


def _print(args: argparse.Namespace, action: OperatorAction) -> None:
    if args.json:
        print(json.dumps(action.to_json(), sort_keys=True))
        return
    echo(f"recorded {action.kind} {action.key}: {action.describe()}")
    if "version" in action.result:
        echo(f"  new version {ModelRef.from_json(action.result['version'])}")
    if "work" in action.result:
        echo(f"  queued {action.result['work']} (a running daemon sharing this store "
              "claims it)")


def _now() -> datetime:
    return datetime.now(UTC)


def _actor(args: argparse.Namespace) -> str:
    return str(args.by) if args.by else default_actor()


def _family_of(store: ModelStore, agent_id: str, family: str | None) -> str:
    if family:
        try:
            check_known_agent(action_store(store), family, agent_id)
        except UnknownAgent as e:
            raise _Fail(str(e)) from None
        return family
    families = families_of(action_store(store), agent_id)
    if len(families) != 1:
        raise _Fail(f"which family is {agent_id}? add --family"
                    + (f" (one of {', '.join(families)})" if families else ""))
    return families[0]


def _assess(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        family = _family_of(store, args.agent_id, args.family)
        _print(args, request_assessment(action_store(store), family, args.agent_id,
                                        args.method, _actor(args), args.reason, _now(),
                                        args.key))
    return _run(args, body)


def _review(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        v = _resolve(store, args.ref)
        _print(args, review(action_store(store), args.kind, v.ref, _actor(args), args.reason,
                            _now(), args.key))
    return _run(args, body)


def _rollback(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        family, agent, n = parse_ref(args.agent)
        if agent is None or n is not None:
            raise _Fail("rollback takes FAMILY/AGENT (the version goes in --to)")
        to = _resolve(store, args.to)
        _print(args, rollback(action_store(store), family, agent, to.ref, _actor(args),
                              args.reason, _now(), args.key))
    return _run(args, body)


def _promote(args: argparse.Namespace) -> int:
    def body(store: ModelStore) -> None:
        v = _resolve(store, args.ref)
        _print(args, promote(action_store(store), v.ref, _actor(args), args.reason, _now(),
                             args.key))
    return _run(args, body)
