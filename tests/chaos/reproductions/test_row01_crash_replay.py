"""Issue 12, row 1 (and row 8's "after restart, spurious versions again"): after a SIGKILL
or a store outage mid-stream, the outcome must equal the uninterrupted run's: the same
versions in content and count, the same alerts after dedup, every record processed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.chaos.harness import FleetInput, Outcome, compare
from tests.chaos.scenarios import can_mount, disk_full, sigkill


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_a_random_moment_changes_nothing(
        drift_fleet: FleetInput, drift_reference: Outcome, tmp_path: Path, seed: int) -> None:
    observed = sigkill(drift_fleet, tmp_path / "run", random.Random(seed))
    assert compare(drift_reference, observed.outcome, len(drift_fleet.lines)) == [], (
        f"killed at {observed.kill_at_s:.2f}s")
    assert observed.outcome.exits[1:] == [0]


@pytest.mark.skipif(not can_mount(), reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("seed", [1, 2])
def test_a_full_disk_under_the_store_is_survived(
        drift_fleet: FleetInput, drift_reference: Outcome, tmp_path: Path, seed: int) -> None:
    observed = disk_full(drift_fleet, tmp_path / "run", random.Random(seed))
    assert observed.exited_during_fault is None, "the daemon exited during the outage"
    assert compare(drift_reference, observed.outcome, len(drift_fleet.lines)) == []
    assert observed.outcome.exits == [0, 0]
