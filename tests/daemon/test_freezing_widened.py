"""Agents of one family on a small shared index that widens for the large states among
them (SharedGrounding.widen) while others move to indexes of their own, each frozen
(watch_freezing) whenever idle, with the decoder's atoms that differ and its very sets
handed over: every verdict, inconsistency and execution kept is what a monitor on no
family index, never frozen, fed equal copies, gives (an index of the agent's own keeps
the newest executions that fit its room, a subset)."""

from __future__ import annotations

import random

from capwatch.daemon.watch_freezing import freeze_bytes, thaw_bytes
from capwatch.model import ModelError
from capwatch.model.domain import Action, Domain, LiftedAtom, Outcome, Parameter, Predicate
from capwatch.model.grounding import SharedGrounding
from capwatch.monitor.transition_monitor import MonitorLimits, TransitionMonitor

_X, _Y = Parameter("?x"), Parameter("?y")
Atoms = frozenset[tuple[str, ...]]


def _lifted(name: str, *args: str) -> LiftedAtom:
    return LiftedAtom(name, args)


def _domain() -> Domain:
    p, q = _lifted("p", "?x"), _lifted("q", "?x")
    return Domain("d", (Predicate("p", (_X,)), Predicate("q", (_X,)),
                        Predicate("r", (_X, _Y))), (
        Action("mark", (_X,), pre_pos=frozenset({p}),
               outcomes=(Outcome(add=frozenset({q})),)),
        Action("unmark", (_X,), pre_pos=frozenset({q}),
               outcomes=(Outcome(delete=frozenset({q})),)),
        Action("link", (_X, _Y), pre_pos=frozenset({p, _lifted("p", "?y")}),
               outcomes=(Outcome(add=frozenset({_lifted("r", "?x", "?y")})),)),
    ))


def _step(state: Atoms, action: tuple[str, ...]) -> Atoms:
    name, *o = action
    if name == "mark" and ("p", o[0]) in state:
        return state | {("q", o[0])}
    if name == "unmark":
        return state - {("q", o[0])}
    if name == "link" and ("p", o[0]) in state and ("p", o[1]) in state:
        return state | {("r", o[0], o[1])}
    return state


def _kept(monitor: TransitionMonitor) -> set[tuple[object, ...]]:
    decode = monitor.index.decode
    return {(name, t.position, decode(t.state), t.action, decode(t.next_state))
            for name, buf in monitor.executed.items() for t in buf}


def test_frozen_agents_on_a_widening_family_index_do_what_unfrozen_ones_do() -> None:
    rng = random.Random(7)
    domain = _domain()
    shared = SharedGrounding(domain, 16)
    # The large states widen the index (to at most own_index_atoms); the small ones,
    # joining later, share it until it is full, then move to indexes of their own.
    limits = MonitorLimits(max_state_atoms=300, own_index_room=50)
    sizes = {"large": 120, "huge": 250, "tiny": 3, "small": 10}
    joins = {"large": 0, "huge": 200, "tiny": 400, "small": 400}
    objects = {a: [f"{a}{k}" for k in range(n)] for a, n in sizes.items()}
    subject = {a: TransitionMonitor(domain, limits, shared) for a in sizes}
    reference = {a: TransitionMonitor(domain, limits) for a in sizes}
    state: dict[str, Atoms] = {a: frozenset(("p", o) for o in objects[a]) for a in sizes}
    seen: dict[str, Atoms | None] = dict.fromkeys(sizes)
    frozen: dict[str, tuple[bytes, SharedGrounding | None]] = {}
    freezes = own = faults = 0
    for position in range(1_500):
        agent = rng.choice([a for a, at in joins.items() if at <= position])
        if agent in frozen:
            subject[agent], _, last, _ = thaw_bytes(frozen.pop(agent)[0], domain, limits,
                                                    shared)
            seen[agent] = last or None
        if rng.random() < (0.05 if sizes[agent] > 50 else 0.5):  # an object never named
            objects[agent].append(f"{agent}-new{position}")
            state[agent] |= {("p", objects[agent][-1])}
        name = rng.choice(["mark", "unmark", "link"])
        o = rng.sample(objects[agent], 2)
        action = (name, o[0], o[1]) if name == "link" else (name, o[0])
        before = state[agent]
        after = _step(before, action)
        if rng.random() < 0.05:  # a fault: an atom no action explains
            after ^= {("q", rng.choice(objects[agent]))}
            faults += 1
        if rng.random() < 0.01:  # outside the vocabulary: refused, nothing changes
            after |= {("p", "x", "y")}
        # The decoder hands over the very set the monitor saw last, and the atoms that
        # differ when it made the next state from the state by them.
        last_seen = seen[agent]
        s = last_seen if last_seen is not None and last_seen == before \
            and rng.random() < 0.8 else frozenset(before)
        s2 = frozenset(after)
        flipped = list(s ^ s2) if rng.random() < 0.6 else None
        got: object
        try:
            got = subject[agent].observe(s, action, s2, position, flipped)[:4]
        except ModelError as e:
            got = str(e)
        want: object
        try:
            want = reference[agent].observe(frozenset(before), action, frozenset(after),
                                            position)[:4]
        except ModelError as e:
            want = str(e)
        assert got == want, position
        if not isinstance(got, str):
            state[agent], seen[agent] = after, s2
        if position % 10 == 0:
            # A move to an index of its own keeps the newest executions that fit its room.
            assert _kept(subject[agent]) <= _kept(reference[agent]), position
            assert list(subject[agent].inconsistencies) \
                == list(reference[agent].inconsistencies)
        own += not subject[agent].shares_index
        if rng.random() < 0.2:  # idle: trimmed, then held as bytes (Registry.compact_idle)
            subject[agent].compact(keep_last=True)
            reference[agent].compact(keep_last=True)
            packed = freeze_bytes(subject[agent], seen[agent] or frozenset(), {})
            if packed is not None:
                frozen[agent] = packed
                freezes += 1
    assert freezes > 100 and faults > 30
    assert len(shared.index) == limits.own_index_atoms  # widened for the large states
    assert own > 100  # and small states moved to indexes of their own
