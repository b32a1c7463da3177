"""Documentation references resolve: a file path named in help text, code or docs exists.

A user follows these pointers literally (``capwatch run --help`` named a
docs/configuration.md that was never written), so a renamed or missing page fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
_DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.(?:md|yaml|json)\b")
_MD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _sources() -> list[Path]:
    return sorted((REPO_ROOT / "capwatch").rglob("*.py")) + sorted(DOCS.glob("*.md"))


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_named_docs_files_exist(path: Path) -> None:
    missing = {ref for ref in _DOC_PATH.findall(path.read_text(encoding="utf-8"))
               if not (REPO_ROOT / ref).exists()}
    assert not missing, f"{path.relative_to(REPO_ROOT)} names missing files: {sorted(missing)}"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    # Inline code (a regex such as `(?:a](b)` ) is not a link.
    text = _CODE_SPAN.sub("", page.read_text(encoding="utf-8"))
    links = [t for t in _MD_LINK.findall(text) if "://" not in t]
    missing = [t for t in links if not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"


def test_the_index_links_every_page() -> None:
    linked = set(_MD_LINK.findall((DOCS / "index.md").read_text(encoding="utf-8")))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= linked, f"pages missing from docs/index.md: {sorted(pages - linked)}"


_STARTING = re.compile(r"""(?:\.starting|\.doing) = f?"([^"{]+)""")


def test_every_readiness_status_of_a_start_is_in_the_daemons_table() -> None:
    """An operator reads /readyz's "starting: ..." against docs/daemon.md's table: the
    SciPy step ("loading SciPy's statistics", since d617bf4) was missing from it, and the
    page still said SciPy's statistics load at the first drift alarm."""
    table = (DOCS / "daemon.md").read_text(encoding="utf-8")
    sources = [*sorted((REPO_ROOT / "capwatch" / "daemon").rglob("*.py")),
               REPO_ROOT / "capwatch" / "cli" / "run_cmd.py"]
    said = {m.strip() for path in sources
            for m in _STARTING.findall(path.read_text(encoding="utf-8"))}
    assert len(said) >= 10, said
    missing = sorted(s for s in said if f"`starting: {s}" not in table)
    assert not missing, f"docs/daemon.md's /readyz table lacks {missing}"
    # And the other way: a step the daemon no longer takes is not in the table
    # ("loading SciPy's statistics" stayed after 667ecd8 dropped scipy.stats).
    listed = {m.rstrip(". ") for m in re.findall(r"`starting: ([^`]+)`", table)}
    gone = sorted(s for s in listed if not any(s.startswith(d.rstrip(". ")) or
                                               d.startswith(s) for d in said))
    assert not gone, f"docs/daemon.md's /readyz table names steps no code says: {gone}"
