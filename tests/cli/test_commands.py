"""`capwatch <command>` imports only its own command's module (capwatch.cli.COMMANDS)."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from capwatch.cli import COMMAND_MODULES, COMMANDS, build_parser


def _registered(module: str) -> set[str]:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(f"capwatch.cli.{module}").register(sub)
    return set(sub.choices)


def test_the_command_table_names_what_each_module_registers() -> None:
    for module in COMMAND_MODULES:
        assert _registered(module) == {c for c, m in COMMANDS.items() if m == module}, module
    assert set(COMMANDS.values()) == set(COMMAND_MODULES)


def test_help_lists_every_command() -> None:
    parser = build_parser("--help")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)


@pytest.mark.parametrize("argv", [["run", "--help"], ["models", "--help"]])
def test_a_command_does_not_import_the_others(argv: list[str]) -> None:
    # In a fresh interpreter: this one has imported everything already.
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from capwatch.cli import main\n"
         "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         "import json; print(json.dumps(sorted(sys.modules)))", *argv],
        capture_output=True, text=True, check=True).stdout.splitlines()[-1]
    modules = set(json.loads(out))
    commands = {m.rsplit(".", 1)[1] for m in modules if m.startswith("capwatch.cli.")}
    assert COMMANDS[argv[0]] in commands
    assert not commands & {"assess_cmd", "agent_cmd", "demo_cmd", "console_cmd"}, commands
    assert "capwatch.assess.engine" not in modules
