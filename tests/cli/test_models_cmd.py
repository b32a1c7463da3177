"""``capwatch models``: read the registry from the shell, against a real SQLite store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capwatch.cli import main
from capwatch.model.pddl_reader import parse_domain, read_domain
from capwatch.model.serialize import domain_from_json
from capwatch.models_store import open_store, record_new_model
from tests.paths import DATA

EXAMPLES = Path(__file__).resolve().parents[2] / "capwatch" / "examples"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def store_path(tmp_path: Path) -> str:
    path = str(tmp_path / "models.db")
    store = open_store(path)
    rover = read_domain(EXAMPLES / "rover.pddl")
    drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    record_new_model(store, "rover-v3", None, rover, T0)
    record_new_model(store, "rover-v3", "rover-17", drifted, T0 + timedelta(hours=2),
                     evidence={"queries": 3})
    store.close()
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "list", "--store", store_path, "--json")
    assert code == 0
    assert [(r["agent_id"], r["version"], r["delta_to_baseline"]) for r in json.loads(out)] \
        == [(None, 1, 0), ("rover-17", 1, 5)]
    code, out, _ = run(capsys, "models", "list", "--store", store_path)
    assert "(baseline)" in out and "rover-17" in out


def test_show_latest_and_at_time(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "show", "rover-v3/rover-17", "--store", store_path)
    assert code == 0
    assert out.splitlines()[0].startswith("rover-v3/rover-17@1")
    assert "now requires (battery_full ?r)" in out
    code, out, _ = run(capsys, "models", "show", "rover-v3/rover-17", "--at",
                       "2026-11-01T13:00:00Z", "--store", store_path, "--json")
    assert code == 0
    assert json.loads(out)["ref"] == {"family": "rover-v3", "agent_id": None, "version": 1}


def test_history_with_ancestry(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "history", "rover-v3/rover-17", "--ancestry",
                       "--json", "--store", store_path)
    assert code == 0
    refs = [(v["ref"]["agent_id"], v["ref"]["version"]) for v in json.loads(out)]
    assert refs == [(None, 1), ("rover-17", 1)]


def test_diff(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Exit status as `capwatch model diff` (and diff(1)): 0 same, 1 different, 2 trouble.
    code, out, _ = run(capsys, "models", "diff", "rover-v3@1", "rover-v3/rover-17@1",
                       "--store", store_path, "--json")
    assert code == 1
    assert json.loads(out)["delta"] == 5
    code, out, _ = run(capsys, "models", "diff", "rover-v3", "rover-v3/rover-17",
                       "--store", store_path)
    assert code == 1
    assert out.startswith("Δ(rover-v3/baseline@1, rover-v3/rover-17@1) = 5")
    code, out, _ = run(capsys, "models", "diff", "rover-v3", "rover-v3@1", "--store", store_path)
    assert code == 0 and out.startswith("Δ(rover-v3/baseline@1, rover-v3/baseline@1) = 0")
    code, _, err = run(capsys, "models", "diff", "rover-v3@9", "rover-v3", "--store", store_path)
    assert code == 2 and err.startswith("capwatch: ")


def test_diff_refuses_models_with_nothing_in_common(
        store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(store_path)
    record_new_model(store, "courier-v1", None, read_domain(EXAMPLES / "courier.pddl"), T0)
    store.close()
    code, out, err = run(capsys, "models", "diff", "rover-v3", "courier-v1", "--store",
                         store_path)
    assert code == 2 and out == ""
    assert "have no action in common" in err


def test_export_pddl_and_json(store_path: str, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    drifted = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    code, out, _ = run(capsys, "models", "export", "rover-v3/rover-17", "--store", store_path)
    assert code == 0 and parse_domain(out) == drifted
    target = tmp_path / "m.json"
    code, _, _ = run(capsys, "models", "export", "rover-v3/rover-17@1", "--format", "json",
                     "-o", str(target), "--store", store_path)
    assert code == 0 and domain_from_json(json.loads(target.read_text())) == drifted


@pytest.mark.parametrize(("argv", "message"), [
    (["show", "rover-v3/nobody"], "no model version rover-v3/nobody"),
    (["show", "rover-v3/@2"], "bad model reference"),
    (["show", "rover-v3@zero"], "bad version"),
    (["show", "rover-v3", "--at", "2026-11-01"], "--at needs FAMILY/AGENT"),
    (["show", "rover-v3/rover-17", "--at", "yesterday"], "bad time"),
    (["show", "rover-v3/rover-17", "--at", "2020-01-01T00:00Z"], "had no model at"),
    (["history", "rover-v3/ghost"], "no versions of rover-v3/ghost"),
    (["history", "rover-17"], "no versions of rover-17; agent rover-17 is in family "
                              "rover-v3: try rover-v3/rover-17"),
    (["history", "ghost"], "no versions of ghost"),
])
def test_errors_are_one_clear_line(store_path: str, capsys: pytest.CaptureFixture[str],
                                   argv: list[str], message: str) -> None:
    code, out, err = run(capsys, "models", *argv, "--store", store_path)
    assert code == 1 and out == ""
    assert err.startswith("capwatch: ") and message in err


def test_missing_store_is_not_created(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "typo.db"
    code, _, err = run(capsys, "models", "list", "--store", str(path))
    assert code == 1 and "no model store at" in err
    assert not path.exists()


def test_diff_of_stored_versions_says_when_a_change_lies_outside_the_pal_tuples(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A family baseline seeded again from a configuration whose precondition over a
    constant changed (woodworking's load-highspeed-saw now needs a rough board): Δ 0, and
    `models diff` of the two versions printed nothing else and exited 0, 'the same',
    unlike `capwatch model diff` of the two files (and the version's summary was empty)."""
    text = (DATA / "ipc" / "woodworking" / "domain.pddl").read_text()
    old = "(empty ?m)\n            (available ?b))"
    assert text.count(old) == 1
    drifted = text.replace(
        old, "(empty ?m)\n            (available ?b)\n            (surface-condition ?b rough))")
    path = str(tmp_path / "models.db")
    store = open_store(path)
    record_new_model(store, "ww", None, parse_domain(text), T0)
    second = record_new_model(store, "ww", None, parse_domain(drifted), T0 + timedelta(hours=1))
    store.close()
    assert second.delta_to_parent == 0
    assert any("now requires (surface-condition ?b rough)" in s for s in second.summary)
    code, out, _ = run(capsys, "models", "diff", "ww@1", "ww@2", "--store", path)
    assert code == 1
    assert "load-highspeed-saw(?b ?m) now requires (surface-condition ?b rough)" in out
    code, out, _ = run(capsys, "models", "diff", "ww@2", "ww@1", "--store", path, "--json")
    assert code == 1
    assert any("no longer requires (surface-condition ?b rough)" in s
               for s in json.loads(out)["summary"])
