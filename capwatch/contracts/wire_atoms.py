"""The fast decoder's vocabulary: atoms seen valid on the wire, numbered and interned
process-wide, and the JSON text of each atom as producers write it, so that an atom seen
before costs one dict lookup on its text and is never parsed again.

A state's JSON text ``[[...], [...]]`` is cut at every ``]``: each piece but the last then
holds one atom's text with the separator before it (``, ["at", "r1", "w2"``; the first
piece is given the second one's separator so that it looks like the others,
:func:`_first`), the last piece only whitespace.
A piece is remembered (:data:`PIECES`, piece → atom id) only after checking that, read
alone, it is whitespace, a comma, whitespace and the JSON text of exactly the atom it
stands for. A state text cut into remembered pieces is therefore valid JSON whose atoms
are those pieces' atoms, as the full decoder reads them (a JSON value does not depend on
its context). Anything else (a piece never seen, a name holding ``]``, other spacing)
goes to the full decoder, which validates as before (:func:`learn`) and teaches the
pieces it can (:func:`teach`).

Bounded: the vocabulary is kept in two generations of up to ``MAX_ATOMS // 2`` atoms
learnt each (:func:`_turn_vocabulary`). When the current one is full, the atoms of the
older one go, except those a remembered piece or state text of the current generations
still holds (in use there: forgetting them, as the whole vocabulary once was, made every
large state of a fleet parsed whole again, the cliff the piece table had), and the
current one becomes the older one. The forgotten atoms' ids are given to new atoms
later, so :data:`generation` moves on at each turn: ids are meaningful only within one
generation (a holder of ids from an earlier one, an agent's memo, reads its text again),
and the older tables' entries naming a forgotten atom are dropped at the turn (every id
those tables hold is then of an atom known now, as before). The pieces
are kept in two generations of up to :data:`MAX_PIECES` each: when the current one is
full it becomes the older one and the older one is dropped, and a piece found in the
older one is moved back into the current one. A piece in use is so never forgotten
while fewer than :data:`MAX_PIECES` are in use: clearing the table at once made every
state of a fleet of many writers' spacings (one piece per atom per spacing) parsed
again after each overflow (decode 36 -> 75 us a message). An agent naming ever-new
objects, or spacing its JSON ever differently, costs memory up to the bounds, never
beyond.
Owned by the main loop (not thread-safe), like the decoder.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from capwatch.contracts import wire_split, wire_text
from capwatch.model.domain import GroundAtom

MAX_ATOMS = 200_000
MAX_PIECES = 200_000
MAX_ATOM_LENGTH = 33
"""A predicate or action name and up to 32 objects (``wire.Atom``)."""
_NAME = wire_text.NAME
"""wire.Name's shape: 1-256 characters, no whitespace, parentheses or control characters
(and nothing wire_text refuses, checked beside it)."""
_WS = b" \t\n\r"
"""JSON's whitespace (``bytes.strip`` alone would also take \\v and \\f)."""
_ATOM_TEXT = msgspec.json.Decoder(tuple[str, ...]).decode
_PIECE_IDS: wire_split.PieceIds | None = wire_split.PIECE_IDS
"""The pieces' lookup in C (wire_split.PIECE_IDS), or None (pure Python); a module
variable, so that a test may set it."""

_INDEX: wire_split.Index | None = None if wire_split.PIECE_INDEX is None \
    else wire_split.PIECE_INDEX()
"""Compiled, :data:`PIECES` mirrored in C for :data:`_PIECE_IDS` (``PieceIndex``: each
piece hashed and compared where it lies in the text, where a dict's lookup made a bytes
object of it and hashed that with SipHash, ~20% of a trace's decode, session 16). Every
entry is one of PIECES' with its id; it may hold fewer (a piece whose probe is too long
is not added, see _wire_split.c), and :func:`ids` then asks PIECES. Written wherever
PIECES is (:func:`_keep`, :func:`_turn`, :func:`forget`)."""

ID: dict[GroundAtom, int] = {}
"""Atom → its id, for every atom known (seen valid, and not forgotten since)."""
ATOM: list[GroundAtom] = []
"""Id → the atom, the inverse of :data:`ID` (one tuple object per atom: every agent's
states share them); a forgotten atom's slot holds :data:`_GONE` until it is given again.
Both are changed in place, never rebound (the decoder binds their methods once)."""
_GONE: GroundAtom = ()
"""No atom (an atom has a name): a forgotten atom's slot in :data:`ATOM`."""
_FREE: list[int] = []
"""The ids of forgotten atoms, given to the next new ones."""
_FRESH: set[int] = set()
"""The ids learnt since the last turn: the current generation of the vocabulary."""
turns = 0
"""Vocabulary turns so far (:func:`_turn_vocabulary`)."""
PIECES: dict[bytes, int] = {}
"""A piece of state text (see the module docstring) → the id of the atom it holds: the
current generation (a module global rebound at each turn, :func:`_turn`)."""
_OLDER: dict[bytes, int] = {}
"""The previous generation of :data:`PIECES`, whose pieces are moved back when used."""
generation = 0
"""Moves on at every :func:`forget` and vocabulary turn; ids are meaningful only within
one generation."""

State = tuple[int, frozenset[GroundAtom], list[int] | None]
"""A state read from its text: its atoms as sent, its set and its atoms' ids (in order,
with repeats; None for a short text, decoded whole). A pure function of the text,
shared by every agent that sends that text."""
Kept = tuple[int, frozenset[GroundAtom], list[int] | None, bytes]
"""A :data:`State` as :data:`STATES` keeps it, with its text: the table's own key object,
which an agent's memo holds (wire_fast) rather than a copy of the text or its hash."""
STATES: dict[bytes, Kept] = {}
"""A state's whole text → its read, for texts read before (:func:`known_state`)."""
_OLDER_STATES: dict[bytes, Kept] = {}
_states_bytes = 0
state_turns = 0
"""How many times :data:`STATES` turned (its older generation dropped): wire_fast's
step table, which holds STATES' texts, turns with it."""
MAX_STATE_BYTES = 12_000_000
"""The memory a generation of :data:`STATES` may take (two generations, as the
pieces'), counted as :func:`_state_cost` per state."""


def _state_cost(text: bytes) -> int:
    # Its text, its set and ids (about twice the text's bytes: ~27 bytes of text, a
    # 16-byte set slot or two and an 8-byte id per atom) and the objects around them.
    return 3 * len(text) + 300


class Invalid(Exception):
    """An atom the wire schema refuses (its decoder says why)."""


def forget() -> None:
    global generation, _states_bytes
    ID.clear()
    ATOM.clear()
    _FREE.clear()
    _FRESH.clear()
    PIECES.clear()
    _OLDER.clear()
    if _INDEX is not None:
        _INDEX.clear()
    STATES.clear()
    _OLDER_STATES.clear()
    _states_bytes = 0
    generation += 1


def known_state(text: bytes) -> Kept | None:
    """The read of a state's text seen before (its ids of this generation), with the
    table's own copy of the text, or None.

    Agents of one family share states (their problems' scenery, the states a policy
    visits), and a state's text, hashed anyway to fingerprint it, is then read in one
    lookup instead of piece by piece."""
    found = STATES.get(text)
    if found is None and _OLDER_STATES:
        found = _OLDER_STATES.get(text)
        if found is not None:
            _keep_state(found[3], found)
    return found


def remember_state(text: bytes, state: State) -> None:
    """Keep ``state``, the read of ``text`` (which becomes the table's key object)."""
    _keep_state(text, (state[0], state[1], state[2], text))


def _keep_state(text: bytes, kept: Kept) -> None:
    global STATES, _OLDER_STATES, _states_bytes, state_turns
    cost = _state_cost(text)
    if _states_bytes + cost > MAX_STATE_BYTES:
        _OLDER_STATES, STATES = STATES, _OLDER_STATES
        STATES.clear()
        _states_bytes = 0
        state_turns += 1
    STATES[text] = kept
    _states_bytes += cost


def _turn() -> None:
    """The current generation of pieces becomes the older one; the older one is dropped."""
    global PIECES, _OLDER
    _OLDER, PIECES = PIECES, _OLDER
    PIECES.clear()
    if _INDEX is not None:
        _INDEX.clear()


def _keep(piece: bytes, known: int) -> None:
    if len(PIECES) >= MAX_PIECES:
        _turn()
    PIECES[piece] = known
    if _INDEX is not None:
        _INDEX.add(piece, known)


_NAMES: set[str] = set()
"""Names :data:`_NAME` matched: an atom's names repeat across the atoms a producer
sends (its predicates and objects), and the pattern's match cost ~2,200 instructions a
name, ~60% of learning a new atom (an outside producer's first pass, session 18)."""
MAX_NAMES = 20_000
"""A bound on :data:`_NAMES` (at most ~6 MB of names of 256 characters; cleared when
full and refilled from the traffic, as wire_fast's id caches are)."""


def _valid_name(name: str) -> bool:
    if _NAME.match(name) is None or wire_text.fault(name) is not None:
        return False
    if len(_NAMES) >= MAX_NAMES:
        _NAMES.clear()
    _NAMES.add(name)
    return True


def learn(atoms: Iterable[GroundAtom]) -> None:
    """Number the atoms not known yet. Raises :class:`Invalid`, learning nothing, if one
    of them is not a valid atom. Afterwards every one of ``atoms`` has an id (a full
    generation turns first: the caller looks all of them up next, known or not)."""
    every = list(atoms)
    new = [a for a in every if a not in ID]
    for atom in new:
        if not 0 < len(atom) <= MAX_ATOM_LENGTH \
                or not all(n in _NAMES or _valid_name(n) for n in atom):
            raise Invalid
    if len(_FRESH) + len(new) > MAX_ATOMS // 2:
        _turn_vocabulary()
        new = [a for a in every if a not in ID]  # the turn may have forgotten some
    for atom in new:
        if atom not in ID:  # an atom may come twice in one state
            if _FREE:
                known = ID[atom] = _FREE.pop()
                ATOM[known] = atom
            else:
                known = ID[atom] = len(ATOM)
                ATOM.append(atom)
            _FRESH.add(known)


def _turn_vocabulary() -> None:
    """The current generation of the vocabulary becomes the older one. The older one's
    atoms are forgotten, but for those the current pieces and state texts hold (read by
    those, an atom in use is never learnt again, so learning alone would not keep it).
    The older pieces and state texts naming a forgotten atom go with it, and ids from
    before mean nothing after (:data:`generation`)."""
    global generation, turns
    held = set(PIECES.values())
    held.update(_FRESH)
    for read in STATES.values():
        if read[2] is not None:
            held.update(read[2])
    gone = set()
    for known, atom in enumerate(ATOM):
        if known not in held and atom is not _GONE:
            del ID[atom]
            ATOM[known] = _GONE
            gone.add(known)
    _FREE.extend(gone)
    for piece in [p for p, i in _OLDER.items() if i in gone]:
        del _OLDER[piece]
    for text in [t for t, read in _OLDER_STATES.items()
                 if read[2] is not None and not gone.isdisjoint(read[2])]:
        del _OLDER_STATES[text]
    _FRESH.clear()
    generation += 1
    turns += 1


def _first(pieces: list[bytes]) -> bytes:
    """The first piece of a state's text (whatever follows its ``[``) spelt as the
    pieces after it are: with the separator the second piece starts with (its bytes up
    to its first ``[``) in place of its own leading whitespace, so that an atom first in
    one state and later in another is one piece (with ``b","`` before it, a state's
    first atom made a piece of its own for every atom that ever came first: twice the
    pieces of a writer spacing its commas). With one piece, or when the first does not
    start with ``[`` after its whitespace, ``b","`` before it.

    The piece stands for the same atom: a remembered piece is whitespace, a comma,
    whitespace and one atom's text (:func:`_atom_of`), and since the separator taken
    holds no ``[``, the remembered piece equal to this one starts with exactly that
    separator, so it is whitespace, a comma and whitespace, and the rest, the first
    piece's own text after its whitespace, is that atom's text."""
    first = pieces[0]
    if len(pieces) > 1:
        head = first.lstrip(_WS)
        if head[:1] == b"[":
            second = pieces[1]
            at = second.find(b"[")
            if at > 0:
                return second[:at] + head
    return b"," + first


def ids(text: bytes) -> list[int] | None:
    """The ids of the atoms of a state's JSON text, in order and with repeats, when the
    text is cut into remembered pieces only; None when it is not (the full decoder's
    turn). ``text`` is valid JSON (the envelope's decoder checked it).

    Compiled, the current table's pieces are cut and looked up in C
    (:data:`_PIECE_IDS`): the split's list, :func:`_first`'s copies and ``map``'s calls
    of the dict's ``__getitem__`` took ~60% of this function's instructions (session
    16), in the mirror :data:`_INDEX` (session 17). A piece it does not find is looked
    for again here when the older table holds pieces (:func:`reference_ids`, which
    moves it back), or when the index holds fewer pieces than PIECES."""
    if _PIECE_IDS is not None:
        if _INDEX is None:
            got = _PIECE_IDS(text, PIECES)
            if got is not None or not _OLDER:
                return got
        else:
            got = _PIECE_IDS(text, _INDEX)
            # The index is a subset of PIECES: as large, it is PIECES.
            if got is not None or (not _OLDER and len(_INDEX) == len(PIECES)):
                return got
    return reference_ids(text)


def reference_ids(text: bytes) -> list[int] | None:
    """:func:`ids` in Python (the contract of ``_wire_split.piece_ids`` when the older
    table is empty)."""
    if text[:1] != b"[":
        return None
    pieces = text[1:-1].split(b"]")
    if pieces.pop().strip(_WS):
        return None
    if pieces:
        pieces[0] = _first(pieces)
    try:
        return list(map(PIECES.__getitem__, pieces))
    except KeyError:
        return _recall(pieces) if _OLDER else None


def _recall(pieces: list[bytes]) -> list[int] | None:
    """:func:`ids` from both generations, the older one's pieces moved to the current."""
    out = []
    current, older = PIECES.get, _OLDER.get
    for piece in pieces:
        known = current(piece)
        if known is None:
            known = older(piece)
            if known is None:
                return None
            _keep(piece, known)
            current, older = PIECES.get, _OLDER.get  # a turn may have rebound them
        out.append(known)
    return out


def learn_pieces(text: bytes, most: int) -> list[int] | None:
    """:func:`ids` of a state's text (valid JSON, as there) holding pieces never seen:
    each such piece read alone (:func:`_atom_of`, as :func:`teach` checks it), its atom
    learnt and the piece remembered. None, learning nothing, when a piece is not one
    atom's text, when the text holds more than ``most`` atoms (the caller refuses such a
    state before learning anything), or when learning turned the vocabulary; the full
    decoder's turn then (:func:`learn`, :func:`teach`). Raises :class:`Invalid`, as
    :func:`learn`, when an atom is not valid.

    A state text is mostly pieces seen before, even on a fleet's first pass: a step
    changes a few atoms, and a family's problems share their scenery. Decoding the whole
    text, looking every atom's tuple up three times (learning, teaching, its id) and
    cutting the text again to teach its pieces cost ~230,000 instructions a state of ~30
    atoms, where a known piece is one lookup (callgrind, session 22: 1,743 states of the
    first 3,000 messages of an outside producer's fleet)."""
    if text[:1] != b"[" or text[-1:] != b"]":
        return None
    pieces = text[1:-1].split(b"]")
    if pieces.pop().strip(_WS) or len(pieces) > most:
        return None
    if pieces:
        pieces[0] = _first(pieces)
    out: list[int] = []
    fresh: list[int] = []
    atoms: list[GroundAtom] = []
    for piece in pieces:
        known = PIECES.get(piece)
        if known is None:
            known = _OLDER.get(piece)
            if known is None:
                atom = _atom_of(piece)
                if atom is None:
                    return None
                fresh.append(len(out))
                atoms.append(atom)
                known = -1
            else:
                _keep(piece, known)
        out.append(known)
    if not fresh:
        return out
    start = generation
    learn(atoms)
    if generation != start:
        return None  # ids taken before the turn: read whole
    for at, atom in zip(fresh, atoms, strict=True):
        known = ID[atom]
        out[at] = known
        piece = pieces[at]
        if piece not in PIECES:
            _keep(piece, known)
    return out


def teach(text: bytes, atoms: Sequence[GroundAtom]) -> None:
    """Remember the pieces of a state's text that the full decoder read as ``atoms``
    (all of them learnt). Pieces that are not each exactly one atom's text are not."""
    if text[:1] != b"[":
        return
    pieces = text[1:-1].split(b"]")
    if len(pieces) != len(atoms) + 1 or pieces.pop().strip(_WS):
        return
    if pieces:
        pieces[0] = _first(pieces)
    for piece, atom in zip(pieces, atoms, strict=True):
        known = ID.get(atom)
        if known is None or piece in PIECES:
            continue
        if _OLDER.get(piece) == known or _atom_of(piece) == atom:
            _keep(piece, known)


def _atom_of(piece: bytes) -> tuple[str, ...] | None:
    """The atom a piece holds, read alone; None unless it is JSON whitespace, a comma,
    JSON whitespace and one JSON array of strings (closed by the ``]`` cut off)."""
    rest = piece.lstrip(_WS)
    if rest[:1] != b",":
        return None
    rest = rest[1:].lstrip(_WS)
    if rest[:1] != b"[":
        return None
    try:
        return _ATOM_TEXT(rest + b"]")
    except (msgspec.DecodeError, ValueError):
        return None
