"""Scheduled re-assessment (``assessment.reassess_every_s``): each agent a replica watches
is assessed with ``verify`` once per period, evidence or not.

What the stream never shows stays unknown otherwise: a precondition removed from an action
the agent does not use (a widened capability) makes no transition inconsistent, and the
canaries, which make an action's known precondition true to see whether it still runs,
cannot see a precondition that is no longer needed. ``verify`` probes every pal-tuple, so
it finds such a change (or confirms the model, publishing nothing).

Each agent has a phase of its own within the period (a hash of its family and id), so a
fleet's re-assessments are spread over the period instead of queued at once, and one is
queued when a round of this job sees the agent's phase pass. The work is the operator's
"assess" action (models_store.actions.request_assessment, actor ``capwatch``), keyed by the
agent and the period's number: another replica that holds the agent after a partition move,
or this one after a restart, queues nothing twice. A phase that passed while no replica held
the agent (stopped, idle and evicted) is not made up: the agent's next period is.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterable
from datetime import datetime

import structlog

from capwatch.contracts.store import ModelStore
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.models_store.actions import action_store, request_assessment

log = structlog.get_logger("capwatch.daemon")

ACTOR = "capwatch"
"""Who the scheduled re-assessments are recorded as, beside operators' own actions."""


def phase(family: str, agent_id: str, every_s: float) -> float:
    """Seconds into each period at which the agent is due."""
    return zlib.crc32(f"{family}\0{agent_id}".encode()) / 2.0**32 * every_s


def period(at_s: float, family: str, agent_id: str, every_s: float) -> int:
    """The number of the agent's period that time ``at_s`` (epoch seconds) falls in."""
    return math.floor((at_s - phase(family, agent_id, every_s)) / every_s)


class Reassessment:
    def __init__(self, every_s: float, store: ModelStore, started: datetime,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.store = action_store(store)
        self._last = started.timestamp()
        """When the previous round looked (epoch s): phases passed since are due."""
        self._monotonic = monotonic
        self._last_mono = monotonic()

    def run(self, watches: Iterable[AgentWatch], now: datetime) -> list[str]:
        """Queue the re-assessments due since the last round; the agents queued. An agent
        awaiting an assessment already is left: that one answers the question too.

        A round's time never falls behind the last round's plus the time elapsed since
        (monotonic): a wall clock stepped back an hour held every phase back for the
        hour. Periods are still numbered on the wall clock, which the replicas share
        (roughly: replicas whose clocks are X apart may, for an agent that moves between
        them, queue one re-assessment more or one a period late when a phase falls
        within X; a verify that finds nothing publishes nothing)."""
        mono = self._monotonic()
        at = max(now.timestamp(), self._last + (mono - self._last_mono))
        self._last_mono = mono
        queued = []
        for watch in watches:
            if watch.awaiting is not None:
                continue
            family, agent_id = watch.family, watch.agent_id
            k = period(at, family, agent_id, self.every_s)
            if k <= period(self._last, family, agent_id, self.every_s):
                continue
            request_assessment(
                self.store, family, agent_id, "verify", ACTOR,
                f"scheduled re-assessment, every {self.every_s:g} s "
                f"(assessment.reassess_every_s)", now, key=f"reassess/{family}/{agent_id}/{k}")
            queued.append(agent_id)
        # Only after the whole round: a store failure part-way leaves the round to repeat,
        # and the keys make what it queued already a no-op.
        self._last = at
        if queued:
            log.info("scheduled re-assessments queued", agents=len(queued),
                     first=queued[:10])
        return queued
