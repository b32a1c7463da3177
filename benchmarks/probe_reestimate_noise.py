"""Noise versions of honest agents and real drifts through the stream's alarm (session 18).

tireworld's move-car: the stream's sequential detector (capwatch.monitor ActionMonitor,
the defaults) sees an agent's executions until it alarms; the daemon's assessor
(``EngineAssessor``, the audit's defaults) then re-estimates the action by queries to the
agent, with the alarm's evidence as the daemon passes it. Per case and seed:

- honest (the agent draws the model's probabilities): the stream replays one episode of
  10 executions drawn once (oper18b's fleet seeded every walk alike), so an unusual
  episode raises the alarm; a published version is a noise version;
- drift: 500 executions from the model, then from the drifted probabilities; a version
  the fleet audit would not reject on the truth's expected counts (window 2,000, X² at
  most the 0.05 critical value) is right, one it would reject is wrong, no version is
  kept (the alarm's back-off and drift_not_confirmed follow), unexplained is failed.

    PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=TREE:. python benchmarks/probe_reestimate_noise.py [SEEDS]

Run it with PYTHONPATH at two trees (before/after) in turn; the request carries the
alarm's evidence only where the tree's AssessmentRequest has ``drift_evidence``.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import Any

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor
from capwatch.daemon.work import DriftProbe
from capwatch.model.domain import Domain
from capwatch.model.pddl_domain import parse_domain
from capwatch.monitor.action_drift import ActionMonitor
from capwatch.monitor.drift_evidence import DriftAlarm
from capwatch.monitor.stats import chi2_isf

TIRE = """(define (domain tire)
  (:requirements :typing :probabilistic-effects)
  (:types location)
  (:predicates (vehicle-at ?l - location) (road ?a ?b - location) (not-flattire))
  (:action move-car
    :parameters (?from ?to - location)
    :precondition (and (vehicle-at ?from) (road ?from ?to) (not-flattire))
    :effect (and (vehicle-at ?to) (not (vehicle-at ?from))
                 (probabilistic P (not (not-flattire))))))"""
PROBE = DriftProbe(("move-car", "a", "b"),
                   frozenset({("vehicle-at", "a"), ("road", "a", "b"), ("not-flattire",)}))
WINDOW = 2000
CASES = (("honest", 0.8, 0.8), ("honest", 0.5, 0.5), ("honest", 0.1, 0.1),
         ("drift", 0.8, 0.5), ("drift", 0.8, 0.7), ("drift", 0.1, 0.01))
HAS_EVIDENCE = "drift_evidence" in {f.name for f in dataclasses.fields(AssessmentRequest)}


def _tire(p_flat: float) -> Domain:
    return parse_domain(TIRE.replace(" P ", f" {p_flat} "), "tire")


def _draw(rng: random.Random, probs: list[float]) -> int:
    u, acc = rng.random(), 0.0
    for i, p in enumerate(probs):
        acc += p
        if u < acc:
            return i
    return len(probs) - 1


def _alarm(kind: str, known: Domain, truth: Domain, seed: int) -> DriftAlarm | None:
    monitor = ActionMonitor(known.action("move-car"))
    rng = random.Random(seed)
    old = [o.probability for o in known.action("move-car").outcomes]
    new = [o.probability for o in truth.action("move-car").outcomes]
    episode = [_draw(rng, new) for _ in range(10)]
    for i in range(20_000):
        if kind == "honest":
            outcome = episode[i % len(episode)]
        else:
            outcome = _draw(rng, old if i < 500 else new)
        alarm = monitor.observe(outcome)
        if alarm is not None and alarm.provisional:
            return alarm
    return None


def main(seeds: int) -> None:
    critical = chi2_isf(0.05, 1)
    for kind, p_known, p_truth in CASES:
        known, truth = _tire(p_known), _tire(p_truth)
        t = [o.probability for o in truth.action("move-car").outcomes]
        tally = {"alarms": 0, "version": 0, "right": 0, "wrong": 0, "kept": 0, "failed": 0}
        for seed in range(seeds):
            alarm = _alarm(kind, known, truth, seed)
            if alarm is None:
                continue
            tally["alarms"] += 1
            extra: dict[str, Any] = {"drift_evidence": {"move-car": alarm.evidence.to_dict()}} \
                if HAS_EVIDENCE else {}
            out = EngineAssessor().assess(AssessmentRequest(
                "tire-1", "tire", known, SimulatedAgent(truth, seed=seed),
                drifted_actions={"move-car": alarm.updated_action},
                drift_probes={"move-car": PROBE}, **extra))
            if out.unexplained:
                tally["failed"] += 1
            elif out.model == known:
                tally["kept"] += 1
            else:
                tally["version"] += 1
                got = [o.probability for o in out.model.action("move-car").outcomes]
                x2 = WINDOW * sum((a - b) ** 2 / b for a, b in zip(t, got, strict=True))
                tally["wrong" if x2 > critical else "right"] += 1
        print(f"{kind} model {p_known} agent {p_truth}: {tally}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
