"""What the executed transitions a monitor keeps (as bitsets, per action name, oldest
first) tell, read off them: the pa-values they pin down (Table 2), the evidence an
assessment gets, the state an action last ran in; and the same executions re-encoded in
a new atom index. :class:`~capwatch.monitor.transition_monitor.TransitionMonitor` keeps
them and calls these; nothing here changes what it is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.grounding import AtomIndex
from capwatch.model.pal import (
    LEGAL_PA_VALUES,
    PaTuple,
    PaValue,
    lifted_instantiations,
    pa_values_consistent_with,
)
from capwatch.monitor.observations import ExecutedTransition

Executed = Mapping[str, Sequence[ExecutedTransition]]
"""Action name → its executions kept, oldest first."""
Decoded = tuple[frozenset[GroundAtom], GroundAction, frozenset[GroundAtom]]
_new_tuple: Any = tuple.__new__


def pinned_pa_values(domain: Domain, index: AtomIndex, executed: Executed
                     ) -> dict[PaTuple, frozenset[PaValue]]:
    """Pa-values still possible after every execution in ``executed`` (Table 2), for
    the pa-tuples some execution constrains."""
    result: dict[PaTuple, frozenset[PaValue]] = {}
    actions = domain.action_map
    # An atom never interned is in no state kept here (its bit is 0): no need to intern
    # it, which could fill a shared index.
    bit = index.known_bit
    for name, buf in executed.items():
        action = actions[name]
        if not action.is_deterministic:
            # Table 2 describes one effect; branches of a probabilistic action would rule
            # each other out.
            continue
        atoms = list(lifted_instantiations(domain, action))
        for t in buf:
            binding = dict(zip(action.parameter_names, t.action[1:], strict=True))
            for atom in atoms:
                b = bit(atom.ground(binding))
                pa = PaTuple(name, atom)
                allowed = pa_values_consistent_with((bool(t.state & b), bool(t.next_state & b)))
                result[pa] = result.get(pa, frozenset(LEGAL_PA_VALUES)) & allowed
    return result


def executed_since(index: AtomIndex, executed: Executed, position: int, keep: int
                   ) -> list[Decoded]:
    """The last ``keep`` executions at or after ``position``, oldest first, decoded."""
    recent = sorted((t for buf in executed.values() for t in buf if t.position >= position),
                    key=lambda t: t.position)[-keep:]
    # Consecutive executions share a state (s_{t+1} = s'_t): each state decoded once, and
    # handed out as one set (an assessment's work item writes each set's atoms once).
    states: dict[int, frozenset[GroundAtom]] = {}

    def decode(mask: int) -> frozenset[GroundAtom]:
        got = states.get(mask)
        if got is None:
            got = states[mask] = index.decode(mask)
        return got

    return [(decode(t.state), t.action, decode(t.next_state)) for t in recent]


def last_executed(index: AtomIndex, executed: Executed, name: str
                  ) -> tuple[frozenset[GroundAtom], GroundAction] | None:
    """The state action ``name`` last executed in, decoded, with its grounding."""
    buf = executed.get(name)
    if not buf:
        return None
    last = buf[-1]
    return index.decode(last.state), last.action


def recoded(executed: Executed, old: AtomIndex, index: AtomIndex, room: int
            ) -> dict[str, list[ExecutedTransition]]:
    """``executed`` (encoded in ``old``) encoded in ``index``, newest first while their
    atoms fit in ``room`` atoms of it; older ones are dropped (a recency buffer: losing
    some costs queries, never a verdict). Actions left with none are left out."""
    kept = sorted(((t.position, i, name, t) for name, buf in executed.items()
                   for i, t in enumerate(buf)), key=lambda k: (k[0], k[1]), reverse=True)
    out: dict[str, list[ExecutedTransition]] = {name: [] for name in executed}
    for _, _, name, t in kept:
        state, after = old.decode(t.state), old.decode(t.next_state)
        if len(index) + sum(a not in index for a in state | after) > room:
            break
        out[name].append(_new_tuple(ExecutedTransition, (
            t.position, index.encode(sorted(state)), t.action, index.encode(sorted(after)))))
    return {name: buf[::-1] for name, buf in out.items() if buf}
