"""The ``capwatch`` command line.

Each command group lives in its own module with a ``register(subparsers)`` function,
so the parts of capwatch stay independent of one another.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Module names under capwatch.cli; each has register(subparsers).
COMMAND_MODULES: tuple[str, ...] = ("model_cmd", "agent_cmd", "run_cmd", "demo_cmd",
                                     "models_cmd", "assess_cmd", "console_cmd")

COMMANDS: dict[str, str] = {"model": "model_cmd", "agent": "agent_cmd", "run": "run_cmd",
                            "demo": "demo_cmd", "models": "models_cmd",
                            "assess": "assess_cmd", "agents": "console_cmd",
                            "alerts": "console_cmd", "report": "console_cmd"}
"""Each top-level command and the module that registers it (tests/cli checks the two
agree). A named command imports its own module only: importing all of them pulled in the
assessment engine, SciPy and the agent server, 1.3 s of CPU before `capwatch run` could
answer its first probe (about 12 s at a load of 30 on 2 cores)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone (its module's only)."""
    parser = argparse.ArgumentParser(
        prog="capwatch",
        description="Watch what deployed agents can still do: check their traces against "
                    "symbolic capability models, detect drift, re-learn what changed.")
    sub = parser.add_subparsers(dest="command", required=True)
    modules = (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES
    for name in modules:
        module = importlib.import_module(f"capwatch.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    # Help and unknown commands get every command's parser, so they list them all.
    parser = build_parser(args_in[0] if args_in else None)
    args = parser.parse_args(args_in)
    handler = args.handler
    try:
        code: int = handler(args)
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
