"""Wire formats: what crosses the process boundary as JSON (design.md §4).

Inbound: a transition event (one step) or a trace event (a whole episode), keyed by
agent id. Outbound: a model-version event, an alert event and a dead-letter record.
Every event carries ``"v"``, the wire-format version; inbound events may omit it and
are then read as version 1, so the example in the design brief stays valid.

Inbound models forbid unknown fields: a misspelt optional field (``"optmal"``) would
otherwise be dropped without a word and the daemon would draw wrong conclusions.

``decode`` never raises on bad input: it returns a :class:`DeadLetter` with a reason,
and the caller routes it (with the original bytes) to the dead-letter output. Checks
that need the agent's model (unknown predicate or action, wrong arity) are made by the
daemon with :func:`vocabulary_error`, because the decoder does not know the model.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from capwatch.contracts.wire_text import MAX_NAME, NAME_PATTERN, allowed
from capwatch.model.domain import Domain, GroundAction, GroundAtom

WIRE_VERSION = 1

Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_NAME, pattern=NAME_PATTERN),
    BeforeValidator(allowed),
]
"""A PDDL-ish name: no whitespace or parentheses, nothing wire_text refuses (controls,
format characters such as bidi overrides and zero-width spaces, private use, ...)."""

Identifier = Annotated[
    str,
    StringConstraints(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f]+$"),
    BeforeValidator(allowed),
]
"""Family and episode ids: any text wire_text allows (spaces are allowed here)."""

AGENT_ID_PATTERN = (r"^[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?)*$")
"""Dot-separated labels of letters, digits, ``-`` and ``_``, each starting and ending with
a letter or digit: an id placed in an agent URL template can then never add a scheme,
user, port, path, query or fragment, nor a ``..`` path segment."""
MAX_AGENT_ID = 128

AgentId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_AGENT_ID, pattern=AGENT_ID_PATTERN),
]
"""An agent id (see :data:`AGENT_ID_PATTERN`)."""

MAX_STEP = 2**63 - 1

Atom = Annotated[list[Name], Field(min_length=1, max_length=33)]
"""``["at", "rover1", "waypoint1"]``: predicate or action name, then objects."""


class _Inbound(BaseModel):
    # strict: "12" is not a step, "yes" not a flag and 1 not a boolean. A lax parser would
    # accept them and capwatch would reason about what the producer never said.
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False,
                              strict=True)

    v: Literal[1] = Field(default=1, description="Wire-format version.")
    agent_id: AgentId = Field(description="Stable id of the agent; also the Kafka key. "
                              "Dot-separated labels of letters, digits, '-' and '_', each"
                              " starting and ending with a letter or digit, at most 128"
                              " characters.")
    family: Identifier = Field(description="The model the agent was deployed with.")
    episode_id: Identifier | None = None
    time: datetime | None = Field(default=None, description="When the agent acted (RFC 3339).")
    optimal: bool = Field(
        default=False, description="True when the agent's plan was optimal (DAAISy uses it)."
    )


class TransitionEvent(_Inbound):
    """One step ⟨s, a, s'⟩ of one agent."""

    type: Literal["transition"]
    step: int | None = Field(default=None, ge=0, le=MAX_STEP,
                             description="Position within the episode.")
    state: list[Atom]
    action: Atom
    next_state: list[Atom]
    executed: bool | None = Field(
        default=None, description="Whether the agent executed the action (false: it refused or"
        " its precondition failed); omit when unknown."
    )


class TraceEvent(_Inbound):
    """A whole episode: ``states[i]`` --``actions[i]``--> ``states[i+1]``."""

    type: Literal["trace"]
    start_step: int = Field(default=0, ge=0, le=MAX_STEP)
    states: list[list[Atom]] = Field(min_length=1)
    actions: list[Atom]
    executed: list[bool] | None = None

    @model_validator(mode="after")
    def _lengths(self) -> TraceEvent:
        if len(self.states) != len(self.actions) + 1:
            raise ValueError(
                f"a trace with {len(self.actions)} actions needs {len(self.actions) + 1}"
                f" states, found {len(self.states)}"
            )
        if self.executed is not None and len(self.executed) != len(self.actions):
            raise ValueError(f"executed has {len(self.executed)} entries for"
                             f" {len(self.actions)} actions")
        return self


InboundEvent = Annotated[TransitionEvent | TraceEvent, Field(discriminator="type")]
_INBOUND: TypeAdapter[TransitionEvent | TraceEvent] = TypeAdapter(InboundEvent)


# --------------------------------------------------------------------------- outbound


class _Outbound(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1


class ChangedPalTuple(BaseModel):
    """One pal-tuple whose mode changed: ``old`` and ``new`` are ``+``, ``-``, ``0`` or ``?``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: str
    atom: list[str] = Field(description='Lifted atom, e.g. ["battery_full", "?r"].')
    location: Literal["pre", "eff"]
    old: Literal["+", "-", "0", "?"]
    new: Literal["+", "-", "0", "?"]


class ModelPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True,
                              serialize_by_alias=True)

    json_: dict[str, Any] = Field(alias="json", description="capwatch.model.serialize form.")
    pddl: str


class Coverage(BaseModel):
    """What the assessment behind a version checked: unknown stays unknown (issue 11)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    confirmed: int = Field(ge=0, description="Pal-tuples whose mode the evidence pins down.")
    carried_over: int = Field(
        ge=0, description="Pal-tuples kept at the parent's mode without evidence for it.")
    unresolved: int = Field(
        ge=0, description="Pal-tuples the assessment could not decide; published at the "
                          "parent's mode.")
    carried_over_actions: list[str] = Field(default_factory=list)
    unresolved_actions: list[str] = Field(default_factory=list)
    unresolved_pal_tuples: list[str] = Field(default_factory=list)
    unchecked: str | None = Field(
        default=None, description='"n capabilities could not be checked (actions) ...", '
                                  "or null when nothing is unresolved.")


class ModelVersionEvent(_Outbound):
    """A new model version of one agent (topic ``capwatch.models``, compacted, key = agent)."""

    type: Literal["model_version"] = "model_version"
    agent_id: str
    family: str
    version: int = Field(ge=1)
    parent_version: int | None = None
    parent_agent_id: str | None = Field(
        default=None, description="Lineage of the parent; null for the family baseline."
    )
    delta: int = Field(ge=0, description="Δ to the parent: pal-tuples whose mode differs.")
    delta_to_baseline: int = Field(default=0, ge=0)
    changes: list[ChangedPalTuple]
    summary: list[str] = Field(description="One human line per changed action.")
    model: ModelPayload
    time: datetime
    evidence: dict[str, Any] = Field(default_factory=dict)
    coverage: Coverage | None = Field(
        default=None, description="What the assessment checked; absent for versions no "
                                  "assessment made (baselines, operators) and from older "
                                  "capwatch (added in v1 as optional).")


class AlertEvent(_Outbound):
    """A human-facing alert (topic ``capwatch.alerts``)."""

    type: Literal["alert"] = "alert"
    alert_type: str = Field(description="e.g. capability_reduced, effect_distribution_drift.")
    severity: Literal["info", "warning", "critical"]
    agent_id: str
    family: str
    action: str | None = None
    summary: str
    detail: dict[str, Any] = Field(
        default_factory=dict,
        description="What the alert is about, structured: the changed pal-tuples, old and "
                    "new probabilities, the contradicted pa-tuples, or an assessment's "
                    "failure reason and message (per agent in a grouped alert).")
    evidence: dict[str, Any] = Field(default_factory=dict)
    dedup_key: str
    model_version: int | None = None
    time: datetime


class DeadLetterRecord(_Outbound):
    """Bad input as it reached us, with why it was refused (topic ``capwatch.deadletter``)."""

    type: Literal["dead_letter"] = "dead_letter"
    reason: str
    raw_base64: str = Field(description="The original bytes, or their first bytes when"
                            " ``truncated``.")
    raw_length: int | None = Field(default=None, ge=0,
                                   description="Length of the original in bytes.")
    raw_sha256: str | None = Field(default=None, description="SHA-256 of the original (hex).")
    truncated: bool = Field(default=False, description="``raw_base64`` holds only the first"
                            " bytes: the whole would not fit in a dead letter.")
    source: str = Field(description="Topic or file the message came from.")
    partition: int | None = None
    offset: int | None = None
    time: datetime

    @property
    def raw(self) -> bytes:
        return base64.b64decode(self.raw_base64)


SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "transition-event": TransitionEvent,
    "trace-event": TraceEvent,
    "model-version-event": ModelVersionEvent,
    "alert-event": AlertEvent,
    "dead-letter": DeadLetterRecord,
}


def json_schemas() -> dict[str, dict[str, Any]]:
    """JSON Schema of every wire model, keyed by file stem (docs/schemas/<stem>.json)."""
    result: dict[str, dict[str, Any]] = {}
    for stem, model in SCHEMA_MODELS.items():
        schema = model.model_json_schema(by_alias=True)
        schema["$id"] = f"https://capwatch.dev/schemas/v{WIRE_VERSION}/{stem}.json"
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        result[stem] = schema
    return result


# --------------------------------------------------------------------------- decoding


class AgentTransition(msgspec.Struct, frozen=True, gc=False):
    """One step ⟨s, a, s'⟩ an agent reported, in the model core's types, with where it came
    from. The daemon's one transition type: decoded here, checked by the agent's monitor,
    buffered as evidence, queued in a work item and handed to the assessor.

    A frozen msgspec Struct rather than a frozen dataclass: one is built per transition,
    and a frozen dataclass's ``__init__`` (``object.__setattr__`` per field) cost 1.4 µs,
    a tenth of the daemon's whole per-transition budget; the Struct is built in C (0.07
    µs) and compares, hashes and reads the same. ``gc=False``: it holds only immutable
    values, so it can never be part of a reference cycle.
    """

    agent_id: str
    family: str
    episode_id: str | None
    step: int | None
    time: datetime | None
    state: frozenset[GroundAtom]
    action: GroundAction
    next_state: frozenset[GroundAtom]
    optimal: bool
    executed: bool | None = None
    partition: int = -1
    offset: int = -1
    """Source position of the record it came in; -1 for one that came from no record (a
    canary probe's answer), which therefore holds no commit."""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: str
    raw: bytes
    length: int | None = None
    """Length of the original when ``raw`` is only its first bytes (a source cut it)."""
    sha256: str | None = None
    """Digest of the original when ``raw`` is only its first bytes."""


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    max_message_bytes: int = 1_000_000
    max_state_atoms: int = 5_000
    max_trace_steps: int = 5_000


MAX_DEAD_LETTER_RAW = 256 * 1024
"""Most original bytes a dead letter carries: as base64 with its envelope it stays well
under a broker's default 1 MB message limit, so a dead letter can always be written."""


def _atoms(atoms: Iterable[list[str]]) -> frozenset[GroundAtom]:
    return frozenset(tuple(a) for a in atoms)


_UTF8_BOM = b"\xef\xbb\xbf"


def _describe(error: ValidationError) -> str:
    parts = []
    for e in error.errors(include_url=False)[:3]:
        if e["type"] == "union_tag_not_found":
            # pydantic's "(message): Unable to extract tag using discriminator 'type'" told
            # the producer's team neither which field nor which values.
            parts.append("type: Field required ('transition' or 'trace')")
            continue
        loc = ".".join(str(x) for x in e["loc"]) or "(message)"
        parts.append(f"{loc}: {e['msg']}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def decode(
    raw: bytes, limits: DecodeLimits = DecodeLimits(), key: bytes | None = None,
    *, partition: int = -1, offset: int = -1, size: int | None = None,
    sha256: str | None = None,
) -> list[AgentTransition] | DeadLetter:
    """Bytes from a source → transitions, or a dead letter saying why not.

    ``key`` is the Kafka message key when there is one: it must equal ``agent_id``,
    because partition ownership (and so which replica holds the agent) follows the key.
    ``partition`` and ``offset`` say where the bytes came from; every transition carries them.
    ``size`` (and ``sha256``) describe the whole message when a source stopped reading it
    at the limit and ``raw`` is only its first bytes.
    """
    full = size if size is not None else len(raw)
    if full > limits.max_message_bytes:
        return DeadLetter(
            f"message of {full} bytes exceeds the limit of {limits.max_message_bytes}", raw,
            size, sha256,
        )
    try:
        event = _INBOUND.validate_json(raw)
    except ValidationError as e:
        if raw.startswith(_UTF8_BOM):
            # Otherwise the reason would be "expected value at column 1", which names no
            # cause: editors and some JSON writers on Windows add the mark.
            return DeadLetter("invalid event: starts with a UTF-8 byte order mark; JSON "
                              "events must not (RFC 8259, section 8.1)", raw)
        return DeadLetter(f"invalid event: {_describe(e)}", raw)
    except (ValueError, RecursionError) as e:  # pydantic-core raises these on odd input
        return DeadLetter(f"not a JSON event: {e}", raw)
    duplicate = duplicate_key(raw)
    if duplicate is not None:
        return DeadLetter(f"invalid event: {duplicate}", raw)
    if key is not None:
        try:
            key_text = key.decode("utf-8")
        except UnicodeDecodeError:
            return DeadLetter("message key is not UTF-8", raw)
        if key_text != event.agent_id:
            return DeadLetter(
                f"message key {key_text!r} does not match agent_id {event.agent_id!r}", raw
            )
    if isinstance(event, TransitionEvent):
        for name, atoms in (("state", event.state), ("next_state", event.next_state)):
            if len(atoms) > limits.max_state_atoms:
                return DeadLetter(
                    f"{name} has {len(atoms)} atoms, more than the limit of"
                    f" {limits.max_state_atoms}", raw,
                )
        return [AgentTransition(
            event.agent_id, event.family, event.episode_id, event.step, event.time,
            _atoms(event.state), tuple(event.action), _atoms(event.next_state), event.optimal,
            event.executed, partition, offset,
        )]
    if len(event.actions) > limits.max_trace_steps:
        return DeadLetter(
            f"trace has {len(event.actions)} steps, more than the limit of"
            f" {limits.max_trace_steps}", raw,
        )
    for i, s in enumerate(event.states):
        if len(s) > limits.max_state_atoms:
            return DeadLetter(
                f"states[{i}] has {len(s)} atoms, more than the limit of"
                f" {limits.max_state_atoms}", raw,
            )
    states = [_atoms(s) for s in event.states]
    return [
        AgentTransition(
            event.agent_id, event.family, event.episode_id, event.start_step + i, event.time,
            states[i], tuple(a), states[i + 1], event.optimal,
            event.executed[i] if event.executed is not None else None, partition, offset,
        )
        for i, a in enumerate(event.actions)
    ]


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise _DuplicateKey(k)
        seen[k] = v
    return seen


def duplicate_key(raw: bytes | str) -> str | None:
    """Why ``raw`` is ambiguous (a key given twice in one object), or None.

    JSON leaves the meaning of a repeated key open (RFC 8259 §4): our parsers keep the last
    value, another reader may keep the first, so ``{"executed": true, ..., "executed":
    false}`` would mean different things to the producer's tools and to capwatch. Such a
    message is refused rather than read one way. Call it only on text a schema accepted:
    its nesting is then bounded and this second parse cannot recurse deeply.
    """
    try:
        json.loads(raw, object_pairs_hook=_unique_pairs)
    except _DuplicateKey as e:
        return f"key {e.args[0]!r} appears twice in one object"
    except (ValueError, RecursionError) as e:
        return f"not plain JSON: {e}"
    return None


def vocabulary_error(domain: Domain, t: AgentTransition) -> str | None:
    """Why ``t`` cannot be read in ``domain``'s vocabulary, or None when it can.

    An unknown predicate in a state is refused rather than ignored: it means the agent
    reports a vocabulary its model does not have, and silently dropping atoms could make
    an inconsistent transition look consistent.
    """
    actions = domain.action_map
    action = actions.get(t.action[0])
    if action is None:
        return f"unknown action {t.action[0]!r} for model {domain.name!r}"
    if len(t.action) - 1 != action.arity:
        return f"action {t.action[0]!r} takes {action.arity} arguments, found {len(t.action) - 1}"
    arity = {p.name: p.arity for p in domain.predicates}
    for name, atoms in (("state", t.state), ("next_state", t.next_state)):
        for atom in atoms:
            n = arity.get(atom[0])
            if n is None:
                return f"{name}: unknown predicate {atom[0]!r} for model {domain.name!r}"
            if len(atom) - 1 != n:
                return f"{name}: predicate {atom[0]!r} takes {n} arguments, found {len(atom) - 1}"
    return None


def encode_transition(t: AgentTransition) -> bytes:
    """The wire form of a transition (simulated fleets and tests produce events with it)."""
    event = TransitionEvent(
        type="transition", agent_id=t.agent_id, family=t.family, episode_id=t.episode_id,
        step=t.step, time=t.time, state=[list(a) for a in sorted(t.state)],
        action=list(t.action), next_state=[list(a) for a in sorted(t.next_state)],
        optimal=t.optimal, executed=t.executed,
    )
    return event.model_dump_json(exclude_none=True).encode()


def dead_letter_record(
    letter: DeadLetter, source: str, partition: int | None, offset: int | None, time: datetime,
    max_raw_bytes: int = MAX_DEAD_LETTER_RAW,
) -> DeadLetterRecord:
    """The dead letter as written: the original bytes, cut to ``max_raw_bytes`` when longer
    (then ``truncated``), always with the original's length and SHA-256 so the message can
    be identified and its loss measured."""
    raw = letter.raw
    length = letter.length if letter.length is not None else len(raw)
    digest = letter.sha256 if letter.sha256 is not None else hashlib.sha256(raw).hexdigest()
    truncated = length > len(raw) or len(raw) > max_raw_bytes
    return DeadLetterRecord(
        reason=letter.reason[:2000],
        raw_base64=base64.b64encode(raw[:max_raw_bytes]).decode("ascii"),
        raw_length=length, raw_sha256=digest, truncated=truncated,
        source=source, partition=partition, offset=offset, time=time,
    )
