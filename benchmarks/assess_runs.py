"""What the assessment harnesses (fuzz_assess, probe_assess_rev12b, probe_assess_rev13b)
share: a case's walks as the daemon's transitions, and one run of the daemon's assessor
under a wall-clock alarm, a hang or a crash recorded rather than raised.

Each harness keeps its own drifts, agents and verdicts; what a run costs and how it ended
is read alike here, so the three count a hang, a crash and an unreachable agent the same.
"""

from __future__ import annotations

import signal
import time
import traceback
from collections.abc import Sequence
from typing import Any

from capwatch.assess.agent import AgentUnavailable
from capwatch.assess.observations import Transition
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.assessor import AssessmentOutcome, AssessmentRequest, EngineAssessor


class Timeout(Exception):
    """The run outlasted its alarm (the harness's hang)."""


def _alarm(*_: object) -> None:
    raise Timeout()


def agent_transitions(transitions: Sequence[Transition]) -> list[AgentTransition]:
    """The walks' transitions as one agent's records, numbered in order."""
    return [AgentTransition("a", "f", "e", i, None, t.state, t.action, t.next_state, False,
                            executed=t.executed)
            for i, t in enumerate(transitions)]


def assess_once(request: AssessmentRequest, rec: dict[str, Any], *, method: str = "verify",
                seconds: int = 180) -> AssessmentOutcome | None:
    """The daemon's assessor on ``request``; its seconds go in ``rec``. None when it did not
    end with an outcome: ``rec["status"]`` then says how (hang, crash, or failed closed on
    an agent the assessor could not reach)."""
    t0 = time.monotonic()
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        return EngineAssessor(method=method).assess(request)
    except Timeout:
        rec["status"] = "hang"
    except AgentUnavailable as exc:
        rec.update(status="failed_closed", why=f"agent unavailable: {exc}")
    except Exception as exc:
        rec.update(status="crash", error=f"{type(exc).__name__}: {exc}",
                   tb=traceback.format_exc()[-2000:])
    finally:
        signal.alarm(0)
        rec["seconds"] = round(time.monotonic() - t0, 2)
    return None
