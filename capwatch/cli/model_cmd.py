"""``capwatch model stats|diff``: inspect capability models from the shell."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from capwatch.cli._common import load_domain
from capwatch.console.terminal import echo
from capwatch.model import AbstractModel, pal_tuples
from capwatch.model.diff import describe_changes
from capwatch.model.pal import Mode


def register(sub: Any) -> None:
    model = sub.add_parser("model", help="inspect PDDL/PPDDL capability models")
    msub = model.add_subparsers(dest="model_command", required=True)

    stats = msub.add_parser("stats", help="count predicates, actions and pal-tuples")
    stats.add_argument("domain")
    stats.set_defaults(handler=_stats)

    diff = msub.add_parser(
        "diff", help="what changed, in words (modes and outcome probabilities), and Δ")
    diff.add_argument("a")
    diff.add_argument("b")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.set_defaults(handler=_diff)


def _stats(args: argparse.Namespace) -> int:
    domain = load_domain(args.domain)
    out = {
        "predicates": len(domain.predicates),
        "actions": len(domain.actions),
        "pal_tuples": len(pal_tuples(domain)),
        "probabilistic": domain.is_probabilistic,
    }
    print(json.dumps(out))
    return 0


def _diff(args: argparse.Namespace) -> int:
    # As capwatch monitors a model: without pddlgym action literals, which the daemon
    # strips from a family's domain, so its published versions never have them and a
    # domain file that does would otherwise never compare with them.
    a = load_domain(args.a).without_action_literals()
    b = load_domain(args.b).without_action_literals()
    ma, mb = AbstractModel.from_domain(a), AbstractModel.from_domain(b)
    if ma.modes.keys() != mb.modes.keys():
        echo("capwatch: the two models have different vocabularies (predicates, action "
              "headers or types); Δ is defined only over the same pal-tuples", file=sys.stderr)
        return 2
    changes = ma.diff(mb)
    # Δ counts pal-tuples only: a change of outcome probabilities has Δ 0 and is still a
    # difference (the lines a version's summary has).
    lines = describe_changes(a, b, changes)
    if args.json:
        print(json.dumps({
            "delta": len(changes),
            "summary": lines,
            "pal_tuples": len(ma.modes),
            "changes": [
                {"action": p.action, "atom": [p.atom.predicate, *p.atom.args],
                 "location": p.location.value, "from": _m(old), "to": _m(new)}
                for p, old, new in changes
            ],
        }))
    else:
        for line in lines:
            echo(line)
        echo(f"Δ = {len(changes)} of {len(ma.modes)} pal-tuples")
    return 0 if not lines and not changes else 1


def _m(mode: Mode) -> str:
    return mode.value
