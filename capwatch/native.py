"""Which of the hot path's modules run compiled (mypyc), and the guard that keeps a
compiled build from running against sources it was not built from (docs/performance.md,
"Compiled modules").

``make compiled`` (``setup.py build_ext --inplace`` with ``CAPWATCH_COMPILE=1``; every
``make test``/``bench*``/``demo`` by default) builds :data:`MODULES` into extension modules
next to their sources and writes :data:`MANIFEST`: the source hash of each of them and of
every capwatch module they import, directly or not. mypyc compiles against the types (and
inlines the ``Final`` constants) of those imports, so an edit of any of them can make a
build wrong, not only an edit of a compiled module. Python imports an extension module
before a source of the same name, so after an edit the old build would run silently;
:func:`install` (called by ``capwatch/__init__.py`` before anything else is imported)
therefore loads every compiled module from source when any recorded source differs from
the build (with a warning), or when ``CAPWATCH_PURE_PYTHON=1`` (a benchmark's A/B, the
pure-Python test pass, a debugger). All of them or none: compiled modules call each other
directly in C, not through the module objects. ``CAPWATCH_REQUIRE_COMPILED=1`` (set by the
Makefile unless ``COMPILE=0``) makes a missing or stale build an error instead, so a test
run or a benchmark cannot run pure Python while meaning to run compiled.

Run as a script (``python -P capwatch/native.py --check``: stdlib only, the package is not
imported), it exits 0 when the build is complete and current; the Makefile rebuilds
otherwise. Never compiled itself: it decides what is.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULES = (
    "capwatch.adapters.io.kafka_batch",
    "capwatch.contracts.wire_atoms",
    "capwatch.contracts.wire_fast",
    "capwatch.contracts.wire_keys",
    "capwatch.daemon.agent_watch",
    "capwatch.daemon.batch",
    "capwatch.daemon.intake",
    "capwatch.daemon.registry",
    "capwatch.daemon.watch_freezing",
    "capwatch.model.consistency",
    "capwatch.model.grounding_plans",
    "capwatch.monitor.action_drift",
    "capwatch.monitor.attribution",
    "capwatch.monitor.drift",
    "capwatch.monitor.sequential",
    "capwatch.monitor.tables",
    "capwatch.monitor.transition_monitor",
)
"""The modules compiled: the decode and monitor path of every record (cProfile of the
steady state), kafka-python's batches read into Records (kafka_batch: on the poll's
thread, in one process on the main loop), and a ground action's atoms when it is first
met (grounding_plans: about one a message of a fleet's first pass). The mypyc build's
group is :data:`GROUP`."""

EXTENSIONS = ("capwatch.contracts._wire_split",)
"""C extension modules built with :data:`MODULES` (setup.py), each from the ``.c`` source
beside its module's path; part of the build as the compiled modules are (recorded in the
manifest, required by :func:`compiled`): their callers use them only when the hot path
runs compiled, and take a pure-Python way otherwise."""

GROUP = "capwatch._native"
"""mypyc's shared library for :data:`MODULES` (``capwatch/_native__mypyc*.so``): inside the
package, so that it is found wherever the package is."""

PACKAGE = Path(__file__).resolve().parent
MANIFEST = PACKAGE / "native.json"
MANIFEST_FORMAT = 2
"""Format 2 records the compiled modules' imports too; a format-1 manifest (the compiled
modules only) is stale."""
PURE_ENV = "CAPWATCH_PURE_PYTHON"
REQUIRE_ENV = "CAPWATCH_REQUIRE_COMPILED"


def _set(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def source(module: str, package: Path = PACKAGE) -> Path:
    base = package.joinpath(*module.split(".")[1:])
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _hashed(module: str, package: Path = PACKAGE) -> Path:
    """The file a module's manifest entry is the hash of: an extension's C source."""
    path = source(module, package)
    return path.with_suffix(".c") if module in EXTENSIONS else path


def _imports(module: str, package: Path) -> set[str]:
    """The capwatch modules ``module``'s import statements name (a ``from capwatch.x
    import y`` names ``capwatch.x`` and, when it is one, the module ``capwatch.x.y``)."""
    root = package.name
    found: set[str] = set()
    for node in ast.walk(ast.parse(source(module, package).read_bytes())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if name.split(".")[0] == root and source(name, package).exists():
                # A package's __init__ runs before its modules, so it counts too.
                parts = name.split(".")
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return found


def dependencies(package: Path = PACKAGE) -> list[str]:
    """:data:`MODULES` and every capwatch module they import, directly or not."""
    seen = set(MODULES)
    todo = list(MODULES)
    while todo:
        for name in _imports(todo.pop(), package) - seen:
            seen.add(name)
            todo.append(name)
    return sorted(seen)


def source_hashes(package: Path = PACKAGE) -> dict[str, str]:
    return {m: hashlib.sha256(_hashed(m, package).read_bytes()).hexdigest()
            for m in (*dependencies(package), *EXTENSIONS)}


def manifest_text(package: Path = PACKAGE) -> str:
    """What a build writes to :data:`MANIFEST`, for the sources as they are now."""
    return json.dumps({"format": MANIFEST_FORMAT, "sources": source_hashes(package)},
                      indent=1, sort_keys=True) + "\n"


def _built(module: str, package: Path) -> bool:
    path = source(module, package)
    return any(path.with_suffix(suffix).exists()
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def stale(package: Path = PACKAGE) -> list[str]:
    """The modules whose source is not the one the build was made from (a compiled module
    or one it imports), and the compiled modules missing from the build (all of them when
    the manifest is missing, unreadable or of an older format); empty when none is built."""
    if not any(_built(m, package) for m in MODULES):
        return []
    try:
        recorded = json.loads((package / MANIFEST.name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return list(MODULES)
    if not isinstance(recorded, dict) or recorded.get("format") != MANIFEST_FORMAT \
            or not isinstance(recorded.get("sources"), dict):
        return list(MODULES)
    sources: dict[str, object] = recorded["sources"]
    out = {m for m in (*MODULES, *EXTENSIONS) if m not in sources or not _built(m, package)}
    for module, digest in sources.items():
        path = _hashed(module, package)
        try:
            if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                out.add(module)
        except OSError:
            out.add(module)
    return sorted(out)


class _FromSource(importlib.abc.MetaPathFinder):
    """Finds :data:`MODULES` as their ``.py`` sources, ahead of the extension modules; and
    any other capwatch module that has an extension module beside its source (left by a
    build of an earlier list of modules)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES and not (fullname.startswith(PACKAGE.name + ".")
                                            and _built(fullname, PACKAGE)):
            return None
        origin = source(fullname)
        if origin.name == "__init__.py" or not origin.exists():
            return None
        return importlib.util.spec_from_file_location(fullname, origin)


_FINDER = _FromSource()


def install() -> None:
    if _FINDER in sys.meta_path:
        return
    if _set(PURE_ENV):
        sys.meta_path.insert(0, _FINDER)
        return
    out_of_date = stale()
    if _set(REQUIRE_ENV) and (out_of_date or not all(_built(m, PACKAGE)
                                                     for m in (*MODULES, *EXTENSIONS))):
        raise RuntimeError(f"capwatch: {REQUIRE_ENV} is set but the {_why_not()}; "
                           "`make compiled` builds it (or set CAPWATCH_PURE_PYTHON=1)")
    if out_of_date:
        warnings.warn(
            f"capwatch: the compiled hot path was built from other sources than "
            f"{', '.join(out_of_date)}; running every hot-path module as pure Python "
            "(`make compiled` rebuilds them)",
            RuntimeWarning, stacklevel=2)
        sys.meta_path.insert(0, _FINDER)


def compiled(package: Path = PACKAGE) -> bool:
    """Whether the hot path runs compiled: every module built, and not loaded from source."""
    return _FINDER not in sys.meta_path and all(_built(m, package)
                                                for m in (*MODULES, *EXTENSIONS))


def _why_not(package: Path = PACKAGE) -> str:
    out_of_date = stale(package)
    if out_of_date:
        return f"hot path's build is older than its sources ({', '.join(out_of_date)})"
    return "hot path is not built"


def describe() -> str:
    """For a benchmark's or a test run's header: how the hot path runs, and why not
    compiled."""
    if compiled():
        return "hot path compiled (mypyc)"
    if _set(PURE_ENV):
        return f"hot path pure Python ({PURE_ENV} set)"
    return f"hot path pure Python (the {_why_not()}: make compiled)"


def main(argv: Sequence[str]) -> int:
    if list(argv) != ["--check"]:
        print("usage: python -P capwatch/native.py --check", file=sys.stderr)
        return 2
    if all(_built(m, PACKAGE) for m in (*MODULES, *EXTENSIONS)) and not stale():
        return 0
    print(f"capwatch: the {_why_not()}")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
