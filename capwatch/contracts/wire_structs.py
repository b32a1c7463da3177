"""The fast decoder's msgspec structs (contracts/wire_fast.py), in a module of their own
because it is never compiled: mypyc builds a class with another metaclass by calling the
metaclass without the class statement's keywords, and a Struct's ``tag_field``, ``tag`` and
``forbid_unknown_fields`` would be lost (docs/performance.md, "Compiled modules").

They accept a subset of what the pydantic models of contracts/wire.py accept.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

from capwatch.contracts.wire import MAX_STEP

# Ids are plain strings here and checked after decoding (wire_fast), like atoms: the same
# few agent ids and families come in every message.
_Identifier = str
_AgentId = str
# Atoms are plain string lists here and checked after decoding against the atoms seen
# valid before (wire_atoms), which also interns them: a fleet's vocabulary is small and
# repeats in every message, and a regex per name cost more than the rest of the decode.
# Tuples straight from the decoder: an atom is a tuple in the model's types, and
# converting lists afterwards cost a tenth of the decode.
_Atom = tuple[str, ...]
_Step = Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]

NO_TIME = msgspec.Raw(b"null")


# Optional fields default to UNSET so that the fields a message gave can be counted: with
# the keys counted in its bytes, that shows a key given twice (see wire_keys).
class Transition(msgspec.Struct, tag_field="type", tag="transition", forbid_unknown_fields=True):
    agent_id: _AgentId
    family: _Identifier
    # The states are kept as their JSON text and decoded by wire_fast._state: a state
    # equal to the agent's previous next-state (every step of an episode after the first)
    # is then recognised by its bytes and not decoded again (see wire_fast.StateMemo).
    state: msgspec.Raw
    # Kept as its text too: a fleet runs few actions, and a text seen before is its
    # interned atom in one lookup (wire_fast._fast), where decoding its strings and
    # hashing their tuple cost ~0.2 us a record.
    action: msgspec.Raw
    next_state: msgspec.Raw
    v: Literal[1] | UnsetType = UNSET
    episode_id: _Identifier | UnsetType | None = UNSET
    # The time is handed to pydantic's own datetime parser (strict), so both decoders
    # read the same instants from the same strings.
    time: msgspec.Raw = NO_TIME
    optimal: bool | UnsetType = UNSET
    step: _Step | UnsetType | None = UNSET
    executed: bool | UnsetType | None = UNSET


class Trace(msgspec.Struct, tag_field="type", tag="trace", forbid_unknown_fields=True):
    agent_id: _AgentId
    family: _Identifier
    # Kept as their JSON texts and read as a transition's states are (wire_fast).
    states: list[msgspec.Raw]
    # Kept as their texts, as a transition's action is: each read by wire_fast._trace.
    actions: list[msgspec.Raw]
    v: Literal[1] | UnsetType = UNSET
    episode_id: _Identifier | UnsetType | None = UNSET
    time: msgspec.Raw = NO_TIME
    optimal: bool | UnsetType = UNSET
    start_step: _Step | UnsetType = UNSET
    executed: list[bool] | UnsetType | None = UNSET
