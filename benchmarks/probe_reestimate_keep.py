"""When a probability drift's re-estimate keeps the current probabilities (session 18).

tireworld's move-car through the daemon's assessor (``EngineAssessor``, the audit's
defaults: window 2,000, level 0.05), 20 seeds per case: the current version's flat-tyre
probability and the one the agent draws. Prints per case how often the current model was
kept, how many kept or published models the audit would reject on the truth's expected
counts (X² over the critical value), and the samples asked (median, max).

    PYTHONPATH=. python benchmarks/probe_reestimate_keep.py [SEEDS]

rare17's loop case is current 0.00578 against the truth 0.01; current = truth is a false
alarm of the audit (docs/assessment.md, "Re-estimates relative to each probability's
size, and kept models held to the audit").
"""

from __future__ import annotations

import sys

from capwatch.adapters.sim.agent import SimulatedAgent
from capwatch.daemon.assessor import AssessmentRequest, EngineAssessor
from capwatch.monitor.stats import chi2_isf
from tests.daemon.test_reestimate_agrees import PROBE, _tire

WINDOW = 2000
CASES = ((0.00578, 0.01), (0.01, 0.012), (0.1, 0.115), (0.01, 0.01), (0.1, 0.1),
         (0.5, 0.5), (0.8, 0.8))


def _x2(truth: list[float], model: list[float]) -> float:
    return WINDOW * sum((a - b) ** 2 / b for a, b in zip(sorted(truth), sorted(model),
                                                          strict=True))


def main(seeds: int) -> None:
    critical = chi2_isf(0.05, 1)
    for current, drawn in CASES:
        known, truth = _tire(current), _tire(drawn)
        t = [o.probability for o in truth.action("move-car").outcomes]
        kept = kept_bad = published = published_bad = 0
        samples = []
        for seed in range(seeds):
            out = EngineAssessor().assess(AssessmentRequest(
                "tire-1", "tire", known, SimulatedAgent(truth, seed=seed),
                drifted_actions={"move-car": known.action("move-car")},
                drift_probes={"move-car": PROBE}))
            samples.append(out.details["estimates"]["move-car"]["samples"])
            bad = _x2(t, [o.probability for o in out.model.action("move-car").outcomes]) \
                > critical
            if out.model == known:
                kept, kept_bad = kept + 1, kept_bad + bad
            else:
                published, published_bad = published + 1, published_bad + bad
        samples.sort()
        print(f"current {current} truth {drawn}: kept {kept} (audit rejects on the truth: "
              f"{kept_bad}), published {published} (rejects: {published_bad}), samples "
              f"median {samples[len(samples) // 2]} max {samples[-1]}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
