"""The bounded chaos suite (part of ``make test``): the rows of issue 12 that are fixed,
in a form that runs in about a minute. Rows that still fail are in reproductions/
(``make chaos``) until fixed; docs/reliability.md lists them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from capwatch.model.pal import delta
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.chaos.harness import EXAMPLES, FleetInput, Outcome, compare
from tests.chaos.hostile import generate
from tests.chaos.scenarios import hostile_jsonl, sigkill
from tests.chaos.selection import cases


def test_an_uninterrupted_run_learns_each_drift_once_and_exactly(
        drift_fleet: FleetInput, drift_reference: Outcome) -> None:
    ref = drift_reference
    assert ref.exits == [0] and ref.tracebacks == 0
    assert ref.committed == len(drift_fleet.lines)
    assert sorted(ref.versions) == [(a, 1) for a in sorted(drift_fleet.drifted)]
    assert set(ref.published) == set(ref.versions)
    truth = read_domain(EXAMPLES / "rover-sample-drift.pddl")
    for key, model in ref.versions.items():
        assert delta(domain_from_json(model), truth) == 0, key
    assert ref.alerts, "a drift raised no alert"
    assert not ref.dead_letters


def test_hostile_messages_are_dead_lettered_and_valid_ones_processed(
        valid_events: tuple[list[bytes], dict[str, dict[str, str]]], tmp_path: Path) -> None:
    valid, families = valid_events
    messages = list(generate(valid, 3000, seed=12))
    report = hostile_jsonl(messages, tmp_path / "hostile", families)
    assert report.exit_code == 0 and report.tracebacks == 0
    assert report.committed == report.sent, "records were left unread"
    assert report.wrong == {}, report.by_kind
    assert report.internal_errors == 0
    # Not vacuous: both fates occurred.
    assert 0 < sum(v["dead"] for v in report.by_kind.values()) < report.sent


@pytest.mark.parametrize("seed", cases([1], [1, 2]))
def test_sigkill_at_a_random_moment_changes_nothing(
        drift_fleet: FleetInput, drift_reference: Outcome, tmp_path: Path, seed: int) -> None:
    """Issue 12 row 1 over JSONL: the same versions (content and count), the same alerts,
    every record processed, whatever moment the daemon is killed at."""
    observed = sigkill(drift_fleet, tmp_path / "run", random.Random(seed))
    assert compare(drift_reference, observed.outcome, len(drift_fleet.lines)) == [], (
        f"killed at {observed.kill_at_s:.2f}s")
    assert observed.outcome.exits[1:] == [0] and observed.outcome.tracebacks == 0
