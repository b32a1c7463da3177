"""Saved drift state: round trips, exact continuation after a restore, refusals."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from capwatch.model.domain import Action, Domain
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.attribution import Attribution
from capwatch.monitor.drift import (
    ActionMonitor,
    DriftAlarm,
    DriftConfig,
    DriftMonitor,
    with_probabilities,
)
from capwatch.monitor.snapshot import (
    SnapshotError,
    decode_action_state,
    encode_action_state,
    restore_agent,
    snapshot_agent,
    snapshot_frozen,
)
from tests.paths import STOCHASTIC


@pytest.fixture(scope="module")
def tireworld() -> Domain:
    return read_domain(STOCHASTIC / "tireworld" / "domain.pddl").without_action_literals()


@pytest.fixture(scope="module")
def move_car(tireworld: Domain) -> Action:
    return tireworld.action("move-car")


def _stream(seed: int, p0: list[float], p1: list[float], change: int, n: int) -> list[int]:
    rng = np.random.default_rng(seed)
    before = rng.choice(len(p0), size=change, p=p0)
    after = rng.choice(len(p1), size=n - change, p=p1)
    return [int(x) for x in np.concatenate([before, after])]


def _through_json(data: Any) -> Any:
    return json.loads(json.dumps(data))


def _first_alarm(mon: ActionMonitor, xs: list[int], start: int
                 ) -> tuple[int, DriftAlarm] | None:
    for t, x in enumerate(xs[start:], start):
        alarm = mon.observe(x)
        if alarm is not None:
            return t, alarm
    return None


def test_action_state_round_trips_through_json(move_car: Action) -> None:
    mon = ActionMonitor(move_car)
    for x in _stream(1, [0.8, 0.2], [0.8, 0.2], 2500, 2500):
        mon.observe(x)
    state = mon.export_state()
    encoded = _through_json(encode_action_state(state))
    assert decode_action_state(encoded) == state
    # A full 2,000-execution window plus the detector fits in a couple of kilobytes.
    assert len(json.dumps(encoded)) < 2500
    assert encoded["seen"] == 2500 and len(state["window"]["values"]) == 2000


def test_restored_monitor_alarms_at_the_same_step_with_the_same_evidence(
        move_car: Action) -> None:
    # 0.8/0.2 → 0.6/0.4 at 3000; snapshot midway through the change, before the alarm.
    xs = _stream(7, [0.8, 0.2], [0.6, 0.4], 3000, 6000)
    reference = ActionMonitor(move_car)
    ref = _first_alarm(reference, xs, 0)
    assert ref is not None
    ref_step, ref_alarm = ref
    assert ref_step > 3050, "the test needs an alarm well after the change"
    cut = 3000 + (ref_step - 3000) // 2

    original = ActionMonitor(move_car)
    for x in xs[:cut]:
        assert original.observe(x) is None
    drift = DriftMonitor()
    drift.put("rover", original)  # the agent's live table
    saved = _through_json(snapshot_agent(drift, "rover", {"version": 3}))
    restored_drift = DriftMonitor()
    assert restore_agent(restored_drift, "rover", {"move-car": move_car}, saved) == {}
    restored = restored_drift.monitor("rover", move_car)
    assert restored is not original

    got = _first_alarm(restored, xs, cut)
    assert got is not None
    assert got[0] == ref_step
    assert got[1].evidence.to_dict() == ref_alarm.evidence.to_dict()
    assert got[1].updated_action == ref_alarm.updated_action
    assert got[1].fresh_samples_planned == ref_alarm.fresh_samples_planned
    # The original, continued without a restore, agrees too (the snapshot changed nothing).
    cont = _first_alarm(original, xs, cut)
    assert cont is not None and cont[0] == ref_step


def test_restore_during_a_confirmation_gives_the_same_confirmation(move_car: Action) -> None:
    xs = _stream(11, [0.8, 0.2], [0.5, 0.5], 1000, 5000)
    reference = ActionMonitor(move_car)
    alarm = _first_alarm(reference, xs, 0)
    assert alarm is not None and alarm[1].provisional
    planned = alarm[1].fresh_samples_planned
    assert planned is not None
    cut = alarm[0] + 1 + planned // 2
    for x in xs[alarm[0] + 1: cut]:
        assert reference.observe(x) is None
    assert reference.confirming
    state = decode_action_state(_through_json(encode_action_state(reference.export_state())))
    restored = ActionMonitor(move_car)
    restored.load_state(state)
    assert restored.confirming
    ref_conf = _first_alarm(reference, xs, cut)
    got_conf = _first_alarm(restored, xs, cut)
    assert ref_conf is not None and got_conf is not None
    assert not ref_conf[1].provisional
    assert got_conf[0] == ref_conf[0]
    assert got_conf[1].evidence.to_dict() == ref_conf[1].evidence.to_dict()


def test_tumbling_windows_and_ambiguous_observations_round_trip(move_car: Action) -> None:
    cfg = DriftConfig(window=200, window_kind="tumbling", min_samples=100)
    mon = ActionMonitor(move_car, cfg)
    ambiguous = Attribution(((0, 1),), 0)
    rng = np.random.default_rng(5)
    for i in range(530):
        mon.observe(ambiguous if i % 7 == 0 else int(rng.choice(2, p=[0.8, 0.2])))
    state = decode_action_state(_through_json(encode_action_state(mon.export_state())))
    copy = ActionMonitor(move_car, cfg)
    copy.load_state(state)
    assert copy.window.ambiguous() == mon.window.ambiguous() > 0
    assert list(copy.window.counts()) == list(mon.window.counts())
    assert copy.window.span() == mon.window.span()
    for i in range(530, 800):  # the next block completes identically
        x = ambiguous if i % 7 == 0 else int(rng.choice(2, p=[0.8, 0.2]))
        mon.observe(x)
        copy.observe(x)
    assert list(copy.window.counts()) == list(mon.window.counts())
    assert copy.test() == mon.test()


def test_state_for_another_model_or_setting_is_skipped_not_loaded(move_car: Action) -> None:
    drift = DriftMonitor()
    for x in _stream(3, [0.8, 0.2], [0.8, 0.2], 300, 300):
        drift.observe("a", move_car, x)
    saved = _through_json(snapshot_agent(drift, "a"))
    # A new model version re-estimated move-car's probabilities: its tables do not apply.
    newer = with_probabilities(move_car, [0.6, 0.4])
    other = DriftMonitor()
    skipped = restore_agent(other, "a", {"move-car": newer}, saved)
    assert "another version of move-car" in skipped["move-car"]
    assert other.monitor("a", newer).window.seen == 0
    # Another window size (a configuration change) is refused the same way.
    resized = DriftMonitor(DriftConfig(window=500))
    skipped = restore_agent(resized, "a", {"move-car": move_car}, saved)
    assert "size=2000" in skipped["move-car"]
    # An action the model no longer has is reported.
    assert restore_agent(DriftMonitor(), "a", {}, saved) == {
        "move-car": "not in the current model"}


def test_unreadable_snapshots_are_refused_with_a_reason(move_car: Action) -> None:
    drift = DriftMonitor()
    drift.observe("a", move_car, 0)
    saved = _through_json(snapshot_agent(drift, "a"))
    with pytest.raises(SnapshotError, match="version 2 is not supported"):
        restore_agent(DriftMonitor(), "a", {"move-car": move_car}, {**saved, "version": 2})
    with pytest.raises(SnapshotError, match="not a drift snapshot"):
        restore_agent(DriftMonitor(), "a", {"move-car": move_car}, {"actions": {}})
    with pytest.raises(SnapshotError, match="JSON object"):
        restore_agent(DriftMonitor(), "a", {"move-car": move_car}, [1, 2])
    broken = json.loads(json.dumps(saved))
    broken["actions"]["move-car"]["values"] = "***"
    target = DriftMonitor()
    skipped = restore_agent(target, "a", {"move-car": move_car}, broken)
    assert "bad base64" in skipped["move-car"]
    assert target.monitor("a", move_car).window.seen == 0
    broken["actions"]["move-car"] = {"action": "move-car"}
    assert "malformed" in restore_agent(target, "a", {"move-car": move_car}, broken)["move-car"]


def test_changed_agents_are_tracked_for_checkpoints(move_car: Action) -> None:
    drift = DriftMonitor()
    drift.observe("a", move_car, 0)
    drift.observe("b", move_car, 1)
    assert drift.take_changed() == {"a", "b"}
    assert drift.take_changed() == set()
    drift.forget("b")
    assert drift.take_changed() == {"b"}
    saved = snapshot_agent(drift, "a")
    restore_agent(drift, "c", {"move-car": move_car}, saved)
    assert drift.take_changed() == set()  # a restore is already saved state
    assert drift.monitor("c", move_car).window.seen == 1


def test_short_windows_pack_as_long_ones_do_and_round_trip(move_car: Action) -> None:
    # Windows up to _SMALL_WINDOW are packed without numpy and their deflated bytes
    # remembered: the text must be what the numpy path writes, and read back the same.
    import zlib

    from capwatch.monitor import snapshot
    for values in ([], [0], [1, -1, 0], [1] * snapshot._SMALL_WINDOW, list(range(-1, 40))):
        arr = np.asarray(values, dtype=np.int64)
        expected = snapshot._b64(zlib.compress((arr + 1).astype(np.uint8).tobytes(), 1))
        assert snapshot._pack_outcomes(arr) == expected
        assert snapshot._pack_outcomes(values) == expected  # remembered, and from a list
        assert snapshot._unpack_outcomes(expected) == values
    with pytest.raises(ValueError):
        snapshot._pack_outcomes([255])
    with pytest.raises(ValueError):
        snapshot._pack_outcomes(np.asarray([-2], dtype=np.int64))
    mon = ActionMonitor(move_car)
    for x in (0, 1, 1):
        mon.observe(x)
    state = mon.export_state()
    assert state["window"]["values"] == [0, 1, 1] and state["confirm_counts"] == [0, 0]
    assert decode_action_state(_through_json(encode_action_state(state))) == state


def test_a_snapshot_packs_arrays_as_it_packs_the_lists_they_export(move_car: Action) -> None:
    # snapshot_agent packs the window and detector statistics from their arrays; the
    # text must be what packing the plain lists gives, and read back to them.
    drift = DriftMonitor()
    for x in _stream(3, [0.8, 0.2], [0.8, 0.2], 300, 300):
        drift.observe("a", move_car, x)
    snap = snapshot_agent(drift, "a")
    plain = drift.monitor("a", move_car).export_state()
    assert snap["actions"]["move-car"] == encode_action_state(plain)
    assert decode_action_state(_through_json(snap["actions"]["move-car"])) == plain


def test_snapshots_of_tables_alike_are_those_encoded_afresh(
        move_car: Action, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables that pack to the same bytes share one encoding (snapshot._encoded): every
    snapshot is the one encoding the agent's exported state gives, for agents alike and
    not, past the bound on encodings kept, with tables packed or not, and under other
    settings for the same bytes."""
    from capwatch.monitor import snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "ENCODED_KEPT", 3)
    short = DriftMonitor(DriftConfig(window=100, min_samples=50))
    long = DriftMonitor(DriftConfig(window=300, min_samples=50))
    histories = [[0], [1], [0, 1], [1, 1, 0], [0, 0]]

    def afresh(drift: DriftMonitor, agent: str) -> dict[str, Any]:
        return {name: encode_action_state(state)
                for name, state in drift.agent_states(agent, values_array=True).items()}

    for step in range(3):
        for n in range(20):
            agent = f"a{n}"
            for drift in (short, long):
                for x in histories[n % len(histories)]:
                    drift.observe(agent, move_car, x)
                if (n + step) % 3 == 0:
                    assert drift.pack(agent)
                snap = snapshot_agent(drift, agent, {"v": 1})
                assert json.loads(json.dumps(snap)) == snap
                assert snap["actions"] == afresh(drift, agent)
                assert snap["model"] == {"v": 1}
                snap["actions"][move_car.name]["seen"] = -1  # a caller's own copy
                assert snapshot_agent(drift, agent)["actions"] == afresh(drift, agent)
    for x in range(100):  # a table past the short windows encodes directly
        long.observe("busy", move_car, x % 2)
        assert snapshot_agent(long, "busy")["actions"] == afresh(long, "busy")


def test_frozen_tables_snapshot_as_they_were_when_taken(
        tireworld: Domain, move_car: Action) -> None:
    """The scheduled checkpoint takes an agent's tables as bytes (DriftMonitor.frozen) on
    the main loop and encodes the snapshot in its writer's thread: the snapshot is the one
    snapshot_agent gave when the bytes were taken, for live and packed tables, short and
    long windows, several actions, whatever the agent's tables do after."""
    change = tireworld.action("changetire")
    drift = DriftMonitor(DriftConfig(window=300, min_samples=50))
    xs = _stream(7, [0.6, 0.4], [0.2, 0.8], 150, 400)
    for n, steps in enumerate([1, 3, 70, 350]):
        for packed in (False, True):
            agent = f"a{n}-{packed}"
            for x in xs[:steps]:
                drift.observe(agent, move_car, x)
            drift.observe(agent, change, 0)
            if packed:
                assert drift.pack(agent)
            expected = snapshot_agent(drift, agent, {"v": n})
            frozen = drift.frozen(agent)
            for x in xs[steps:steps + 50]:  # the agent goes on after its bytes were taken
                drift.observe(agent, move_car, x)
            assert snapshot_agent(drift, agent, {"v": n}) != expected
            assert snapshot_frozen(frozen, {"v": n}) == expected
    assert snapshot_frozen(drift.frozen("nobody")) == snapshot_agent(drift, "nobody")


def test_frozen_tables_snapshot_and_restore_exactly_without_kept_encodings(
        tireworld: Domain, move_car: Action) -> None:
    """snapshot_frozen finds each table's bytes in the frozen blob from their headers and
    unpacks a table only when its encoding is not kept: with nothing kept (a cold cache),
    the snapshot is still snapshot_agent's, the extent found is the table's own pack, and
    the snapshot restores tables that continue exactly like the originals."""
    from capwatch.monitor import snapshot as snapshot_module

    change = tireworld.action("changetire")
    config = DriftConfig(window=300, min_samples=50)
    fresh = ActionMonitor(move_car, config)  # a detector at rest: its header alone
    assert ActionMonitor.packed_extent(move_car, config, fresh.pack()) == (len(fresh.pack()), 0)
    drift = DriftMonitor(config)
    xs = _stream(11, [0.6, 0.4], [0.2, 0.8], 150, 400)
    for n, steps in enumerate([1, 5, 70, 350]):
        for packed in (False, True):
            agent = f"a{n}-{packed}"
            for x in xs[:steps]:
                drift.observe(agent, move_car, x)
            drift.observe(agent, change, 0)
            for mon in drift.tables(agent).values():
                raw = mon.pack()
                assert ActionMonitor.packed_extent(mon.action, config, b"xy" + raw, 2) \
                    == (2 + len(raw), mon.window.seen)
            if packed:
                assert drift.pack(agent)
            frozen = drift.frozen(agent)
            snapshot_module._ENCODED.clear()
            snap = snapshot_frozen(frozen, {"v": n})
            assert snap == snapshot_agent(drift, agent, {"v": n})
            restored = DriftMonitor(config)
            actions = {a.name: a for a in (move_car, change)}
            assert restore_agent(restored, agent, actions, json.loads(json.dumps(snap))) == {}
            for x in xs[steps:steps + 200]:
                assert (restored.observe(agent, move_car, x) is None) \
                    == (drift.observe(agent, move_car, x) is None)
            assert restored.agent_states(agent) == drift.agent_states(agent)
