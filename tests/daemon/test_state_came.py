"""A message whose (first) state is not the agent's last next-state (a reset, a new
episode, a gap) reaches the monitor with the set the decoder made it from and the atoms
that differ (``wire_fast`` memo[3], "came"): the monitor encodes the state from its last
mask by them. Across agents, transitions and traces interleaved, resets to earlier and
to new states, the decoder's generation turns and agents moving to indexes of their
own, every verdict, state and kept execution is the one a monitor given freshly decoded
sets (and no atoms) finds; and a ``came`` from another set than the monitor's last one
is not used."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from capwatch.contracts import wire, wire_atoms, wire_fast
from capwatch.model.grounding import SharedGrounding
from capwatch.monitor.transition_monitor import TransitionMonitor
from tests.daemon.test_trace_flips import ACTIONS, ARITY, DOMAIN, LIMITS, _executed, _fresh
from tests.support.decoder_bounds import shrink_decoder


@pytest.mark.parametrize("seed", range(3))
def test_a_state_made_from_the_memo_is_encoded_from_the_last_mask(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    shrink_decoder(monkeypatch, atoms=80, pieces=40, state_bytes=8_000)
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
        f"a{i}": {"family": fam, "memo": [None, None, None, None], "last": None,
                  "seen": [], "compact": i % 3 == 0,
                  "mon": TransitionMonitor(DOMAIN, LIMITS, families[fam]),
                  "ref": TransitionMonitor(DOMAIN, LIMITS, families[fam])}
        for i, fam in enumerate("fgfg")}
    came_used = 0
    for _ in range(400):
        name = rng.choice(list(agents))
        a = agents[name]
        r = rng.random()
        if a["last"] is not None and r < .4:
            state = a["last"]
        elif a["seen"] and r < .7:
            state = rng.choice(a["seen"])  # back to an earlier state: a reset
        elif a["last"] is not None and r < .85:
            state = step(a["last"])  # a gap: a step never sent
        else:
            state = [atom() for _ in range(rng.randint(3, 30))]
        states = [state]
        for _ in range(rng.randint(1, 6)):
            states.append(step(states[-1]))
        actions = [[x, *(rng.choice(blocks) for _ in range(ACTIONS[x]))]
                   for x in rng.choices(list(ACTIONS), k=len(states) - 1)]
        if len(actions) == 1 and rng.random() < .6:
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
        came = memo[3]
        if came is not None:
            # The memo's set before this message, and exactly the atoms that differ.
            assert kept is not None and came[0] is kept[2]
            assert came[1] and len(set(came[1])) == len(came[1])
            assert set(came[1]) == came[0] ^ got[0].state
            assert got[0].state is not came[0]
        flips = memo[2] if event["type"] == "trace" else [memo[1]]
        assert flips is not None and len(flips) == len(got)
        a["last"] = states[-1]
        a["seen"] = (a["seen"] + [states[0]])[-5:]
        mon: TransitionMonitor = a["mon"]
        ref: TransitionMonitor = a["ref"]
        for i, t in enumerate(got):
            here = came if i == 0 else None
            if here is not None and mon._last_lists is here[0]:
                came_used += 1
            seen = mon.observe(t.state, t.action, t.next_state, t.step or 0, flips[i],
                               came=here)
            want = ref.observe(_fresh(states[i]), t.action, _fresh(states[i + 1]),
                               t.step or 0)
            assert seen[:4] == want[:4]
            assert mon.index.decode(seen.state) == ref.index.decode(want.state) == t.state
            assert mon.transitions == ref.transitions
        assert _executed(a["mon"]) == _executed(a["ref"])
    assert came_used > 10
    wire_atoms.forget()


def test_atoms_from_another_set_than_the_last_are_not_used() -> None:
    shared = SharedGrounding(DOMAIN)
    mon = TransitionMonitor(DOMAIN, LIMITS, shared)
    ref = TransitionMonitor(DOMAIN, LIMITS, shared)
    s0 = frozenset({("clear", "b1"), ("ontable", "b1"), ("handempty",)})
    s1 = frozenset({("holding", "b1")})
    mon.observe(s0, ("pick-up", "b1"), s1, 0)
    ref.observe(s0, ("pick-up", "b1"), s1, 0)
    other = frozenset({("holding", "b2")})
    # Wrong atoms, from a set the monitor did not see last: the state is encoded whole.
    wrong = (other, [("holding", "b2"), ("clear", "b1")])
    got = mon.observe(s0, ("pick-up", "b1"), s1, 1, came=wrong)
    want = ref.observe(s0, ("pick-up", "b1"), s1, 1)
    assert got[:4] == want[:4] and got.state == want.state
    # From the last set by the right atoms: the same mask.
    right = (s1, list(s1 ^ s0))
    got = mon.observe(s0, ("pick-up", "b1"), s1, 2, came=right)
    want = ref.observe(s0, ("pick-up", "b1"), s1, 2)
    assert got[:4] == want[:4] and got.state == want.state
