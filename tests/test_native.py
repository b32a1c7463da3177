"""The guard of capwatch/native.py: a compiled build is run only when it was built from the
sources as they are now, and CAPWATCH_PURE_PYTHON=1 runs the sources whatever is built."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

from capwatch import native
from tests.paths import REPO_ROOT

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _package(tmp_path: Path) -> Path:
    """A copy of the compiled modules' sources, as a package folder."""
    package = tmp_path / "capwatch"
    for module in native.MODULES:
        target = native.source(module, package)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(native.source(module).read_bytes())
    return package


def _build(package: Path, modules: tuple[str, ...] = native.MODULES) -> None:
    """What a build leaves: an extension module next to each source, and the manifest."""
    for module in modules:
        native.source(module, package).with_suffix(SUFFIX).write_bytes(b"")
    (package / native.MANIFEST.name).write_text(
        json.dumps(native.source_hashes(package)), encoding="utf-8")


def test_nothing_built_is_nothing_stale(tmp_path: Path) -> None:
    assert native.stale(_package(tmp_path)) == []


def test_a_build_of_the_sources_as_they_are_is_run(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _build(package)
    assert native.stale(package) == []


def test_an_edited_source_makes_its_build_stale(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _build(package)
    edited = native.MODULES[1]
    path = native.source(edited, package)
    path.write_text(path.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    assert native.stale(package) == [edited]


def test_a_build_without_its_manifest_or_with_a_module_missing_is_stale(
        tmp_path: Path) -> None:
    package = _package(tmp_path)
    _build(package)
    missing = native.MODULES[0]
    native.source(missing, package).with_suffix(SUFFIX).unlink()
    assert native.stale(package) == [missing]
    (package / native.MANIFEST.name).unlink()
    assert native.stale(package) == list(native.MODULES)


def test_pure_python_is_asked_for_by_the_environment() -> None:
    code = ("import capwatch.native as n, capwatch.contracts.wire_fast as w; "
            "print(n.compiled(), w.__file__)")
    env = {**os.environ, native.PURE_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", str(native.source("capwatch.contracts.wire_fast"))]
