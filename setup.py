"""The compiled build of the hot path (docs/performance.md, "Compiled modules").

Everything else is in pyproject.toml. ``CAPWATCH_COMPILE=1 python setup.py build_ext
--inplace`` (``make compiled``) compiles the modules of ``capwatch/native.py`` with mypyc
next to their sources, and the C extensions of ``native.EXTENSIONS``, and records the
source hashes they were built from;
``CAPWATCH_COMPILE=1 pip wheel --no-build-isolation`` builds a wheel holding them (the
image's build stage, Dockerfile). Without ``CAPWATCH_COMPILE=1`` (``pip install -e .``,
whose isolated build environment would hide the dependencies' types from mypy) nothing is
compiled and the package is pure Python.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _native() -> Any:
    # Loaded by path: importing the capwatch package would import its dependencies.
    spec = importlib.util.spec_from_file_location("_capwatch_native",
                                                  ROOT / "capwatch" / "native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The manifest of the sources as they were before mypyc read them: hashed after the build, a
# source edited while it ran would be recorded as built and `native.py --check` would pass
# on a stale build. Hashed first, such an edit leaves the manifest older than the source,
# so the check fails and the next build catches up.
_manifest_before_build: str | None = None


class _BuildExt(build_ext):  # type: ignore[misc]
    """build_ext, then the manifest of the sources the modules were built from."""

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return  # a pure build: a manifest now would vouch for an older build's files
        native = _native()
        manifest = _manifest_before_build
        assert manifest is not None, "extensions come only from _ext_modules, which hashes"
        if self.inplace:
            native.MANIFEST.write_text(manifest, encoding="utf-8")
        else:
            out = Path(self.build_lib) / "capwatch" / native.MANIFEST.name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(manifest, encoding="utf-8")


def _ext_modules() -> list[Any]:
    if os.environ.get("CAPWATCH_COMPILE", "") in ("", "0"):
        return []
    from mypyc.build import mypycify

    global _manifest_before_build
    native = _native()
    _manifest_before_build = native.manifest_text()
    # The C extensions (native.EXTENSIONS): each from the .c beside its module's path.
    extensions = [Extension(m, [str(native.source(m).with_suffix(".c").relative_to(ROOT))],
                            extra_compile_args=["-O3"]) for m in native.EXTENSIONS]
    return [*mypycify([str(native.source(m).relative_to(ROOT)) for m in native.MODULES],
                      opt_level="3", group_name=native.GROUP), *extensions]


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": _BuildExt})
