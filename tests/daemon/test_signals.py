"""SIGTERM stops the daemon even when it lands while the main thread is writing a log line.

The handler used to log and set an Event: both take a lock, and a signal that arrived while
the main thread held the log's lock left the handler waiting for it forever, so the daemon
never stopped (seen twice in tests/client/test_ingest_e2e.py under load: py-spy showed the
handler inside PrintLogger.msg, called from PrintLogger.msg). The handler now only records
the signal (Pipeline.signalled). A subprocess, so that a regression hangs it, not pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.paths import REPO_ROOT

SCRIPT = textwrap.dedent('''
    import os, signal, sys, threading, time
    from capwatch.adapters.io.streams import MemoryPublisher
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service
    from tests.daemon.helpers import config

    tmp = sys.argv[1]
    path = os.path.join(tmp, "in.jsonl")
    open(path, "w").close()
    cfg = config(__import__("pathlib").Path(tmp),
                 source={"kind": "jsonl", "path": path, "follow": True},
                 log={"level": "info"})
    entered, gate = threading.Event(), threading.Event()

    class Stream:
        """Holds the first 'daemon started' line, and so the log's lock, until let go."""
        def write(self, text):
            if "daemon started" in text and not entered.is_set():
                entered.set()
                gate.wait(60)
            sys.stderr.write(text)
        def flush(self):
            sys.stderr.flush()

    configure_logging("info", "json", stream=Stream())
    service = build_service(cfg, publisher=MemoryPublisher())

    def poke():
        assert entered.wait(60)
        # To the main thread, which holds the log's lock, again until its handler has run
        # there: one that lands just before the main thread blocks in gate.wait is taken,
        # but its Python-level handler waits for the next bytecode, after the wait, and
        # this thread then waited out its 30 s (half the runs); one that lands during the
        # wait interrupts it and runs the handler at once.
        deadline = time.monotonic() + 30
        while service.pipeline.signalled is None and time.monotonic() < deadline:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
            time.sleep(0.01)
        gate.set()

    threading.Thread(target=poke, daemon=True).start()
    code = service.run()
    print("stopped", code, flush=True)
''')


def test_sigterm_while_a_log_line_is_written_stops_the_daemon(tmp_path: Path) -> None:
    try:
        run = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the daemon did not stop on SIGTERM: {e.stderr!r}"[-2000:]) \
            from None
    assert run.returncode == 0 and "stopped 0" in run.stdout, run.stderr[-2000:]
    assert '"signal received"' in run.stderr or "signal received" in run.stderr
