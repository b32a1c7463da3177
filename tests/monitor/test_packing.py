"""An idle agent's drift tables packed in memory (DriftMonitor.pack) continue exactly as
tables never packed: the same alarms and confirmations at the same step, the same saved
state, the same audit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
import pytest

from capwatch.model.domain import Action
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor import drift as drift_module
from capwatch.monitor import tables as tables_module
from capwatch.monitor.attribution import Attribution
from capwatch.monitor.drift import ActionMonitor, DriftConfig, DriftMonitor
from capwatch.monitor.snapshot import snapshot_agent
from capwatch.monitor.tables import OutcomeWindow
from tests.paths import STOCHASTIC


@pytest.fixture(scope="module")
def move_car() -> Action:
    domain = read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()
    return domain.action("move-car")


@pytest.fixture(scope="module")
def three_way(move_car: Action) -> Action:
    """move-car with a third outcome (a 3-outcome table: more alternatives, int8 window)."""
    a, b = move_car.outcomes
    extra = replace(b, add=a.add | b.add, probability=0.1)
    return move_car.replace(name="move-car-3", outcomes=(replace(a, probability=0.6),
                                                         replace(b, probability=0.3), extra))


def _draw(rng: np.random.Generator, k: int, i: int, drift_at: int) -> int | Attribution:
    if k == 2 and i % 11 == 5:
        return Attribution(((0, 1),), 0)  # tells no outcome apart
    if k == 3 and i % 13 == 7:
        return Attribution(((0, 2), (1,)), 0)  # ambiguous between two outcomes
    p = [0.8, 0.2] if k == 2 else [0.6, 0.3, 0.1]
    if i >= drift_at:
        p = [0.4, 0.6] if k == 2 else [0.2, 0.3, 0.5]
    return int(rng.choice(k, p=p))


def _dump(alarm: Any) -> Any:
    if alarm is None:
        return None
    return (alarm.evidence.to_dict(), alarm.updated_action, alarm.provisional,
            alarm.fresh_samples_planned)


@pytest.mark.parametrize("kind", ["sliding", "tumbling"])
def test_packed_tables_continue_exactly_like_tables_never_packed(
        move_car: Action, three_way: Action, kind: Literal["sliding", "tumbling"]) -> None:
    cfg = DriftConfig(window=300, window_kind=kind, min_samples=100)
    plain, packed = DriftMonitor(cfg), DriftMonitor(cfg)
    rng = np.random.default_rng(7)
    alarms = packs = 0
    for i in range(2_500):
        for action in (move_car, three_way):
            x = _draw(rng, len(action.outcomes), i, drift_at=900)
            want = plain.observe("a", action, x)
            got = packed.observe("a", action, x)
            assert _dump(got) == _dump(want), f"step {i}, {action.name}"
            alarms += want is not None
        if i % 37 == 0 or rng.random() < 0.05:
            assert packed.pack("a")
            packs += 1
            assert packed.packed("a") and packed.has("a") and len(packed) == len(plain) == 2
            assert packed.agent_states("a") == plain.agent_states("a")
            assert snapshot_agent(packed, "a") == snapshot_agent(plain, "a")
            audit = [(f.agent_id, f.action, f.gof, f.q_value, f.rejected) for f in plain.audit()]
            assert [(f.agent_id, f.action, f.gof, f.q_value, f.rejected)
                    for f in packed.audit()] == audit
            assert packed.packed("a")  # neither reading nor auditing unpacks them
    assert alarms >= 2 and packs > 50
    for (key, mon), (key2, mon2) in zip(sorted(plain, key=lambda kv: kv[0]),
                                        sorted(packed, key=lambda kv: kv[0]), strict=True):
        assert key == key2 and mon.export_state() == mon2.export_state()


def test_a_packed_table_is_its_fields_byte_for_byte(move_car: Action) -> None:
    mon = ActionMonitor(move_car, DriftConfig(window=500))
    rng = np.random.default_rng(3)
    for i in range(40):
        mon.observe(_draw(rng, 2, i, drift_at=10**9))
    copy, end = ActionMonitor.unpack(move_car, mon.config, mon.pack())
    assert end == len(mon.pack())
    assert copy.window._buffer.tobytes() == mon.window._buffer.tobytes()  # its room too
    assert copy.window._buffer.dtype == mon.window._buffer.dtype
    assert copy.export_state() == mon.export_state()
    assert copy.detector is not None and mon.detector is not None
    assert copy.detector.alternatives is mon.detector.alternatives  # shared, not copied
    fresh = ActionMonitor(move_car, mon.config)
    assert len(fresh.pack()) < len(mon.pack())  # a detector at rest is its header alone


def test_forgetting_or_loading_an_agent_drops_its_packed_tables(move_car: Action) -> None:
    drift = DriftMonitor()
    for x in (0, 1, 0):
        drift.observe("a", move_car, x)
    state = drift.agent_states("a")
    drift.take_changed()
    assert drift.pack("a") and not drift.pack("b")
    assert drift.take_changed() == set()  # packing changes nothing that is saved
    drift.forget("a")
    assert not drift.has("a") and len(drift) == 0
    drift.load_agent_states("a", {move_car.name: move_car}, state)
    assert drift.pack("a")
    drift.load_agent_states("a", {move_car.name: move_car}, {})
    assert not drift.has("a")


def test_agents_with_the_same_tables_hold_one_packed_blob(
        move_car: Action, three_way: Action, monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents whose tables went through the same executions hold one blob; past the
    bound on blobs kept, tables are packed anew; either way each agent's tables
    continue exactly as tables never packed."""
    monkeypatch.setattr(drift_module, "SHARED_BLOBS", 3)
    plain, packed = DriftMonitor(), DriftMonitor()
    histories = [[0], [1], [0, 1], [1, 1, 0], [0, 0]]  # five kinds of agent, three kept
    agents = [(f"a{kind}-{n}", kind) for kind in range(len(histories)) for n in range(6)]
    for step in range(3):
        for agent, kind in agents:
            action = move_car if (kind + step) % 2 else three_way
            for x in histories[kind]:
                assert _dump(plain.observe(agent, action, x)) == \
                    _dump(packed.observe(agent, action, x))
            assert packed.pack(agent)
        for (agent, kind), (before, kind_before) in zip(agents[1:], agents, strict=False):
            same = packed._packed[agent][0] is packed._packed[before][0]
            assert same == (kind == kind_before)
        for agent, _ in agents:
            assert snapshot_agent(packed, agent) == snapshot_agent(plain, agent)


def test_long_tables_are_packed_without_being_kept_by_their_bytes(move_car: Action) -> None:
    """Only short tables are kept for agents alike: a long one (kilobytes) would hold its
    bytes in the map long after its agent unpacked it. Packed either way, it continues
    exactly as a table never packed."""
    plain, packed = DriftMonitor(), DriftMonitor()
    for agent, n in (("short", drift_module.SHARED_UP_TO_SEEN),
                     ("long", drift_module.SHARED_UP_TO_SEEN + 1)):
        for x in range(n):
            assert _dump(plain.observe(agent, move_car, x % 2)) == \
                _dump(packed.observe(agent, move_car, x % 2))
        assert packed.pack(agent)
    assert [packed._packed["short"][0]] == list(packed._blobs.values())
    for x in range(5):
        for agent in ("short", "long"):
            assert _dump(plain.observe(agent, move_car, x % 2)) == \
                _dump(packed.observe(agent, move_car, x % 2))
    for agent in ("short", "long"):
        assert snapshot_agent(packed, agent) == snapshot_agent(plain, agent)


@pytest.mark.parametrize("kind", ["sliding", "tumbling"])
@pytest.mark.parametrize("k", [2, 3, 130])
def test_a_window_packs_to_the_bytes_its_numpy_fields_make(
        kind: Literal["sliding", "tumbling"], k: int) -> None:
    """The counts are packed with struct (a numpy array for a few ints cost five times
    more): the very bytes ``np.array(counts, np.int64).tobytes()`` made, which the
    packed blobs kept alike, the snapshot encodings kept by them and unpack rely on."""
    rng = np.random.default_rng(k)
    window = OutcomeWindow(k, 40, kind)
    for _ in range(130):
        window.add(int(rng.integers(-1, k)))
        kept = min(window.seen, len(window._buffer))
        counts = [*window._counts, *window._block, *(window._completed or ())]
        assert window.pack() == b"".join((
            tables_module._PACK_HEAD.pack(window.seen, len(window._buffer),
                                          window._completed is not None),
            window._buffer[:kept].tobytes(), np.array(counts, dtype=np.int64).tobytes()))
        copy = OutcomeWindow(k, 40, kind)
        assert copy.unpack(window.pack()) == len(window.pack())
        assert copy.export_state() == window.export_state()
