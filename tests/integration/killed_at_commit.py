"""``capwatch run`` that SIGKILLs itself at a background commit: after the checkpoint's
flush acknowledged every output of the records before the offsets, before the commit is
sent. The commit rule says the outputs are there and the commit is not.

``python -m tests.integration.killed_at_commit CONFIG PAST SENT``: the kill comes at the
first background commit that moves some partition ``p`` past ``PAST[p]`` (a JSON object),
so it cannot have been sent already; every commit sent, and the killed one last, is
appended to SENT as a JSON line first.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from capwatch.contracts.ports import Source
from capwatch.daemon.config import load_config
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.service import build_service


class KilledAtCommit:
    """The checkpointer's view of the source (the main loop polls the real one)."""

    def __init__(self, inner: Source, past: dict[int, int], sent: Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.past = past
        self.sent = sent

    def _record(self, offsets: Mapping[int, int], killed: bool) -> None:
        with open(self.sent, "a") as f:
            f.write(json.dumps({"killed": killed, "offsets": dict(offsets)}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def commit(self, offsets: Mapping[int, int]) -> None:
        self._record(offsets, False)
        self.inner.commit(offsets)

    def commit_async(self, offsets: Mapping[int, int],
                     done: Callable[[BaseException | None], None]) -> None:
        if any(o > self.past.get(p, o) for p, o in offsets.items()):
            self._record(offsets, True)
            os.kill(os.getpid(), signal.SIGKILL)
        self._record(offsets, False)
        self.inner.commit_async(offsets, done)  # type: ignore[attr-defined]


def main(config_path: str, past: str, sent: str) -> int:
    config = load_config(config_path)
    configure_logging(config.log.level, config.log.format)
    service = build_service(config)
    checkpoints = service.pipeline.checkpoints
    # Only the checkpointer commits through it: name, commit and commit_async suffice.
    checkpoints.source = KilledAtCommit(
        checkpoints.source, {int(p): o for p, o in json.loads(past).items()}, Path(sent))  # type: ignore[assignment]
    return service.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3]))
