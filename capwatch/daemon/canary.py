"""Canary probes: ask an agent to run actions the stream has not shown it running lately.

A lost capability is invisible to the monitor when the agent stops attempting the
action. The prober (a scheduler job, run on the main loop) picks, per agent, the actions
idle for ``canary_idle_s``, grounds each with the family's objects, makes its
precondition true in the agent's last reported state (or the family problem's initial
state), and asks the agent on a thread of its own. An answer the model cannot explain
comes back to the main loop as a :class:`~capwatch.daemon.work.CanaryFinding`, evidence
exactly like an inconsistent transition from the stream but from no record (offset -1),
so it holds no commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import structlog

from capwatch.assess.agent import AgentUnavailable
from capwatch.contracts.ports import AgentDirectory
from capwatch.contracts.wire import AgentTransition
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.work import CanaryFinding, Result
from capwatch.model.consistency import Verdict, check
from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.grounding import Grounder

log = structlog.get_logger("capwatch.daemon")


class CanaryProber:
    def __init__(self, *, agents: AgentDirectory, metrics: DaemonMetrics, idle_s: float,
                 clock: Callable[[], datetime], post: Callable[[Result], None]) -> None:
        self.agents = agents
        self.metrics = metrics
        self.idle_s = idle_s
        self.clock = clock
        self.post = post
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="canary")

    def probe_idle(self, watches: Iterable[AgentWatch],
                   problems: Mapping[str, frozenset[GroundAtom]],
                   objects: Mapping[str, Mapping[str, tuple[str, ...]]]) -> None:
        """Queue a probe of every idle action of every agent not awaiting work."""
        now = time.monotonic()
        for watch in watches:
            if watch.awaiting is not None or watch.family not in objects:
                continue
            base_state = watch.last_state or problems.get(watch.family, frozenset())
            for action in watch.domain.actions:
                if now - watch.last_executed.get(action.name, -1e18) < self.idle_s:
                    continue
                args: list[str] = []
                for p in action.parameters:
                    candidates = objects[watch.family].get(p.type, ())
                    pick = next((c for c in candidates if c not in args), None)
                    if pick is None:
                        break
                    args.append(pick)
                if len(args) != action.arity:
                    continue
                ground = (action.name, *args)
                binding = dict(zip(action.parameter_names, args, strict=True))
                state = (set(base_state) | {a.ground(binding) for a in action.pre_pos}) - {
                    a.ground(binding) for a in action.pre_neg}
                watch.last_executed[action.name] = now  # one probe per idle period
                self._pool.submit(self._probe, watch.agent_id, watch.family, watch.domain,
                                  frozenset(state), ground)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _probe(self, agent_id: str, family: str, domain: Domain,
               state: frozenset[GroundAtom], ground: GroundAction) -> None:
        try:
            answer = self.agents.agent(agent_id, family).query(state, [ground], 1)[0]
        except AgentUnavailable as e:
            self.metrics.canaries.labels(family, "unavailable").inc()
            log.warning("canary failed", agent_id=agent_id, error=str(e))
            return
        grounder = Grounder(domain)
        op = grounder.operator(ground)
        s = grounder.index.encode(state)
        verdict, _ = check(op, s, grounder.index.encode(answer.state))
        if answer.executed == 0 and verdict is not Verdict.INCONSISTENT and op.applicable(s):
            # Refused although the model says it applies, and nothing changed: the check
            # above calls that NOT_APPLICABLE only if the precondition failed, so a
            # refusal of an applicable action is a finding too.
            verdict = Verdict.INCONSISTENT
        self.metrics.canaries.labels(family, verdict.name.lower()).inc()
        if verdict is Verdict.INCONSISTENT:
            t = AgentTransition(agent_id, family, "canary", None, self.clock(), state, ground,
                                answer.state, False, answer.executed > 0)
            log.info("canary found an inconsistency", agent_id=agent_id, action=list(ground))
            self.post(CanaryFinding(agent_id, t))
