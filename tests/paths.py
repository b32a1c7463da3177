"""Where the test and benchmark domains live: tests/data/domains (see its README)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT / "tests" / "data" / "domains"
DOMAINS = DATA / "classic"
STOCHASTIC = DATA / "stochastic"
IPC = DATA / "ipc"
DETERMINISTIC_NAMES = ("gripper", "miconic", "blocksworld")
STOCHASTIC_NAMES = ("tireworld", "explodingblocks", "probabilistic_elevators")
IPC_NAMES = tuple(sorted(p.name for p in IPC.iterdir() if p.is_dir()))
