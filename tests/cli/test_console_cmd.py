"""``capwatch agents``, ``alerts``, ``report`` and the actions, on the demo's real store."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from capwatch.cli import main
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import open_store, record_new_model


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    assert main(["demo", "--store", str(path)]) == 0
    return str(path)


T0 = datetime(2026, 11, 28, 4, 0, tzinfo=UTC)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_agents_ls_lists_the_whole_fleet_with_states(
        demo_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "agents", "ls", "--store", demo_store, "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 24
    assert {r["agent_id"] for r in rows if r["state"] == "drifted"} == {
        "courier-v1-002", "courier-v1-007", "rover-v3-004"}
    assert all(r["transitions"] == 400 for r in rows)
    # A resolved drift leaves its change's alert open, not also the "awaiting assessment"
    # alert its version answered (both are in the store: see test_alerts_ls_show_and_tail).
    drifted = [r for r in rows if r["state"] == "drifted"]
    assert [r["open_alerts"] for r in drifted] == [1] * len(drifted)
    code, out, _ = run(capsys, "agents", "ls", "--store", demo_store, "--state", "drifted")
    assert out.splitlines()[0].split() == ["FAMILY", "AGENT", "STATE", "MODEL", "Δ", "BASE",
                                           "OPEN", "ALERTS", "LAST", "EVENT", "CHANGE"]
    rover = next(x for x in out.splitlines() if "rover-v3-004" in x)
    assert rover.endswith("  sample_rock(?r ?s ?w) now requires (battery_full ?r); no longer "
                          "requires (battery_half ?r); now make")  # cut at 100 characters
    assert "3 of 24 agents shown; fleet: 21 healthy, 3 drifted" in out


def test_agents_ls_says_when_a_version_changed_more_than_one_action(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """oper19: ferry agent g2's version changed two actions (board keeps (at ?car ?loc), an
    expansion; sail now requires (empty-ferry), critical). `capwatch agents ls` showed the
    first line alone in its CHANGE column, so the critical change was not on the screen
    and nothing said there was more; the console's fleet page says "(+1 more)" since
    oper18b."""
    ipc = Path(__file__).resolve().parents[1] / "data" / "domains"
    store = open_store(str(tmp_path / "models.db"))
    record_new_model(store, "transport", None,
                     read_domain(ipc / "ipc" / "transport" / "domain.pddl"), T0)
    record_new_model(store, "transport", "truck-1", read_domain(
        ipc / "own" / "ipc-drifts" / "transport" / "drive-and-drop.pddl"),
        T0 + timedelta(hours=1))
    store.close()
    code, out, _ = run(capsys, "agents", "ls", "--store", str(tmp_path / "models.db"))
    assert code == 0
    row = next(x for x in out.splitlines() if "truck-1" in x)
    assert row.endswith("drive(?v ?l1 ?l2) no longer makes (at ?v ?l1) false (+1 more)"), row


def test_models_show_prints_outcome_probabilities_as_a_table(
        demo_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "show", "courier-v1/courier-v1-007", "--store",
                       demo_store)
    assert code == 0
    assert "evidence: {" not in out  # no raw JSON dump
    assert re.search(r"assessment: 1 query, \d+ samples of the agent's outcomes", out)
    header = next(x for x in out.splitlines() if "OUTCOME" in x)
    assert header.split() == ["OUTCOME", "MODEL", "P", "OBSERVED", "P", "[95%", "CI]",
                              "RE-ESTIMATED", "P"]
    row = next(x for x in out.splitlines() if x.strip().startswith("(no change)"))
    # model 0.1, observed with interval and sample count, re-estimated.
    m = re.search(r"0\.100\s+(0\.\d{3}) \[(0\.\d{3}), (0\.\d{3})\] n=(\d+)\s+(0\.\d{3})", row)
    assert m is not None, row
    p, lo, hi, n, new = m.groups()
    assert float(lo) <= float(p) <= float(hi) and int(n) > 30
    assert p == new  # the re-estimate installed is the observed estimate


def test_alerts_ls_show_and_tail(demo_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "alerts", "ls", "--store", demo_store, "--agent",
                       "rover-v3-004", "--json")
    alerts = json.loads(out)
    assert sorted(a["alert_type"] for a in alerts) == ["capability_reduced",
                                                       "unexplained_inconsistency"]
    reduced = next(a for a in alerts if a["alert_type"] == "capability_reduced")
    code, out, _ = run(capsys, "alerts", "show", reduced["id"][:6], "--store", demo_store)
    assert code == 0
    assert out.startswith("capability_reduced [critical] rover-v3/rover-v3-004")
    assert "now requires (battery_full ?r)" in out and "detail:" in out
    code, out, _ = run(capsys, "alerts", "tail", "-n", "2", "--store", demo_store)
    assert len(out.splitlines()) == 2
    code, _, err = run(capsys, "alerts", "show", "nope", "--store", demo_store)
    assert code == 1 and "no alert 'nope'" in err


def test_actions_are_shown_in_the_lineage(
        demo_store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models", "approve", "courier-v1/courier-v1-002", "--reason",
                       "matches the jam report", "--by", "alice", "--store", demo_store)
    assert code == 0 and "alice approved courier-v1/courier-v1-002@1" in out
    code, out, _ = run(capsys, "models", "rollback", "rover-v3/rover-v3-004", "--to",
                       "rover-v3@1", "--reason", "firmware reverted", "--by", "bob",
                       "--store", demo_store)
    assert code == 0 and "new version rover-v3/rover-v3-004@2" in out
    code, out, _ = run(capsys, "agents", "show", "rover-v3-004", "--store", demo_store)
    assert "written by an operator: bob rolled back to rover-v3/baseline@1: firmware " \
           "reverted" in out
    assert "state assessing" in out  # the rollback's installation waits for a daemon
    code, out, _ = run(capsys, "agents", "show", "courier-v1-002", "--store", demo_store)
    assert "[approved by alice: matches the jam report]" in out
    code, _, err = run(capsys, "models", "approve", "rover-v3@1", "--reason", "x",
                       "--store", demo_store)
    assert code == 1 and "reviews are of learned versions" in err
    code, out, _ = run(capsys, "assess", "agent", "rover-v3-001", "--method", "verify",
                       "--reason", "spot check", "--store", demo_store, "--json")
    assert json.loads(out)["result"]["method"] == "verify"


def test_report_is_one_self_contained_html_file(
        demo_store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "r" / "courier.html"
    code, out, _ = run(capsys, "report", "courier-v1", "-o", str(out_path), "--store",
                       demo_store)
    assert code == 0 and out.strip() == f"wrote {out_path}"
    text = out_path.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text and "stylesheet" not in text
    assert re.findall(r"(?:src|href)=\"https?://", text) == []
    assert "Outcome probabilities of <code>pick</code>" in text and "<svg" in text
    assert "Drift statistic of <code>pick</code>" in text
    assert 'class="changed"' in text  # the drop and pick actions highlighted in the PDDL
    assert "2 agents of courier-v1" not in text  # the two drifts are different changes
    code, _, err = run(capsys, "report", "nosuch", "-o", str(out_path), "--store", demo_store)
    assert code == 1 and "no family nosuch" in err


def test_agents_show_takes_the_family_agent_form_the_listings_print(
        demo_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, bare, _ = run(capsys, "agents", "show", "rover-v3-004", "--store", demo_store)
    assert code == 0
    code, out, _ = run(capsys, "agents", "show", "rover-v3/rover-v3-004", "--store", demo_store)
    assert code == 0 and out == bare
    code, _, err = run(capsys, "agents", "show", "courier-v1/rover-v3-004", "--store",
                       demo_store)
    assert code == 1 and "no agent courier-v1/rover-v3-004 in the store" in err
    code, _, err = run(capsys, "agents", "show", "rover-v3/rover-v3-004", "--family",
                       "courier-v1", "--store", demo_store)
    assert code == 1 and "--family says courier-v1" in err


def test_assess_refuses_an_agent_the_store_never_saw_in_the_family(
        demo_store: str, capsys: pytest.CaptureFixture[str]) -> None:
    """oper20: `assess agent nosuch --family F` and `assess agent A --family G` for an
    agent of family F were queued; the daemon then asked a URL no agent answers (five
    failed attempts) or asked F's agent in G's vocabulary, and the typo's action made
    the unknown agent 'known' to every later command."""
    code, _, err = run(capsys, "assess", "agent", "rover-v3-0O1", "--family", "rover-v3",
                       "--reason", "typo", "--store", demo_store)
    assert code == 1 and "has not seen agent rover-v3-0O1 in family rover-v3" in err
    code, _, err = run(capsys, "assess", "agent", "rover-v3-001", "--family", "courier-v1",
                       "--reason", "wrong family", "--store", demo_store)
    assert code == 1 and "(it knows it in rover-v3)" in err
    code, _, err = run(capsys, "assess", "agent", "rover-v3-0O1", "--reason", "typo",
                       "--store", demo_store)
    assert code == 1 and "which family is rover-v3-0O1?" in err
    code, out, _ = run(capsys, "assess", "agent", "rover-v3-002", "--family", "rover-v3",
                       "--reason", "spot check", "--store", demo_store)
    assert code == 0 and "queued operator/" in out
