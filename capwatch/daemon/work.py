"""Assessment work as typed values: what is queued, and what comes back to the main loop.

A :class:`WorkItem` is everything one assessment needs, built by an agent's watch when its
evidence is ripe and queued in the store (as JSON, :meth:`WorkItem.to_json`) so that any
replica can run it after any restart. Its JSON form is the one queued items have always
had, so a store holding work queued by an older capwatch still reads.

Workers and the canary prober never touch the per-agent state; they post a
:data:`Result` that the main loop applies between polls.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from capwatch.contracts.store import PendingAssessment
from capwatch.contracts.versions import ModelRef, ModelVersion
from capwatch.contracts.wire import AgentTransition
from capwatch.model.domain import Action, Domain, GroundAction, GroundAtom
from capwatch.model.serialize import domain_from_json, domain_to_json

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class DriftProbe:
    """Where to re-estimate a drifted action: a grounding and a state it executed in."""

    action: GroundAction
    state: frozenset[GroundAtom]


@dataclass(frozen=True, slots=True)
class WorkItem:
    """One queued assessment of one agent."""

    key: str
    """Names the model the evidence contradicts and where the evidence starts: a replay
    after a crash rebuilds the same key (and re-queuing is a no-op)."""
    agent_id: str
    family: str
    partition: int
    base: ModelRef
    """The model the agent was believed to follow when the evidence arrived."""
    inconsistent: tuple[AgentTransition, ...] = ()
    """Transitions the base model cannot explain (canary findings have offset -1)."""
    executed: tuple[AgentTransition, ...] = ()
    """Recent transitions the model explained (they pin modes without a query)."""
    drift: Mapping[str, JSON] = field(default_factory=dict)
    """Action name → the drift evidence (DriftEvidence.to_dict()) that raised its alarm."""
    provisional: Domain | None = None
    """The base model with each drifted action's outcome probabilities re-estimated."""
    probes: Mapping[str, DriftProbe] = field(default_factory=dict)
    operator: Mapping[str, Any] = field(default_factory=dict)
    """Work an operator queued (capwatch.models_store.actions): the action's key and, for
    "assess now", the method to use."""
    kinds: tuple[str, ...] = ()
    """The kinds of its inconsistent evidence (agent_watch.evidence_kind): should the work
    end unexplained, evidence of these kinds is backed off, also after a restart."""

    @property
    def floatless(self) -> bool:
        """Whether :meth:`to_json` holds no float: names, numbers, lists and flags only
        (no drift evidence, provisional model or operator's parameters), which a store
        may write with a faster encoder (``PendingAssessment.finite``; a tenth of
        ``json.dumps``'s time for an item's hundreds of atoms)."""
        return not self.drift and self.provisional is None and not self.operator

    @property
    def method(self) -> str | None:
        method = self.operator.get("method")
        return str(method) if method is not None else None

    def drifted_actions(self) -> dict[str, Action]:
        if self.provisional is None:
            return {}
        return {name: self.provisional.action(name) for name in self.drift}

    def evidence_positions(self) -> list[JSON]:
        """Where the inconsistent evidence came from (recorded with the new version)."""
        return [{"partition": t.partition, "offset": t.offset, "episode_id": t.episode_id,
                 "step": t.step} for t in self.inconsistent]

    def to_json(self) -> JSON:
        """The item as JSON; lists in it may be shared (one list per distinct state and
        per atom): read, never change them."""
        atoms_json = _StatesJson(self)
        return {
            "agent_id": self.agent_id, "family": self.family, "partition": self.partition,
            "base": self.base.to_json(),
            "inconsistent": [_inconsistent_json(t, atoms_json) for t in self.inconsistent],
            "executed": [{"state": atoms_json(t.state), "action": list(t.action),
                          "next_state": atoms_json(t.next_state)} for t in self.executed],
            "drift": {name: dict(e) for name, e in self.drift.items()},
            "provisional_model": domain_to_json(self.provisional)
            if self.provisional is not None and self.drift else None,
            "drift_probes": {name: {"state": atoms_json(p.state), "action": list(p.action)}
                             for name, p in self.probes.items()},
            **({"operator": dict(self.operator)} if self.operator else {}),
            **({"evidence_kinds": list(self.kinds)} if self.kinds else {}),
        }

    @classmethod
    def from_json(cls, key: str, data: Mapping[str, Any]) -> WorkItem:
        agent_id, family = str(data["agent_id"]), str(data["family"])
        provisional = data.get("provisional_model")
        return cls(
            key=key, agent_id=agent_id, family=family, partition=int(data.get("partition", -1)),
            base=ModelRef.from_json(data["base"]),
            inconsistent=tuple(
                AgentTransition(agent_id, family, o.get("episode_id"), o.get("step"), None,
                                _atoms(o["state"]), tuple(o["action"]),
                                _atoms(o["next_state"]), bool(o.get("optimal", False)),
                                o.get("executed"), int(o["partition"]), int(o["offset"]))
                for o in data.get("inconsistent", [])),
            executed=tuple(
                AgentTransition(agent_id, family, None, None, None, _atoms(o["state"]),
                                tuple(o["action"]), _atoms(o["next_state"]), False)
                for o in data.get("executed", [])),
            drift=dict(data.get("drift", {})),
            provisional=domain_from_json(provisional) if provisional else None,
            probes={name: DriftProbe(tuple(p["action"]), _atoms(p["state"]))
                    for name, p in data.get("drift_probes", {}).items()},
            operator=dict(data.get("operator") or {}),
            kinds=tuple(str(k) for k in data.get("evidence_kinds") or ()),
        )

    @classmethod
    def from_pending(cls, item: PendingAssessment) -> WorkItem:
        return cls.from_json(item.key, item.payload)


def _atoms(data: Any) -> frozenset[GroundAtom]:
    return frozenset(tuple(a) for a in data)


def _atoms_json(atoms: frozenset[GroundAtom]) -> list[list[str]]:
    return sorted(list(a) for a in atoms)


class _StatesJson:
    """A work item's states as JSON (:func:`_atoms_json`), each distinct set made once:
    an item holds up to hundreds of states, mostly the same atoms, and consecutive
    transitions share their state sets (s_{t+1} = s'_t). Every atom of the item is sorted
    once, and each state's atoms in that order by their rank: comparing atoms (tuples of
    names) is what sorting each state cost (~13 us a 50-atom state). Tuples sort as the
    lists they become, so each state's list is :func:`_atoms_json`'s."""

    __slots__ = ("_done", "_lists", "_rank")

    def __init__(self, item: WorkItem) -> None:
        states = [s for t in (*item.inconsistent, *item.executed)
                  for s in (t.state, t.next_state)]
        states.extend(p.state for p in item.probes.values())
        ordered = sorted(frozenset().union(*states))
        self._rank = dict(zip(ordered, range(len(ordered)), strict=True))
        self._lists = [list(a) for a in ordered]
        self._done: dict[int, tuple[frozenset[GroundAtom], list[list[str]]]] = {}

    def __call__(self, atoms: frozenset[GroundAtom]) -> list[list[str]]:
        # By identity: the entry holds the set, so its id names no other meanwhile.
        got = self._done.get(id(atoms))
        if got is not None:
            return got[1]
        lists = self._lists
        out = [lists[r] for r in sorted(map(self._rank.__getitem__, atoms))]
        self._done[id(atoms)] = (atoms, out)
        return out


def _inconsistent_json(t: AgentTransition,
                       atoms_json: Callable[[frozenset[GroundAtom]], list[list[str]]]
                       = _atoms_json) -> JSON:
    return {"partition": t.partition, "offset": t.offset, "episode_id": t.episode_id,
            "step": t.step, "state": atoms_json(t.state), "action": list(t.action),
            "next_state": atoms_json(t.next_state), "optimal": t.optimal,
            "executed": t.executed}


# ------------------------------------------------------------------ results


class Settlement(enum.Enum):
    """How queued work ended without a new version for the agent."""

    UNCHANGED = "unchanged"
    """The assessment found the model still right."""
    FAILED = "failed"
    """It failed for good (its alert is in the outbox)."""
    UNREACHABLE = "agent unreachable"
    """It failed for good because the agent could not be reached (its alert is in the
    outbox): nothing was learnt about the agent's behaviour."""
    LEFT_QUEUE = "left the queue"
    """Another replica finished it; seen by polling the store."""


@dataclass(frozen=True, slots=True)
class Installed:
    """A version for the agent is stored (by this replica or another): adopt it."""

    agent_id: str
    version: ModelVersion


@dataclass(frozen=True, slots=True)
class Settled:
    """The work ``key`` ended without a new version: the agent may queue again."""

    agent_id: str
    key: str
    how: Settlement


@dataclass(frozen=True, slots=True)
class CanaryFinding:
    """A canary probe's answer the model cannot explain: evidence like a stream record's."""

    agent_id: str
    transition: AgentTransition


Result = Installed | Settled | CanaryFinding
