"""The daemon's agent clients read a sampled answer as large as the protocol allows."""

from __future__ import annotations

from typing import Any

from capwatch.daemon.service import HttpDirectory
from tests.adapters.test_agent_http import flaky, serve


def test_a_sampled_answer_beyond_one_state_is_read() -> None:
    # 1,000 samples (the protocol's most) of a 300-atom state: ~12 MB, more than the 8 MiB
    # the daemon once allowed, which failed such queries as a broken protocol.
    state = [["at", f"obj{i:04d}", "somewhere-far-away"] for i in range(300)]
    results: list[dict[str, Any]] = [{"executed": 1, "state": state}] * 1000
    with serve(flaky(0, 200, results)) as url:
        directory = HttpDirectory(url, {}, 30.0)
        answers = directory.agent("rover-1", "rovers").query(frozenset(), [("noop",)],
                                                              samples=1000)
    assert len(answers) == 1000
    assert len(answers[0].state) == 300
