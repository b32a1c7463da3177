"""capwatch.client is what agent teams install next to their agent: it may use the wire
contracts and the model core, never the daemon, its adapters or its store."""

from __future__ import annotations

import ast

from tests.paths import REPO_ROOT

ALLOWED = ("capwatch.client", "capwatch.contracts", "capwatch.model")


def test_the_sdk_imports_only_contracts_and_the_model() -> None:
    offending = []
    for path in sorted((REPO_ROOT / "capwatch" / "client").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                if name.startswith("capwatch") and not name.startswith(ALLOWED):
                    offending.append(f"{path.name}: {name}")
    assert offending == []
