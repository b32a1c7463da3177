"""The drift path's shortcuts decide exactly as the plain arithmetic they replace.

``SequentialDetector.update`` takes each outcome's rows and each ambiguous group's
likelihood ratios from shared tables, ``OutcomeWindow`` counts in plain lists,
``attribution_from_mask`` hands out shared attributions when every outcome leads
elsewhere, and snapshots pack the window from an array at a faster deflate level. The
references below are the straightforward forms (the code before these shortcuts): every
statistic must come out bit for bit the same, so every alarm, change point and count is
the same.
"""

from __future__ import annotations

import base64
import math
import random
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

from capwatch.model.domain import Action, LiftedAtom, Outcome
from capwatch.model.grounding import GroundOperator
from capwatch.monitor.attribution import Attribution, attribute, attribution_from_mask
from capwatch.monitor.drift import ActionMonitor, DriftConfig, DriftMonitor
from capwatch.monitor.sequential import (
    WAITING_CAP,
    SequentialDetector,
    apply_waiting,
    block_llr,
    tilted_alternatives,
)
from capwatch.monitor.snapshot import encode_action_state, restore_agent, snapshot_agent
from capwatch.monitor.tables import OutcomeWindow


@dataclass
class ReferenceSR:
    """Mixture Shiryaev–Roberts with per-alternative CUSUMs, every table computed anew."""

    p0: np.ndarray
    threshold: float
    alternatives: np.ndarray = field(init=False)
    w: np.ndarray = field(init=False)
    r: np.ndarray = field(init=False)
    c: np.ndarray = field(init=False)
    start: np.ndarray = field(init=False)
    n: int = 0
    alarmed: bool = False

    def __post_init__(self) -> None:
        self.alternatives, logw = tilted_alternatives(self.p0)
        self.w = np.exp(logw)
        self.restart()

    def restart(self) -> None:
        g = len(self.alternatives)
        self.r, self.c = np.zeros(g), np.zeros(g)
        self.start = np.zeros(g, dtype=np.int64)
        self.n, self.alarmed = 0, False

    def update(self, explaining: tuple[int, ...]) -> bool:
        if self.alarmed:
            self.restart()
        if len(explaining) == len(self.p0):
            return False
        llr = (np.log(self.alternatives[:, explaining[0]]) - np.log(self.p0[explaining[0]])
               if len(explaining) == 1 else block_llr(self.p0, self.alternatives, explaining))
        self.r = (1.0 + self.r) * np.exp(llr)
        self.c = self.c + llr
        fresh = self.c <= 0.0
        self.c[fresh] = 0.0
        self.start[fresh] = self.n + 1
        self.n += 1
        self.alarmed = float(self.r @ self.w) >= self.threshold
        return self.alarmed


def stream(rng: random.Random, p: list[float], q: list[float], n: int, change: int,
           groups: list[tuple[tuple[int, ...], ...]]) -> list[Attribution]:
    """Outcomes from p, then from q after ``change``; each seen through one of ``groups``
    (partitions of the outcomes), as pre-states that hide some outcomes would."""
    out = []
    for i in range(n):
        x = rng.choices(range(len(p)), p if i < change else q)[0]
        partition = rng.choice(groups)
        out.append(Attribution(partition, next(b for b, g in enumerate(partition) if x in g)))
    return out


CASES = [
    ([0.8, 0.2], [0.55, 0.45], [((0,), (1,))]),
    ([0.1, 0.9], [0.1, 0.9], [((0,), (1,)), ((0, 1),)]),
    ([0.2, 0.3, 0.5], [0.45, 0.3, 0.25], [((0,), (1,), (2,)), ((0, 1), (2,)), ((0,), (1, 2))]),
    ([0.05, 0.15, 0.3, 0.5], [0.25, 0.15, 0.3, 0.3],
     [((0,), (1,), (2,), (3,)), ((0, 2), (1, 3)), ((0, 1, 2), (3,))]),
]


@pytest.mark.parametrize(("p", "q", "groups"), CASES)
def test_sequential_detector_matches_the_reference_bit_for_bit(
        p: list[float], q: list[float], groups: list[tuple[tuple[int, ...], ...]]) -> None:
    rng = random.Random(len(p) * 7 + len(groups))
    # A high false-alarm rate, so that alarms (and the restarts after them) happen often.
    det = SequentialDetector(p, false_alarm_rate=1e-2)
    ref = ReferenceSR(np.asarray(p), math.exp(det.log_threshold))
    alarms = []
    for i, obs in enumerate(stream(rng, p, q, 4_000, 2_000, groups)):
        got = det.update(obs if rng.random() < 0.7 or obs.outcome is None else obs.outcome)
        assert got == ref.update(obs.explaining), i
        assert det.n == ref.n
        if got:
            alarms.append(i)
            assert det.change_point == int(ref.start[int(np.argmax(ref.c))])
            assert det.log_statistic == math.log(float(ref.r @ ref.w))
        if got or i % 97 == 0:
            state = det.export_state()
            assert state["r"] == ref.r.tolist() and state["cusum"] == ref.c.tolist()
            assert state["start"] == ref.start.tolist()
    assert alarms, "the case should raise alarms, or it tests nothing"


def test_outcome_window_counts_as_a_plain_record_does() -> None:
    rng = random.Random(5)
    for kind in ("sliding", "tumbling"):
        w = OutcomeWindow(3, 50, kind)
        values: list[int] = []
        for _ in range(400):
            v = rng.choice([0, 1, 2, -1])
            w.add(Attribution(((0, 1), (2,)), 0) if v == -1 else v)
            values.append(v)
            last = values[-50:] if kind == "sliding" else (
                values[(len(values) // 50 - 1) * 50:(len(values) // 50) * 50]
                if len(values) >= 50 else [])
            want = [last.count(i) for i in range(3)]
            assert w.counts().tolist() == want and w.counts().dtype == np.int64
            assert w.ambiguous() == last.count(-1)
        copy = OutcomeWindow(3, 50, kind)
        copy.load_state(w.export_state())
        assert copy.export_state() == w.export_state()
        for v in (0, 2, 1):
            w.add(v)
            copy.add(v)
        assert copy.export_state() == w.export_state()
        assert copy.counts().tolist() == w.counts().tolist()


def _action(*probabilities: float) -> Action:
    return Action("go", (), outcomes=tuple(
        Outcome(add=frozenset({LiftedAtom(f"o{i}")}), probability=p)
        for i, p in enumerate(probabilities)))


def test_action_monitor_alarms_at_the_same_step_through_either_path() -> None:
    action = _action(0.7, 0.3)
    cfg = DriftConfig(false_alarm_rate=1e-3, confirm_half_width=None)
    by_int, by_attr = ActionMonitor(action, cfg), ActionMonitor(action, cfg)
    rng = random.Random(9)
    fired = []
    for i in range(4_000):
        x = rng.choices([0, 1], [0.7, 0.3] if i < 1_500 else [0.4, 0.6])[0]
        a, b = by_int.observe(x), by_attr.observe(Attribution(((0,), (1,)), x))
        assert (a is None) == (b is None), i
        if a is not None and b is not None:
            fired.append(i)
            assert a.evidence.gof.counts == b.evidence.gof.counts
    assert fired


def test_shared_attributions_equal_the_partitioned_ones() -> None:
    action = _action(0.5, 0.3, 0.2)
    rng = random.Random(2)
    for _ in range(300):
        effects = tuple((~rng.getrandbits(4), rng.getrandbits(4)) for _ in range(3))
        op = GroundOperator(action, (), 0, 0, effects)
        state = rng.getrandbits(6)
        successors = [(state & keep) | add for keep, add in effects]
        nxt = rng.choice(successors)
        matched = sum(1 << i for i, s in enumerate(successors) if s == nxt)
        assert attribution_from_mask(op, state, matched) == attribute(op, state, nxt)


def test_snapshots_pack_the_window_as_the_plain_export_does_and_read_any_level() -> None:
    action = _action(0.6, 0.3, 0.1)
    drift = DriftMonitor(DriftConfig(window=300))
    rng = random.Random(4)
    for i in range(1_000):
        x = rng.choices([0, 1, 2], [0.6, 0.3, 0.1])[0]
        drift.observe("a", action, x if i % 7 else Attribution(((0, 1), (2,)), 0 if x < 2 else 1))
    snap = snapshot_agent(drift, "a")
    plain = {name: encode_action_state(state)
             for name, state in drift.agent_states("a").items()}
    assert snap["actions"] == plain
    # A snapshot deflated at another level (as written before) reads the same.
    state = drift.agent_states("a")["go"]
    packed = dict(plain["go"])
    shifted = np.asarray(state["window"]["values"], dtype=np.int64) + 1
    packed["values"] = base64.b64encode(
        zlib.compress(shifted.astype(np.uint8).tobytes(), 9)).decode()
    again = DriftMonitor(DriftConfig(window=300))
    skipped = restore_agent(again, "a", {"go": action}, {**snap, "actions": {"go": packed}})
    assert skipped == {}
    assert again.agent_states("a") == drift.agent_states("a")
    for x in (0, 1, 2, 0):
        assert (drift.observe("a", action, x) is None) == (again.observe("a", action, x) is None)
    assert again.agent_states("a") == drift.agent_states("a")


def test_an_unwanted_alarm_leaves_the_table_exactly_as_a_wanted_one_does() -> None:
    """An agent awaiting an assessment ignores alarms, so none is made for it (its
    evidence costs milliseconds); the table, its detector and the confirmation's plan
    must still move exactly as they would have, alarm after alarm."""
    action = _action(0.7, 0.2, 0.1)
    cfg = DriftConfig(false_alarm_rate=1e-3)
    wanted, unwanted = ActionMonitor(action, cfg), ActionMonitor(action, cfg)
    rng = random.Random(4)
    kinds = []
    for i in range(6_000):
        x = rng.choices([0, 1, 2], [0.7, 0.2, 0.1] if i < 1_000 else [0.4, 0.3, 0.3])[0]
        alarm = wanted.observe(x)
        assert unwanted.observe(x, wanted=False) is None
        if alarm is not None:
            kinds.append(alarm.provisional)
        assert unwanted.export_state() == wanted.export_state(), i
        assert unwanted.confirming == wanted.confirming
    assert kinds.count(True) >= 2 and kinds.count(False) >= 2  # alarms and confirmations


Grouping = tuple[tuple[int, ...], ...]


def _random_case(rng: random.Random) -> tuple[list[float], list[float], list[Grouping]]:
    """A model p, a changed q and the groupings its pre-states may show, at random."""
    k = rng.randint(2, 5)
    p = [rng.uniform(0.02, 1.0) for _ in range(k)]
    q = [v * math.exp(rng.uniform(-2.0, 2.0)) for v in p]
    p = [v / sum(p) for v in p]
    q = [v / sum(q) for v in q]
    groups: list[Grouping] = [tuple((i,) for i in range(k))]
    for _ in range(rng.randint(0, 3)):
        labels = [rng.randrange(k) for _ in range(k)]
        blocks = sorted({tuple(i for i in range(k) if labels[i] == b) for b in set(labels)})
        groups.append(tuple(blocks))
    return p, q, groups


@pytest.mark.parametrize("seed", range(16))
def test_the_dot_products_the_detector_skips_never_hide_an_alarm(seed: int) -> None:
    """``update`` takes the mixture's dot product only when a bound on it (from the last
    one taken and each step's largest likelihood ratio) comes near the threshold: over
    random models, groupings, changes, thresholds and state round trips (whose bound is
    unknown), every decision, change point and statistic is the reference's, which takes
    the dot product at every step."""
    rng = random.Random(seed)
    p, q, groups = _random_case(rng)
    rate = 10 ** rng.uniform(-6.0, -1.5)
    det = SequentialDetector(p, false_alarm_rate=rate)
    ref = ReferenceSR(np.asarray(p), math.exp(det.log_threshold))
    alarms = 0
    for i, obs in enumerate(stream(rng, p, q, 2_000, rng.randrange(2_000), groups)):
        if i % 500 == 250:
            # A detector continued from its bytes or its plain state does not know the
            # bound: it must take the dot product before it may skip it again.
            twin = SequentialDetector(p, false_alarm_rate=rate)
            if i % 1_000 == 250:
                twin.unpack(det.pack())
            else:
                twin.load_state(det.export_state())
            det = twin
        got = det.update(obs)
        assert got == ref.update(obs.explaining), i
        assert det.n == ref.n
        if got:
            alarms += 1
            assert det.change_point == int(ref.start[int(np.argmax(ref.c))])
            assert det.log_statistic == math.log(float(ref.r @ ref.w))
        if got or i % 211 == 0:
            state = det.export_state()
            assert state["r"] == ref.r.tolist() and state["cusum"] == ref.c.tolist()
            assert state["start"] == ref.start.tolist()
    assert det.log_statistic == (math.log(float(ref.r @ ref.w)) if ref.r.any() else -math.inf)
    if seed < 4:
        assert alarms, "these cases should raise alarms, or they test nothing"


def _same_as_reference(det: SequentialDetector, ref: ReferenceSR) -> None:
    state = det.export_state()
    assert state["n"] == ref.n and state["alarmed"] == ref.alarmed
    assert state["r"] == ref.r.tolist() and state["cusum"] == ref.c.tolist()
    assert state["start"] == ref.start.tolist()


@pytest.mark.parametrize("seed", range(12))
def test_waiting_updates_applied_together_match_the_reference(seed: int) -> None:
    """An update the bound clears waits (``SequentialDetector.waiting``) until its
    detector's next update that the bound cannot clear, a read, or ``apply_waiting``,
    which applies the waiting updates of one table's detectors as rows of one array.
    Agents of a few shared models interleave at random, with batches applied at random
    points (over every detector, a random part of them, with duplicates), detectors
    replaced mid-batch by their bytes or plain state (eviction and restore, a snapshot:
    it must hold the waiting updates) and statistics read mid-batch: every decision,
    statistic, start and change point is the reference's, which applies every update at
    once and takes the dot product at every step."""
    rng = random.Random(1000 + seed)
    models = [_random_case(rng) for _ in range(rng.randint(1, 3))]
    rate = 10 ** rng.uniform(-4.0, -1.5)
    agents = rng.randint(4, 12)
    which = [rng.randrange(len(models)) for _ in range(agents)]
    streams = []
    for m in which:
        p, q, groups = models[m]
        streams.append(iter(stream(rng, p, q, 3_000, rng.randrange(3_000), groups)))
    dets = [SequentialDetector(models[m][0], false_alarm_rate=rate) for m in which]
    refs = [ReferenceSR(np.asarray(models[m][0]), math.exp(d.log_threshold))
            for m, d in zip(which, dets, strict=True)]
    waiting: list[SequentialDetector] = []
    alarms = shared_deep = 0
    for i in range(agents * 1_500):
        a = rng.randrange(agents)
        obs = next(streams[a])
        got = dets[a].update(obs)
        assert got == refs[a].update(obs.explaining), (i, a)
        assert dets[a].n == refs[a].n
        assert len(dets[a].waiting) < WAITING_CAP
        if len(dets[a].waiting) == 1:
            waiting.append(dets[a])
        if got:
            alarms += 1
            assert dets[a].change_point == int(refs[a].start[int(np.argmax(refs[a].c))])
            assert dets[a].log_statistic == math.log(float(refs[a].r @ refs[a].w))
        u = rng.random()
        if u < 0.02:
            # A batch boundary: that two detectors of one table wait, one of them more
            # than one update, is what the test is for.
            held = [d for d in dets if d.waiting]
            shared_deep += any(len(d.waiting) > 1 and any(
                e is not d and e._rows is d._rows for e in held) for d in held)
            if rng.random() < 0.5:
                apply_waiting(waiting)
                waiting.clear()
            else:
                part = rng.sample(waiting, len(waiting) // 2)
                apply_waiting(part + part[:3])
        elif u < 0.025:
            b = rng.randrange(agents)
            twin = SequentialDetector(models[which[b]][0], false_alarm_rate=rate)
            if rng.random() < 0.5:
                twin.unpack(dets[b].pack())
            else:
                twin.load_state(dets[b].export_state())
            _same_as_reference(twin, refs[b])
            dets[b] = twin  # the evicted one may still be in ``waiting``: harmless
        elif u < 0.03:
            b = rng.randrange(agents)
            assert dets[b].change_point == int(refs[b].start[int(np.argmax(refs[b].c))])
    apply_waiting(waiting)
    for det, ref in zip(dets, refs, strict=True):
        assert not det.waiting
        _same_as_reference(det, ref)
    assert shared_deep, "no batch applied a table's detectors together, deep ones among them"
    if seed < 4:
        assert alarms, "these cases should raise alarms, or they test nothing"


def test_a_drift_monitor_snapshot_holds_the_waiting_updates() -> None:
    """Through the daemon's entry point: agents of one model observed in turn, batches
    applied at random, agents packed (evicted) and their states exported mid-batch: each
    agent's exported state is the reference's at every point."""
    rng = random.Random(5)
    p = [0.6, 0.3, 0.1]
    action = _action(*p)
    cfg = DriftConfig(false_alarm_rate=1e-3, confirm_half_width=None)
    drift = DriftMonitor(cfg)
    threshold = math.exp(SequentialDetector(p, false_alarm_rate=1e-3).log_threshold)
    refs = {f"a{k}": ReferenceSR(np.asarray(p), threshold) for k in range(6)}
    alarms = 0
    for i in range(6_000):
        agent = rng.choice(sorted(refs))
        x = rng.choices(range(3), p if i < 3_000 else [0.3, 0.3, 0.4])[0]
        alarm = drift.observe(agent, action, x)
        assert (alarm is not None) == refs[agent].update((x,)), i
        alarms += alarm is not None
        u = rng.random()
        if u < 0.02:
            drift.apply_waiting()
        elif u < 0.04:
            b = rng.choice(sorted(refs))
            if rng.random() < 0.5:
                drift.pack(b)
            state = drift.agent_states(b)["go"]["detector"]
            ref = refs[b]
            assert state["n"] == ref.n
            assert state["r"] == ref.r.tolist() and state["cusum"] == ref.c.tolist()
            assert state["start"] == ref.start.tolist()
    assert alarms, "the change should raise alarms, or the test tests little"
