"""Plumbing shared by the throwaway test servers in tests/support: ports, waiting, stopping.

Every server here is started on a port the kernel just handed out, polled until it answers,
and stopped by the PID we started (never by name), so a test run cannot touch a server it
did not start.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

log = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (callers retry on a lost race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(ready: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll ``ready`` until it returns True (→ True) or ``timeout_s`` has passed (→ False).

    ``ready`` may raise to give up at once (say, when the server process has exited).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if ready():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float, name: str) -> bool:
    """SIGTERM ``proc`` by its PID, SIGKILL it after ``timeout_s``; False if it had exited."""
    if proc.poll() is not None:
        return False
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("%s pid %d ignored SIGTERM for %.0fs: SIGKILL", name, proc.pid, timeout_s)
        proc.kill()
        proc.wait(timeout=timeout_s)
    return True


def tail(path: Path, n: int, missing: str = "") -> str:
    """The last ``n`` lines of a server's log, for an error message; ``missing`` if unreadable."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return missing


class ManagedServer:
    """A started server: ``stop()`` is idempotent, and ``with server:`` always stops it."""

    timings: dict[str, float]
    """Seconds spent in each start/stop phase, for the test-session summary."""

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


S = TypeVar("S", bound=ManagedServer)


def start_print_stop(
    start: Callable[[], S], ready_line: Callable[[S], str], errors: type[Exception]
) -> int:
    """The ``python -m tests.support.<server>`` check: start, print how long it took, stop."""
    try:
        with start() as server:
            print(ready_line(server))
        print(f"stopped in {server.timings.get('stop', 0.0):.1f}s")
        return 0
    except errors as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
