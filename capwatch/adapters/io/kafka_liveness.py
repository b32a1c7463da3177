"""Is the Kafka cluster answering? A probe on a thread of its own, for /readyz and the log.

A broker that stops answering without closing its connections (a frozen process, a
network partition that drops packets) makes no Kafka client raise anything while it only
polls: the consumer's fetches and heartbeats simply get no answer, so the daemon would
stay "ready" with a lag of 0 for as long as it lasts. The probe asks the cluster for one
topic's metadata (a small answer, and a permission the daemon has anyway) with a bounded
timeout, over connections of its own, every ``interval_s``; the
cluster is reported as not answering once no probe succeeded for ``timeout_s``. It never
blocks the caller: :meth:`BrokerLiveness.problem` only reads what the thread saw.

It is independent of which client library consumes and produces: any backend's daemon
can be watched by it.

Given the daemon's consumer ``group``, each successful probe also asks the cluster how
the group stands (DescribeGroups: its state and members) and how many partitions the topic
has: :meth:`BrokerLiveness.group_view`, with which /readyz tells a replica standing by in a
group with more members than partitions from one left without partitions. That second
question failing (a missing Describe right on the group) is only logged: the cluster did
answer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from capwatch.contracts.errors import error_text
from capwatch.contracts.ports import GroupView

log = structlog.get_logger("capwatch.kafka")


class BrokerLiveness:
    """Probes ``bootstrap`` every ``interval_s``; :meth:`problem` says what fails, if
    anything has for longer than ``timeout_s``."""

    def __init__(self, bootstrap: str, topic: str, *, timeout_s: float,
                 interval_s: float | None = None,
                 security: Mapping[str, Any] | None = None,
                 client_id: str = "capwatch-liveness",
                 group: str | None = None,
                 probe: Callable[[], object] | None = None,
                 describe_group: Callable[[str], object] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout_s = timeout_s
        self.interval_s = interval_s if interval_s is not None else max(1.0, timeout_s / 4)
        self._security = dict(security or {})
        self._client_id = client_id
        self._probe = probe if probe is not None else self._describe_topic
        self.group = group
        self._describe_group = describe_group if describe_group is not None \
            else self._describe_groups
        self._group_view: tuple[float, GroupView] | None = None
        self._group_error: str | None = None
        self._clock = clock
        self._admin: Any = None
        self._last_ok = clock()
        self._last_error: str | None = None
        self._reported = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> BrokerLiveness:
        self._last_ok = self._clock()
        self._thread = threading.Thread(target=self._run, name="kafka-liveness", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 5)
        self._drop_admin()

    def problem(self) -> str | None:
        """None while the cluster answered within ``timeout_s``; else what fails. The
        first time it is seen (here or by the probe thread) the log says so."""
        silent = self._clock() - self._last_ok
        if silent <= self.timeout_s:
            return None
        last = f"; last error: {self._last_error}" if self._last_error else ""
        problem = (f"Kafka unavailable: no answer from {self.bootstrap} for {silent:.0f} s"
                   f"{last}")[:500]
        self._report(problem)
        return problem

    def check_once(self) -> bool:
        """One probe; True if the cluster answered (the thread's step, callable from tests)."""
        try:
            topics = self._probe()
        except Exception as e:
            self._last_error = error_text(e)[:300]
            # A client that met a dead broker may keep backing off its reconnects for
            # long after the broker is back: the next probe starts a fresh one.
            self._drop_admin()
            self.problem()
            return False
        self._last_ok = self._clock()
        self._last_error = None
        self._report(None)
        if self.group is not None:
            self._look_at_group(self.group, _partitions(topics, self.topic))
        return True

    def group_view(self, max_age_s: float | None = None) -> GroupView | None:
        """How the group stood at the last probe that could say (None if none could, or
        if that is older than ``max_age_s``)."""
        seen = self._group_view
        if seen is None:
            return None
        at, view = seen
        if max_age_s is not None and self._clock() - at > max_age_s:
            return None
        return view

    def _look_at_group(self, group: str, partitions: int | None) -> None:
        try:
            answer = self._describe_group(group)
            view = _group(answer, group, partitions)
        except Exception as e:
            error = error_text(e)[:300]
            if error != self._group_error:
                log.warning("the consumer group could not be described", group=group,
                            error=error)
            self._group_error = error
            return
        self._group_error = None
        self._group_view = (self._clock(), view)

    def _report(self, problem: str | None) -> None:
        # /readyz (an HTTP thread) and the probe thread both see the change: log it once.
        with self._lock:
            if problem is not None and not self._reported:
                log.error("dependency failed; retrying", component="Kafka", problem=problem)
                self._reported = True
            elif problem is None and self._reported:
                log.info("dependency back; resuming", component="Kafka",
                         bootstrap_servers=self.bootstrap)
                self._reported = False

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check_once()
            self._stop.wait(self.interval_s)

    def _describe_topic(self) -> object:
        from kafka import KafkaAdminClient

        if self._admin is None:
            ms = int(max(1.0, min(self.timeout_s / 2, 10.0)) * 1000)
            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap,
                                           client_id=self._client_id, request_timeout_ms=ms,
                                           bootstrap_timeout_ms=ms, **self._security)
        return self._admin.describe_topics([self.topic])

    def _describe_groups(self, group: str) -> object:
        if self._admin is None:
            self._describe_topic()
        return self._admin.describe_groups([group])

    def _drop_admin(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()


def _partitions(described: object, topic: str) -> int | None:
    """The topic's partition count from kafka-python's describe_topics answer."""
    if not isinstance(described, list):
        return None
    for entry in described:
        if isinstance(entry, dict) and entry.get("name") == topic \
                and isinstance(entry.get("partitions"), list):
            return len(entry["partitions"])
    return None


def _group(described: object, group: str, partitions: int | None) -> GroupView:
    """kafka-python's describe_groups answer for ``group`` as a GroupView."""
    if not isinstance(described, dict) or not isinstance(described.get(group), dict):
        raise ValueError(f"no description of the group {group!r} in the answer")
    entry = described[group]
    members = frozenset(str(m["member_id"]) for m in entry.get("members") or []
                        if isinstance(m, dict) and m.get("member_id"))
    return GroupView(str(entry.get("group_state") or "Unknown"), members, partitions)
