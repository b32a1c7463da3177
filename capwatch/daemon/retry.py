"""When a failed assessment is tried again, and how often before it is given up.

An agent that cannot be reached is usually restarting, redeploying or behind a network
blip: that resolves itself in seconds to minutes, so those failures are retried with
exponential backoff for longer than other errors (a bug or a bad model will not fix
itself by waiting). Each wait carries a jitter derived from the assessment's key, so a
family whose agents went down together is not retried in lockstep, and the same failure
always gets the same wait (tests and replays see the same schedule).
"""

from __future__ import annotations

import enum
import zlib
from dataclasses import dataclass
from datetime import timedelta

from capwatch.assess.agent import AgentUnavailable
from capwatch.contracts.agent_protocol import AgentProtocolError, AgentRejectedQuery
from capwatch.contracts.errors import error_text
from capwatch.contracts.store import PendingAssessment
from capwatch.daemon.config import AgentRetryConfig, AssessmentConfig


class FailureKind(enum.Enum):
    AGENT_UNREACHABLE = "agent_unreachable"
    """The agent was not reached: waiting may cure it (backoff)."""
    AGENT_REFUSED = "agent_refused"
    """The agent answered but refused the query (4xx) or broke the protocol."""
    ERROR = "error"
    """Anything else (a bug, a bad model): the ordinary retries."""


@dataclass(frozen=True, slots=True)
class Failure:
    """Why an assessment attempt failed; the retry plan and the alert follow ``kind``."""

    kind: FailureKind
    message: str
    final: bool = False
    """No attempt more: the next would ask the same and be answered the same (a refusal)."""

    @property
    def agent_unreachable(self) -> bool:
        return self.kind is FailureKind.AGENT_UNREACHABLE

    @property
    def alert_reason(self) -> str:
        return "agent_unreachable" if self.agent_unreachable else "error"


def describe_agent_failure(e: AgentUnavailable) -> Failure:
    """A failed query as a :class:`Failure`: an agent that answered but refused the query
    (4xx) or broke the protocol will not be cured by waiting, so it is not reported as
    unreachable. A refusal ends the work at once: the next attempt asks the same first
    query and is refused the same (oper20: m5 refused 12 queries over 3 assessments, its
    alert after the fifth attempt of each); the client already retried the 4xx that ask
    to be retried (408, 425, 429). A broken answer gets the ordinary retries: an agent
    that answers out of the protocol now and then (a proxy's error page) may answer the
    next attempt."""
    if isinstance(e, AgentProtocolError):
        return Failure(FailureKind.AGENT_REFUSED, f"agent broke the query protocol: {e}")
    if isinstance(e, AgentRejectedQuery):
        return Failure(FailureKind.AGENT_REFUSED, f"agent refused the query: {e}", final=True)
    return Failure(FailureKind.AGENT_UNREACHABLE, f"{UNREACHABLE_PREFIX}{e}")


UNREACHABLE_PREFIX = "agent unavailable: "
"""How an unreachable agent's failure reads (the queue's ``last_error``)."""


def ended_unreachable(item: PendingAssessment) -> bool:
    """Whether queued work failed for good because its agent could not be reached: read
    from the store, where the work's failure is its last error (the replica that ran it
    posts Settlement.UNREACHABLE; another replica sees only the work leaving the queue)."""
    return item.status == "failed" and (item.last_error or "").startswith(UNREACHABLE_PREFIX)


def internal_failure(e: Exception) -> Failure:
    return Failure(FailureKind.ERROR, error_text(e))


def backoff_s(cfg: AgentRetryConfig, attempts: int, key: str) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt (1-based) of ``key``."""
    base = min(cfg.max_backoff_s, cfg.backoff_s * cfg.multiplier ** max(0, attempts - 1))
    u = zlib.crc32(f"{key}#{attempts}".encode()) / 2**32
    return base * (1.0 + cfg.jitter * (2.0 * u - 1.0))


def retry_plan(cfg: AssessmentConfig, attempts: int, key: str, *,
               agent_unreachable: bool) -> tuple[timedelta, int]:
    """(wait before the next attempt, attempts allowed in all) after a failed attempt."""
    if agent_unreachable:
        retry = cfg.agent_retry
        return timedelta(seconds=backoff_s(retry, attempts, key)), retry.attempts
    return timedelta(seconds=cfg.retry_after_s), cfg.max_attempts
