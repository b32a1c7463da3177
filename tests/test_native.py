"""The guard of capwatch/native.py: a compiled build is run only when it was built from the
sources as they are now (the compiled modules and every capwatch module they import),
CAPWATCH_PURE_PYTHON=1 runs the sources whatever is built, and CAPWATCH_REQUIRE_COMPILED=1
(the Makefile's default) makes a missing or stale build an error instead of pure Python."""

from __future__ import annotations

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from capwatch import native
from tests.paths import REPO_ROOT

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _package(tmp_path: Path) -> Path:
    """A copy of the package's sources (no build), as a package folder."""
    package = tmp_path / "capwatch"
    shutil.copytree(native.PACKAGE, package,
                    ignore=lambda folder, names: [
                        n for n in names
                        if not (n.endswith((".py", ".c")) or (Path(folder) / n).is_dir())
                        or n == "__pycache__"])
    return package


def _build(package: Path,
           modules: tuple[str, ...] = (*native.MODULES, *native.EXTENSIONS)) -> None:
    """What a build leaves: an extension module next to each source (and each C
    extension's), and the manifest."""
    for module in modules:
        native.source(module, package).with_suffix(SUFFIX).write_bytes(b"")
    (package / native.MANIFEST.name).write_text(native.manifest_text(package),
                                                encoding="utf-8")


def _edit(package: Path, module: str) -> None:
    path = native.source(module, package)
    path.write_text(path.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")


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
    _edit(package, edited)
    assert native.stale(package) == [edited]


def test_an_edited_or_missing_c_extension_makes_the_build_stale(tmp_path: Path) -> None:
    package = _package(tmp_path)
    _build(package)
    extension = native.EXTENSIONS[0]
    c_source = native.source(extension, package).with_suffix(".c")
    assert c_source.exists()
    c_source.write_text(c_source.read_text(encoding="utf-8") + "\n/* edited */\n",
                        encoding="utf-8")
    assert native.stale(package) == [extension]
    _build(package)
    native.source(extension, package).with_suffix(SUFFIX).unlink()
    assert native.stale(package) == [extension]


def test_an_edit_of_what_a_compiled_module_imports_makes_the_build_stale(
        tmp_path: Path) -> None:
    # mypyc compiles against the types (and inlines the Final constants) of the modules
    # a compiled module imports, directly (model.domain from model.consistency) or not.
    package = _package(tmp_path)
    deps = native.dependencies(package)
    assert set(native.MODULES) < set(deps)
    assert {"capwatch.model.domain", "capwatch.monitor.observations"} <= set(deps)
    _build(package)
    _edit(package, "capwatch.model.domain")
    assert native.stale(package) == ["capwatch.model.domain"]


def test_an_edit_elsewhere_leaves_the_build_current(tmp_path: Path) -> None:
    package = _package(tmp_path)
    assert "capwatch.cli" not in native.dependencies(package)
    _build(package)
    _edit(package, "capwatch.cli")
    assert native.stale(package) == []


def test_a_build_without_its_manifest_or_with_a_module_missing_is_stale(
        tmp_path: Path) -> None:
    package = _package(tmp_path)
    _build(package)
    missing = native.MODULES[0]
    native.source(missing, package).with_suffix(SUFFIX).unlink()
    assert native.stale(package) == [missing]
    (package / native.MANIFEST.name).unlink()
    assert native.stale(package) == list(native.MODULES)


def test_a_manifest_of_the_first_format_is_stale(tmp_path: Path) -> None:
    # Format 1 recorded the compiled modules only, so it cannot vouch for their imports.
    package = _package(tmp_path)
    _build(package)
    (package / native.MANIFEST.name).write_text(json.dumps(
        {m: h for m, h in native.source_hashes(package).items() if m in native.MODULES}))
    assert native.stale(package) == list(native.MODULES)


def _import_capwatch(cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`import capwatch` of the package folder in ``cwd`` (its __init__ imports only
    native, so the copy's empty extension modules are never loaded)."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (native.PURE_ENV, native.REQUIRE_ENV)}
    code = "import capwatch, capwatch.native as n; print(n.compiled(), n.describe())"
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code],
                          cwd=cwd, env={**clean, **env}, capture_output=True, text=True)


def test_required_compiled_refuses_a_stale_or_missing_build(tmp_path: Path) -> None:
    package = _package(tmp_path)
    require = {native.REQUIRE_ENV: "1"}
    run = _import_capwatch(tmp_path, **require)
    assert run.returncode == 1 and "hot path is not built" in run.stderr
    _build(package)
    run = _import_capwatch(tmp_path, **require)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "hot", "path", "compiled", "(mypyc)"]
    _edit(package, "capwatch.model.domain")
    run = _import_capwatch(tmp_path, **require)
    assert run.returncode == 1
    assert "older than its sources (capwatch.model.domain)" in run.stderr
    # Without the requirement, the same build falls back to the sources with a warning
    # (an error here through -W error).
    run = _import_capwatch(tmp_path)
    assert run.returncode == 1 and "RuntimeWarning" in run.stderr
    # The pure path asked for wins over the requirement.
    run = _import_capwatch(tmp_path, **require, **{native.PURE_ENV: "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("False hot path pure Python (CAPWATCH_PURE_PYTHON set)")


def test_the_check_the_makefile_runs(tmp_path: Path) -> None:
    package = _package(tmp_path)

    def check() -> int:
        return subprocess.run([sys.executable, "-P", str(package / "native.py"), "--check"],
                              capture_output=True).returncode

    assert check() == 1
    _build(package)
    assert check() == 0
    _edit(package, native.MODULES[-1])
    assert check() == 1


def test_pure_python_is_asked_for_by_the_environment() -> None:
    code = ("import capwatch.native as n, capwatch.contracts.wire_fast as w, "
            "capwatch.contracts.wire_split as s; "
            "print(n.compiled(), w.__file__, s.SPLIT)")
    env = {**os.environ, native.PURE_ENV: "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    # The C splitter too is left out: pure means no extension module of capwatch's.
    assert out == ["False", str(native.source("capwatch.contracts.wire_fast")), "None"]
