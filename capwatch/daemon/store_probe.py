"""/readyz's check of the models store, on a thread of its own so that /readyz answers
within :data:`ANSWER_S` whatever the store does.

The store's own probe (``SqlBase.unreachable``) is bounded, but by several waits in a
row: the connection's lock (1.5 s), then, at the start of an outage, a reconnection or a
probe on a connection of its own (libpq's least connect timeout, 2 s, and a 1.5 s round
trip). /readyz waited for all of it and answered after 3-5 s, at the readiness probe's
own timeout. Now a probe runs on a thread, one at a time, started by a /readyz that finds
no answer younger than :data:`FRESH_S`; /readyz waits at most :data:`ANSWER_S` for it and
otherwise answers with the last probe's answer, unless the probe in flight has waited
longer than any probe of an answering store does (``late_s``): that is itself the answer
(the store does not answer). The first /readyz of an outage may so still say ready; the
next one, a probe period later, names the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

import structlog

from capwatch.contracts.errors import error_text

log = structlog.get_logger("capwatch.daemon")

ANSWER_S = 1.0
"""The longest /readyz waits for a probe it started (the rest of its answer is at once)."""
FRESH_S = 1.0
"""How long a probe's answer is reused before /readyz starts another one."""
STORE_PROBE_WAIT_S = 1.5
"""How long the store's probe waits for its connection and for each round trip: with a
reconnect (libpq allows no less than 2 s) about 5 s at most when the server froze. The
probe runs on a thread of its own: /readyz waits for it at most :data:`ANSWER_S`."""


class StoreProbe:
    """Runs ``probe`` (why the store is unreachable, or None) on a thread of its own, one
    at a time; :meth:`check` answers within ``answer_s``."""

    def __init__(self, probe: Callable[[], str | None], *, late_s: float,
                 answer_s: float = ANSWER_S, fresh_s: float = FRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._probe = probe
        self.late_s = late_s
        """A probe still in flight after this long says the store does not answer: an
        answering store's probe ends within it."""
        self.answer_s = answer_s
        self.fresh_s = fresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: str | None = None
        self._answered_at: float | None = None
        self._started_at: float | None = None
        """When the probe in flight started; None when none is."""
        self._done = threading.Event()
        self._done.set()

    @property
    def probing(self) -> bool:
        """A probe is in flight."""
        with self._lock:
            return self._started_at is not None

    def check(self) -> str | None:
        """Why the store is unreachable, or None, within ``answer_s``."""
        with self._lock:
            now = self._clock()
            if self._started_at is None and (
                    self._answered_at is None or now - self._answered_at >= self.fresh_s):
                self._started_at = now
                self._done = threading.Event()
                threading.Thread(target=self._run, args=(self._done,), name="store-probe",
                                 daemon=True).start()
            done = self._done
        done.wait(self.answer_s)
        with self._lock:
            started = self._started_at
            if started is not None:
                waited = self._clock() - started
                if waited >= self.late_s:
                    last = f"; the last answer: {self._last}" if self._last else ""
                    return f"a probe has had no answer for {waited:.0f} s{last}"
            return self._last

    def _run(self, done: threading.Event) -> None:
        try:
            why = self._probe()
        except Exception as e:  # a probe that raises says why the store is unreachable
            why = error_text(e)
        with self._lock:
            self._last = why
            self._answered_at = self._clock()
            self._started_at = None
        done.set()


REFUSED_PROBE_S = 60.0
"""How often :class:`RefusedWritesProbe` tries the store while it refuses a kind of write:
well inside the 300 s a refusal is reported for (``WRITE_FAILURE_HOLD_S``)."""


class RefusedWritesProbe:
    """Keeps the report of refused store writes (``capwatch_store_writes_failing``, the
    ``CapwatchStoreWritesFailing`` rule) true when nothing requests /readyz.

    A refused write is reported until a write of its kind lands or 300 s pass; /readyz's
    probe tries a write of each refused kind, which restarts the 300 s while the store
    still refuses and ends the report once it takes one. Without /readyz requests (a
    daemon under systemd or Compose with no readiness check) only real writes did either:
    a version write retried less often than every 300 s (the assessment's lease, 120 s,
    plus an assessment that takes minutes) let the gauge fall to 0 between refusals, so the
    rule's ``for: 10m`` never fired while no version could be stored. Every
    :data:`REFUSED_PROBE_S`, while some kind is reported, this runs the same probe on a
    thread of its own; with nothing refused it does nothing."""

    def __init__(self, failing: Callable[[], Mapping[str, str]],
                 probe: Callable[[], object], interval_s: float = REFUSED_PROBE_S) -> None:
        self._failing = failing
        self._probe = probe
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        """One round: the store's probe, if some kind of write is reported refused."""
        if self._failing():
            try:
                self._probe()
            except Exception:  # the probe reports through the store; /readyz says why
                log.debug("refused-writes probe failed", exc_info=True)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="capwatch-refused-writes",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)


def refused_writes_probe(store: object) -> RefusedWritesProbe | None:
    """The probe for a store that reports refused writes and can probe them (the SQL
    stores); None for one that does not."""
    failing = getattr(store, "write_failures", None)
    unreachable = getattr(store, "unreachable", None)
    if failing is None or unreachable is None:
        return None
    return RefusedWritesProbe(failing, lambda: unreachable(STORE_PROBE_WAIT_S))
