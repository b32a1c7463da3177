"""Which of the hot path's modules run compiled (mypyc), and the guard that keeps a
compiled module from shadowing an edited source (docs/performance.md, "Compiled modules").

Opt-in for now (docs/performance.md says what is left before it is the default).
``make compiled COMPILE=1`` (``setup.py build_ext --inplace`` with ``CAPWATCH_COMPILE=1``)
builds :data:`MODULES` into extension modules next to their sources and writes
:data:`MANIFEST`, each module's source hash at build time. Python imports an extension
module before a source of the same name, so after an edit the old build would run
silently; :func:`install` (called by ``capwatch/__init__.py`` before anything else is
imported) therefore loads every one of them from source when any source differs from the
build (with a warning), or when ``CAPWATCH_PURE_PYTHON=1`` (a benchmark's A/B, a
debugger). All of them or none: compiled modules call each other directly in C, not
through the module objects. Never compiled itself: it decides what is.
"""

from __future__ import annotations

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
    "capwatch.contracts.wire_atoms",
    "capwatch.contracts.wire_fast",
    "capwatch.contracts.wire_keys",
    "capwatch.daemon.batch",
    "capwatch.daemon.intake",
    "capwatch.daemon.registry",
    "capwatch.model.consistency",
    "capwatch.monitor.action_drift",
    "capwatch.monitor.attribution",
    "capwatch.monitor.drift",
    "capwatch.monitor.sequential",
    "capwatch.monitor.tables",
    "capwatch.monitor.transition_monitor",
)
"""The modules compiled: the decode and monitor path of every record (cProfile of the
steady state). The mypyc build's group is :data:`GROUP`."""

GROUP = "capwatch._native"
"""mypyc's shared library for :data:`MODULES` (``capwatch/_native__mypyc*.so``): inside the
package, so that it is found wherever the package is."""

PACKAGE = Path(__file__).resolve().parent
MANIFEST = PACKAGE / "native.json"
PURE_ENV = "CAPWATCH_PURE_PYTHON"


def source(module: str, package: Path = PACKAGE) -> Path:
    return package.joinpath(*module.split(".")[1:]).with_suffix(".py")


def source_hashes(package: Path = PACKAGE) -> dict[str, str]:
    return {m: hashlib.sha256(source(m, package).read_bytes()).hexdigest() for m in MODULES}


def _built(module: str, package: Path) -> bool:
    path = source(module, package)
    return any(path.with_suffix(suffix).exists()
               for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def stale(package: Path = PACKAGE) -> list[str]:
    """The compiled modules whose source is not the one they were built from, or that
    are missing from a build (all of them when the manifest is missing or unreadable);
    empty when none is built."""
    built = [m for m in MODULES if _built(m, package)]
    if not built:
        return []
    try:
        recorded = json.loads((package / MANIFEST.name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return list(MODULES)
    if not isinstance(recorded, dict):
        return list(MODULES)
    now = source_hashes(package)
    return [m for m in MODULES if recorded.get(m) != now[m] or not _built(m, package)]


class _FromSource(importlib.abc.MetaPathFinder):
    """Finds :data:`MODULES` as their ``.py`` sources, ahead of the extension modules."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MODULES:
            return None
        return importlib.util.spec_from_file_location(fullname, source(fullname))


_FINDER = _FromSource()


def install() -> None:
    if _FINDER in sys.meta_path:
        return
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        sys.meta_path.insert(0, _FINDER)
        return
    out_of_date = stale()
    if out_of_date:
        warnings.warn(
            f"capwatch: the compiled {', '.join(out_of_date)} differ from their sources; "
            "running every hot-path module as pure Python (`make compiled COMPILE=1` "
            "rebuilds them)",
            RuntimeWarning, stacklevel=2)
        sys.meta_path.insert(0, _FINDER)


def compiled(package: Path = PACKAGE) -> bool:
    """Whether the hot path runs compiled: every module built, and not loaded from source."""
    return _FINDER not in sys.meta_path and all(_built(m, package) for m in MODULES)


def describe() -> str:
    """For a benchmark's header: how the hot path runs, and why not compiled."""
    if compiled():
        return "hot path compiled (mypyc)"
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"hot path pure Python ({PURE_ENV} set)"
    if stale():
        return "hot path pure Python (its build is older than its sources)"
    return "hot path pure Python (not built: make compiled COMPILE=1)"
