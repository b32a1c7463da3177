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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="capwatch",
        description="Watch what deployed agents can still do: check their traces against "
                    "symbolic capability models, detect drift, re-learn what changed.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"capwatch.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = args.handler
    try:
        code: int = handler(args)
    except BrokenPipeError:
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
