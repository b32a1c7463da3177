"""The schema generator's command line (the files' freshness is tested in test_wire.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capwatch.contracts.wire_schemas import main
from tests.paths import REPO_ROOT


def test_help_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "directory" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_writes_the_committed_schemas_into_the_given_directory(tmp_path: Path) -> None:
    assert main([str(tmp_path / "out")]) == 0
    written = {p.name: json.loads(p.read_text()) for p in (tmp_path / "out").iterdir()}
    committed = {p.name: json.loads(p.read_text())
                 for p in (REPO_ROOT / "docs" / "schemas").glob("*.json")}
    assert written == committed
