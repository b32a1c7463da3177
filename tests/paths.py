"""Where the shared benchmark domains live: ../shared from the repository root."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED = Path((REPO_ROOT.parent / "shared").resolve())
DOMAINS = SHARED / "domains"
STOCHASTIC = SHARED / "domains-stochastic"
DETERMINISTIC_NAMES = ("gripper", "miconic", "blocksworld")
STOCHASTIC_NAMES = ("tireworld", "explodingblocks", "probabilistic_elevators")
