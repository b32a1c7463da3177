"""The main loop runs with a short thread switch interval (pipeline.GIL_SWITCH_S), so the
threads a prompt alert goes through, and the main loop's own poll, wait less for the
interpreter lock; the process's own setting is back once the loop ends."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.daemon.pipeline import GIL_SWITCH_S
from capwatch.daemon.service import build_service
from tests.daemon.helpers import simulated


def test_the_main_loop_runs_with_the_short_switch_interval(tmp_path: Path) -> None:
    service = build_service(simulated(tmp_path, agents=1, rounds=20),
                            publisher=MemoryPublisher())
    seen: list[float] = []
    inner = service.pipeline.handle_batch

    def handle_batch(records: Any) -> None:
        seen.append(sys.getswitchinterval())
        inner(records)
    service.pipeline.handle_batch = handle_batch  # type: ignore[method-assign]
    before = sys.getswitchinterval()
    assert before > GIL_SWITCH_S
    assert service.run(exit_when_idle=True, install_signals=False) == 0
    assert seen and all(abs(s - GIL_SWITCH_S) < 1e-9 for s in seen)
    assert sys.getswitchinterval() == before
