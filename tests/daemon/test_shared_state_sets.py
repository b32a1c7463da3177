"""Agents share the fast decoder's state sets (wire_atoms.known_state hands every agent
that sends a text the very set another agent's text made), and the monitor reuses an
encoding when it is handed the very set it saw last. Across agents of two families (one
whose agents move to indexes of their own), through the decoder's
generation turns (the vocabulary's too) and through freezing and thawing, every verdict,
state and kept execution is the one a monitor given freshly decoded sets finds."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from capwatch.contracts import wire, wire_atoms, wire_fast
from capwatch.daemon.watch_freezing import freeze_bytes, thaw_bytes
from capwatch.model.domain import GroundAtom
from capwatch.model.grounding import SharedGrounding
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.transition_monitor import MonitorLimits, TransitionMonitor
from tests.paths import DOMAINS
from tests.support.decoder_bounds import shrink_decoder

DOMAIN = read_domain(DOMAINS / "blocksworld" / "domain.pddl")
LIMITS = MonitorLimits(max_state_atoms=35, own_index_room=4)
"""Indexes of an agent's own of 78 atoms: an agent naming more of blocksworld's 89 atoms
over 8 blocks moves to a new one now and then."""
ARITY = {"on": 2, "ontable": 1, "clear": 1, "holding": 1, "handempty": 0}


def _fresh(text: str) -> frozenset[GroundAtom]:
    return frozenset(tuple(a) for a in json.loads(text))


def _executed(mon: TransitionMonitor) -> dict[str, list[Any]]:
    decode = mon.index.decode
    return {name: [(p, decode(s), a, decode(s2)) for p, s, a, s2 in buf]
            for name, buf in mon.executed.items()}


@pytest.mark.parametrize("seed", range(3))
def test_shared_sets_give_every_agent_its_own_verdicts(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    # Bounds small enough that the vocabulary, the pieces and the state
    # texts turn generations, many times over.
    shrink_decoder(monkeypatch, atoms=40, pieces=12, state_bytes=4_000)
    blocks = [f"b{i}" for i in range(8)]

    def atom() -> list[str]:
        p = rng.choice(list(ARITY))
        return [p, *(rng.choice(blocks) for _ in range(ARITY[p]))]

    # Family g's shared index of 60 atoms fills up: its agents move to their own, each
    # when it first needs an atom past it.
    families = {"f": SharedGrounding(DOMAIN), "g": SharedGrounding(DOMAIN, 60)}
    pool = [[atom() for _ in range(rng.randint(3, 30))] for _ in range(8)]
    agents: dict[str, dict[str, Any]] = {
        f"a{i}": {"family": fam, "memo": [None, None], "last": None,
                  "mon": TransitionMonitor(DOMAIN, LIMITS, families[fam]),
                  "ref": TransitionMonitor(DOMAIN, LIMITS, families[fam])}
        for i, fam in enumerate("fgfgfg")}
    start = wire_atoms.turns
    frozen = 0
    for _ in range(1_500):
        name = rng.choice(list(agents))
        a = agents[name]
        state_text = a["last"] if a["last"] is not None and rng.random() < .7 \
            else json.dumps(rng.choice(pool))
        state = json.loads(state_text)
        if rng.random() < .5:
            # An applicable pick-up, most of the time executed as the model says.
            x = rng.choice(blocks)
            action = ["pick-up", x]
            state = [q for q in state if q != ["holding", x]]
            state += [q for q in (["clear", x], ["ontable", x], ["handempty"])
                      if q not in state]
            state_text = json.dumps(state)
            nxt = [q for q in state if q not in (["clear", x], ["ontable", x], ["handempty"])]
            nxt.append(["holding", x])
            if rng.random() < .2:
                nxt.append(atom())
        else:
            a2 = rng.choice(["put-down", "stack", "unstack"])
            action = [a2, *(rng.choice(blocks) for _ in range(1 if a2 == "put-down" else 2))]
            nxt = [q for q in state if rng.random() < .9] + [atom()] \
                if rng.random() < .7 else rng.choice(pool)
        if rng.random() < .15:
            nxt, state_text = state, json.dumps(state)  # refused: the state repeated
        if rng.random() < .05:
            pool[rng.randrange(len(pool))] = nxt  # other agents come to this state
        next_text = json.dumps(nxt)
        raw = json.dumps({"type": "transition", "agent_id": name, "family": a["family"],
                          "state": "S", "action": action, "next_state": "N"}).encode()
        raw = raw.replace(b'"S"', state_text.encode()).replace(b'"N"', next_text.encode())
        got = wire_fast.decode(raw, memo=a["memo"])
        assert not isinstance(got, wire.DeadLetter), got
        t = got[0]
        assert t == wire.decode(raw)[0]  # type: ignore[index]
        a["last"] = next_text
        mon: TransitionMonitor = a["mon"]
        ref: TransitionMonitor = a["ref"]
        seen = mon.observe(t.state, t.action, t.next_state, flipped=a["memo"][1])
        want = ref.observe(_fresh(state_text), t.action, _fresh(next_text))
        assert seen[:3] == want[:3]
        assert mon.index.decode(seen.state) == ref.index.decode(want.state) == t.state
        assert mon.transitions == ref.transitions
        assert _executed(mon) == _executed(ref)
        if rng.random() < .1:
            # Held as bytes at a checkpoint and thawed by its next record, as the
            # registry does (the decoder's memo is held by its fingerprint meanwhile).
            memo, a["memo"][0] = a["memo"][0], None
            mon.compact(keep_last=True)
            ref.compact()
            packed = freeze_bytes(mon, t.next_state, {}, memo)
            assert packed is not None
            a["mon"], _, last, a["memo"][0] = thaw_bytes(packed[0], DOMAIN, LIMITS, packed[1])
            assert last == t.next_state
            assert a["memo"][0] is None or a["memo"][0][2] is last
            frozen += 1
    assert wire_atoms.turns - start > 5 and frozen > 50
    assert any(not a["mon"].shares_index for a in agents.values())
    assert any(a["mon"].shares_index for a in agents.values())
    wire_atoms.forget()
