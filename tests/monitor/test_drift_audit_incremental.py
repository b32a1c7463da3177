"""The fleet audit keeps each table's test from the last audit while the table's counts
stay the same (DriftMonitor.audit): its findings must be those of testing every table
afresh, as the audit did before it kept anything.

A subject DriftMonitor is audited after every round of random updates (so it reuses what
it kept); the reference is every table tested anew and BH over all of them, worked out
here from the tables alone. Between rounds agents record executions (drifted for some,
so tables are rejected), are packed, unpacked by a record, saved and restored (eviction
and a restart), forgotten, or move to a new model version of an action (new
probabilities, same name); both window kinds.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from capwatch.model.domain import Action
from capwatch.monitor.drift import AuditFinding, DriftConfig, DriftMonitor, with_probabilities
from capwatch.monitor.snapshot import restore_agent, snapshot_agent
from capwatch.monitor.stats import benjamini_hochberg
from tests.monitor.test_drift_state_fuzz import ACTIONS


def _full_audit(drift: DriftMonitor) -> list[tuple[Any, ...]]:
    """Every stochastic table tested afresh (packed ones unpacked), BH over all tested."""
    tested = []
    for (agent_id, _), mon in drift:
        if mon.stochastic:
            gof = mon.test()
            if gof.tested:
                tested.append((agent_id, mon, gof))
    if not tested:
        return []
    rejected, q = benjamini_hochberg([g.p_value for _, _, g in tested], drift.config.fdr)
    return sorted((agent_id, mon.action.name, mon.action.header(), gof, float(qv), bool(rej),
                   mon.evidence().to_dict() if rej else None)
                  for (agent_id, mon, gof), rej, qv in zip(tested, rejected, q, strict=True))


def _findings(findings: list[AuditFinding]) -> list[tuple[Any, ...]]:
    out = []
    for f in findings:
        evidence = None
        if f.evidence is not None:
            assert f.evidence.agent_id == f.agent_id and f.evidence.q_value == f.q_value
            evidence = f.evidence.to_dict()
            # The reference's evidence has neither (they are the audit's to fill in).
            evidence.pop("agent_id", None)
            evidence.pop("q_value", None)
        out.append((f.agent_id, f.action_name, f.action, f.gof, f.q_value, f.rejected,
                    evidence))
    return sorted(out)


def _reference(findings: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    out = []
    for row in findings:
        evidence = row[-1]
        if evidence is not None:
            evidence = dict(evidence)
            evidence.pop("agent_id", None)
            evidence.pop("q_value", None)
        out.append((*row[:-1], evidence))
    return out


def _run(seed: int, config: DriftConfig) -> tuple[int, int, int, int]:
    rng = random.Random(seed)
    drift = DriftMonitor(config)
    agents = [f"a{i}" for i in range(12)]
    used = rng.sample(ACTIONS, k=min(4, len(ACTIONS)))
    current = {(a, act.name): act for a in agents for act in used}
    # A third of the agents run their actions away from the model: rejections.
    skew = {(a, act.name): ([rng.random() ** 3 for _ in act.outcomes] if i % 3 == 0
                            else [o.probability for o in act.outcomes])
            for i, a in enumerate(agents) for act in used}
    rejected = kept = packed_audits = kept_evidence = 0
    for _ in range(120):
        for agent in rng.sample(agents, k=rng.randrange(0, len(agents) + 1)):
            for _ in range(rng.randrange(1, 25)):
                act = used[rng.randrange(len(used))]
                action = current[(agent, act.name)]
                outcome = -1 if rng.random() < 0.05 else rng.choices(
                    range(len(action.outcomes)), weights=skew[(agent, act.name)])[0]
                drift.observe(agent, action, outcome, rng.random() < 0.8)
        for agent in rng.sample(agents, k=rng.randrange(0, 5)):
            what = rng.random()
            if what < 0.45:
                drift.pack(agent)
            elif what < 0.7 and drift.has(agent):
                # Eviction and read-back: saved, forgotten, restored (unpacked).
                saved = json.loads(json.dumps(snapshot_agent(drift, agent)))
                drift.forget(agent)
                restore_agent(drift, agent, {a.name: current[(agent, a.name)] for a in used},
                              saved)
            elif what < 0.8:
                drift.forget(agent)
            elif what < 0.95:
                # A new model version of one action (same name, other probabilities):
                # its table starts afresh at the agent's next execution of it.
                act = used[rng.randrange(len(used))]
                old = current[(agent, act.name)]
                if len(old.outcomes) >= 2:
                    current[(agent, act.name)] = with_probabilities(
                        old, [rng.random() + 0.05 for _ in old.outcomes])
            else:
                # An unpacked read of a packed agent changes nothing.
                drift.tables(agent)
        before = {key: entry[1] for key, entry in drift._audited.items()}
        evidence_before = {key: entry[2] for key, entry in drift._evidence.items()}
        got = drift.audit()
        assert _findings(got) == _reference(_full_audit(drift))
        rejected += sum(f.rejected for f in got)
        kept += sum(drift._audited[key][1] is gof for key, gof in before.items()
                    if key in drift._audited)
        kept_evidence += sum(drift._evidence[key][2] is ev for key, ev in evidence_before.items()
                             if key in drift._evidence)
        packed_audits += sum(1 for f in got if drift.packed(f.agent_id))
    return rejected, kept, packed_audits, kept_evidence


@pytest.mark.parametrize("kind", ["sliding", "tumbling"])
def test_an_audit_that_keeps_results_finds_what_a_full_audit_finds(kind: str) -> None:
    config = DriftConfig(window=150, min_samples=40, false_alarm_rate=1e-3,
                         window_kind=kind)  # type: ignore[arg-type]
    totals = [sum(t) for t in zip(*(_run(seed, config) for seed in range(3)), strict=True)]
    rejected, kept, packed_audits, kept_evidence = totals
    # Not vacuous: tables were rejected, results and evidence were reused, packed tables
    # tested.
    assert rejected > 10 and kept > 100 and packed_audits > 10 and kept_evidence > 10, totals


def test_an_unchanged_table_keeps_its_result_and_a_changed_one_is_retested() -> None:
    action = next(a for a in ACTIONS if len(a.outcomes) == 2)
    drift = DriftMonitor(DriftConfig(window=200, min_samples=50))
    for i in range(120):
        drift.observe("a", action, i % 2)
        drift.observe("b", action, i % 2)
    first = {f.agent_id: f.gof for f in drift.audit()}
    assert set(first) == {"a", "b"}
    drift.observe("b", action, 0)
    drift.pack("a")
    second = {f.agent_id: f.gof for f in drift.audit()}
    assert second["a"] is first["a"]  # kept: packing changes no count
    assert second["b"] is not first["b"] and second["b"].n == first["b"].n + 1
    third = {f.agent_id: f.gof for f in drift.audit()}
    assert third["a"] is first["a"] and third["b"] is second["b"]
    # Too few executions after a new model version: no longer tested.
    drift.observe("b", with_probabilities(action, [0.3, 0.7]), 0)
    assert {f.agent_id for f in drift.audit()} == {"a"}


@pytest.mark.parametrize("pack", [False, True])
def test_the_same_counts_under_a_new_model_version_are_tested_again(pack: bool) -> None:
    action = next(a for a in ACTIONS if len(a.outcomes) == 2)
    newer = with_probabilities(action, [0.5, 0.5])
    drift = DriftMonitor(DriftConfig(window=200, min_samples=50))
    for version in (action, newer):
        # The very same executions against each version: the same counts.
        for i in range(120):
            drift.observe("a", version, i % 2)
        if version is newer and pack:
            assert drift.pack("a")
        (finding,) = drift.audit()
        assert finding.gof == _fresh_test(drift, version)


def _fresh_test(drift: DriftMonitor, version: Action) -> Any:
    """The table's test against ``version``, worked out afresh."""
    (mon,) = drift.tables("a").values()
    assert mon.action == version
    return mon.test()
