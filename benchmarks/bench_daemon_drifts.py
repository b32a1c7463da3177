"""The daemon end to end on IPC domains with hand-made drifts, as an outside checker runs it.

For each drift in tests/data/domains/own/ipc-drifts/<domain>/<drift>.pddl, a simulated fleet
of the domain's agents (its problem.pddl) runs through ``build_service``: one agent switches
to the drifted domain, the others do not. The daemon must publish exactly one version for
the drifted agent, whose model equals the drifted domain (Δ 0 over all pal-tuples), or
mark what it could not decide as unresolved (or fail the assessment with a reason, when the
drift lies outside the pal-tuples it learns); no other agent may get a version. Prints a
table: queries the drifted agent answered, versions right/wrong/open, spurious versions,
failed assessments, alerts, wall and CPU seconds (CPU of the whole process: the fleet
simulator's share included).

A drift that adds a precondition shows in the stream only when the agent happens to try
the action where it now fails; ``--canary-s`` makes the daemon probe actions that often
(the default, 60 s, is longer than a short run), which is how such drifts are found.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.service import build_service
from capwatch.model.pal import AbstractModel
from capwatch.model.pddl_reader import read_domain
from capwatch.model.serialize import domain_from_json
from tests.paths import DATA, IPC

DRIFTS = DATA / "own" / "ipc-drifts"


@dataclass
class Outcome:
    case: str
    queries: int
    right: int
    wrong: int
    open: int
    spurious: int
    failed: int
    """assessment_failed alerts: nothing published, the operator told why."""
    alerts: list[str]
    wall_s: float
    cpu_s: float
    assess_s: float
    """Wall seconds the daemon's assessments took (its histogram's sum), queries included."""
    note: str


def run_case(drift: Path, *, agents: int, rounds: int, at_step: int, seed: int,
             method: str, canary_s: float | None) -> Outcome:
    name = drift.parent.name
    family = f"{name}-v1"
    target = f"{family}-001"
    with tempfile.TemporaryDirectory() as tmp:
        settings: dict[str, Any] = {
            "replica_id": "bench",
            "store": {"url": f"sqlite:///{tmp}/models.db"},
            "families": {family: {"domain": str(IPC / name / "domain.pddl"),
                                  "problem": str(IPC / name / "problem.pddl")}},
            "source": {"kind": "simulated", "simulated": {
                "families": {family: {"agents": agents}}, "rounds": rounds, "seed": seed,
                "drifts": [{"agent_id": target, "at_step": at_step, "domain": str(drift)}]}},
            "output": {"kind": "log"}, "http": {"enabled": False},
            "log": {"level": "error"},
            "detection": {"debounce_transitions": 3, "debounce_s": 0.5},
            "scheduler": {"checkpoint_s": 0.5, **({} if canary_s is None else {
                "canary_s": canary_s, "canary_idle_s": 2 * canary_s,
                "canary_busy_s": 4 * canary_s})},
            "assessment": {"method": method},
        }
        cfg = DaemonConfig(**settings)
        out = MemoryPublisher()
        wall, cpu = time.perf_counter(), time.process_time()
        service = build_service(cfg, publisher=out)
        code = service.run(exit_when_idle=True, install_signals=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        fleet: Any = service.pipeline.agents.fleet  # type: ignore[attr-defined]
        truth = read_domain(drift)
        notes = [] if code == 0 else [f"exit {code}"]
        drifted = set(fleet.drifted_agents())
        if drifted != {target}:
            notes.append(f"drifted in the fleet: {sorted(drifted)}")
        right = wrong = opened = 0
        for m in out.models:
            if m.agent_id != target:
                continue
            learned = domain_from_json(m.model.json_)
            differ = AbstractModel.from_domain(learned).diff(AbstractModel.from_domain(truth))
            # Pal-tuples of actions the version says it did not check (carried over from
            # the parent, or unresolved) are open, not wrong: the version does not claim
            # them (daaisy checks only the actions the evidence points at).
            unchecked = set() if m.coverage is None else {
                *m.coverage.carried_over_actions, *m.coverage.unresolved_actions}
            if not differ:
                right += 1
            elif all(pal.action in unchecked for pal, _, _ in differ):
                opened += 1
                notes.append(f"v{m.version} Δ{len(differ)}, all in actions it did not check "
                             f"({', '.join(sorted(unchecked))})")
            else:
                wrong += 1
                notes.append(f"v{m.version} Δ{len(differ)} to the drift: "
                             f"{' | '.join(m.summary)}")
        spurious = [m for m in out.models if m.agent_id != target]
        for m in spurious:
            notes.append(f"spurious {m.agent_id} v{m.version}: {' | '.join(m.summary)}")
        if not any(m.agent_id == target for m in out.models):
            notes.append("no version for the drifted agent")
        alerts = [f"{a.alert_type}: {a.summary}" for a in out.alerts if a.agent_id == target
                  and a.alert_type != "unexplained_inconsistency"]
        alerts += [f"[{a.agent_id}] {a.alert_type}: {a.summary}" for a in out.alerts
                   if a.agent_id != target]
        failed = sum(a.alert_type == "assessment_failed" for a in out.alerts)
        assess_s = service.pipeline.metrics.registry.get_sample_value(
            "capwatch_assessment_duration_seconds_sum", {"family": family}) or 0.0
        return Outcome(f"{name}/{drift.stem}", fleet.simulated_agent(target).stats.queries,
                       right, wrong, opened, len(spurious), failed, alerts, wall, cpu, assess_s,
                       "; ".join(notes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("domains", nargs="*", help="domain names (default: every drift)")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--at-step", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--canary-s", type=float, default=None,
                        help="probe actions this often (default: the daemon's 60 s, which a "
                             "short run never reaches)")
    parser.add_argument("--method", default="verify", choices=["verify", "daaisy", "auto"])
    args = parser.parse_args()
    configure_logging("error", "console")
    cases = sorted(p for p in DRIFTS.glob("*/*.pddl")
                   if not args.domains or p.parent.name in args.domains)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.agents} agents x {args.rounds} "
          f"transitions, drift at step {args.at_step}, seed {args.seed}, {args.method}")
    print(f"{'drift':42} {'queries':>7} {'right':>5} {'wrong':>5} {'open':>4} "
          f"{'spur.':>5} {'fail':>4} {'wall s':>7} {'cpu s':>7} {'assess s':>8}")
    for case in cases:
        o = run_case(case, agents=args.agents, rounds=args.rounds, at_step=args.at_step,
                     seed=args.seed, method=args.method,
                     canary_s=args.canary_s)
        print(f"{o.case:42} {o.queries:7} {o.right:5} {o.wrong:5} {o.open:4} {o.spurious:5} "
              f"{o.failed:4} {o.wall_s:7.1f} {o.cpu_s:7.1f} {o.assess_s:8.2f}", flush=True)
        for a in o.alerts:
            print(f"    alert {a}")
        if o.note:
            print(f"    NOTE {o.note}")


if __name__ == "__main__":
    main()
