"""The layer order holds: no module imports from a layer above its own.

Read from the source with ``ast`` (imports inside functions count too), bottom to top:

    model < monitor < assess            the core: no I/O, no knowledge of the rest
    contracts                           wire formats, protocols, store roles and records
    adapters | models_store | alerts | client    peers: none imports another
    console                             the operator's pages and report (reads the store)
    daemon | examples                   the pipeline and the service; example integrations
    cli

Inside the adapters, the roles stay apart too: ``io`` (the daemon's clients) and ``sim``
(the simulated fleet and reference agent) do not import each other. ``client`` is the
agent-side SDK that agent teams install: contracts and the model core only. See
docs/architecture.md.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "capwatch"

LAYERS: Mapping[str, int] = {
    "capwatch.model": 0,
    "capwatch.monitor": 1,
    "capwatch.assess": 2,
    "capwatch.contracts": 3,
    "capwatch.adapters": 4,
    "capwatch.models_store": 4,
    "capwatch.alerts": 4,
    "capwatch.client": 4,
    "capwatch.console": 5,
    "capwatch.daemon": 6,
    "capwatch.examples": 6,
    "capwatch.cli": 7,
}
ROOT_MODULES = {"capwatch", "capwatch.native", "capwatch.lazy"}
"""The package itself (``__version__``), which of its modules run compiled (the package
installs that guard before anything else is imported) and the packages' names imported at
first use (``capwatch.model``'s and ``capwatch.alerts``' ``__getattr__``, two layers
apart): importable from anywhere, they import no other capwatch module."""

ADAPTER_ROLES: Mapping[str, set[str]] = {
    "capwatch.adapters.io": set(),
    "capwatch.adapters.sim": set(),
}
"""Adapter role → the other roles it may import."""


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, root: Path = PACKAGE) -> Iterable[tuple[int, str]]:
    """(line, absolute module name) of every import of a capwatch module in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module_name(path, root)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base


def group(module: str, groups: Iterable[str]) -> str | None:
    return next((g for g in groups if module == g or module.startswith(g + ".")), None)


def violations(files: Iterable[Path], root: Path = PACKAGE) -> list[str]:
    found = []
    for path in files:
        importer = module_name(path, root)
        if importer in ROOT_MODULES:
            here, here_rank = importer, -1
        else:
            g = group(importer, LAYERS)
            assert g is not None, f"{importer} is in no layer: add it to LAYERS"
            here, here_rank = g, LAYERS[g]
        role = group(importer, ADAPTER_ROLES)
        for line, target in imports(path, root):
            if not target.startswith("capwatch"):
                continue
            where = f"{path.relative_to(root.parent)}:{line}: {importer} imports {target}"
            if target in ROOT_MODULES:
                if here_rank < 0 and target != "capwatch.native":
                    found.append(f"{where} (the root package imports nothing)")
                continue
            there = group(target, LAYERS)
            if there is None:
                found.append(f"{where}, which is in no layer")
            elif here_rank < 0 or LAYERS[there] > here_rank:
                found.append(f"{where}, a higher layer")
            elif LAYERS[there] == here_rank and there != here:
                found.append(f"{where}, a peer layer")
            target_role = group(target, ADAPTER_ROLES)
            if role is not None and target_role is not None and target_role != role \
                    and target_role not in ADAPTER_ROLES[role]:
                found.append(f"{where}, another adapter role")
    return found


def test_no_module_imports_from_a_higher_or_peer_layer() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    assert violations(files) == []


def test_the_check_finds_upward_peer_and_cross_role_imports(tmp_path: Path) -> None:
    root = tmp_path / "capwatch"
    sources = {
        "__init__.py": "",
        "lazy.py": "import capwatch.model\n",
        "model/__init__.py": "from capwatch.lazy import lazy_getattr\n",
        "model/domain.py": "from capwatch.daemon.pipeline import Pipeline\n",
        "alerts/__init__.py": "",
        "alerts/types.py": "def f():\n    from capwatch.models_store.base import X\n",
        "adapters/__init__.py": "",
        "adapters/io/__init__.py": "",
        "adapters/io/kafka.py": "from ..sim import fleet\n",
        "daemon/__init__.py": "",
        "daemon/pipeline.py": "from capwatch.model.domain import Domain\nimport capwatch\n",
    }
    for name, text in sources.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    found = violations(sorted(root.rglob("*.py")), root)
    assert len(found) == 4, found
    assert any("capwatch.lazy imports capwatch.model, a higher layer" in f
               for f in found)
    assert any("capwatch.model.domain imports capwatch.daemon.pipeline, a higher layer" in f
               for f in found)
    assert any("capwatch.alerts.types imports capwatch.models_store.base, a peer layer" in f
               for f in found)
    assert any("capwatch.adapters.io.kafka imports capwatch.adapters.sim, another adapter role"
               in f for f in found)
