"""Grounding to fast operators over interned atoms.

A state is a Python ``int`` used as a bitset over interned ground atoms: applying an
outcome is ``(s & keep) | add`` and checking a precondition is two ``&``, a handful
of machine-word operations for the state sizes of real domains. Operators are
grounded lazily, only for ground actions actually seen, because the full grounding of
a fleet's vocabulary would be far larger than the part in use.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import or_

import numpy as np

from capwatch.model import grounding_plans
from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom
from capwatch.model.errors import ModelError

StateMask = int

SHARED_INDEX_ATOMS = 1024
"""Atoms a family's shared index takes (:class:`SharedGrounding`). A bitset is as long
as the highest bit it uses, so agents numbering their atoms in one shared index pay for
every atom the family's agents brought in; past this many (128-byte bitsets) an agent
that brings new atoms moves to an index of its own (see ``TransitionMonitor``), unless
its states are large (:data:`SHARED_INDEX_STATES`)."""

SHARED_INDEX_STATES = 8
"""A family's shared index takes the atoms of an agent whose state holds ``n`` atoms up to
this many times ``n`` atoms, past :data:`SHARED_INDEX_ATOMS` (:meth:`SharedGrounding.widen`):
its bitsets there are then at most this many times as wide as its state, where an index
of its own would cost it every atom's name, held and frozen (~9 bytes an atom even
compressed, tens of µs to build and to freeze per agent). Without it, a family whose
states hold more than half of SHARED_INDEX_ATOMS put every agent after the first few on
an index of its own (1,000-atom states: 1,000 agents/s and 18 KB per idle agent). Small
states keep the bound: many agents' bitsets in a wide index cost more than it saves."""


SMALL_STATE = 64
"""Atoms up to which a set of known atoms is encoded by adding their bits."""
WIDE_INDEX = 16_384
"""Atoms in an index past which states are encoded by packing bytes (see encode)."""


_BITS = tuple(1 << k for k in range(8_192))
"""The bits of the first atoms of an index, made once: every index numbers its atoms from
0, so agents on indexes of their own hold the same int objects rather than one per atom
each (an int past 2**60 costs 36 bytes and more)."""


class IndexFull(Exception):
    """A bounded :class:`AtomIndex` has no room for another atom."""


class AtomIndex:
    """Interns ground atoms as bit positions; grows as new atoms are seen, up to ``limit``
    atoms (beyond it :meth:`bit` raises :class:`IndexFull` and interns nothing)."""

    __slots__ = ("_atoms", "_bits", "_limit", "_unmapped")

    def __init__(self, limit: int | None = None) -> None:
        self._bits: dict[GroundAtom, int] = {}
        self._atoms: list[GroundAtom] = []
        self._limit = limit if limit is not None else sys.maxsize
        self._unmapped = 0
        """The last atoms interned by :meth:`defer_new` and not yet in :attr:`bits`' map
        (:meth:`_map`): every other method maps them first."""

    def __len__(self) -> int:
        return len(self._atoms)

    def __contains__(self, atom: object) -> bool:
        if self._unmapped:
            self._map()
        return atom in self._bits

    def _map(self) -> None:
        """Put the atoms :meth:`defer_new` interned into the map (in place: holders of
        :attr:`bits` see them)."""
        n = len(self._atoms)
        m = n - self._unmapped
        self._bits.update(zip(self._atoms[m:], _BITS[m:n], strict=True))
        self._unmapped = 0

    def defer_new(self, atoms: Collection[GroundAtom],
                  more: Collection[GroundAtom] = ()) -> bool:
        """:meth:`add_new` of ``atoms`` then ``more`` without mapping them yet, if they fit
        (False, and nothing done, if not): numbered in their order as one run of bits from
        the index's size on (the caller knows their bits by their order), and put in the
        map only when the index is next looked in. A new agent naming objects of its own
        brings its whole first state to an index of its own, and mapping ~120 atoms (a
        hash of each atom's tuple and a dict insertion) was ~6 us of its first record;
        an agent held as bytes before its next record (every one admitted past half of
        limits.max_agents_in_memory, or idle for limits.freeze_idle_after_s) keeps the
        atoms in bit order only, so its map was never needed."""
        n = len(self._atoms)
        k = len(atoms) + len(more)
        if k > self._limit - n or n + k > len(_BITS):
            return False
        self._atoms.extend(atoms)
        self._atoms.extend(more)
        self._unmapped += k
        return True

    def bit(self, atom: GroundAtom) -> int:
        if self._unmapped:
            self._map()
        b = self._bits.get(atom)
        if b is None:
            if len(self._atoms) >= self._limit:
                raise IndexFull(f"atom index full ({self._limit} atoms)")
            n = len(self._atoms)
            b = _BITS[n] if n < 8_192 else 1 << n
            self._bits[atom] = b
            self._atoms.append(atom)
        return b

    def add(self, atoms: Iterable[GroundAtom]) -> None:
        """Intern those of ``atoms`` not interned yet, in their order, as :meth:`bit` on
        each would: past the limit, those that fit are interned and :class:`IndexFull`
        is raised. In bulk, without a Python call per atom: an agent naming objects of
        its own brings its whole first state (often a hundred atoms or more) to a new
        index of its own."""
        if self._unmapped:
            self._map()
        bits = self._bits
        if isinstance(atoms, (set, frozenset)):
            # A set repeats no atom, and its difference with the map looks each atom up
            # by the hash the set holds, without a Python step per atom.
            fresh = list(atoms.difference(bits))
        else:
            fresh = list(dict.fromkeys(a for a in atoms if a not in bits))
        n = len(self._atoms)
        room = self._limit - n
        take = fresh if len(fresh) <= room else fresh[:max(0, room)]
        if n + len(take) <= len(_BITS):
            self._atoms.extend(take)
            bits.update(zip(take, _BITS[n:n + len(take)], strict=True))
        else:
            for atom in take:
                self.bit(atom)
        if len(take) < len(fresh):
            raise IndexFull(f"atom index full ({self._limit} atoms)")

    def add_new(self, atoms: Collection[GroundAtom]) -> None:
        """:meth:`add` for atoms none of which is interned yet, none twice (a set's
        difference with :attr:`bits`): numbered in their order as one run of bits from
        the index's size on, without looking each one up first."""
        if self._unmapped:
            self._map()
        n = len(self._atoms)
        k = len(atoms)
        if k > self._limit - n or n + k > len(_BITS):
            self.add(atoms)
            return
        self._atoms.extend(atoms)
        self._bits.update(zip(atoms, _BITS[n:n + k], strict=True))

    @classmethod
    def of(cls, atoms: Iterable[GroundAtom], limit: int | None = None) -> AtomIndex:
        """An index numbering ``atoms`` (distinct) in this order, as interning them one by
        one would have."""
        index = cls(limit)
        listed = list(atoms)
        if len(listed) > min(index._limit, len(_BITS)):
            for atom in listed:
                index.bit(atom)  # raises IndexFull past the limit, as interning would
            return index
        index._atoms = listed
        index._bits = dict(zip(listed, _BITS[:len(listed)], strict=True))
        return index

    @property
    def atoms(self) -> tuple[GroundAtom, ...]:
        """The atoms interned, in bit order (:meth:`of` numbers them alike again)."""
        return tuple(self._atoms)

    @property
    def bits(self) -> dict[GroundAtom, int]:
        """Atom → its bit: the index's own map (read-only for callers)."""
        if self._unmapped:
            self._map()
        return self._bits

    def maps_with(self, bits: dict[GroundAtom, int]) -> bool:
        """Whether ``bits`` is this index's own map (:attr:`bits`), without mapping the
        atoms :meth:`defer_new` left unmapped."""
        return bits is self._bits

    @property
    def full(self) -> bool:
        return len(self._atoms) >= self._limit

    def widen(self, limit: int) -> bool:
        """Take up to ``limit`` atoms, if that is more than now; whether it is."""
        if limit <= self._limit:
            return False
        self._limit = limit
        return True

    def known_bit(self, atom: GroundAtom) -> int:
        """The atom's bit, 0 if it was never interned (then no state encoded here holds
        it); interns nothing."""
        if self._unmapped:
            self._map()
        return self._bits.get(atom, 0)

    def encode(self, atoms: Iterable[GroundAtom]) -> StateMask:
        if self._unmapped:
            self._map()
        bits = self._bits
        if isinstance(atoms, (set, frozenset)) and len(atoms) <= SMALL_STATE:
            # A set repeats no atom, so the sum of the bits is their union, looked up
            # without a Python call per atom. A new atom falls through to interning.
            try:
                mask: int = sum(map(bits.__getitem__, atoms))
                return mask
            except KeyError:
                pass
        if len(self._atoms) <= WIDE_INDEX:
            return reduce(or_, map(self.bit, atoms), 0)
        # Or-ing one-bit ints as wide as the index copies the whole width per atom: an
        # assessment's query states hold thousands of atoms in an index of 10^5, which
        # made encoding quadratic. Setting the bits in a byte array is linear.
        positions = []
        for atom in atoms:
            b = bits.get(atom)
            positions.append((b if b is not None else self.bit(atom)).bit_length() - 1)
        if not positions:
            return 0
        packed = bytearray((max(positions) >> 3) + 1)
        for p in positions:
            packed[p >> 3] |= 1 << (p & 7)
        return int.from_bytes(packed, "little")

    def encode_lists(self, atoms: Sequence[Sequence[str]],
                     validate: Callable[[GroundAtom], None] | None = None) -> StateMask:
        """Encode atoms as a JSON decoder hands them over (lists of strings).

        The fast path sums the bits of known atoms; ``bit_count`` then catches a
        repeated atom (which a sum would double) and sends it to the slow path, as
        does any atom never seen before. ``validate`` vets new atoms before they are
        interned, so a bad message cannot grow the index.
        """
        if self._unmapped:
            self._map()
        try:
            mask: int = sum(map(self._bits.__getitem__, map(tuple, atoms)))
            if mask.bit_count() == len(atoms):
                return mask
        except KeyError:
            pass
        mask = 0
        for raw in atoms:
            atom = tuple(raw)
            b = self._bits.get(atom)
            if b is None:
                if validate is not None:
                    validate(atom)
                b = self.bit(atom)
            mask |= b
        return mask

    def decode(self, mask: StateMask) -> frozenset[GroundAtom]:
        return decode_bits(self._atoms, mask)


def bit_positions(mask: StateMask) -> list[int]:
    """The positions of the bits set in ``mask``, lowest first (a 64-bit word at a time:
    shifting a big integer by one bit per step would copy it at every bit)."""
    out = []
    offset = 0
    while mask:
        word = mask & 0xFFFFFFFFFFFFFFFF
        while word:
            low = word & -word
            out.append(offset + low.bit_length() - 1)
            word ^= low
        mask >>= 64
        offset += 64
    return out


_MANY_BITS = 32
"""From this many bits on, :func:`decode_bits` finds them with numpy: a few µs whatever
their number, where :func:`bit_positions` takes ~0.15 µs a bit (a state of 200 atoms:
~4 times faster; a few bits: slower, so masks of few bits, such as operators'
preconditions, stay on the loop)."""
_UNPACK, _FROM, _NONZERO, _BYTE = np.unpackbits, np.frombuffer, np.flatnonzero, np.uint8


def decode_bits(atoms: Sequence[GroundAtom], mask: StateMask) -> frozenset[GroundAtom]:
    """The atoms whose positions in ``atoms`` are the bits set in ``mask``. A state held
    as bits is decoded this way whenever its agent is thawed (daemon.watch_freezing)."""
    if mask.bit_count() < _MANY_BITS:
        return frozenset(map(atoms.__getitem__, bit_positions(mask)))
    packed = _FROM(mask.to_bytes((mask.bit_length() + 7) >> 3, "little"), _BYTE)
    positions: list[int] = _NONZERO(_UNPACK(packed, bitorder="little")).tolist()
    return frozenset(map(atoms.__getitem__, positions))


@dataclass(frozen=True, slots=True)
class GroundOperator:
    """A ground action with bitmask precondition and one (keep, add) pair per outcome."""

    action: Action
    args: tuple[str, ...]
    pre_pos: StateMask
    pre_neg: StateMask
    effects: tuple[tuple[StateMask, StateMask], ...]
    """Per outcome, in ``action.outcomes`` order: (keep = ~delete, add).

    ``(s & keep) | add`` is PDDL's delete-then-add: when repeated objects make one
    ground atom both deleted and added (``move(?from=?to=a)``), it ends up true."""
    admitted: bool = True
    """The action's equality constraints hold for these objects (``Action.admits``);
    when False the operator is never applicable, whatever the state."""
    distinct_outcomes: bool | None = field(default=None, init=False, compare=False,
                                           repr=False)
    """Whether every two outcomes lead to different successors in every state the
    operator applies in; None until capwatch.monitor.attribution first works it out
    (a property of the operator alone, kept here so that it is worked out once)."""

    @property
    def probabilities(self) -> tuple[float, ...]:
        return tuple(o.probability for o in self.action.outcomes)

    def applicable(self, state: StateMask) -> bool:
        return ((state & self.pre_pos) == self.pre_pos and not (state & self.pre_neg)
                and self.admitted)

    def apply(self, state: StateMask, outcome: int = 0) -> StateMask:
        keep, add = self.effects[outcome]
        return (state & keep) | add


class Grounder:
    """Lazily grounds a domain's actions against one atom index."""

    __slots__ = ("actions", "cache", "domain", "index", "shared")

    def __init__(self, domain: Domain, index: AtomIndex | None = None,
                 shared: SharedGrounding | None = None) -> None:
        self.domain = domain
        self.index = index if index is not None else AtomIndex()
        self.shared = shared if shared is not None and shared.domain is domain else None
        # One action map per family, not one per agent's grounder.
        self.actions = self.shared.actions if self.shared is not None else domain.action_map
        self.cache: dict[GroundAction, GroundOperator] = {}

    def operator(self, ground_action: GroundAction) -> GroundOperator:
        op = self.cache.get(ground_action)
        if op is None:
            op = self._ground(ground_action)
            self.cache[ground_action] = op
        return op

    def _ground(self, ground_action: GroundAction) -> GroundOperator:
        if self.shared is not None:
            lifted, ground_args, pos, neg, outcomes, admitted = \
                self.shared.ground(ground_action)
            bit = self.index.bit

            def union(atoms: GroundAtoms) -> int:
                # OR, not a sum: repeated objects can ground two atoms to the same one.
                return reduce(or_, map(bit, atoms), 0)

            # The same interning order as below, so both ways number atoms alike.
            effects = tuple((~union(d), union(a)) for d, a in outcomes)
            return GroundOperator(lifted, ground_args, union(pos), union(neg), effects,
                                  admitted)
        # The atoms interned in the order they always were: each outcome's deletes and
        # adds, then the preconditions (a shared grounding's operators number alike).
        action, args, pos, neg, outcomes, admitted = grounding_plans.ground(
            _plan(self.actions, ground_action), ground_action)
        idx = self.index

        def mask(atoms: GroundAtoms) -> int:
            m = 0
            for atom in atoms:
                m |= idx.bit(atom)
            return m

        effects = tuple((~mask(d), mask(a)) for d, a in outcomes)
        return GroundOperator(action, args, mask(pos), mask(neg), effects, admitted)


def _plan(actions: dict[str, Action], ground_action: GroundAction) -> grounding_plans.Plan:
    """The plan of the ground action's lifted action; raises ModelError for an unknown
    action or another number of objects than its parameters."""
    name = ground_action[0]
    action = actions.get(name)
    if action is None:
        raise ModelError(f"unknown action {name!r}")
    found = len(ground_action) - 1
    if found != action.arity:
        raise ModelError(f"action {name!r} takes {action.arity} arguments, found {found}")
    return grounding_plans.plan(action)


GroundAtoms = tuple[GroundAtom, ...]
Grounded = tuple[Action, tuple[str, ...], GroundAtoms, GroundAtoms,
                 tuple[tuple[GroundAtoms, GroundAtoms], ...], bool]
"""A ground action's lifted action, objects, precondition atoms (positive, negative),
each outcome's (delete, add) atoms, and whether its equality constraints hold."""
GROUNDINGS = 4_096
"""Ground actions a family's grounding keeps per generation (:meth:`SharedGrounding.ground`)."""


def closed_vocabulary(domain: Domain) -> bool:
    """Whether every atom the domain's actions mention is of a declared predicate, with
    its arity: then every atom a grounding interns would pass the vocabulary check, and an
    index that only ever interns grounded or checked atoms holds checked atoms only."""
    arity = {p.name: p.arity for p in domain.predicates}
    return all(arity.get(atom.predicate) == len(atom.args)
               for action in domain.actions
               for group in (action.pre_pos, action.pre_neg,
                             *(o.add for o in action.outcomes),
                             *(o.delete for o in action.outcomes))
               for atom in group)


class SharedGrounding:
    """What every agent running one domain (a family's baseline) can share: the ground
    atoms of each ground action, its vocabulary, and one atom index with the operators
    grounded over it.

    An agent's monitor numbers its atoms in the shared :attr:`index` (bounded by
    :data:`SHARED_INDEX_ATOMS`), so admitting an agent of a fleet whose agents share their
    objects grounds nothing and holds no index of its own; an agent whose vocabulary
    no longer fits moves to an index of its own, and its bitsets stay as small as its
    own vocabulary. Owned by the main loop (not thread-safe).
    """

    __slots__ = ("_ground", "_older", "actions", "bits", "closed", "domain", "grounder",
                 "index", "predicates")

    def __init__(self, domain: Domain, index_atoms: int = SHARED_INDEX_ATOMS) -> None:
        self.domain = domain
        self._ground: dict[GroundAction, Grounded] = {}
        """The ground actions' atoms, grounded since the last turn (see :meth:`ground`)."""
        self._older: dict[GroundAction, Grounded] = {}
        """Those of the generation before, moved back into :attr:`_ground` when used."""
        self.actions = domain.action_map
        self.predicates = {p.name: p.arity for p in domain.predicates}
        """Predicate name → arity (the vocabulary check)."""
        self.index = AtomIndex(index_atoms)
        """The atom index agents share while their atoms fit in it."""
        self.grounder = Grounder(domain, self.index, self)
        """Operators over :attr:`index`, grounded once for every agent sharing it."""
        self.bits: dict[GroundAtom, int] = {}
        """Atom → its bit in :attr:`index`, for atoms checked against the vocabulary."""
        self.closed = closed_vocabulary(domain)
        """:func:`closed_vocabulary` of the domain, found once."""

    def widen(self, state_atoms: int, most: int) -> bool:
        """Make room in :attr:`index` for an agent whose states hold ``state_atoms``
        atoms, up to :data:`SHARED_INDEX_STATES` times that and at most ``most`` atoms;
        whether there is more room than before."""
        return self.index.widen(min(SHARED_INDEX_STATES * state_atoms, most))

    def ground(self, ground_action: GroundAction) -> Grounded:
        """Raises ModelError as :meth:`Grounder.operator` does.

        Kept in two generations of up to :data:`GROUNDINGS` each: when the current one is
        full it becomes the older one and the older one is dropped; one found in the
        older one is moved back. The ground actions in use are so kept while fewer than
        GROUNDINGS are, and agents naming objects of their own, whose every grounding is
        a one-off (~1.1 KB each, the atoms' tuples with their names), hold at most twice
        that (~9 MB a family), where one generation of 100,000 held up to ~110 MB, all
        dropped at once when full."""
        found = self._ground.get(ground_action)
        if found is not None:
            return found
        found = self._older.pop(ground_action, None)
        if found is not None:
            self._keep(ground_action, found)
            return found
        # Its atoms made by the action's plan, compiled (grounding_plans): the first
        # pass over a fleet grounds about one new action a message.
        found = grounding_plans.ground(_plan(self.actions, ground_action), ground_action)
        self._keep(ground_action, found)
        return found

    def _keep(self, ground_action: GroundAction, found: Grounded) -> None:
        if len(self._ground) >= GROUNDINGS:
            self._older = self._ground
            self._ground = {}
        self._ground[ground_action] = found
