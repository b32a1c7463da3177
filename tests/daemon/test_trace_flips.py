"""A ``trace`` event's steps reach the monitor with the atoms each step flipped (the
decoder made each state from the one before by them, ``wire_fast`` memo[2]), and a trace
continuing the agent's last state starts from the memo's very set. Across agents, traces
and transitions interleaved, repeated and refused steps, the decoder's generation turns
and agents moving to indexes of their own, every verdict, state and kept execution is
the one a monitor given freshly decoded sets (and no flipped atoms) finds."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from capwatch.contracts import wire, wire_atoms, wire_fast
from capwatch.model.domain import GroundAtom
from capwatch.model.grounding import SharedGrounding
from capwatch.model.pddl_reader import read_domain
from capwatch.monitor.transition_monitor import MonitorLimits, TransitionMonitor
from tests.paths import DOMAINS
from tests.support.decoder_bounds import shrink_decoder

DOMAIN = read_domain(DOMAINS / "blocksworld" / "domain.pddl")
LIMITS = MonitorLimits(max_state_atoms=35, own_index_room=4)
ARITY = {"on": 2, "ontable": 1, "clear": 1, "holding": 1, "handempty": 0}
ACTIONS = {"pick-up": 1, "put-down": 1, "stack": 2, "unstack": 2}


def _fresh(state: list[list[str]]) -> frozenset[GroundAtom]:
    return frozenset(tuple(a) for a in state)


def _executed(mon: TransitionMonitor) -> dict[str, list[Any]]:
    decode = mon.index.decode
    return {name: [(p, decode(s), a, decode(s2)) for p, s, a, s2 in buf]
            for name, buf in mon.executed.items()}


@pytest.mark.parametrize("seed", range(3))
def test_trace_steps_with_their_flipped_atoms_give_the_same_verdicts(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    shrink_decoder(monkeypatch, atoms=60, pieces=30, state_bytes=6_000)
    blocks = [f"b{i}" for i in range(8)]

    def atom() -> list[str]:
        p = rng.choice(list(ARITY))
        return [p, *(rng.choice(blocks) for _ in range(ARITY[p]))]

    def step(state: list[list[str]]) -> list[list[str]]:
        if rng.random() < .15:
            return state  # refused: the state repeated
        after = [q for q in state if rng.random() < .9] + [atom() for _ in range(2)]
        return after if after else [atom()]

    families = {"f": SharedGrounding(DOMAIN), "g": SharedGrounding(DOMAIN, 60)}
    agents: dict[str, dict[str, Any]] = {
        f"a{i}": {"family": fam, "memo": [None, None, None], "last": None,
                  "compact": i % 3 == 0,  # each agent's writer spaces its JSON its way
                  "mon": TransitionMonitor(DOMAIN, LIMITS, families[fam]),
                  "ref": TransitionMonitor(DOMAIN, LIMITS, families[fam])}
        for i, fam in enumerate("fgfg")}
    told = continued = 0
    for _ in range(400):
        name = rng.choice(list(agents))
        a = agents[name]
        state = a["last"] if a["last"] is not None and rng.random() < .7 \
            else [atom() for _ in range(rng.randint(3, 30))]
        states = [state]
        for _ in range(rng.randint(1, 8)):
            states.append(step(states[-1]))
        actions = [[x, *(rng.choice(blocks) for _ in range(ACTIONS[x]))]
                   for x in rng.choices(list(ACTIONS), k=len(states) - 1)]
        if len(actions) == 1 and rng.random() < .5:
            event: dict[str, Any] = {"type": "transition", "state": states[0],
                                     "action": actions[0], "next_state": states[1]}
        else:
            event = {"type": "trace", "states": states, "actions": actions}
        raw = json.dumps({"agent_id": name, "family": a["family"], **event},
                         separators=(",", ":") if a["compact"] else None).encode()
        memo = a["memo"]
        kept = memo[0]
        got = wire_fast.decode(raw, memo=memo)
        assert not isinstance(got, wire.DeadLetter), got
        assert got == wire.decode(raw)
        if event["type"] == "trace":
            flips = memo[2]
            assert memo[1] is None and flips is not None and len(flips) == len(got)
            if kept is not None and states[0] == a["last"]:
                assert got[0].state is kept[2]  # the memo's very set
                continued += 1
        else:
            assert memo[2] is None
            flips = [memo[1]]
        a["last"] = states[-1]
        for i, t in enumerate(got):
            if i:
                assert t.state is got[i - 1].next_state  # one set per state
            flipped = flips[i]
            if flipped is not None:
                told += 1
                assert len(set(flipped)) == len(flipped)
                assert set(flipped) == t.state ^ t.next_state
            mon: TransitionMonitor = a["mon"]
            ref: TransitionMonitor = a["ref"]
            seen = mon.observe(t.state, t.action, t.next_state, t.step or 0, flipped)
            want = ref.observe(_fresh(states[i]), t.action, _fresh(states[i + 1]),
                               t.step or 0)
            assert seen[:4] == want[:4]
            assert mon.index.decode(seen.state) == ref.index.decode(want.state) == t.state
            assert mon.transitions == ref.transitions
        assert _executed(a["mon"]) == _executed(a["ref"])
    assert told > 100 and continued > 20
    wire_atoms.forget()
