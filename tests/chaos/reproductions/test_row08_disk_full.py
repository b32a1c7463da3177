"""Issue 12, row 8: a full disk under the store mid-stream must be ridden out (no exit),
and the outcome must equal the uninterrupted run's: the same versions in content and
count, the same alerts after dedup, every record processed. (Row 1, SIGKILL, is fixed
over JSONL and lives in the bounded suite, tests/chaos/test_bounded.py.)"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.chaos.harness import FleetInput, Outcome, compare
from tests.chaos.scenarios import can_mount, disk_full


@pytest.mark.skipif(not can_mount(), reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("seed", [1, 2])
def test_a_full_disk_under_the_store_is_survived(
        drift_fleet: FleetInput, drift_reference: Outcome, tmp_path: Path, seed: int) -> None:
    observed = disk_full(drift_fleet, tmp_path / "run", random.Random(seed))
    assert observed.exited_during_fault is None, "the daemon exited during the outage"
    assert compare(drift_reference, observed.outcome, len(drift_fleet.lines)) == []
    assert observed.outcome.exits == [0, 0]
