"""``capwatch model stats|diff``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from capwatch.cli import main
from tests.paths import DATA, DOMAINS, REPO_ROOT


@pytest.mark.parametrize(("name", "pals", "actions"), [("gripper", 20, 3), ("miconic", 36, 4),
                                                       ("blocksworld", 52, 4)])
def test_stats(name: str, pals: int, actions: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "stats", str(DOMAINS / name / "domain.pddl")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pal_tuples"] == pals
    assert out["actions"] == actions


@pytest.mark.parametrize("path", sorted(DATA.glob("*/*/domain.pddl")),
                         ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_stats_prints_the_counts_of_every_shipped_domain(
        path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "stats", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["actions"] == len(re.findall(r"^\s*\(:action", path.read_text(), re.M | re.I))
    assert out["pal_tuples"] > 0 and out["predicates"] > 0


def test_diff_json_lists_changed_pal_tuples(capsys: pytest.CaptureFixture[str]) -> None:
    a = DOMAINS / "gripper" / "initial-models" / "domain_1_0.pddl"
    b = DOMAINS / "gripper" / "domain.pddl"
    assert main(["model", "diff", "--json", str(a), str(b)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["delta"] == 1 == len(out["changes"])
    assert main(["model", "diff", str(b), str(b)]) == 0
    assert "Δ = 0 of 20" in capsys.readouterr().out


def test_bad_file_names_file_line_and_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pddl"
    bad.write_text("(define (domain d)\n  (:predicates (p))\n  (:action a :effect (q)))\n")
    with pytest.raises(SystemExit) as info:
        main(["model", "stats", str(bad)])
    assert f"{bad}:3:22: unknown predicate 'q'" in str(info.value)


EXAMPLES = REPO_ROOT / "capwatch" / "examples"


def test_diff_says_when_only_outcome_probabilities_changed(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's own probability drift (courier's pick, 0.9 -> 0.5) has Δ 0: diff printed
    only 'Δ = 0' and exited 0, 'the same', for two models an operator must tell apart."""
    a, b = EXAMPLES / "courier.pddl", EXAMPLES / "courier-pick-wear.pddl"
    assert main(["model", "diff", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert "pick(?r ?p ?x) outcome probabilities changed: 0.9→0.5, 0.1→0.5" in out
    assert "Δ = 0 of 22" in out
    assert main(["model", "diff", "--json", str(a), str(b)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["delta"] == 0 and data["summary"] == [
        "pick(?r ?p ?x) outcome probabilities changed: 0.9→0.5, 0.1→0.5"]


def test_diff_says_when_a_deterministic_action_became_stochastic(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """drive succeeding only 60% of the time keeps every pal-tuple's mode (Δ 0) and is no
    shift of known outcomes' probabilities (a new, empty outcome): it was described
    nowhere, not by diff, not in a version's summary."""
    text = (DATA / "ipc" / "depot" / "domain.pddl").read_text()
    once = "(and (at ?x ?z) (not (at ?x ?y))))"
    assert text.count(once) == 1
    slips = tmp_path / "depot-slips.pddl"
    slips.write_text(text.replace("(:requirements :strips)",
                                  "(:requirements :strips :probabilistic-effects)")
                     .replace(once, "(probabilistic 0.6 (and (at ?x ?z) (not (at ?x ?y)))))"))
    assert main(["model", "diff", str(DATA / "ipc" / "depot" / "domain.pddl"),
                 str(slips)]) == 1
    out = capsys.readouterr().out
    assert ("drive(?x ?y ?z) outcomes changed: 1 (makes (at ?x ?z) true, (at ?x ?y) false)"
            " → 0.6 (makes (at ?x ?z) true, (at ?x ?y) false), 0.4 (no effect)") in out


def test_diff_says_when_a_change_lies_outside_the_pal_tuples(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A precondition over a constant is no pal-tuple (docs/models.md): diff printed
    'Δ = 0' and exited 0, 'the models agree', for woodworking's load-highspeed-saw that
    now needs a rough board."""
    base = DATA / "ipc" / "woodworking" / "domain.pddl"
    text = base.read_text()
    old = "(empty ?m)\n            (available ?b))"
    assert text.count(old) == 1
    drifted = tmp_path / "ww.pddl"
    drifted.write_text(text.replace(
        old, "(empty ?m)\n            (available ?b)\n            (surface-condition ?b rough))"))
    assert main(["model", "diff", str(base), str(drifted)]) == 1
    out = capsys.readouterr().out
    assert ("load-highspeed-saw(?b ?m) now requires (surface-condition ?b rough), outside "
            "the pal-tuples") in out
    assert main(["model", "diff", "--json", str(drifted), str(base)]) == 1
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary and "no longer requires (surface-condition ?b rough)" in summary[0]


def test_diff_says_when_an_effect_outside_the_pal_tuples_changed_beside_a_mode(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An effect over a constant is no pal-tuple: changed alone it is printed ('outcomes
    changed'), but beside a mode change of the same action only the mode was printed, and
    the new effect (load-highspeed-saw now makes (surface-condition ?b rough) true) was
    described nowhere, in diff nor in a version's summary."""
    base = DATA / "ipc" / "woodworking" / "domain.pddl"
    text = base.read_text()
    old = "            (not (empty ?m))\n            (in-highspeed-saw ?b ?m)))"
    assert text.count(old) == 1
    drifted = tmp_path / "ww.pddl"
    drifted.write_text(text.replace(
        old, "            (in-highspeed-saw ?b ?m)\n            (surface-condition ?b rough)))"))
    assert main(["model", "diff", str(base), str(drifted)]) == 1
    out = capsys.readouterr().out
    assert "load-highspeed-saw(?b ?m) no longer makes (empty ?m) false" in out
    assert "(surface-condition ?b rough) true" in out


def test_diff_compares_a_domain_with_action_literals_to_its_published_version(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """oper18b: the daemon monitors a family without its pddlgym action literals
    (``(move-car ?from ?to)`` in move-car's precondition), so every version it publishes
    is written without them. ``capwatch model diff TRUTH.pddl VERSION.pddl``, the check
    docs/daemon.md gives the operator, refused such a pair with exit 2 ("different
    vocabularies") even when the version was exactly the truth: the tireworld agents'
    right versions could not be checked. Both sides are compared as capwatch monitors
    them."""
    from capwatch.model.pddl_reader import read_domain
    from capwatch.model.pddl_writer import write_domain

    truth = DATA / "stochastic" / "tireworld" / "domain.pddl"
    published = tmp_path / "version.pddl"
    published.write_text(write_domain(read_domain(truth).without_action_literals()))
    assert main(["model", "diff", str(truth), str(published)]) == 0
    assert "Δ = 0 of" in capsys.readouterr().out
    # A real change is still seen across the two spellings.
    changed = tmp_path / "changed.pddl"
    changed.write_text(published.read_text().replace(
        "(and (not-flattire) (not (spare-in ?loc)))", "(and (not-flattire))"))
    assert changed.read_text() != published.read_text()
    assert main(["model", "diff", str(truth), str(changed)]) == 1
    assert "changetire(?loc) no longer makes (spare-in ?loc) false" in capsys.readouterr().out
