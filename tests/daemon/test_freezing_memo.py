"""A watch held as bytes keeps its decoder memo's fingerprint (AgentWatch.freeze): the
agent's next record, whose state repeats its last next-state, is recognised without
being parsed, and everything the watch does stays what it would have done."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from capwatch import native
from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.adapters.sim.fleet import DriftSpec, FamilySpec, SimulatedFleet
from capwatch.contracts import wire_atoms, wire_fast
from capwatch.contracts.ports import Record
from capwatch.contracts.wire import AgentTransition, DeadLetter
from capwatch.daemon.pipeline import Pipeline
from capwatch.daemon.service import build_service
from capwatch.daemon.watch_freezing import idle_state
from capwatch.model.pddl_reader import read_problem
from tests.daemon.helpers import EXAMPLES, HALF, SAMPLE, SAMPLED, example, simulated, transition
from tests.daemon.test_freezing import _watch_state


def _records(rounds: int) -> list[Record]:
    rover = FamilySpec("rover-v1", example("rover.pddl"),
                       read_problem(EXAMPLES / "rover-problem.pddl"))
    fleet = SimulatedFleet.build({"rover-v1": rover}, 2, [DriftSpec(
        example("rover-sample-drift.pddl"), at_step=40, family="rover-v1")], seed=5)
    return [Record("t", 0, offset, e.agent_id.encode(), e.value)
            for offset, e in enumerate(fleet.events(rounds))]


def _pipeline(tmp_path: Path) -> Pipeline:
    service = build_service(simulated(tmp_path, agents=1, rounds=1),
                            publisher=MemoryPublisher())
    service.pipeline.open()
    return service.pipeline


def _run(p: Pipeline, records: list[Record], freeze: bool) -> list[Any]:
    """Each record read and observed as the batch does, then every watch trimmed and,
    with ``freeze``, held as bytes (two rounds: the second finds all idle)."""
    out: list[Any] = []
    for record in records:
        read = p.intake.read(record)
        assert read is not None
        watch, decoded = read
        out.extend(watch.observe(t, p.intake.flipped) for t in decoded)
        p.registry.compact_idle(0.0, 0.0 if freeze else None)
        p.registry.compact_idle(0.0, 0.0 if freeze else None)
    return out


def test_a_frozen_watch_acts_alike(tmp_path: Path) -> None:
    records = _records(45)  # (the drift starts at step 40 and shows a few steps later)
    (tmp_path / "ref").mkdir()
    ref = _pipeline(tmp_path / "ref")
    want = _run(ref, records, freeze=False)
    p = _pipeline(tmp_path)
    got = _run(p, records, freeze=True)
    assert got == want
    assert len(p.registry) == len(ref.registry) == 2
    frozen = [w._frozen for w in p.registry if w._frozen is not None]
    assert len(frozen) == 2 and all(idle_state(b)[3] is not None for b in frozen)
    for plain in ref.registry:
        watch = p.registry.get(plain.agent_id)
        assert watch is not None
        got_state, want_state = _watch_state(watch, p.drift), _watch_state(plain, ref.drift)
        # Index 4: the actions' execution times, each run's own clock.
        assert got_state[4].keys() == want_state[4].keys()
        assert got_state[:4] + got_state[5:] == want_state[:4] + want_state[5:]


@pytest.mark.skipif(native.compiled(), reason=(
    "compiled, wire_fast calls its _state in C and the count below cannot see it; "
    "`make test` runs this file again as pure Python (Makefile, PURE_TESTS)"))
def test_a_frozen_watch_decodes_its_next_state_from_the_memo(tmp_path: Path) -> None:
    records = _records(45)
    p = _pipeline(tmp_path)
    parsed: list[bytes] = []
    state_of = wire_fast._state

    def counting(text: Any, max_atoms: int, remember: bool = True) -> Any:
        parsed.append(bytes(text))
        return state_of(text, max_atoms, remember)

    wire_fast._state = counting  # type: ignore[assignment]
    try:
        _run(p, records, freeze=True)
    finally:
        wire_fast._state = state_of
    assert [w for w in p.registry if w._frozen is not None]
    # Each record's state was its agent's last next-state (an episode's steps), except
    # at a reset: a frozen agent's record then parses its next state only.
    states = 0
    for record in records:
        decoded = wire_fast.decode(record.value)
        assert not isinstance(decoded, DeadLetter)
        states += 1 + (decoded[0].next_state != decoded[0].state)
    assert 0 < len(parsed) < states * 2 // 3


def test_the_next_record_gets_the_very_set_whose_encoding_the_monitor_holds(
        tmp_path: Path) -> None:
    p = _pipeline(tmp_path)
    first, second = _records(2)[0::2]  # one agent's first two records
    assert _run(p, [first], freeze=True)
    watch = p.registry.get(first.key.decode())  # type: ignore[union-attr]
    assert watch is not None and watch.frozen and watch.state_memo is None
    read = p.intake.read(second)
    assert read is not None and read[0] is watch and not watch.frozen
    t: AgentTransition = read[1][0]
    assert t.state is watch.monitor._last_lists  # recognised, not decoded again
    assert t.state == watch.last_state


def test_a_memo_kept_by_its_hashed_fingerprint_recognises_only_its_text() -> None:
    raw = transition("rover-a", "rover-v1", HALF, SAMPLE, SAMPLED).encode()
    text = json.dumps(HALF).encode()  # the state's text in the message
    assert text in raw and type(wire_fast._fingerprint(text)) is bytes  # a short one
    half = frozenset(map(tuple, HALF))
    generation = wire_atoms.generation
    kept = wire_fast.hashed(wire_fast._fingerprint(text))
    assert kept == (len(text), hash(text))
    got = wire_fast.decode(raw, memo=[(kept, len(HALF), half, None, generation), None])
    assert not isinstance(got, DeadLetter) and got[0].state is half  # recognised
    # Another text of the same length: decoded, not taken for the memo's.
    other = (len(text), hash(text) + 1)
    wrong = frozenset(list(half)[1:])
    got = wire_fast.decode(raw, memo=[(other, len(HALF), wrong, None, generation), None])
    assert not isinstance(got, DeadLetter)
    assert got[0].state == half and got[0].state is not wrong
