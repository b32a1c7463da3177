"""Per-agent consistency monitoring: the hot path every transition goes through.

One ``TransitionMonitor`` per agent holds the agent's current model grounded over an
atom index, checks each transition (Def. 35), and keeps the evidence the assessment
engine needs: the inconsistent transitions with their Table 2 explanation, and a
bounded sample of executed transitions per action, from which the pa-values that the
observations pin down are inferred without asking the agent anything
(capwatch.monitor.executions reads them).

Over ~400 lines and 24 KB (~620, 33 KB): :meth:`TransitionMonitor.idle_state` and
:meth:`TransitionMonitor.from_idle_state` must see every private field the monitor
keeps (an index of the agent's own included), so they live with it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Final

from capwatch.model.consistency import Verdict, check, check_declared
from capwatch.model.domain import Domain, GroundAction, GroundAtom
from capwatch.model.errors import ModelError
from capwatch.model.grounding import (
    AtomIndex,
    Grounder,
    GroundOperator,
    IndexFull,
    SharedGrounding,
    StateMask,
    closed_vocabulary,
)
from capwatch.model.pal import AbstractModel, PaTuple, PaValue
from capwatch.monitor import executions
from capwatch.monitor.observations import ExecutedTransition as ExecutedTransition
from capwatch.monitor.observations import InconsistentTransition as InconsistentTransition
from capwatch.monitor.observations import MonitorLimits as MonitorLimits
from capwatch.monitor.observations import Observation as Observation

AtomLists = Sequence[Sequence[str]]
_new_tuple: Final[Any] = tuple.__new__
Step = tuple[Verdict, GroundAction, int, int, StateMask, GroundOperator]
""":class:`Observation`'s fields, in its order (:meth:`TransitionMonitor.step`)."""
# Module constants: reading a member off an enum class costs ~0.15 µs on Python 3.11
# (Final: kept in a C static by mypyc, not looked up in the module's dictionary).
_APPLIED: Final = Verdict.APPLIED
_INCONSISTENT: Final = Verdict.INCONSISTENT
_NO_ATOMS: frozenset[GroundAtom] = frozenset()
RUN: Final = 4
"""Values an execution takes in :attr:`TransitionMonitor._runs`' flat lists."""
IDLE_MASK, IDLE_HAD_LAST, IDLE_OWN = 2, 3, 4
"""Where :meth:`TransitionMonitor.idle_state` holds the last next-state's mask, whether
it is the caller's last state's, and an index of the agent's own."""


def _in_vocabulary(arity: dict[str, int], atoms: Iterable[GroundAtom]) -> bool:
    """Whether every atom is of a predicate of the vocabulary ``arity`` (name → arity),
    with its arity: the vocabulary check of a new agent's atoms in bulk (compiled, ~10 ns
    an atom, where a set of their shapes cost ~70 ns, and a set of atoms checked before,
    shared by a family, cost more to look in and to fill than the check it spared: an
    agent naming objects of its own brings a hundred atoms or more, none of them checked
    before). False too for an empty atom or a name that is no string: a check atom by
    atom then says what is wrong."""
    try:
        for atom in atoms:
            if not atom or arity.get(atom[0], -1) != len(atom) - 1:
                return False
    except TypeError:
        return False
    return True


def _unflat(buf: list[Any], kind: Any, keep: int) -> list[Any]:
    """A flat list of executions (:data:`RUN` values each) as one ``kind`` (a tuple type)
    per execution: its last ``keep`` (the list holds up to :data:`RUN_SLACK` more)."""
    return [_new_tuple(kind, (buf[i], buf[i + 1], buf[i + 2], buf[i + 3]))
            for i in range(max(0, len(buf) - RUN * keep), len(buf), RUN)]


RUN_SLACK: Final = 8
"""Executions an action's flat list may hold beyond ``limits.executed_per_action``
before its oldest are dropped, all at once: dropping one execution a record moved the
whole list (a slice deletion: ~680 instructions a record once the list was full;
callgrind, outside fleet). Readers take the last ``executed_per_action`` (_unflat)."""


def _union(bits: dict[GroundAtom, int], atoms: tuple[GroundAtom, ...]) -> int:
    """The bits of ``atoms`` (all in ``bits``); OR, not a sum: repeated objects can ground
    two atoms to the same one."""
    mask = 0
    for atom in atoms:
        mask |= bits[atom]
    return mask


class TransitionMonitor:
    """Checks one agent's transitions against its current model.

    Given its model's :class:`SharedGrounding`, the monitor numbers atoms in the
    family's shared index and uses the operators grounded there: a new agent of a
    family grounds nothing and holds no index of its own. When the shared index is
    full and the agent brings atoms it lacks, the monitor moves to an index of its own
    (:meth:`_own_index`), re-encoding what it keeps. Held per agent, so its fields are
    slots and its evidence buffers are made when first needed.
    """

    __slots__ = ("_inconsistencies", "_last_lists", "_last_mask", "_ops",
                 "_predicates", "_runs", "_shared", "_valid", "domain",
                 "grounder", "index", "limits", "transitions")

    def __init__(self, domain: Domain, limits: MonitorLimits | None = None,
                 shared: SharedGrounding | None = None) -> None:
        self.limits = limits or MonitorLimits()
        # An agent of a family sharing its index makes no index of its own (three objects
        # less to allocate, and for the collector to scan, per agent admitted).
        self.index = shared.index if shared is not None and shared.domain is domain \
            and not shared.index.full else AtomIndex(self.limits.own_index_atoms)
        self._shared: SharedGrounding | None = None
        self._last_lists: AtomLists | frozenset[GroundAtom] | None = None
        """The last next-state seen (lists from :meth:`observe_lists`, the very set from
        :meth:`observe`) and its encoding, reused when the next transition starts there."""
        self._last_mask: StateMask = 0
        self._set_domain(domain, shared)
        self._inconsistencies: deque[InconsistentTransition] | None = None
        self._runs: dict[str, list[Any]] = {}
        """Action name → its last executions (at most ``limits.executed_per_action``),
        oldest first, flat: each one's position, state mask, ground action and next-state
        mask in turn (:data:`RUN`). Flat, not a tuple per execution: a tuple kept for 64
        executions of its action was an object for the garbage collector to visit in
        every generation it passed (half of what a young collection visited in steady
        state), and a subclass of tuple is never untracked. Lists, because most agents
        keep few and a bounded deque allocates room for 64 at once. Read as
        :class:`ExecutedTransition` through :attr:`executed`."""
        self.transitions = 0

    def _set_domain(self, domain: Domain, shared: SharedGrounding | None = None) -> None:
        self.domain = domain
        if shared is not None and shared.domain is not domain:
            shared = None
        was_shared = self.shares_index
        self._shared = shared
        if shared is not None and not shared.index.full:
            self._use_shared(shared)
        else:
            if was_shared:
                self._last_lists = None
                self.index = AtomIndex(self.limits.own_index_atoms)
            self.grounder = Grounder(domain, self.index, shared)
            self._valid: dict[GroundAtom, int] = self._own_valid()
            """Atom → its bit, for the atoms checked against this model's vocabulary."""
        self._ops = self.grounder.cache
        self._predicates = shared.predicates if shared is not None \
            else {p.name: p.arity for p in domain.predicates}

    def _own_valid(self, checked: bool = False) -> dict[GroundAtom, int]:
        """The checked atoms' map of an index of the agent's own: the index's own map
        while every atom it holds is checked (a new index, or one ``checked`` holds only
        checked atoms, over a model whose actions mention only its vocabulary: grounded
        atoms pass the check, and the rest are checked before they are interned); an
        agent on its own index then holds one map, not two. An index kept from an earlier
        model is checked again, atom by atom."""
        shared = self._shared
        if (checked or len(self.index) == 0) and (
                shared.closed if shared is not None else closed_vocabulary(self.domain)):
            return self.index.bits
        return {}

    def _use_shared(self, shared: SharedGrounding) -> None:
        if self.index is not shared.index:
            self._last_lists = None  # its mask was in another index
        self.index = shared.index
        self.grounder = shared.grounder
        self._valid = shared.bits

    def idle_state(self, last: Collection[GroundAtom]) -> tuple[Any, ...] | None:
        """What the monitor holds beyond its model, as plain values, for an idle agent held
        in memory as bytes; :meth:`from_idle_state` rebuilds the very same monitor. ``last``
        is the caller's last next-state (the set :meth:`observe` was handed last, or the
        tuple :meth:`compact` was told it is held as). None
        (nothing to gain, or not rebuilt exactly) while the monitor holds inconsistent
        transitions or last saw decoded lists.

        An index of the agent's own is held as its atoms in bit order (numbered alike
        again), with the bits of those checked against the model (None: all of them, the
        index's own map); its operators are grounded again when next used, to the same
        bits, since every atom they intern already is in the index."""
        lists = self._last_lists
        if self._inconsistencies is not None or (lists is not None and lists is not last):
            return None
        own: tuple[tuple[GroundAtom, ...], int | None] | None = None
        if not self.shares_index:
            index = self.index
            valid = self._valid
            # Not index.bits: that would map atoms left unmapped (AtomIndex.defer_new).
            own = (index.atoms, None if index.maps_with(valid) else sum(valid.values()))
        return (self.transitions,
                tuple((name, tuple(_unflat(buf, tuple, self.limits.executed_per_action)))
                      for name, buf in self._runs.items()),
                self._last_mask, lists is not None, own)

    @classmethod
    def from_idle_state(cls, domain: Domain, limits: MonitorLimits,
                        shared: SharedGrounding | None, state: tuple[Any, ...],
                        last: frozenset[GroundAtom]) -> TransitionMonitor:
        """The monitor :meth:`idle_state` described, over the same model, limits and shared
        grounding; ``last`` is the caller's last next-state again."""
        transitions, executed, mask, had_last, own = state
        if shared is not None and shared.domain is not domain:
            raise ValueError("the shared grounding is for another model")
        mon = cls(domain, limits, shared)
        if own is not None:
            atoms, valid = own
            index = mon.index = AtomIndex.of(atoms, limits.own_index_atoms)
            mon.grounder = Grounder(domain, index, shared)
            mon._ops = mon.grounder.cache
            mon._valid = index.bits if valid is None \
                else {a: b for a, b in index.bits.items() if valid & b}
        elif not mon.shares_index:
            assert shared is not None
            # The shared index filled up meanwhile: the monitor had numbered its atoms in
            # it before and keeps doing so until an atom does not fit (as it would have).
            mon._use_shared(shared)
            mon._ops = mon.grounder.cache
        mon.transitions = transitions
        mon._runs = {name: [v for t in buf for v in t] for name, buf in executed}
        mon._last_lists = last if had_last else None
        mon._last_mask = mask
        return mon

    def _own_index(self) -> None:
        """Move to a new index of the agent's own: when the family's shared index is full,
        or when the agent's own index reached ``limits.own_index_atoms``. The executed
        transitions kept are re-encoded, newest first, while their atoms fit in
        ``limits.own_index_room``; older ones are dropped (a recency buffer: losing some
        costs queries, never a verdict), so the transition being observed always fits."""
        old = self.index
        # The executions re-encoded below hold atoms of the old index: checked ones if
        # every atom there was (the family's index is checked as this one would be).
        checked = self._valid is old.bits or self.shares_index
        index = AtomIndex(self.limits.own_index_atoms)
        self._runs = {name: [v for t in buf for v in t] for name, buf in executions.recoded(
            self.executed, old, index, self.limits.own_index_room).items()}
        self._last_lists = None  # its mask was in the old index
        self.index = index
        self.grounder = Grounder(self.domain, index, self._shared)
        self._ops = self.grounder.cache
        self._valid = self._own_valid(checked)

    @property
    def executed(self) -> dict[str, list[ExecutedTransition]]:
        """Action name → its last executions kept, oldest first; made anew from the flat
        lists at each read (assessments, freezing, canaries: off the per-record path)."""
        keep = self.limits.executed_per_action
        return {name: _unflat(buf, ExecutedTransition, keep) for name, buf in self._runs.items()}

    @property
    def shared(self) -> SharedGrounding | None:
        """The family grounding the monitor was given (see :attr:`shares_index`)."""
        return self._shared

    @property
    def shares_index(self) -> bool:
        """Whether the monitor numbers atoms in its family's shared index."""
        return self._shared is not None and self.index is self._shared.index

    def replace_model(self, domain: Domain, shared: SharedGrounding | None = None) -> None:
        """Adopt a new model version; evidence gathered under the old one is dropped
        because its verdicts no longer hold, but an index of the agent's own is kept."""
        self._last_lists = None  # its atoms are checked against the new model again
        self._runs.clear()
        self._inconsistencies = None
        self._set_domain(domain, shared)

    def compact(self, keep_last: bool = False,
                held: tuple[frozenset[GroundAtom], tuple[GroundAtom, ...]] | None = None
                ) -> bool:
        """Keep only what an idle agent still needs: the last execution of each action
        (drift probes ask the agent to run it there again). Older executions and the
        inconsistent transitions kept so far are dropped: an assessment gets executions
        from its first buffered inconsistency on, so a caller compacts only an agent with
        none buffered; :meth:`pinned_pa_values` and :meth:`contradicted` then see only
        what was observed since. True if anything was dropped (the last next-state's
        set is let go too: an idle agent's next record comes with a set decoded anew,
        whose encoding is made again), unless ``keep_last`` (the monitor is held as
        bytes next: :meth:`idle_state` then gives its mask for it).

        ``held``: (a set, the tuple of its atoms the caller holds it as from now on).
        When the set is the last next-state the monitor saw, its mask is kept for the
        tuple: :meth:`idle_state` of that tuple gives it, where freezing an agent
        compacted at an earlier checkpoint encoded its last state again (a set made
        anew and a lookup per atom: ~7 us at 150 atoms). The tuple is never a state
        :meth:`observe` or :meth:`observe_lists` is handed, so neither reuses the mask."""
        if not keep_last:
            last = self._last_lists
            self._last_lists = held[1] if held is not None and last is held[0] else None
        dropped = self._inconsistencies is not None
        self._inconsistencies = None
        runs = self._runs
        keep = RUN * self.limits.executed_per_action
        for name, buf in runs.items():
            if len(buf) > RUN:
                runs[name] = buf[-RUN:]
                # Dropped: executions a reader saw (not only those beyond the limit).
                dropped = dropped or min(len(buf), keep) > RUN
        return dropped

    @property
    def inconsistencies(self) -> Sequence[InconsistentTransition]:
        """The inconsistent transitions kept (at most ``limits.max_inconsistencies``)."""
        return self._inconsistencies if self._inconsistencies is not None else ()

    def validate_atom(self, atom: GroundAtom) -> None:
        arity = self._predicates.get(atom[0]) if atom else None
        if arity is None:
            raise ModelError(f"unknown predicate {atom[0]!r}" if atom else "empty atom")
        if len(atom) - 1 != arity:
            raise ModelError(
                f"predicate {atom[0]!r} takes {arity} arguments, found {len(atom) - 1}")

    def _encode(self, atoms: AtomLists) -> StateMask:
        if len(atoms) > self.limits.max_state_atoms:
            raise ModelError(
                f"state has {len(atoms)} atoms, more than the limit {self.limits.max_state_atoms}")
        return self.index.encode_lists(atoms, self.validate_atom)

    def observe_lists(self, state: AtomLists, action: Sequence[str], next_state: AtomLists,
                      position: int = -1) -> Observation:
        """Check a transition given as decoded JSON. Raises ModelError on vocabulary errors
        (unknown action or predicate, wrong arity, oversized state) before touching any
        evidence, so a rejected message leaves the monitor as it was."""
        ground_action = tuple(action)
        op = self._ops.get(ground_action)
        if op is None:
            op = self._operator(ground_action)
        try:
            s, s2 = self._encode_pair(state, next_state)
        except IndexFull:
            self._own_index()
            op = self._operator(ground_action)
            s, s2 = self._encode_pair(state, next_state)
        self._last_lists, self._last_mask = next_state, s2
        return self._record(op, ground_action, s, s2, check(op, s, s2), position)

    def _encode_pair(self, state: AtomLists, next_state: AtomLists
                     ) -> tuple[StateMask, StateMask]:
        # Consecutive transitions of an episode share a state (s_{t+1} = s'_t), so the
        # previous next-state's encoding is reused when the lists are equal.
        last_lists = self._last_lists
        s = self._last_mask if isinstance(last_lists, list) and state == last_lists \
            else self._encode(state)
        # A refused action leaves the state as it was: no need to encode it twice.
        return s, s if next_state == state else self._encode(next_state)

    def observe(self, state: frozenset[GroundAtom], action: GroundAction,
                next_state: frozenset[GroundAtom], position: int = -1,
                flipped: Collection[GroundAtom] | None = None,
                executed: bool | None = None,
                came: tuple[frozenset[GroundAtom], Collection[GroundAtom]] | None = None
                ) -> Observation:
        """Check a transition given as sets of atoms (see :meth:`observe_lists`):
        :meth:`step` as an :class:`Observation`."""
        obs: Observation = _new_tuple(Observation, self.step(
            state, action, next_state, position, flipped, executed, came))
        return obs

    def step(self, state: frozenset[GroundAtom], action: GroundAction,
             next_state: frozenset[GroundAtom], position: int = -1,
             flipped: Collection[GroundAtom] | None = None,
             executed: bool | None = None,
             came: tuple[frozenset[GroundAtom], Collection[GroundAtom]] | None = None
             ) -> Step:
        """:meth:`observe`'s check, its observation's fields as a plain tuple: the
        per-record path's (AgentWatch), which compiled takes it as a C struct, where
        the NamedTuple cost a call of ``tuple.__new__`` a record (~870 instructions;
        callgrind, outside fleet).

        ``executed``: the producer's word on whether the agent executed the action (the
        wire's field; None: not said), which decides an unchanged state
        (:func:`check_declared`).

        ``flipped``: the atoms in exactly one of ``state`` and ``next_state``, no atom
        twice, when the caller knows them (the decoder made the next state from the
        state by them): the next state is then encoded from the state's mask by those
        few atoms alone. Wrong ones would make a wrong verdict: only a caller that built
        ``next_state`` from them passes them.

        ``came``: a set and the atoms in exactly one of it and ``state``, no atom twice,
        when the caller made ``state`` from that set by them (the decoder, from the
        agent's last next-state, on a state that is not that very set: a reset, a new
        episode). When the set is the last next-state the monitor saw, the state is
        encoded from that one's encoding by those atoms, not whole. The same trust as
        ``flipped``.
        """
        # The operator first: grounding a new one may move the agent to an index of its
        # own, which the states must then be encoded in.
        op = self._ops.get(action)
        if op is None:
            op = self._operator(action)
        valid = self._valid
        try:
            # Consecutive transitions of an episode share a state (s_{t+1} = s'_t), and the
            # decoder hands the previous next-state's very set over again (wire_fast's
            # StateMemo): its encoding is reused, and the next state's is made from it by
            # the few atoms a step changes (the set differences reuse the hashes the sets
            # hold; looking every atom up hashed its tuple again, ~0.05 µs an atom). A
            # set has no repeated atom, so the sum of the bits is their union.
            # A state made by the decoder from the last next-state by the few atoms that
            # differ (a reset, a new episode, a gap): encoded from that one's mask by them.
            # A new agent's first record: the state encoded whole, by a loop (compiled, no
            # bound method, map or call per atom: sum(map(valid.__getitem__, ...)) cost
            # ~600 instructions an atom, callgrind, ipc-mixed).
            last = self._last_lists
            if state is last:
                s = self._last_mask
            elif came is not None and came[0] is last:
                s = self._last_mask
                for atom in came[1]:
                    s ^= valid[atom]
            else:
                s = 0
                for atom in state:
                    s += valid[atom]
            if next_state is state:
                s2 = s
            elif flipped is not None:
                # Each atom's bit is its own: toggling the flipped ones' bits removes
                # those the state had and adds the others. A loop, not sum(map(...)): a
                # step flips 2-8 atoms, and compiled, the loop makes no bound method, map
                # or call (the map was a container object per record for the collector).
                s2 = s
                for atom in flipped:
                    s2 ^= valid[atom]
            elif len(next_state) < 10:  # two set differences cost more than 9 lookups
                # Loops, as for the flipped atoms: sum(map(...)) over so few atoms cost
                # more in making the bound method, the map and the calls than in adding
                # (perf, stochastic fleet: a fifth of this method).
                s2 = 0
                for atom in next_state:
                    s2 += valid[atom]
            else:
                s2 = s
                for atom in state - next_state:
                    s2 -= valid[atom]
                for atom in next_state - state:
                    s2 += valid[atom]
        except KeyError:
            s, s2 = self._encode_new(state, next_state, flipped)
            if self._ops.get(action) is not op:
                op = self._operator(action)  # the agent moved to an index of its own
        self._last_lists, self._last_mask = next_state, s2
        # The producer's word decides an unchanged state, and a change said not executed
        # is inconsistent (check_declared); an execution said or not said is checked alone.
        result = check(op, s, s2) if executed is None or (executed and s != s2) \
            else check_declared(op, s, s2, executed)
        verdict = result[0]
        if verdict is not _APPLIED:
            return self._record(op, action, s, s2, result, position, state, next_state,
                                executed)
        # An execution, most transitions: _record's bookkeeping inline (a call and its
        # argument tuple cost a tenth of the whole check on this path). The name is the
        # ground action's own (an operator is grounded from the action of that name),
        # where op.action.name took two attribute reads of Python objects.
        name = action[0]
        self.transitions += 1
        buf = self._runs.get(name)
        if buf is None:
            buf = self._runs[name] = []
        buf.append(position)
        buf.append(s)
        buf.append(action)
        buf.append(s2)
        keep = RUN * self.limits.executed_per_action
        if len(buf) > keep + RUN * RUN_SLACK:
            del buf[:len(buf) - keep]
        return verdict, action, result[1], position, s, op

    def _operator(self, action: GroundAction) -> GroundOperator:
        """Ground ``action`` (raises ModelError); on a full shared index, in an index of
        the agent's own."""
        ops = self._ops
        if len(ops) >= 100_000:
            ops.clear()  # a bound on memory for fleets with many objects; grounded again
        try:
            return self._ground(action)
        except IndexFull:
            self._own_index()
            return self._ground(action)

    def _ground(self, action: GroundAction) -> GroundOperator:
        """``self.grounder.operator(action)``; with a family grounding, its atoms numbered
        here (compiled) rather than by the grounder's loop in Python: a new agent on an
        index of its own grounds its first action anew (~4 us there, ~1 here)."""
        shared = self.grounder.shared
        if shared is None:
            return self.grounder.operator(action)
        lifted, args, pos, neg, outcomes, admitted = shared.ground(action)
        index = self.index
        bits = index.bits
        # Atoms new to the index interned at once, in the grounder's order (each
        # outcome's deletes and adds, then the preconditions), so both number atoms
        # alike; a new agent on an index of its own has none of them yet.
        missing: dict[GroundAtom, None] = {}
        for d, a in outcomes:
            for group in (d, a):
                for atom in group:
                    if atom not in bits:
                        missing[atom] = None
        for group in (pos, neg):
            for atom in group:
                if atom not in bits:
                    missing[atom] = None
        if missing:
            index.add_new(missing)
        effects = tuple([(~_union(bits, d), _union(bits, a)) for d, a in outcomes])
        op = GroundOperator(lifted, args, _union(bits, pos), _union(bits, neg), effects,
                            admitted)
        self._ops[action] = op
        return op

    def _encode_new(self, state: frozenset[GroundAtom], next_state: frozenset[GroundAtom],
                    flipped: Collection[GroundAtom] | None = None
                    ) -> tuple[StateMask, StateMask]:
        """Encode states holding atoms not yet checked against the current model: every
        one is checked before any is interned, so a refused transition changes nothing.
        ``flipped`` as for :meth:`observe`."""
        index = self.index
        bits = index.bits  # maps the atoms a first record left unmapped (see below)
        valid = self._valid
        # Set operations on the frozensets reuse the hashes they hold (hashing an atom's
        # tuple again costs about as much as the lookup): a new agent on an index of its
        # own brings its whole first state here, often a hundred atoms or more. A step
        # changes few atoms, so the next state's new atoms are found among those: the
        # decoder's flipped ones when it has them (two set differences of whole states
        # cost ~2 us each at 150 atoms).
        fresh = state.difference(valid)
        gone: Collection[GroundAtom] | None = _NO_ATOMS
        came: Collection[GroundAtom] = _NO_ATOMS
        if next_state is not state:
            if flipped is not None:
                came = [a for a in flipped if a in next_state]
                gone = [a for a in flipped if a not in next_state]
            else:
                came = next_state - state
                gone = None
        came_new = [a for a in came if a not in valid]
        predicates = self._predicates
        if not (_in_vocabulary(predicates, fresh) and _in_vocabulary(predicates, came_new)):
            for atom in (*fresh, *came_new):
                self.validate_atom(atom)  # names what is wrong
        # The map of checked atoms is the index's own (an index of the agent's own): the
        # state's atoms not in it are interned first, as one run of bits from the
        # index's size on, so their sum is that run, not a lookup and a big-int sum per
        # atom (~5 us for a new agent's 120 atoms).
        run = valid is bits
        first = len(index)
        if run and gone is not None:
            # Nor mapped yet (AtomIndex.defer_new): only the few atoms a step changes are
            # looked up here, so those of the run are put first, where their bits are
            # known by their order. An agent held as bytes before its next record never
            # maps them (its bytes hold the atoms in bit order).
            lead = [a for a in gone if a in fresh]
            order: Collection[GroundAtom] = [*lead, *fresh.difference(lead)] if lead \
                else fresh
            if index.defer_new(order, came_new):
                s = ((1 << len(fresh)) - 1) << first
                if len(fresh) < len(state):
                    s += sum(map(valid.__getitem__, state.difference(fresh)))
                if next_state is state:
                    return s, s
                placed: dict[GroundAtom, int] = {}
                for i, atom in enumerate(lead):
                    placed[atom] = 1 << (first + i)
                at = first + len(fresh)
                for i, atom in enumerate(came_new):
                    placed[atom] = 1 << (at + i)
                s2 = s
                for atom in gone:
                    s2 -= placed[atom] if atom in placed else valid[atom]
                for atom in came:
                    s2 += placed[atom] if atom in placed else valid[atom]
                return s, s2
        new = fresh
        try:
            if run:
                # Neither holds an atom of the index, nor one of the other's.
                index.add_new(fresh)
                if came_new:
                    index.add_new(came_new)
            else:
                if came_new:
                    new = fresh.union(came_new)
                index.add(new)
        except IndexFull:
            # Atoms interned before the shared index filled up stay there: they are
            # valid, and other agents may use them.
            if valid is not bits:
                valid.update((a, bits[a]) for a in new if a in bits)
            shared = self._shared
            if shared is None or index is not shared.index or not shared.widen(
                    max(len(state), len(next_state)), self.limits.own_index_atoms):
                self._own_index()
            return self._encode_new(state, next_state, flipped)
        get = valid.__getitem__
        if run:
            s = ((1 << len(fresh)) - 1) << first
            if len(fresh) < len(state):
                s += sum(map(get, state.difference(fresh)))
        else:
            valid.update(zip(new, map(bits.__getitem__, new), strict=True))
            s = sum(map(get, state))
        if next_state is state:
            return s, s
        # A step changes few atoms: the next state's mask from the state's (see observe).
        if gone is None:
            gone = state - next_state
        return s, s - sum(map(get, gone)) + sum(map(get, came))

    def _record(self, op: GroundOperator, action: GroundAction, s: StateMask, s2: StateMask,
                result: tuple[Verdict, int], position: int,
                state: frozenset[GroundAtom] | None = None,
                next_state: frozenset[GroundAtom] | None = None,
                executed: bool | None = None) -> Observation:
        """``state``, ``next_state``: the sets ``s``, ``s2`` encode, if the caller has them
        (decoding them again cost more than the check on large states); ``executed`` as
        for :meth:`observe`."""
        verdict, outcomes = result
        name = op.action.name
        self.transitions += 1
        if verdict is _APPLIED:
            self._keep_executed(name, position, s, action, s2)
        elif verdict is _INCONSISTENT:
            fs = state if state is not None else self.index.decode(s)
            fs2 = next_state if next_state is not None else self.index.decode(s2)
            kept = self._inconsistencies
            if kept is None:
                kept = self._inconsistencies = deque(maxlen=self.limits.max_inconsistencies)
            kept.append(InconsistentTransition.unexplained(position, fs, action, fs2,
                                                           self.domain, executed))
            if s != s2:
                self._keep_executed(name, position, s, action, s2)
        # tuple.__new__ skips the NamedTuple's Python-level constructor (hot path).
        obs: Observation = _new_tuple(Observation, (verdict, action, outcomes, position, s, op))
        return obs

    def last_inconsistency(self) -> InconsistentTransition:
        """The inconsistent transition recorded last, with its Table 2 explanation."""
        return self.inconsistencies[-1]

    def executed_since(self, position: int, keep: int) -> list[executions.Decoded]:
        """The last ``keep`` executed transitions at or after ``position``, oldest first,
        decoded: the evidence an assessment gets alongside the inconsistent ones."""
        return executions.executed_since(self.index, self.executed, position, keep)

    def last_executed(self, name: str) -> tuple[frozenset[GroundAtom], GroundAction] | None:
        """The state action ``name`` last executed in, with its grounding (drift probes ask
        the agent to run it there again)."""
        buf = self._runs.get(name)
        if not buf:
            return None
        return self.index.decode(buf[-3]), buf[-2]

    def _keep_executed(self, name: str, position: int, s: StateMask, action: GroundAction,
                       s2: StateMask) -> None:
        buf = self._runs.get(name)
        if buf is None:
            buf = self._runs[name] = []
        buf.append(position)
        buf.append(s)
        buf.append(action)
        buf.append(s2)
        keep = RUN * self.limits.executed_per_action
        if len(buf) > keep + RUN * RUN_SLACK:
            del buf[:len(buf) - keep]

    def pinned_pa_values(self) -> dict[PaTuple, frozenset[PaValue]]:
        """Pa-values still possible after every executed transition seen (Table 2),
        for the pa-tuples some observation constrains."""
        return executions.pinned_pa_values(self.domain, self.index, self.executed)

    def contradicted(self) -> set[PaTuple]:
        """Pa-tuples whose current value the observations rule out."""
        model = AbstractModel.from_domain(self.domain)
        pinned = self.pinned_pa_values()
        out = {pa for pa, allowed in pinned.items() if model.pa_value(pa) not in allowed}
        for inc in self.inconsistencies:
            out.update(c.pa for c in inc.explanation.contradicted)
        return out

