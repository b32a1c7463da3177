"""Intake: a source record → the transitions of an agent this replica watches, or a dead
letter saying why not (bad bytes, a trace mixing agents, an unknown family, a trace
step outside the model's vocabulary, an action naming an object of another type than its
parameter's). Runs on the main loop."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import Any, Final

import msgspec
import structlog

from capwatch.contracts.ports import Publisher, Record
from capwatch.contracts.wire import (
    AgentTransition,
    DeadLetter,
    DecodeLimits,
    dead_letter_record,
    vocabulary_error,
)
from capwatch.contracts.wire_fast import decode
from capwatch.daemon.agent_watch import AgentWatch
from capwatch.daemon.checkpoint import Checkpointer
from capwatch.daemon.logs import TRANSITION, record_context
from capwatch.daemon.metrics import DaemonMetrics
from capwatch.daemon.registry import Registry
from capwatch.model.domain import Domain, GroundAtom
from capwatch.model.object_types import ObjectTypes

log = structlog.get_logger("capwatch.daemon")

MAX_VOCABULARIES = 1_024
"""Models whose arities :meth:`Intake._in_vocabulary` keeps (each agent's published
model is one; a family's baseline is shared by its agents)."""
MAX_PENDING_MOVES = 4_096
"""Agents whose last record named another family than they are watched under, kept
(:attr:`Intake._moving`); past it the candidates are forgotten, so a stray costs one more
dead letter, never a move."""
MAX_CHECKED_VOCABULARIES = 64
MAX_CHECKED_ATOMS = 20_000
"""Atoms found right kept for one vocabulary, of up to 64 (a set of 20,000 takes ~1 MB;
the atoms are mostly the decoder's interned tuples, held anyway)."""

_RECORD_FIELDS: Final = msgspec.structs.astuple
"""A Record's fields as a tuple, in the order below (checked at import)."""
if tuple(f.name for f in msgspec.structs.fields(Record)) != (
        "source", "partition", "offset", "key", "value", "timestamp", "size", "sha256"):
    raise ImportError("Record's fields moved: Intake.read reads them by position")


class Intake:
    def __init__(self, *, limits: DecodeLimits, registry: Registry, checkpoints: Checkpointer,
                 publisher: Publisher, metrics: DaemonMetrics,
                 clock: Callable[[], datetime],
                 queue_evidence: Callable[[AgentWatch], None] = lambda watch: None,
                 dropped: Callable[[AgentWatch, str, str, str], None] | None = None,
                 require_key: bool = False,
                 object_types: Mapping[str, ObjectTypes] | None = None) -> None:
        self.limits = limits
        self.object_types: dict[str, ObjectTypes] = dict(object_types or {})
        """Family → the types its problem declares: an action naming an object of another
        type than its parameter's is a dead letter (``type``), not an inconsistency."""
        self.require_key = require_key
        """Kafka: a record must be keyed by its agent id. The key decides the partition,
        and so which replica holds the agent; an unkeyed record lands on any partition,
        and two replicas could each watch (and assess, and publish for) the same agent."""
        self.queue_evidence = queue_evidence
        """Queues a watch's buffered evidence now (the pipeline's ``queue``)."""
        self.dropped = dropped
        """Told of evidence dropped unqueued (watch, its work key, its first action, why):
        its prompt alert gets an ending (``EvidenceQueue.dropped``)."""
        self.registry = registry
        self._lookup = registry.lookup
        self._next_tick = registry.next_tick
        self.checkpoints = checkpoints
        self.publisher = publisher
        self.metrics = metrics
        self.clock = clock
        self.dead_letters = 0
        self.slot = record_context.slot
        """The log context of the thread reading (the main loop sets it per batch)."""
        self.flipped: list[GroundAtom] | None = None
        """The atoms the last record read's transition changed, when the decoder made its
        next state from its state by them (for ``AgentWatch.observe``); else None."""
        self.steps_flipped: list[list[GroundAtom] | None] | None = None
        """For a trace, the same for each of its steps, in order; else None."""
        self.came: tuple[frozenset[GroundAtom], list[GroundAtom]] | None = None
        """The set the last record read's (first) state was made from by the atoms that
        differ, with those atoms (the agent's memo's set: ``wire_fast.decode``'s fourth
        memo item), for ``AgentWatch.observe``; else None."""
        self.last_read: dict[int, Record] = {}
        """Partition → the last record :meth:`read` was given since :meth:`begin_batch`,
        of the source :attr:`read_source` (the batch's positions, ``Batches``): noted as
        each record is read, where a pass over the batch at its end read two attributes
        of every record and keyed a dict by a new tuple apiece (~1,100 instructions a
        record, 1.8% of ipc-mixed's steady record; callgrind)."""
        self.read_source: str | None = None
        """The source of the records read since :meth:`begin_batch` (the first one's)."""
        self.mixed_sources = False
        """Whether records of another source than :attr:`read_source` were read too."""
        self.names: dict[bytes, str] = {}
        """Key → its text (the agent id), for the batch's keys (:meth:`begin_batch`): the
        batch decodes each of its keys once for the store's prefetch, and :meth:`read`
        finds a record's there rather than decoding it again (~440 instructions a record,
        compiled; callgrind)."""
        self._vocabularies: dict[int, tuple[Domain, dict[str, int], dict[str, int],
                                            set[GroundAtom]]] = {}
        """A model, by its object id (the model held, so the id is never another's) →
        its actions' and predicates' arities and its atoms found right, for
        :meth:`_in_vocabulary`."""
        self._checked: dict[tuple[tuple[str, int], ...], set[GroundAtom]] = {}
        """Predicates' arities → the atoms found of them, each with its arity."""
        self._moving: dict[str, str] = {}
        """Agent → the other family its last record named (dead-lettered): a second
        record in a row naming it moves the agent, one of its own family clears it."""

    def begin_batch(self, names: dict[bytes, str] | None = None) -> None:
        """Forget the records read before (:attr:`last_read`): a new batch begins, whose
        keys' texts are ``names`` (:attr:`names`; a key not there is decoded when read)."""
        self.names = {} if names is None else names
        self.last_read.clear()
        self.read_source = None
        self.mixed_sources = False

    def read(self, record: Record) -> tuple[AgentWatch, list[AgentTransition]] | None:
        """The record's transitions and their agent's watch; None when there are none
        (the record was dead-lettered, or was an empty trace).

        A single transition's vocabulary is left to the watch's monitor, which checks it
        before changing anything; a trace's steps are all checked here first, because a
        trace is applied whole or not at all.
        """
        # The record's fields read once, in one C call (a msgspec Struct's attribute
        # read from compiled code is a generic lookup each).
        fields = _RECORD_FIELDS(record)
        partition: int = fields[1]
        source: str = fields[0]
        self.last_read[partition] = record
        if source is not self.read_source:
            if self.read_source is None:
                self.read_source = source
            elif source != self.read_source:
                self.mixed_sources = True
        key: bytes | None = fields[3]
        if key is None:
            if self.require_key:
                self.dead_letter(record, "Kafka record without a key: transitions must be "
                                 "keyed by agent_id (the key decides which replica owns "
                                 "the agent)", "decode")
                return None
            prior = None
        else:
            # The key is the agent id (the decoder checks it): the agent's watch, if
            # loaded, holds its last next-state, which this record's state most likely
            # repeats.
            name = self.names.get(key)
            prior = self._lookup(key.decode("utf-8", "replace") if name is None else name)
            if prior is not None and prior.state_memo is None and prior.frozen:
                # Its bytes keep the memo's fingerprint (AgentWatch.freeze): thawed now
                # rather than by the observation, so that the decoder gets the memo.
                prior.thaw()
        memo: list[Any] = [None if prior is None else prior.state_memo, None, None, None]
        # A loaded watch's agent id and family came from a message the decoder checked.
        decoded = decode(fields[4], self.limits, key=key,
                         partition=partition, offset=fields[2], size=fields[6],
                         sha256=fields[7], memo=memo,
                         known_ids=None if prior is None else (prior.agent_id, prior.family))
        self.flipped = memo[1]
        self.steps_flipped = memo[2]
        self.came = memo[3]
        if isinstance(decoded, DeadLetter):
            self.dead_letter(record, decoded.reason, "decode")
            return None
        if not decoded:
            return None
        first = decoded[0]
        self.slot[TRANSITION] = first
        family = first.family
        if len(decoded) > 1:
            agent_id = first.agent_id
            if any(t.agent_id != agent_id or t.family != family for t in decoded):
                self.dead_letter(record, "a trace mixes agents or families", "decode")
                return None
        if prior is None or prior.family != family:
            watch = self._load(record, prior, first)
            if watch is None:
                return None
        else:
            # The agent's watch is loaded, for this family: handed out as Registry.load
            # does (without its call, on the per-record path).
            watch = prior
            watch.partition = partition
            watch.seen = self._next_tick()
            if self._moving:
                self._moving.pop(watch.agent_id, None)
        watch.state_memo = memo[0]
        if not watch.restore_tried:
            self.checkpoints.restore(watch)
        typed = self.object_types
        if typed:
            checker = typed.get(watch.family)
            if checker is not None:
                # Each ground action is checked once (then found in ``ok``): a set lookup
                # per record on the per-record path.
                ok = checker.ok
                for t in decoded:
                    if t.action not in ok:
                        problem = checker.problem(watch.domain, t.action)
                        if problem is not None:
                            where = f"step {t.step}: " if len(decoded) > 1 else ""
                            self.dead_letter(record, where + problem, "type")
                            return None
        if len(decoded) > 1 and not self._in_vocabulary(watch.domain, decoded,
                                                        self.steps_flipped):
            # Something is wrong: found step by step, as the reason names the first.
            for t in decoded:
                problem = vocabulary_error(watch.domain, t)
                if problem is not None:
                    self.dead_letter(record, f"step {t.step}: {problem}", "vocabulary")
                    return None
        return watch, decoded

    def _in_vocabulary(self, domain: Domain, steps: list[AgentTransition],
                       flips: list[list[GroundAtom] | None] | None = None) -> bool:
        """Whether no step of a trace has a vocabulary error (``vocabulary_error``: every
        action of the model with its arity, every atom of a predicate with its arity);
        False also for what that check would name otherwise or fail on (an empty atom).

        Each state is checked once: a step's next state is the next step's state, the
        very set (wire_fast), and a refused step's two states are one set; and an atom
        found right before, for a model of the same predicates' arities, is not checked
        again (one subset test of the state's set, whose atoms' hashes it holds).
        Checking each step whole (``vocabulary_error``, uncompiled, building the model's
        maps at each call) cost more than the rest of a trace's step on a fleet of traces
        (session 14, docs/performance.md "A fleet from an outside producer").

        ``flips``: per step, the atoms the decoder made its next state from its state by
        (``Intake.steps_flipped``), or None. A next state so made from a state checked
        here holds no atom but the state's and those: only they are checked, where the
        subset test of the whole state cost ~2,300 instructions a step of ~32 atoms
        (the most of this method on an outside producer's traces; callgrind, steady22)."""
        got = self._vocabularies.get(id(domain))
        if got is None or got[0] is not domain:
            got = self._vocabulary(domain)
        actions, predicates, checked = got[1], got[2], got[3]
        if flips is not None and len(flips) != len(steps):
            flips = None
        last: frozenset[GroundAtom] | None = None
        for i, t in enumerate(steps):
            action = t.action
            if not action or actions.get(action[0], -1) != len(action) - 1:
                return False
            state = t.state
            after = t.next_state
            if state is not last and not _atoms_right(state, predicates, checked):
                return False
            if after is not state:
                flipped = flips[i] if flips is not None else None
                if not _atoms_right(after if flipped is None else flipped, predicates,
                                    checked):
                    return False
            # The next step's state is this very set, checked now (its atoms, or the
            # state's and the flipped ones).
            last = after
        return True

    def _vocabulary(self, domain: Domain) -> tuple[Domain, dict[str, int], dict[str, int],
                                                  set[GroundAtom]]:
        """The model's actions' and predicates' arities, and the atoms found right for
        models of those predicates' arities (one set for a family's models: a model
        learnt for an agent keeps its family's predicates)."""
        predicates = {p.name: p.arity for p in domain.predicates}
        shape = tuple(sorted(predicates.items()))
        checked = self._checked.get(shape)
        if checked is None:
            if len(self._checked) >= MAX_CHECKED_VOCABULARIES:
                self._checked.clear()  # a bound on memory; refilled when used
            checked = self._checked[shape] = set()
        if len(self._vocabularies) >= MAX_VOCABULARIES:
            self._vocabularies.clear()
        got = (domain, {a.name: a.arity for a in domain.actions}, predicates, checked)
        self._vocabularies[id(domain)] = got
        return got

    def _load(self, record: Record, prior: AgentWatch | None, first: AgentTransition
              ) -> AgentWatch | None:
        """The watch of an agent not loaded yet (or now of another family); None, with a
        dead letter, for an unknown family."""
        agent_id, family = first.agent_id, first.family
        old = prior if record.key is not None else self.registry.get(agent_id)
        moving = self._moving
        candidate = moving.pop(agent_id, None) if moving else None
        if old is not None and old.family != family and candidate != family:
            # One record cannot tell a producer naming the wrong family from a fleet
            # redeployed under a new one, and moving on it set the agent's drift statistics
            # aside twice, there and back (oper18b). A second record in a row naming the
            # family can: until then the record is a dead letter (kept, with its reason)
            # and the agent stays where it is.
            if len(moving) >= MAX_PENDING_MOVES:
                moving.clear()
            moving[agent_id] = family
            self.dead_letter(record, f"agent {agent_id!r} is watched under family "
                             f"{old.family!r}: one record naming {family!r} does not move "
                             "it (a second one in a row does)", "family")
            return None
        if old is not None and old.family != family:
            # A warning, not an info line: one record of a producer naming the wrong family
            # moves the agent to that family's model and sets aside what its drift tables
            # had counted, and before session 18 nothing but an info line about drift state
            # said so (oper17's and oper18's stray messages).
            self.metrics.family_moves.labels(family, old.family).inc()
            log.warning("agent now reports under another family; watched under its model "
                        "from this record on", agent_id=agent_id, family=family,
                        previous_family=old.family, partition=record.partition,
                        offset=record.offset)
            self._settle_family_move(agent_id, family)
        watch = self.registry.load(agent_id, family, record.partition)
        if watch is None:
            self.dead_letter(record, f"unknown family {family!r}: no baseline model",
                             "vocabulary")
            return None
        return watch

    def _settle_family_move(self, agent_id: str, family: str) -> None:
        """An agent now reporting under another family gets a new watch; the evidence the
        old one buffered is queued first, under the old family, so it is assessed (and
        alerted on) instead of vanishing with the watch. A store failure propagates: the
        record stays unhandled and the main loop retries it."""
        old = self.registry.get(agent_id)
        if old is None or old.family == family or not old.buffered:
            return
        if old.awaiting:
            # Its awaited work goes on under the old family; evidence buffered meanwhile
            # cannot be queued beside it, so it goes with the watch, and the alert that
            # announced an assessment of it is ended.
            if old.first_buffered_offset() is not None and self.dropped is not None:
                self.dropped(old, old.work_key(), old.evidence[0].transition.action[0],
                             f"the agent moved to family {family}")
            return
        log.info("agent moved to another family; its buffered evidence is queued under "
                 "the old one", old_family=old.family, family=family)
        self.queue_evidence(old)

    def dead_letter(self, record: Record, reason: str, kind: str) -> None:
        self.dead_letters += 1
        self.metrics.dead_letters.labels(kind).inc()
        self.publisher.dead_letter(dead_letter_record(
            DeadLetter(reason, record.value, record.size, record.sha256), record.source,
            record.partition, record.offset, self.clock()))
        log.warning("dead letter", reason=reason)


def _atoms_right(atoms: Collection[GroundAtom], predicates: dict[str, int],
                 checked: set[GroundAtom]) -> bool:
    """Whether every one of ``atoms`` is of a predicate of ``predicates`` with its arity
    (those found so are kept in ``checked``: one subset test of a state's set, whose
    atoms' hashes it holds, when all of them were found before)."""
    if type(atoms) is frozenset and atoms <= checked:
        return True
    for atom in atoms:
        if atom not in checked:
            if not atom or predicates.get(atom[0], -1) != len(atom) - 1:
                return False
            if len(checked) >= MAX_CHECKED_ATOMS:
                checked.clear()  # a bound on memory; refilled as traces come
            checked.add(atom)
    return True
